// What prompts need from a search index, whichever kind it is (BM25 over code terms, dense
// embeddings): the examples closest to a problem, leaks of that problem left out and counted.
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "kbrl/rag/corpus.hpp"

namespace kbrl::rag {

struct SearchOptions;
struct SearchResult;

class Retriever {
 public:
  virtual ~Retriever() = default;
  // At most options.k hits, best first, of options.language (any when empty), none of them a
  // leak of `problem_source` under options.leakage; the leaks passed over are in the result.
  virtual SearchResult search(std::string_view problem_source, const SearchOptions& options) const = 0;
  // What SearchHit::entry indexes.
  virtual const std::vector<CorpusEntry>& entries() const noexcept = 0;
};

// The index file `path` as a Retriever, whichever kind `kbrl-index build` wrote (today BM25:
// CorpusIndex). The one place that knows the kinds: a new index kind is added here. Throws
// core::ConfigError naming the file when it is missing, of no known kind, or unreadable.
std::unique_ptr<Retriever> load_retriever(const std::filesystem::path& path);

}  // namespace kbrl::rag
