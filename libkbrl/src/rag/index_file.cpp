#include "index_file.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "kbrl/core/error.hpp"
#include "kbrl/rag/code_tokens.hpp"

namespace kbrl::rag::detail {

void Writer::u32(std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Writer::u64(std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Writer::f64(double v) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  u64(bits);
}

void Writer::str(std::string_view s) {
  u64(s.size());
  out_.append(s);
}

void Reader::fail(const std::string& what) const {
  throw core::ConfigError(where_, "", fmt::format("corrupt retrieval index: {}", what));
}

void Reader::need(std::size_t n) const {
  if (s_.size() - pos_ < n) fail("truncated");
}

std::uint8_t Reader::u8() {
  need(1);
  return static_cast<std::uint8_t>(s_[pos_++]);
}

std::uint32_t Reader::u32() {
  need(4);
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{static_cast<unsigned char>(s_[pos_++])} << (8 * i);
  return v;
}

std::uint64_t Reader::u64() {
  need(8);
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(s_[pos_++])} << (8 * i);
  return v;
}

double Reader::f64() {
  const std::uint64_t bits = u64();
  double v = 0;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

std::string Reader::str() {
  const std::uint64_t n = u64();
  if (n > s_.size() - pos_) fail("truncated string");
  std::string v(s_.substr(pos_, n));
  pos_ += n;
  return v;
}

std::size_t Reader::count(std::size_t min_item_bytes) {
  const std::uint64_t n = u64();
  if (n > (s_.size() - pos_) / std::max<std::size_t>(1, min_item_bytes)) fail("count larger than the file");
  return static_cast<std::size_t>(n);
}

std::string frame_index_file(std::string_view magic, std::uint32_t version, const std::string& payload) {
  Writer file;
  file.bytes().reserve(kIndexHeaderSize + payload.size());
  file.bytes().append(magic);
  file.u32(version);
  file.u32(0);
  file.u64(payload.size());
  file.u64(fnv1a64(payload));
  file.bytes().append(payload);
  return std::move(file.bytes());
}

IndexFrame read_index_frame(std::string_view bytes, std::string_view magic, std::uint32_t version,
                            const std::string& where) {
  const std::string_view found = bytes.substr(0, std::min<std::size_t>(bytes.size(), 8));
  if (bytes.size() < kIndexHeaderSize || found != magic) {
    if (magic == kBm25Magic && found == kDenseMagic)
      throw core::ConfigError(where, "", "a dense retrieval index (KBRLDIX1), not a BM25 one: load it as a dense index");
    if (magic == kDenseMagic && found == kBm25Magic)
      throw core::ConfigError(where, "", "a BM25 retrieval index (KBRLRIX1), not a dense one: load it as a BM25 index");
    throw core::ConfigError(
        where, "", fmt::format("not a kbrl retrieval index (no {} header): build one with kbrl-index build", magic));
  }
  Reader h(bytes.substr(8, kIndexHeaderSize - 8), where);
  const std::uint32_t found_version = h.u32();
  if (found_version != version)
    throw core::ConfigError(where, "",
                            fmt::format("retrieval index format version {}, this kbrl reads version {}: rebuild it "
                                        "with kbrl-index build",
                                        found_version, version));
  (void)h.u32();
  IndexFrame frame;
  frame.payload_size = h.u64();
  frame.checksum = h.u64();
  return frame;
}

std::string_view unframe_index_file(std::string_view bytes, std::string_view magic, std::uint32_t version,
                                    const std::string& where) {
  const IndexFrame frame = read_index_frame(bytes, magic, version, where);
  const std::string_view payload = bytes.substr(kIndexHeaderSize);
  if (payload.size() != frame.payload_size)
    throw core::ConfigError(where, "",
                            fmt::format("corrupt retrieval index: {} payload bytes, the header says {} (truncated?)",
                                        payload.size(), frame.payload_size));
  if (fnv1a64(payload) != frame.checksum) throw core::ConfigError(where, "", "corrupt retrieval index: checksum mismatch");
  return payload;
}

void write_entries(Writer& p, const std::vector<CorpusEntry>& entries) {
  p.u64(entries.size());
  for (const CorpusEntry& e : entries) {
    p.str(e.id);
    p.str(e.source);
    p.str(e.kernel);
    p.str(e.language);
    p.u8(e.speedup ? 1 : 0);
    p.f64(e.speedup.value_or(0.0));
    p.u32(static_cast<std::uint32_t>(e.level));
    p.str(e.origin);
  }
}

std::vector<CorpusEntry> read_entries(Reader& r) {
  const std::size_t n = r.count(8 * 5 + 1 + 8 + 4);
  std::vector<CorpusEntry> entries;
  entries.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    CorpusEntry e;
    e.id = r.str();
    e.source = r.str();
    e.kernel = r.str();
    e.language = r.str();
    const bool has_speedup = r.u8() != 0;
    const double speedup = r.f64();
    if (has_speedup) e.speedup = speedup;
    e.level = static_cast<int>(r.u32());
    e.origin = r.str();
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace kbrl::rag::detail
