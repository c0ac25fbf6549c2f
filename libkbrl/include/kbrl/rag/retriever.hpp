// What prompts need from a search index, whichever kind it is (BM25 over code terms, dense
// embeddings): the examples closest to a problem, leaks of that problem left out and counted.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "kbrl/rag/corpus.hpp"
#include "kbrl/rag/embedder_settings.hpp"

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

// Whether the index file `path` and the embedder settings fit: a dense index needs an embedder
// (the message names the one the index was built with and the settings to give, through
// name_of), a BM25 index takes none. A missing file, or one of no known kind, is no problem
// here (load_retriever says what it is). Reads at most the file's first few KB.
std::optional<EmbedderSettingsProblem> check_index_embedder(const std::filesystem::path& path,
                                                            const EmbedderSettings& embedder,
                                                            const SettingName& name_of = {});

// The index file `path` as a Retriever, whichever kind `kbrl-index build` wrote: BM25
// (CorpusIndex), or dense (DenseIndex) searched with the embedder `embedder` names (make_embedder,
// with `load_checkpoint` for a checkpoint), whose identity must be the one the index records. The
// one place that knows the kinds: a new index kind is added here. Throws core::ConfigError naming
// the file when it is missing, of no known kind, or unreadable; for a dense index without an
// embedder or with another one, a BM25 index with one (check_index_embedder), and bad embedder
// settings (the field as name_of names it). Without FAISS a dense index throws core::Error saying so.
std::unique_ptr<Retriever> load_retriever(const std::filesystem::path& path, const EmbedderSettings& embedder = {},
                                          const CheckpointEmbedderLoader& load_checkpoint = {},
                                          const SettingName& name_of = {});

}  // namespace kbrl::rag
