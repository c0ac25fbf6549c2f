#include "kbrl/log/tensorboard.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstring>

#include "kbrl/core/error.hpp"

namespace kbrl::log {

namespace fs = std::filesystem;

namespace {

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78U : c >> 1;
    t[i] = c;
  }
  return t;
}

std::uint32_t masked_crc(std::string_view bytes) {
  const std::uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8U;
}

// Protocol buffer wire format, the few pieces the Event messages need. Event, Summary and
// HistogramProto are proto3: a field holding its default (0, 0.0 with all bits clear, "") is not
// written, as every protobuf library does; members of a oneof (simple_value, the event's kind)
// always are.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire) { put_varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<unsigned>(wire)); }
void put_int64(std::string& out, int field, std::int64_t v) {
  if (v == 0) return;
  put_key(out, field, 0);
  put_varint(out, static_cast<std::uint64_t>(v));  // negative: ten bytes, two's complement
}
void put_double(std::string& out, int field, double v) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, 8);
  if (bits == 0) return;  // +0.0 is the default; -0.0 is not
  put_key(out, field, 1);
  char b[8];
  std::memcpy(b, &v, 8);  // little-endian hosts only (x86-64, aarch64)
  out.append(b, 8);
}
void put_float_always(std::string& out, int field, float v) {
  put_key(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}
void put_bytes_always(std::string& out, int field, std::string_view v) {
  put_key(out, field, 2);
  put_varint(out, v.size());
  out.append(v);
}
void put_string(std::string& out, int field, std::string_view v) {
  if (!v.empty()) put_bytes_always(out, field, v);
}
void put_packed_doubles(std::string& out, int field, const std::vector<double>& v) {
  if (v.empty()) return;
  std::string body;
  for (const double d : v) {
    char b[8];
    std::memcpy(b, &d, 8);
    body.append(b, 8);
  }
  put_bytes_always(out, field, body);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event fields: wall_time 1, step 2, oneof {file_version 3, summary 5, session_log 7},
// source_metadata 10. Summary{repeated Value value = 1}.
std::string summary_event(double wall_time, std::int64_t step, const std::string& value) {
  std::string summary;
  put_bytes_always(summary, 1, value);
  std::string e;
  put_double(e, 1, wall_time);
  put_int64(e, 2, step);
  put_bytes_always(e, 5, summary);
  return e;
}

// TensorFlow's histogram::Histogram: values counted into the default buckets, then encoded as
// its EncodeToProto(proto, preserve_zero_buckets = false) does.
std::string histogram_proto(const std::vector<double>& values) {
  const auto& limits = default_histogram_limits();
  std::vector<double> counts(limits.size(), 0.0);
  double min = DBL_MAX, max = -DBL_MAX, sum = 0, sum_sq = 0;
  for (const double x : values) {
    // The bucket whose (previous limit, limit] holds x: the first limit above x (Histogram::Add).
    const auto b = static_cast<std::size_t>(std::upper_bound(limits.begin(), limits.end(), x) - limits.begin());
    counts[std::min(b, limits.size() - 1)] += 1;  // only DBL_MAX itself lies past the last limit
    min = std::min(min, x);
    max = std::max(max, x);
    sum += x;
    sum_sq += x * x;
  }
  // Each run of empty buckets becomes one empty bucket at the run's last limit, so the reader
  // still sees where each non-empty bucket starts.
  std::vector<double> out_limits, out_counts;
  for (std::size_t i = 0; i < limits.size();) {
    double end = limits[i];
    std::size_t j = i + 1;
    if (counts[i] <= 0.0)
      while (j < limits.size() && counts[j] <= 0.0) end = limits[j++];
    out_limits.push_back(end);
    out_counts.push_back(counts[i]);
    i = j;
  }
  std::string h;  // HistogramProto{min 1, max 2, num 3, sum 4, sum_squares 5, bucket_limit 6, bucket 7}
  put_double(h, 1, min);
  put_double(h, 2, max);
  put_double(h, 3, static_cast<double>(values.size()));
  put_double(h, 4, sum);
  put_double(h, 5, sum_sq);
  put_packed_doubles(h, 6, out_limits);
  put_packed_doubles(h, 7, out_counts);
  return h;
}

}  // namespace

std::uint32_t crc32c(std::string_view bytes) {
  static const auto table = make_crc_table();
  std::uint32_t c = 0xFFFFFFFFU;
  for (const char ch : bytes) c = table[(c ^ static_cast<unsigned char>(ch)) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFU;
}

const std::vector<double>& default_histogram_limits() {
  static const std::vector<double> limits = [] {
    std::vector<double> pos;
    for (double v = 1e-12; v < 1e20; v *= 1.1) pos.push_back(v);
    pos.push_back(DBL_MAX);
    std::vector<double> all;
    for (auto it = pos.rbegin(); it != pos.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), pos.begin(), pos.end());
    return all;
  }();
  return limits;
}

TensorBoardWriter::TensorBoardWriter(const fs::path& dir, std::optional<double> start_time) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw core::Error(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  // The counter tells apart two writers of one process opened within the same second.
  static std::atomic<int> counter{0};
  const double start = start_time.value_or(now_seconds());
  path_ = dir / fmt::format("events.out.tfevents.{:010d}.{}.{}.{}", static_cast<long long>(start), host, ::getpid(),
                            counter++);
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) throw core::Error(fmt::format("cannot create {}", path_.string()));
  std::string metadata;  // SourceMetadata{writer = 1}
  put_string(metadata, 1, kWriterName);
  std::string e;
  put_double(e, 1, start);
  put_bytes_always(e, 3, "brain.Event:2");  // the version TensorBoard's reader keys its purging on
  put_bytes_always(e, 10, metadata);
  write_record(e);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::write_record(const std::string& payload) {
  std::string frame;
  const std::uint64_t n = payload.size();
  char len[8];
  std::memcpy(len, &n, 8);
  frame.append(len, 8);
  const std::uint32_t len_crc = masked_crc(std::string_view(len, 8));
  frame.append(reinterpret_cast<const char*>(&len_crc), 4);
  frame += payload;
  const std::uint32_t data_crc = masked_crc(payload);
  frame.append(reinterpret_cast<const char*>(&data_crc), 4);
  if (std::fwrite(frame.data(), 1, frame.size(), file_) != frame.size())
    throw core::Error(fmt::format("cannot write {}", path_.string()));
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, std::int64_t step, std::optional<double> wall_time) {
  if (!std::isfinite(value)) return;
  std::string v;  // Summary.Value{tag = 1, simple_value = 2}
  put_string(v, 1, tag);
  put_float_always(v, 2, static_cast<float>(value));
  write_record(summary_event(wall_time.value_or(now_seconds()), step, v));
}

void TensorBoardWriter::add_histogram(std::string_view tag, const std::vector<double>& values, std::int64_t step,
                                      std::optional<double> wall_time) {
  std::vector<double> finite;
  for (const double x : values)
    if (std::isfinite(x)) finite.push_back(x);
  if (finite.empty()) return;
  std::string v;  // Summary.Value{tag = 1, histo = 5}
  put_string(v, 1, tag);
  put_bytes_always(v, 5, histogram_proto(finite));
  write_record(summary_event(wall_time.value_or(now_seconds()), step, v));
}

void TensorBoardWriter::add_session_start(std::int64_t step, std::optional<double> wall_time) {
  std::string log;  // SessionLog{status = 1}, START = 1
  put_key(log, 1, 0);
  put_varint(log, 1);
  std::string e;
  put_double(e, 1, wall_time.value_or(now_seconds()));
  put_int64(e, 2, step);
  put_bytes_always(e, 7, log);
  write_record(e);
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0) throw core::Error(fmt::format("cannot write {}", path_.string()));
}

}  // namespace kbrl::log
