// The dense half of kbrl_bench_retrieval (dense.cpp): FAISS index build, save, load and query on the
// same synthetic corpus as BM25, embedded with HashingEmbedder so that what is timed is the vector
// index; optionally the in-process embedder's throughput on a checkpoint, reported apart.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kbrl/rag/corpus.hpp"

namespace kbrl_bench {

struct DenseBenchOptions {
  std::vector<std::size_t> dimensions{256, 1536};
  std::string out;                  // where the index file goes (removed after)
  std::string checkpoint;           // a checkpoint to time the in-process embedder on; empty: not timed
  std::size_t checkpoint_texts = 256;
};

void run_dense(const std::vector<kbrl::rag::CorpusEntry>& corpus, const std::vector<std::string>& problems,
               const DenseBenchOptions& options);

}  // namespace kbrl_bench
