#include <kbrl/core/error.hpp>
#include <kbrl/core/file.hpp>
#include <kbrl/rag/corpus_index.hpp>

#include <algorithm>
#include <iostream>
#include <set>
#include <string>

#include <fmt/format.h>

#include "../../benchmarks/retrieval/synthetic_corpus.hpp"
#include "catch.hpp"
#include "rag_fixtures.hpp"

using namespace kbrl::rag;
using kbrl_rag_test::config_error_of;
using kbrl_rag_test::contains;

// The bar of docs/retrieval.md: over the labeled queries, the mean fraction of each query's
// relevant examples found in the top 5 (with leakage control on, as prompts will use it).
constexpr double kRecallAt5Bar = 0.8;

TEST_CASE("BM25 recall@5 on the labeled queries is above the bar") {
  const auto index = CorpusIndex::build(kbrl_rag_test::bundled_corpus());
  const auto queries = kbrl_rag_test::read_jsonl_objects(kbrl_rag_test::data_dir() / "queries.jsonl");
  REQUIRE(queries.size() >= 12);
  double total = 0;
  for (const auto& q : queries) {
    const std::string id(q.at("id").as_string());
    std::set<std::string> relevant;
    for (const auto& r : q.at("relevant").as_array()) relevant.insert(std::string(r.as_string()));
    const SearchResult result = index.search(std::string(q.at("source").as_string()));
    CHECK(result.hits.size() == 5);
    CHECK(result.excluded.empty());  // the queries are other problems, not copies
    std::size_t found = 0;
    std::string ranked;
    for (const auto& hit : result.hits) {
      const std::string& hit_id = index.entries()[hit.entry].id;
      found += relevant.count(hit_id);
      ranked += fmt::format(" {}({:.2f})", hit_id, hit.score);
    }
    const double recall = static_cast<double>(found) / static_cast<double>(relevant.size());
    std::cout << fmt::format("{:<24} recall@5 {:.2f}:{}\n", id, recall, ranked);
    total += recall;
  }
  const double mean = total / static_cast<double>(queries.size());
  std::cout << fmt::format("mean recall@5 {:.3f} over {} queries (bar {})\n", mean, queries.size(), kRecallAt5Bar);
  CHECK(mean >= kRecallAt5Bar);
}

TEST_CASE("search: k, the language filter, and a problem without terms") {
  const auto index = CorpusIndex::build(kbrl_rag_test::bundled_corpus());
  const std::string problem = "import torch\nclass Model:\n    def forward(self, x):\n        return torch.softmax(x, dim=0) * 2\n";
  SearchOptions options;
  options.k = 3;
  CHECK(index.search(problem, options).hits.size() == 3);
  options.k = 36;
  options.language = "triton";
  const auto triton = index.search(problem, options);
  CHECK_FALSE(triton.hits.empty());
  for (const auto& hit : triton.hits) CHECK(index.entries()[hit.entry].language == "triton");
  CHECK(std::is_sorted(triton.hits.begin(), triton.hits.end(),
                       [](const SearchHit& a, const SearchHit& b) { return a.score > b.score; }));
  options.language = "hip";
  CHECK(index.search(problem, options).hits.empty());
  CHECK(index.search("1 + 2\n").hits.empty());
}

TEST_CASE("an index saved and loaded answers the same") {
  const auto dir = kbrl_rag_test::fresh_dir("save_load");
  const auto index = CorpusIndex::build(kbrl_rag_test::bundled_corpus(), Bm25Params{1.5, 0.6});
  index.save(dir / "corpus.kbrlidx");
  const auto loaded = CorpusIndex::load(dir / "corpus.kbrlidx");
  REQUIRE(loaded.entries().size() == index.entries().size());
  for (std::size_t i = 0; i < index.entries().size(); ++i) {
    const auto& a = index.entries()[i];
    const auto& b = loaded.entries()[i];
    CHECK(a.id == b.id);
    CHECK(a.source == b.source);
    CHECK(a.kernel == b.kernel);
    CHECK(a.language == b.language);
    CHECK(a.speedup == b.speedup);
    CHECK(a.level == b.level);
    CHECK(a.origin == b.origin);
  }
  CHECK(loaded.bm25().params().k1 == 1.5);
  CHECK(loaded.bm25().params().b == 0.6);
  const auto queries = kbrl_rag_test::read_jsonl_objects(kbrl_rag_test::data_dir() / "queries.jsonl");
  for (const auto& q : queries) {
    const std::string source(q.at("source").as_string());
    const auto x = index.search(source);
    const auto y = loaded.search(source);
    REQUIRE(x.hits.size() == y.hits.size());
    for (std::size_t i = 0; i < x.hits.size(); ++i) {
      CHECK(x.hits[i].entry == y.hits[i].entry);
      CHECK(x.hits[i].score == y.hits[i].score);
    }
  }
  CHECK(loaded.serialize() == index.serialize());
}

TEST_CASE("a corrupt, truncated or foreign index file is refused clearly") {
  const auto dir = kbrl_rag_test::fresh_dir("corrupt");
  const std::string bytes = CorpusIndex::build(kbrl_rag_test::bundled_corpus()).serialize();
  const auto where = (dir / "x.kbrlidx").string();

  std::string flipped = bytes;
  flipped[bytes.size() / 2] = static_cast<char>(flipped[bytes.size() / 2] ^ 0x40);
  auto e = config_error_of([&] { CorpusIndex::deserialize(flipped, where); });
  CHECK(e.where() == where);
  CHECK(contains(e.what(), "checksum"));

  e = config_error_of([&] { CorpusIndex::deserialize(bytes.substr(0, bytes.size() - 10), where); });
  CHECK(contains(e.what(), "truncated"));

  std::string version = bytes;
  version[8] = 9;  // the version field follows the 8-byte magic
  e = config_error_of([&] { CorpusIndex::deserialize(version, where); });
  CHECK(contains(e.what(), "version 9"));
  CHECK(contains(e.what(), "rebuild"));

  e = config_error_of([&] { CorpusIndex::deserialize("{\"not\": \"an index\"}", where); });
  CHECK(contains(e.what(), "not a kbrl retrieval index"));
  e = config_error_of([&] { CorpusIndex::deserialize("", where); });
  CHECK(contains(e.what(), "not a kbrl retrieval index"));

  // A file written whole, then cut: load names the file.
  kbrl_rag_test::write_file(dir / "cut.kbrlidx", bytes.substr(0, 100));
  e = config_error_of([&] { CorpusIndex::load(dir / "cut.kbrlidx"); });
  CHECK(e.where() == (dir / "cut.kbrlidx").string());
}

TEST_CASE("smoke: 1000 synthetic examples index, round-trip and find their own operations") {
  auto corpus = kbrl_bench::synthetic_corpus(1000, 7);
  CHECK(kbrl_bench::synthetic_corpus(1000, 7)[999].source == corpus[999].source);  // deterministic
  const auto index = CorpusIndex::build(std::move(corpus));
  CHECK(index.bm25().size() == 1000);
  const auto loaded = CorpusIndex::deserialize(index.serialize(), "memory");
  // A problem generated the same way is never its own leak unless it is a copy: an entry's own
  // source is excluded as an exact copy, and the next hits are still found.
  const auto& first = index.entries()[0];
  const auto r = loaded.search(first.source);
  CHECK(r.hits.size() == 5);
  REQUIRE_FALSE(r.excluded.empty());
  CHECK(r.excluded[0].entry == 0);
  CHECK(r.excluded[0].kind == LeakKind::exact);
}
