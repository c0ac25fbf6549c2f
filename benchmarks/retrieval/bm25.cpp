// BM25 and dense (FAISS) retrieval on the CPU at corpus scale: builds an index of N deterministic
// synthetic examples (synthetic_corpus.hpp; the Sakana archive plus KernelBook is about 50K), saves
// and loads it, and times queries with the leakage filter on (median and p90 over --queries
// problems generated the same way but from another seed). The dense part is dense.cpp. Results:
// docs/performance.md.
//   kbrl_bench_retrieval [--entries 50000] [--queries 100] [--dimension 256 --dimension 1536]
//                        [--checkpoint DIR [--checkpoint-texts 256]] [--no-bm25] [--out FILE]
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.hpp"
#include "dense.hpp"
#include "kbrl/rag/corpus_index.hpp"
#include "synthetic_corpus.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

void bm25(const std::vector<kbrl::rag::CorpusEntry>& corpus, const std::vector<std::string>& problems,
          const std::string& out) {
  auto entries = corpus;  // copied outside the timing: the index takes its entries
  auto t = Clock::now();
  const auto index = kbrl::rag::CorpusIndex::build(std::move(entries));
  const double build_s = since(t);
  t = Clock::now();
  index.save(out);
  const double save_s = since(t);
  const auto size = fs::file_size(out);
  t = Clock::now();
  const auto loaded = kbrl::rag::CorpusIndex::load(out);
  const double load_s = since(t);
  fs::remove(out);

  std::vector<double> ms_filtered, ms_unfiltered;
  std::size_t excluded = 0;
  for (const auto& p : problems) {
    kbrl::rag::SearchOptions on;
    t = Clock::now();
    const auto r = loaded.search(p, on);
    ms_filtered.push_back(since(t) * 1e3);
    excluded += r.excluded.size();
    kbrl::rag::SearchOptions off;
    off.leakage.enabled = false;
    t = Clock::now();
    (void)loaded.search(p, off);
    ms_unfiltered.push_back(since(t) * 1e3);
  }
  std::cout << fmt::format("build {:.2f} s ({} terms, {} postings)\n", build_s, index.bm25().vocabulary_size(),
                           index.bm25().posting_count());
  std::cout << fmt::format("save {:.2f} s, load {:.2f} s, file {:.1f} MB\n", save_s, load_s,
                           static_cast<double>(size) / 1e6);
  std::cout << fmt::format("query k=5, leakage filter on:  median {:.2f} ms, p90 {:.2f} ms ({} leaks excluded over {} queries)\n",
                           percentile(ms_filtered, 0.5), percentile(ms_filtered, 0.9), excluded, problems.size());
  std::cout << fmt::format("query k=5, leakage filter off: median {:.2f} ms, p90 {:.2f} ms\n",
                           percentile(ms_unfiltered, 0.5), percentile(ms_unfiltered, 0.9));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "Times BM25 and dense (FAISS) index build, save, load and query on N synthetic examples (docs/performance.md).",
      "kbrl_bench_retrieval");
  std::size_t entries = 50000;
  std::size_t queries = 100;
  std::string out = (fs::temp_directory_path() / "kbrl_bench_retrieval.kbrlidx").string();
  app.add_option("--entries", entries, "synthetic corpus size [default: 50000]");
  app.add_option("--queries", queries, "problems to time [default: 100]");
  app.add_option("--out", out, "where the index file goes (removed at the end)");
  kbrl_bench::DenseBenchOptions dense;
  std::vector<std::size_t> dimensions;
  bool no_bm25 = false;
  app.add_option("--dimension", dimensions, "dense: embedding dimensions to time (repeatable) [default: 256 and 1536]");
  app.add_option("--checkpoint", dense.checkpoint,
                 "dense: also time the in-process embedder on this checkpoint (e.g. the demo policy)")
      ->type_name("DIR");
  app.add_option("--checkpoint-texts", dense.checkpoint_texts, "synthetic programs it embeds [default: 256]");
  app.add_flag("--no-bm25", no_bm25, "dense only");
  return kbrl::apps::run_program(app, argc, argv, [&] {
    if (entries == 0 || queries == 0) throw kbrl::apps::UsageError("--entries and --queries must be at least 1");
    auto t = Clock::now();
    auto corpus = kbrl_bench::synthetic_corpus(entries, 42);
    const double generate_s = since(t);
    std::size_t chars = 0;
    for (const auto& e : corpus) chars += e.source.size() + e.kernel.size();

    kbrl_bench::SplitMix64 rng(4242);
    std::vector<std::string> problems;
    for (std::size_t i = 0; i < queries; ++i) problems.push_back(kbrl_bench::synthetic_problem(rng));
    std::cout << fmt::format("entries {} ({:.1f} MB of source + kernel text), generated in {:.2f} s\n", entries,
                             static_cast<double>(chars) / 1e6, generate_s);
    if (!no_bm25) bm25(corpus, problems, out);
    if (!dimensions.empty()) dense.dimensions = dimensions;
    dense.out = out;
    kbrl_bench::run_dense(corpus, problems, dense);
    return 0;
  });
}
