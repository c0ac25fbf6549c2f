// A searchable corpus: the entries and their BM25 index, saved to and loaded from one versioned
// binary file, searched for the examples closest to a problem with leaks of that problem left out.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/rag/bm25.hpp"
#include "kbrl/rag/corpus.hpp"
#include "kbrl/rag/leakage.hpp"
#include "kbrl/rag/retriever.hpp"

namespace kbrl::rag {

struct SearchOptions {
  std::size_t k = 5;
  std::string language;   // only entries of this language ("triton", "cuda"); empty: any
  LeakageConfig leakage;  // on by default
};

struct SearchHit {
  std::size_t entry = 0;  // into CorpusIndex::entries()
  double score = 0;
};

struct ExcludedEntry {
  std::size_t entry = 0;
  double score = 0;
  LeakKind kind = LeakKind::exact;
};

struct SearchResult {
  std::vector<SearchHit> hits;  // at most k, best first, no leak among them
  // Leaks of the problem passed over on the way to the k-th hit (every leak that shares a search
  // term with the problem when fewer than k clean hits exist), best first.
  std::vector<ExcludedEntry> excluded;
  std::size_t excluded_count(LeakKind kind) const noexcept;
};

class CorpusIndex final : public Retriever {
 public:
  // The file format's version: load refuses any other.
  static constexpr std::uint32_t kFormatVersion = 1;

  CorpusIndex() = default;
  // Indexes the PyTorch side of every entry.
  static CorpusIndex build(std::vector<CorpusEntry> entries, Bm25Params params = {});

  SearchResult search(std::string_view problem_source, const SearchOptions& options) const override;
  SearchResult search(std::string_view problem_source) const { return search(problem_source, SearchOptions{}); }

  const std::vector<CorpusEntry>& entries() const noexcept override { return entries_; }
  const Bm25Index& bm25() const noexcept { return bm25_; }

  // The whole index as bytes: "KBRLRIX1" magic, format version, payload size and checksum, then
  // the payload (little-endian). save writes them atomically (core::write_file_atomically).
  std::string serialize() const;
  void save(const std::filesystem::path& path) const;
  // Throws core::ConfigError(where) for another format version, a wrong magic, a truncated or
  // corrupt file (checksum), or contents that do not fit together.
  static CorpusIndex deserialize(std::string_view bytes, const std::string& where);
  static CorpusIndex load(const std::filesystem::path& path);

 private:
  std::vector<CorpusEntry> entries_;
  Bm25Index bm25_;
};

}  // namespace kbrl::rag
