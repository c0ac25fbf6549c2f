// TensorBoard event files written directly: TFRecord framing (length, masked CRC-32C, payload,
// masked CRC-32C) around Event protocol buffers encoded here by hand, so no protobuf or
// TensorFlow library is needed. Scalars and histograms (TensorBoard's default exponential
// buckets). Each writer opens a new file in its folder; TensorBoard reads all of them in order,
// so a resumed run simply adds one.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kbrl::log {

class TensorBoardWriter {
 public:
  // Creates `dir` and events.out.tfevents.<seconds>.<host>.<pid>.<n> in it. Throws core::Error
  // when it cannot.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Non-finite values are skipped (TensorBoard cannot plot them). wall_time: seconds since the
  // epoch, now when empty.
  void add_scalar(std::string_view tag, double value, std::int64_t step, std::optional<double> wall_time = {});
  // min, max, count, sum, sum of squares and the counts of TensorBoard's default buckets
  // (±1e-12 · 1.1^k up to 1e20, and 0); non-finite values are left out, an empty list writes nothing.
  void add_histogram(std::string_view tag, const std::vector<double>& values, std::int64_t step,
                     std::optional<double> wall_time = {});
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& payload);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// CRC-32C (Castagnoli), as TFRecord frames use it: exposed for tests.
std::uint32_t crc32c(std::string_view bytes);
// TensorBoard's default histogram bucket limits.
const std::vector<double>& default_histogram_limits();

}  // namespace kbrl::log
