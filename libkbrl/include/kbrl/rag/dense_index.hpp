// Dense retrieval: the PyTorch side of every corpus entry embedded (rag::Embedder) and searched by
// cosine similarity with FAISS (an exact inner-product index over unit vectors), with the same
// language filter and leakage control as the BM25 index; saved to and loaded from one versioned,
// checksummed file that records the embedder's identity. Needs FAISS (libfaiss-dev) at build time:
// without it every function here but dense_retrieval_available() throws core::Error saying so.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/rag/corpus.hpp"
#include "kbrl/rag/corpus_index.hpp"
#include "kbrl/rag/embedder.hpp"
#include "kbrl/rag/retriever.hpp"

namespace kbrl::rag {

// Whether this kbrl was built with FAISS (KBRL_WITH_FAISS).
bool dense_retrieval_available() noexcept;

struct DenseBuildOptions {
  std::size_t batch_size = 256;  // texts per Embedder::embed call
  // After each batch: entries embedded so far, of the total.
  std::function<void(std::size_t done, std::size_t total)> progress;
};

class DenseIndex final : public Retriever {
 public:
  // The file format's version: load refuses any other.
  static constexpr std::uint32_t kFormatVersion = 1;

  DenseIndex();
  ~DenseIndex() override;
  DenseIndex(DenseIndex&&) noexcept;
  DenseIndex& operator=(DenseIndex&&) noexcept;

  // Embeds every entry's source with `embedder` (kept for searching) and indexes the vectors.
  static DenseIndex build(std::vector<CorpusEntry> entries, std::shared_ptr<Embedder> embedder,
                          const DenseBuildOptions& options = {});
  // From vectors embedded elsewhere (entries.size() rows of identity.dimension floats; normalized
  // here). Search it with search_embedding, or attach the embedder that made them.
  static DenseIndex from_embeddings(std::vector<CorpusEntry> entries, const EmbedderIdentity& identity,
                                    std::vector<float> vectors);

  // Embeds the problem with the attached embedder (core::Error when none is), then as
  // search_embedding. Scores are cosine similarities.
  SearchResult search(std::string_view problem_source, const SearchOptions& options) const override;
  SearchResult search(std::string_view problem_source) const { return search(problem_source, SearchOptions{}); }
  // With the problem's embedding given (normalized here); `problem_source` is what leakage control
  // compares the candidates with. Walks the ranking best first, sets every leak aside and stops
  // at options.k clean hits (searching deeper when leaks used up the first candidates).
  SearchResult search_embedding(std::span<const float> query, std::string_view problem_source,
                                const SearchOptions& options) const;

  const std::vector<CorpusEntry>& entries() const noexcept override { return entries_; }
  const EmbedderIdentity& identity() const noexcept { return identity_; }
  // The embedder used for search(); throws core::InvalidArgument when its identity is not the
  // index's.
  void attach(std::shared_ptr<Embedder> embedder);
  const std::shared_ptr<Embedder>& embedder() const noexcept { return embedder_; }
  // The indexed vector of entry i (unit length, or zero for a text that embeds to nothing).
  std::vector<float> vector(std::size_t entry) const;

  // "KBRLDIX1" magic, format version, payload size and checksum, then the payload: the embedder's
  // identity, the entries and the FAISS index (faiss::write_index). save writes atomically.
  std::string serialize() const;
  void save(const std::filesystem::path& path) const;
  // Throws core::ConfigError(where) for another format version, a wrong magic (a BM25 index is
  // named as such), a truncated or corrupt file, contents that do not fit together, and an
  // `embedder` whose identity is not the one the index was built with. Without an embedder the
  // index answers search_embedding only (and attach() can add one later).
  static DenseIndex deserialize(std::string_view bytes, const std::string& where,
                                std::shared_ptr<Embedder> embedder = nullptr);
  static DenseIndex load(const std::filesystem::path& path, std::shared_ptr<Embedder> embedder = nullptr);
  // The embedder identity a dense index file records, from its first bytes alone (no checksum:
  // load checks the whole file), so that a program can say which embedder an index needs before
  // loading a model, and without FAISS. Throws core::ConfigError(path) for a file that is not a
  // dense index of this format version, or is too short.
  static EmbedderIdentity read_identity(const std::filesystem::path& path);

 private:
  struct Vectors;
  void index_languages();

  std::vector<CorpusEntry> entries_;
  EmbedderIdentity identity_;
  std::shared_ptr<Embedder> embedder_;
  std::unique_ptr<Vectors> vectors_;
};

// What kind of retrieval index a file holds, from its first 8 bytes; throws core::ConfigError
// naming the file for neither (or an unreadable file).
enum class IndexKind { bm25, dense };
IndexKind index_kind(const std::filesystem::path& path);

}  // namespace kbrl::rag
