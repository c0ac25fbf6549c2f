#include <fmt/format.h>

#include "kbrl/core/error.hpp"
#include "kbrl/rag/corpus_index.hpp"
#include "kbrl/rag/retriever.hpp"

namespace kbrl::rag {

std::unique_ptr<Retriever> load_retriever(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw core::ConfigError(path.string(), "", std::filesystem::exists(path, ec)
                                                   ? "not a file (expected an index written by kbrl-index build)"
                                                   : "no such file (build one with kbrl-index build)");
  // CorpusIndex::load checks the magic and says "not a kbrl retrieval index" for anything else.
  return std::make_unique<CorpusIndex>(CorpusIndex::load(path));
}

}  // namespace kbrl::rag
