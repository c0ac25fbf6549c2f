#include "dense.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "checkpoint_embedder.hpp"
#include "kbrl/rag/dense_index.hpp"
#include "kbrl/rag/embedder_settings.hpp"
#include "kbrl/rag/hashing_embedder.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace kbrl_bench {
namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

std::vector<float> embed_all(kbrl::rag::Embedder& e, const std::vector<std::string>& texts) {
  std::vector<float> out;
  constexpr std::size_t kBatch = 1024;
  for (std::size_t start = 0; start < texts.size(); start += kBatch) {
    const std::vector<std::string> batch(texts.begin() + static_cast<std::ptrdiff_t>(start),
                                         texts.begin() + static_cast<std::ptrdiff_t>(std::min(texts.size(), start + kBatch)));
    const auto rows = e.embed(batch);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

}  // namespace

void run_dense(const std::vector<kbrl::rag::CorpusEntry>& corpus, const std::vector<std::string>& problems,
               const DenseBenchOptions& options) {
  if (!kbrl::rag::dense_retrieval_available()) {
    std::cout << "dense: kbrl was built without FAISS, not measured\n";
    return;
  }
  std::vector<std::string> sources;
  sources.reserve(corpus.size());
  for (const auto& e : corpus) sources.push_back(e.source);
  for (const std::size_t dim : options.dimensions) {
    kbrl::rag::HashingEmbedder embedder(dim);
    auto t = Clock::now();
    std::vector<float> vectors = embed_all(embedder, sources);
    const double embed_s = since(t);
    const std::vector<float> queries = embed_all(embedder, problems);

    auto entries = corpus;  // copied outside the timing: the index takes its entries
    t = Clock::now();
    const auto index = kbrl::rag::DenseIndex::from_embeddings(std::move(entries), embedder.identity(), std::move(vectors));
    const double build_s = since(t);
    t = Clock::now();
    index.save(options.out);
    const double save_s = since(t);
    const auto size = fs::file_size(options.out);
    t = Clock::now();
    const auto loaded = kbrl::rag::DenseIndex::load(options.out);
    const double load_s = since(t);
    fs::remove(options.out);

    std::vector<double> on, off, triton;
    std::size_t excluded = 0;
    for (std::size_t i = 0; i < problems.size(); ++i) {
      const std::span<const float> q(queries.data() + i * dim, dim);
      kbrl::rag::SearchOptions filtered;
      t = Clock::now();
      excluded += loaded.search_embedding(q, problems[i], filtered).excluded.size();
      on.push_back(since(t) * 1e3);
      kbrl::rag::SearchOptions unfiltered;
      unfiltered.leakage.enabled = false;
      t = Clock::now();
      (void)loaded.search_embedding(q, problems[i], unfiltered);
      off.push_back(since(t) * 1e3);
      kbrl::rag::SearchOptions language = filtered;
      language.language = "triton";
      t = Clock::now();
      (void)loaded.search_embedding(q, problems[i], language);
      triton.push_back(since(t) * 1e3);
    }
    std::cout << fmt::format("dense, {} dimensions: hashing-embedder embedding {:.2f} s (not FAISS; for reference)\n",
                             dim, embed_s);
    std::cout << fmt::format("dense, {} dimensions: FAISS build (IndexFlatIP add + language bitmaps) {:.2f} s\n", dim,
                             build_s);
    std::cout << fmt::format("dense, {} dimensions: save {:.2f} s, load {:.2f} s, file {:.1f} MB\n", dim, save_s, load_s,
                             static_cast<double>(size) / 1e6);
    std::cout << fmt::format(
        "dense, {} dimensions: query k=5, leakage filter on:  median {:.2f} ms, p90 {:.2f} ms ({} leaks excluded over "
        "{} queries)\n",
        dim, percentile(on, 0.5), percentile(on, 0.9), excluded, problems.size());
    std::cout << fmt::format("dense, {} dimensions: query k=5, leakage filter off: median {:.2f} ms, p90 {:.2f} ms\n",
                             dim, percentile(off, 0.5), percentile(off, 0.9));
    std::cout << fmt::format("dense, {} dimensions: query k=5, triton only, filter on: median {:.2f} ms, p90 {:.2f} ms\n",
                             dim, percentile(triton, 0.5), percentile(triton, 0.9));
  }
  if (!options.checkpoint.empty()) {
    kbrl::rag::EmbedderSettings settings;
    settings.checkpoint = options.checkpoint;
    settings.device = "cpu";
    std::string where;
    auto t = Clock::now();
    auto embedder = kbrl::rag::make_embedder(settings, kbrl::apps::checkpoint_embedder_loader(), {}, &where);
    const double load_s = since(t);
    const std::size_t n = std::min(options.checkpoint_texts, sources.size());
    const std::vector<std::string> some(sources.begin(), sources.begin() + static_cast<std::ptrdiff_t>(n));
    (void)embedder->embed({some.front()});  // first call: thread pools and allocations
    t = Clock::now();
    constexpr std::size_t kBatch = 64;
    for (std::size_t start = 0; start < n; start += kBatch)
      (void)embedder->embed(std::vector<std::string>(some.begin() + static_cast<std::ptrdiff_t>(start),
                                                     some.begin() + static_cast<std::ptrdiff_t>(std::min(n, start + kBatch))));
    const double embed_s = since(t);
    std::cout << fmt::format(
        "in-process embedder {} ({}): loaded in {:.2f} s, {} synthetic programs in {:.2f} s: {:.0f} programs/s\n",
        kbrl::rag::to_string(embedder->identity()), where, load_s, n, embed_s,
        static_cast<double>(n) / embed_s);
  }
}

}  // namespace kbrl_bench
