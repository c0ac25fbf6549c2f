#include "kbrl/rag/bm25.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include <fmt/format.h>

#include "kbrl/core/error.hpp"

namespace kbrl::rag {

bool better(const ScoredDocument& a, const ScoredDocument& b) noexcept {
  return a.score != b.score ? a.score > b.score : a.document < b.document;
}

Bm25Index::Bm25Index(Bm25Params params) : params_(params) {
  if (!(params_.k1 >= 0.0) || !std::isfinite(params_.k1))
    throw core::InvalidArgument(fmt::format("BM25 k1 {} is not a finite number >= 0", params_.k1));
  if (!(params_.b >= 0.0 && params_.b <= 1.0))
    throw core::InvalidArgument(fmt::format("BM25 b {} is not in [0, 1]", params_.b));
}

void Bm25Index::add_document(const std::vector<std::string>& terms) {
  if (document_lengths_.size() >= std::numeric_limits<std::uint32_t>::max())
    throw core::InvalidArgument("BM25 index: more than 2^32 - 1 documents");
  const auto doc = static_cast<std::uint32_t>(document_lengths_.size());
  std::unordered_map<std::string_view, std::uint32_t> counts;
  for (const std::string& t : terms) ++counts[t];
  // Postings in term order within a document do not matter; across documents they stay ascending.
  for (const auto& [term, count] : counts) {
    auto it = ids_.find(std::string(term));
    if (it == ids_.end()) {
      it = ids_.emplace(std::string(term), static_cast<std::uint32_t>(terms_.size())).first;
      terms_.emplace_back(term);
      postings_.emplace_back();
    }
    postings_[it->second].push_back({doc, count});
  }
  document_lengths_.push_back(static_cast<std::uint32_t>(terms.size()));
  total_length_ += terms.size();
}

std::size_t Bm25Index::posting_count() const noexcept {
  std::size_t n = 0;
  for (const auto& p : postings_) n += p.size();
  return n;
}

double Bm25Index::average_length() const noexcept {
  return size() == 0 ? 0.0 : static_cast<double>(total_length_) / static_cast<double>(size());
}

double Bm25Index::idf(std::string_view term) const {
  const auto it = ids_.find(std::string(term));
  const double df = it == ids_.end() ? 0.0 : static_cast<double>(postings_[it->second].size());
  const double n = static_cast<double>(size());
  return std::log(1.0 + (n - df + 0.5) / (df + 0.5));
}

std::vector<ScoredDocument> Bm25Index::score_all(const std::vector<std::string>& query_terms,
                                                 const std::function<bool(std::size_t)>& accept) const {
  std::vector<ScoredDocument> out;
  if (size() == 0) return out;
  const double avgdl = std::max(average_length(), 1e-9);
  const double k1 = params_.k1;
  const double b = params_.b;
  std::vector<double> scores(size(), 0.0);
  std::vector<char> touched(size(), 0);
  std::vector<std::uint32_t> touched_list;
  std::unordered_set<std::string_view> seen;
  const double n = static_cast<double>(size());
  for (const std::string& term : query_terms) {
    if (!seen.insert(term).second) continue;
    const auto it = ids_.find(term);
    if (it == ids_.end()) continue;
    const auto& list = postings_[it->second];
    const double df = static_cast<double>(list.size());
    const double idf = std::log(1.0 + (n - df + 0.5) / (df + 0.5));
    for (const Posting& p : list) {
      const double tf = p.frequency;
      const double norm = k1 * (1.0 - b + b * static_cast<double>(document_lengths_[p.document]) / avgdl);
      scores[p.document] += idf * tf * (k1 + 1.0) / (tf + norm);
      if (!touched[p.document]) {
        touched[p.document] = 1;
        touched_list.push_back(p.document);
      }
    }
  }
  out.reserve(touched_list.size());
  for (const std::uint32_t d : touched_list)
    if (!accept || accept(d)) out.push_back({d, scores[d]});
  return out;
}

std::vector<ScoredDocument> Bm25Index::top(const std::vector<std::string>& query_terms, std::size_t limit,
                                           const std::function<bool(std::size_t)>& accept) const {
  std::vector<ScoredDocument> all = score_all(query_terms, accept);
  if (all.size() > limit) {
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(limit), all.end(), better);
    all.resize(limit);
  } else {
    std::sort(all.begin(), all.end(), better);
  }
  return all;
}

Bm25Index Bm25Index::from_parts(Bm25Params params, std::vector<std::uint32_t> document_lengths,
                                std::vector<std::string> terms, std::vector<std::vector<Posting>> postings) {
  Bm25Index index(params);
  if (terms.size() != postings.size())
    throw core::InvalidArgument(fmt::format("BM25 index: {} terms but {} posting lists", terms.size(), postings.size()));
  const std::size_t n = document_lengths.size();
  for (std::size_t t = 0; t < terms.size(); ++t) {
    std::uint32_t previous = 0;
    for (std::size_t j = 0; j < postings[t].size(); ++j) {
      const Posting& p = postings[t][j];
      if (p.document >= n || (j > 0 && p.document <= previous) || p.frequency == 0 ||
          p.frequency > document_lengths[p.document])
        throw core::InvalidArgument(fmt::format("BM25 index: bad posting of term '{}'", terms[t]));
      previous = p.document;
    }
    if (!index.ids_.emplace(terms[t], static_cast<std::uint32_t>(t)).second)
      throw core::InvalidArgument(fmt::format("BM25 index: term '{}' twice", terms[t]));
  }
  for (const std::uint32_t len : document_lengths) index.total_length_ += len;
  index.document_lengths_ = std::move(document_lengths);
  index.terms_ = std::move(terms);
  index.postings_ = std::move(postings);
  return index;
}

}  // namespace kbrl::rag
