#include "kbrl/rag/corpus_index.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/rag/code_tokens.hpp"

namespace kbrl::rag {
namespace {

constexpr char kMagic[8] = {'K', 'B', 'R', 'L', 'R', 'I', 'X', '1'};
// The search terms' version: an index built with other terms would rank wrongly, so load refuses
// it with "rebuild" rather than answer badly. Bump it when code_search_terms changes.
constexpr std::uint32_t kTermsVersion = 1;
constexpr std::size_t kHeaderSize = 8 + 4 + 4 + 8 + 8;

class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void f64(double v) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    u64(bits);
  }
  void str(std::string_view s) {
    u64(s.size());
    out_.append(s);
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& where) : s_(bytes), where_(where) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw core::ConfigError(where_, "", fmt::format("corrupt retrieval index: {}", what));
  }
  void need(std::size_t n) const {
    if (s_.size() - pos_ < n) fail("truncated");
  }
  std::uint8_t u8() {
    need(1);
    return static_cast<std::uint8_t>(s_[pos_++]);
  }
  std::uint32_t u32() {
    need(4);
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{static_cast<unsigned char>(s_[pos_++])} << (8 * i);
    return v;
  }
  std::uint64_t u64() {
    need(8);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(s_[pos_++])} << (8 * i);
    return v;
  }
  double f64() {
    const std::uint64_t bits = u64();
    double v = 0;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  std::string str() {
    const std::uint64_t n = u64();
    if (n > s_.size() - pos_) fail("truncated string");
    std::string v(s_.substr(pos_, n));
    pos_ += n;
    return v;
  }
  // A count of items of at least `min_item_bytes` each: bounded by what is left, so a corrupt
  // count cannot make us allocate the moon.
  std::size_t count(std::size_t min_item_bytes) {
    const std::uint64_t n = u64();
    if (n > (s_.size() - pos_) / std::max<std::size_t>(1, min_item_bytes)) fail("count larger than the file");
    return static_cast<std::size_t>(n);
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  std::string_view s_;
  std::size_t pos_ = 0;
  const std::string& where_;
};

}  // namespace

std::size_t SearchResult::excluded_count(LeakKind kind) const noexcept {
  return static_cast<std::size_t>(
      std::count_if(excluded.begin(), excluded.end(), [kind](const ExcludedEntry& e) { return e.kind == kind; }));
}

CorpusIndex CorpusIndex::build(std::vector<CorpusEntry> entries, Bm25Params params) {
  CorpusIndex index;
  index.bm25_ = Bm25Index(params);
  for (const CorpusEntry& e : entries) index.bm25_.add_document(code_search_terms(e.source));
  index.entries_ = std::move(entries);
  return index;
}

SearchResult CorpusIndex::search(std::string_view problem_source, const SearchOptions& options) const {
  SearchResult result;
  if (options.k == 0) return result;
  const std::vector<std::string> terms = code_search_terms(problem_source);
  std::function<bool(std::size_t)> accept;
  if (!options.language.empty())
    accept = [this, &options](std::size_t d) { return entries_[d].language == options.language; };
  std::vector<ScoredDocument> ranked = bm25_.score_all(terms, accept);
  if (!options.leakage.enabled) {
    const std::size_t n = std::min(options.k, ranked.size());
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(n), ranked.end(), better);
    for (std::size_t i = 0; i < n; ++i) result.hits.push_back({ranked[i].document, ranked[i].score});
    return result;
  }
  const LeakageFilter filter(problem_source, options.leakage);
  // Sort lazily: the best `sorted` candidates first, more only when leaks used them up.
  std::size_t sorted = 0;
  for (std::size_t i = 0; i < ranked.size() && result.hits.size() < options.k; ++i) {
    if (i == sorted) {
      const std::size_t more = std::min(ranked.size(), std::max<std::size_t>(2 * sorted, options.k + 16));
      std::partial_sort(ranked.begin() + static_cast<std::ptrdiff_t>(sorted),
                        ranked.begin() + static_cast<std::ptrdiff_t>(more), ranked.end(), better);
      sorted = more;
    }
    const ScoredDocument& d = ranked[i];
    const LeakKind kind = filter.check(entries_[d.document].source);
    if (kind == LeakKind::none) {
      result.hits.push_back({d.document, d.score});
    } else {
      result.excluded.push_back({d.document, d.score, kind});
    }
  }
  return result;
}

std::string CorpusIndex::serialize() const {
  Writer p;
  p.u32(kTermsVersion);
  p.f64(bm25_.params().k1);
  p.f64(bm25_.params().b);
  p.u64(entries_.size());
  for (const CorpusEntry& e : entries_) {
    p.str(e.id);
    p.str(e.source);
    p.str(e.kernel);
    p.str(e.language);
    p.u8(e.speedup ? 1 : 0);
    p.f64(e.speedup.value_or(0.0));
    p.u32(static_cast<std::uint32_t>(e.level));
    p.str(e.origin);
  }
  const auto& lengths = bm25_.document_lengths();
  p.u64(lengths.size());
  for (const std::uint32_t len : lengths) p.u32(len);
  p.u64(bm25_.terms().size());
  for (std::size_t t = 0; t < bm25_.terms().size(); ++t) {
    p.str(bm25_.terms()[t]);
    const auto& list = bm25_.postings()[t];
    p.u64(list.size());
    for (const auto& posting : list) {
      p.u32(posting.document);
      p.u32(posting.frequency);
    }
  }
  const std::string& payload = p.bytes();
  Writer file;
  file.bytes().append(kMagic, sizeof kMagic);
  file.u32(kFormatVersion);
  file.u32(0);
  file.u64(payload.size());
  file.u64(fnv1a64(payload));
  file.bytes().append(payload);
  return std::move(file.bytes());
}

void CorpusIndex::save(const std::filesystem::path& path) const { core::write_file_atomically(path, serialize()); }

CorpusIndex CorpusIndex::deserialize(std::string_view bytes, const std::string& where) {
  if (bytes.size() < kHeaderSize || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw core::ConfigError(where, "", "not a kbrl retrieval index (no KBRLRIX1 header): build one with kbrl-index build");
  Reader h(bytes.substr(8, kHeaderSize - 8), where);
  const std::uint32_t version = h.u32();
  if (version != kFormatVersion)
    throw core::ConfigError(where, "",
                            fmt::format("retrieval index format version {}, this kbrl reads version {}: rebuild it "
                                        "with kbrl-index build",
                                        version, kFormatVersion));
  (void)h.u32();
  const std::uint64_t size = h.u64();
  const std::uint64_t checksum = h.u64();
  const std::string_view payload = bytes.substr(kHeaderSize);
  if (payload.size() != size)
    throw core::ConfigError(where, "",
                            fmt::format("corrupt retrieval index: {} payload bytes, the header says {} (truncated?)",
                                        payload.size(), size));
  if (fnv1a64(payload) != checksum)
    throw core::ConfigError(where, "", "corrupt retrieval index: checksum mismatch");

  Reader r(payload, where);
  const std::uint32_t terms_version = r.u32();
  if (terms_version != kTermsVersion)
    throw core::ConfigError(where, "",
                            fmt::format("retrieval index built with search terms version {}, this kbrl uses {}: "
                                        "rebuild it with kbrl-index build",
                                        terms_version, kTermsVersion));
  Bm25Params params;
  params.k1 = r.f64();
  params.b = r.f64();
  CorpusIndex index;
  const std::size_t n = r.count(8 * 5 + 1 + 8 + 4);
  index.entries_.reserve(n);
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
    index.entries_.push_back(std::move(e));
  }
  const std::size_t docs = r.count(4);
  if (docs != n) r.fail(fmt::format("{} entries but {} indexed documents", n, docs));
  std::vector<std::uint32_t> lengths(docs);
  for (auto& len : lengths) len = r.u32();
  const std::size_t vocabulary = r.count(16);
  std::vector<std::string> terms(vocabulary);
  std::vector<std::vector<Bm25Index::Posting>> postings(vocabulary);
  for (std::size_t t = 0; t < vocabulary; ++t) {
    terms[t] = r.str();
    postings[t].resize(r.count(8));
    for (auto& p : postings[t]) {
      p.document = r.u32();
      p.frequency = r.u32();
    }
  }
  if (!r.done()) r.fail("bytes after the end");
  try {
    index.bm25_ = Bm25Index::from_parts(params, std::move(lengths), std::move(terms), std::move(postings));
  } catch (const core::InvalidArgument& e) {
    r.fail(e.what());
  }
  return index;
}

CorpusIndex CorpusIndex::load(const std::filesystem::path& path) {
  return deserialize(core::read_file(path), path.string());
}

}  // namespace kbrl::rag
