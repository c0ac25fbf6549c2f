// The binary layout both kinds of retrieval index files share (private to the rag module): an
// 8-byte magic naming the kind, a format version, the payload's size and 64-bit FNV-1a checksum,
// then the payload, little-endian; and the corpus entries as both kinds store them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/rag/corpus.hpp"

namespace kbrl::rag::detail {

inline constexpr std::size_t kIndexHeaderSize = 8 + 4 + 4 + 8 + 8;
inline constexpr std::string_view kBm25Magic = "KBRLRIX1";
inline constexpr std::string_view kDenseMagic = "KBRLDIX1";

class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v);
  void u64(std::uint64_t v);
  void f64(double v);
  void str(std::string_view s);
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// Reads what Writer wrote; any shortfall or impossible count throws core::ConfigError(where)
// "corrupt retrieval index: ...".
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& where) : s_(bytes), where_(where) {}
  [[noreturn]] void fail(const std::string& what) const;
  std::uint8_t u8();
  std::uint32_t u32();
  std::uint64_t u64();
  double f64();
  std::string str();
  // A count of items of at least `min_item_bytes` each: bounded by what is left, so a corrupt
  // count cannot make us allocate the moon.
  std::size_t count(std::size_t min_item_bytes);
  bool done() const { return pos_ == s_.size(); }

 private:
  void need(std::size_t n) const;
  std::string_view s_;
  std::size_t pos_ = 0;
  const std::string& where_;
};

// magic, version, reserved, payload size, checksum, payload.
std::string frame_index_file(std::string_view magic, std::uint32_t version, const std::string& payload);

// The payload size and checksum from a framed file's header (`bytes`: its first bytes, at least
// kIndexHeaderSize of them when it is one); throws core::ConfigError(where) for another magic
// (naming the other kind when it is one) or another version ("rebuild it").
struct IndexFrame {
  std::uint64_t payload_size = 0;
  std::uint64_t checksum = 0;
};
IndexFrame read_index_frame(std::string_view bytes, std::string_view magic, std::uint32_t version,
                            const std::string& where);

// The payload of a file framed with `magic` and `version`; throws core::ConfigError(where) for
// another magic (naming the other kind when it is one), another version ("rebuild it"), a size
// that does not match (truncated) or a checksum mismatch.
std::string_view unframe_index_file(std::string_view bytes, std::string_view magic, std::uint32_t version,
                                    const std::string& where);

void write_entries(Writer& w, const std::vector<CorpusEntry>& entries);
std::vector<CorpusEntry> read_entries(Reader& r);

}  // namespace kbrl::rag::detail
