#include <fmt/format.h>

#include "kbrl/core/error.hpp"
#include "kbrl/rag/corpus_index.hpp"
#include "kbrl/rag/dense_index.hpp"
#include "kbrl/rag/retriever.hpp"

namespace kbrl::rag {

std::optional<EmbedderSettingsProblem> check_index_embedder(const std::filesystem::path& path,
                                                            const EmbedderSettings& embedder,
                                                            const SettingName& name_of) {
  const auto name = [&](const std::string& field) { return name_of ? name_of(field) : field; };
  const auto problem = [](std::string field, std::string message) {
    return std::optional<EmbedderSettingsProblem>(EmbedderSettingsProblem{std::move(field), std::move(message)});
  };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  IndexKind kind{};
  try {
    kind = index_kind(path);
  } catch (const core::ConfigError&) {
    return std::nullopt;  // not an index: load_retriever says so
  }
  if (kind == IndexKind::bm25) {
    if (!embedder.given()) return std::nullopt;
    const std::string field = embedder.endpoint.empty() ? "embeddings_checkpoint" : "embeddings_endpoint";
    return problem(field, fmt::format("{} is a BM25 index, which embeds nothing: the embeddings settings are for "
                                      "dense indexes (kbrl-index build --dense); remove {}",
                                      path.string(), name(field)));
  }
  if (embedder.given()) return std::nullopt;  // whether it is the right one, loading tells
  const EmbedderIdentity id = DenseIndex::read_identity(path);
  return problem("embeddings_endpoint",
                 fmt::format("{} is a dense index of embeddings of {}, and no embedder is given: search it with "
                             "that model, served ({} URL, {} {}) or in process ({} DIR, a checkpoint folder named {} "
                             "or given {} {})",
                             path.string(), to_string(id), name("embeddings_endpoint"), name("embeddings_model"),
                             id.model, name("embeddings_checkpoint"), id.model, name("embeddings_model"), id.model));
}

std::unique_ptr<Retriever> load_retriever(const std::filesystem::path& path, const EmbedderSettings& embedder,
                                          const CheckpointEmbedderLoader& load_checkpoint, const SettingName& name_of) {
  const auto name = [&](const std::string& field) { return name_of ? name_of(field) : field; };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw core::ConfigError(path.string(), "", std::filesystem::exists(path, ec)
                                                   ? "not a file (expected an index written by kbrl-index build)"
                                                   : "no such file (build one with kbrl-index build)");
  if (const auto problem = check_index_embedder(path, embedder, name_of))
    throw core::ConfigError(path.string(), name(problem->field), problem->message);
  // index_kind says "not a kbrl retrieval index" for anything else.
  if (index_kind(path) == IndexKind::bm25) return std::make_unique<CorpusIndex>(CorpusIndex::load(path));
  if (!dense_retrieval_available())
    throw core::Error(fmt::format("{} is a dense index, and dense retrieval needs FAISS, which this kbrl was built "
                                  "without: install libfaiss-dev and build again (docs/retrieval.md), or use a BM25 "
                                  "index",
                                  path.string()));
  // DenseIndex::load refuses an embedder of another identity than the one the index records.
  std::shared_ptr<Embedder> model = make_embedder(embedder, load_checkpoint, name_of);
  return std::make_unique<DenseIndex>(DenseIndex::load(path, std::move(model)));
}

}  // namespace kbrl::rag
