// TensorBoard event files written directly, byte for byte as TensorFlow's own writers write them:
// TFRecord framing (length, masked CRC-32C, payload, masked CRC-32C) around Event protocol buffers
// encoded here by hand, so no protobuf or TensorFlow library is needed. Scalars and histograms in
// the forms of TensorFlow's C++ summary writer (simple_value; HistogramProto over the default
// exponential buckets), and SessionLog START events that make TensorBoard drop a resumed run's
// redone steps. docs/training-runs.md shows how the files are checked against TensorFlow.
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
  // Creates `dir` and, in it, events.out.tfevents.<seconds, 10 digits>.<host>.<pid>.<n> (the name
  // TensorBoard's own writer gives, <n> counting the writers of this process), whose first event
  // carries the file version. start_time: seconds since the epoch for the name and that event; now
  // when empty. Throws core::Error when it cannot create the file.
  explicit TensorBoardWriter(const std::filesystem::path& dir, std::optional<double> start_time = {});
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // A scalar as a 32-bit float. Non-finite values are skipped (TensorBoard cannot plot them).
  // wall_time: seconds since the epoch, now when empty.
  void add_scalar(std::string_view tag, double value, std::int64_t step, std::optional<double> wall_time = {});
  // min, max, count, sum, sum of squares and the counts of TensorFlow's default buckets
  // (±1e-12 · 1.1^k up to 1e20, ±DBL_MAX and 0; each run of empty buckets written as one).
  // Non-finite values are left out (TensorFlow would fail the whole write); nothing is written when
  // no value is left.
  void add_histogram(std::string_view tag, const std::vector<double>& values, std::int64_t step,
                     std::optional<double> wall_time = {});
  // A SessionLog START event at `step`. TensorBoard's reader (purge_orphaned_data, its default)
  // then drops every event it has read with a step >= `step`, across all earlier files: a run that
  // resumes from a checkpoint and redoes steps writes this, at the first step it will write again,
  // before anything else, so each step is shown once with the values of the run that finished it.
  void add_session_start(std::int64_t step, std::optional<double> wall_time = {});
  void flush();
  const std::filesystem::path& path() const { return path_; }

  // What the first event names as its writer (SourceMetadata.writer).
  static constexpr std::string_view kWriterName = "kbrl.log.tensorboard";

 private:
  void write_record(const std::string& payload);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// CRC-32C (Castagnoli), as TFRecord frames use it: exposed for tests.
std::uint32_t crc32c(std::string_view bytes);
// TensorFlow's default histogram bucket limits (the right edges, ascending).
const std::vector<double>& default_histogram_limits();

}  // namespace kbrl::log
