// What the fuzz targets share: the libFuzzer entry point's signature, the one error family a
// parser may throw on bad input (kbrl::core::Error; anything else escaping is a finding), and
// scratch files for the entry points that read paths. docs/fuzzing.md describes the targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace kbrl::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property the code under test promises, checked on every input: a violation aborts, which
// both engines report with the input that caused it.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "kbrl fuzz: property violated: %s\n", what);
  std::abort();
}

// One directory per process (fuzzers may run side by side), removed at a normal exit. Files are
// rewritten in place for every input, so a run does not churn the directory.
class ScratchDir {
 public:
  ScratchDir() {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    if (ec) base = "/tmp";
    dir_ = base / ("kbrl-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Writes `bytes` to <dir>/<relative> (parents created) and returns the path.
  std::filesystem::path write(const std::filesystem::path& relative, std::string_view bytes) const {
    const std::filesystem::path p = dir_ / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    require(static_cast<bool>(out), "the scratch file was written");
    return p;
  }
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

inline const ScratchDir& scratch() {
  static const ScratchDir dir;
  return dir;
}

}  // namespace kbrl::fuzz
