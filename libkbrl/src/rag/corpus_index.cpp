#include "kbrl/rag/corpus_index.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/rag/code_tokens.hpp"
#include "index_file.hpp"

namespace kbrl::rag {
namespace {

using detail::Reader;
using detail::Writer;

// The search terms' version: an index built with other terms would rank wrongly, so load refuses
// it with "rebuild" rather than answer badly. Bump it when code_search_terms changes.
constexpr std::uint32_t kTermsVersion = 1;

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
  detail::write_entries(p, entries_);
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
  return detail::frame_index_file(detail::kBm25Magic, kFormatVersion, p.bytes());
}

void CorpusIndex::save(const std::filesystem::path& path) const { core::write_file_atomically(path, serialize()); }

CorpusIndex CorpusIndex::deserialize(std::string_view bytes, const std::string& where) {
  const std::string_view payload = detail::unframe_index_file(bytes, detail::kBm25Magic, kFormatVersion, where);
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
  index.entries_ = detail::read_entries(r);
  const std::size_t n = index.entries_.size();
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
