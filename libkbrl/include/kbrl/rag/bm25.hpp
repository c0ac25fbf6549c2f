// Okapi BM25 over an inverted index of search terms (code_search_terms): needs no model, builds in
// one pass, and ranks solved examples by the torch operations and names they share with a problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kbrl::rag {

struct Bm25Params {
  double k1 = 1.2;  // term-frequency saturation
  double b = 0.75;  // document-length normalization
};

struct ScoredDocument {
  std::size_t document = 0;
  double score = 0;
};

// score(q, d) = sum over distinct terms t of q present in d of
//   idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl)),
//   idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))   (never negative).
// A query term counts once however often it occurs in the query.
class Bm25Index {
 public:
  struct Posting {
    std::uint32_t document;
    std::uint32_t frequency;
  };

  explicit Bm25Index(Bm25Params params = {});

  // Adds the next document (its number is size() before the call).
  void add_document(const std::vector<std::string>& terms);

  std::size_t size() const noexcept { return document_lengths_.size(); }
  std::size_t vocabulary_size() const noexcept { return postings_.size(); }
  std::size_t posting_count() const noexcept;
  const Bm25Params& params() const noexcept { return params_; }
  double average_length() const noexcept;
  double idf(std::string_view term) const;

  // Scores of every document sharing a term with the query and passing `accept` (all when
  // empty), unsorted.
  std::vector<ScoredDocument> score_all(const std::vector<std::string>& query_terms,
                                        const std::function<bool(std::size_t)>& accept = {}) const;
  // The same, best first (score descending, then document ascending), at most `limit`.
  std::vector<ScoredDocument> top(const std::vector<std::string>& query_terms, std::size_t limit,
                                  const std::function<bool(std::size_t)>& accept = {}) const;

  // Raw access for saving and loading (corpus_index.cpp).
  const std::vector<std::uint32_t>& document_lengths() const noexcept { return document_lengths_; }
  const std::vector<std::string>& terms() const noexcept { return terms_; }
  const std::vector<std::vector<Posting>>& postings() const noexcept { return postings_; }
  // Rebuilds an index from those parts; throws core::InvalidArgument when they disagree.
  static Bm25Index from_parts(Bm25Params params, std::vector<std::uint32_t> document_lengths,
                              std::vector<std::string> terms, std::vector<std::vector<Posting>> postings);

 private:
  Bm25Params params_;
  std::vector<std::uint32_t> document_lengths_;
  std::uint64_t total_length_ = 0;
  std::vector<std::string> terms_;                       // term id -> term
  std::unordered_map<std::string, std::uint32_t> ids_;  // term -> term id
  std::vector<std::vector<Posting>> postings_;           // term id -> documents, ascending
};

// Best first: score descending, then document ascending (ties break the same way every run).
bool better(const ScoredDocument& a, const ScoredDocument& b) noexcept;

}  // namespace kbrl::rag
