// Fuzz target: the safetensors reader (model::SafetensorsFile), which maps checkpoint files a
// user downloaded. The input is written to a scratch file and opened; a malformed file throws
// core::ConfigError, and a file that opens must describe its data section exactly.
#include <cstring>
#include <filesystem>

#include "fuzz_support.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using kbrl::fuzz::require;
  const std::filesystem::path path = kbrl::fuzz::scratch().write("model.safetensors", kbrl::fuzz::as_text(data, size));
  try {
    const kbrl::model::SafetensorsFile file(path);
    require(size >= 8, "an opened file has its 8-byte header length");
    std::uint64_t header = 0;
    std::memcpy(&header, data, 8);
    const std::uint64_t data_section = size - 8 - header;
    std::uint64_t covered = 0;
    for (const kbrl::model::TensorInfo& t : file.tensors()) {
      require(t.begin == covered && t.end >= t.begin, "tensors cover the data section in order");
      covered = t.end;
      require(file.find(t.name) != nullptr, "every tensor can be found by its name");
      const auto bytes = file.bytes(t);
      require(bytes.size() == t.nbytes(), "a tensor's bytes are its data_offsets' range");
      // The mapping is the file: a tensor's bytes are the input's bytes at its offsets.
      require(bytes.empty() || std::memcmp(bytes.data(), data + 8 + header + t.begin, bytes.size()) == 0,
              "a tensor's bytes are the file's bytes at its data_offsets");
    }
    require(covered == data_section, "the tensors cover the whole data section");
    (void)file.metadata();
  } catch (const kbrl::core::Error&) {
  }
  return 0;
}
