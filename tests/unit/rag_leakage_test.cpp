// The leakage filter on the labeled set of tests/data/retrieval/leakage.jsonl: each problem's
// exact and near copies in the bundled corpus are excluded, and nothing else is: not ReLU for
// LeakyReLU, not sum for prod, not conv2d for a depthwise conv2d.
#include <kbrl/rag/corpus_index.hpp>
#include <kbrl/rag/leakage.hpp>

#include <iostream>
#include <map>
#include <string>

#include <fmt/format.h>

#include "catch.hpp"
#include "rag_fixtures.hpp"

using namespace kbrl::rag;

namespace {

std::map<std::string, std::string> labels_of(const boost::json::object& row) {
  std::map<std::string, std::string> out;
  for (const auto& [id, kind] : row.at("leaks").as_object()) out[std::string(id)] = std::string(kind.as_string());
  return out;
}

}  // namespace

TEST_CASE("the leakage filter excludes exactly the labeled copies") {
  const auto corpus = kbrl_rag_test::bundled_corpus();
  const auto rows = kbrl_rag_test::read_jsonl_objects(kbrl_rag_test::data_dir() / "leakage.jsonl");
  REQUIRE(rows.size() >= 12);
  std::size_t leaks = 0;
  std::size_t non_leak_queries = 0;
  for (const auto& row : rows) {
    const std::string id(row.at("id").as_string());
    const std::string source(row.at("source").as_string());
    const auto expected = labels_of(row);
    leaks += expected.size();
    if (expected.empty()) ++non_leak_queries;
    const LeakageFilter filter(source);
    std::map<std::string, std::string> found;
    for (const CorpusEntry& e : corpus) {
      const LeakKind kind = filter.check(e.source);
      if (kind != LeakKind::none) found[e.id] = to_string(kind);
    }
    for (const CorpusEntry& e : corpus)
      if (expected.count(e.id) != 0)
        std::cout << fmt::format("{} / {}: jaccard {:.3f}\n", id, e.id,
                                 jaccard(filter.problem().shingles, fingerprint_python_source(e.source).shingles));
    INFO("query " << id);
    CHECK(found == expected);
  }
  CHECK(leaks >= 6);
  CHECK(non_leak_queries >= 6);
}

TEST_CASE("search leaves the labeled copies out and counts them") {
  const auto index = CorpusIndex::build(kbrl_rag_test::bundled_corpus());
  const auto rows = kbrl_rag_test::read_jsonl_objects(kbrl_rag_test::data_dir() / "leakage.jsonl");
  for (const auto& row : rows) {
    const std::string source(row.at("source").as_string());
    const auto expected = labels_of(row);
    SearchOptions all;
    all.k = index.entries().size();
    const SearchResult r = index.search(source, all);
    std::map<std::string, std::string> excluded;
    for (const auto& x : r.excluded) excluded[index.entries()[x.entry].id] = to_string(x.kind);
    INFO("query " << row.at("id").as_string());
    CHECK(excluded == expected);
    for (const auto& hit : r.hits) CHECK(expected.count(index.entries()[hit.entry].id) == 0);
    CHECK(r.excluded_count(LeakKind::exact) + r.excluded_count(LeakKind::near) == expected.size());
    // Where there is an exact copy it is what BM25 ranks first without the filter.
    SearchOptions off = all;
    off.leakage.enabled = false;
    const SearchResult unfiltered = index.search(source, off);
    CHECK(unfiltered.excluded.empty());
    CHECK(unfiltered.hits.size() == r.hits.size() + r.excluded.size());
    for (const auto& [leak_id, kind] : expected)
      if (kind == "exact") CHECK(index.entries()[unfiltered.hits.at(0).entry].id == leak_id);
  }
}

TEST_CASE("no two problems of the bundled corpus are leaks of each other") {
  // Distinct problems of one corpus (relu and leaky_relu, sum and mean, conv2d and its transpose)
  // stay apart; the closest pair with the same operations is printed, for docs/retrieval.md.
  const auto corpus = kbrl_rag_test::bundled_corpus();
  double closest = 0;
  std::string pair = "none";
  double closest_any = 0;
  std::string pair_any = "none";
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const LeakageFilter filter(corpus[i].source);
    for (std::size_t j = 0; j < corpus.size(); ++j) {
      if (i == j) continue;
      INFO(corpus[i].id << " vs " << corpus[j].id);
      CHECK(filter.check(corpus[j].source) == LeakKind::none);
      const auto fj = fingerprint_python_source(corpus[j].source);
      const double sim = jaccard(filter.problem().shingles, fj.shingles);
      if (sim > closest_any) {
        closest_any = sim;
        pair_any = corpus[i].id + " / " + corpus[j].id;
      }
      if (fj.operations == filter.problem().operations && sim > closest) {
        closest = sim;
        pair = corpus[i].id + " / " + corpus[j].id;
      }
    }
  }
  std::cout << fmt::format("closest distinct problems with equal operations: {} (jaccard {:.3f})\n", pair, closest);
  std::cout << fmt::format("closest distinct problems: {} (jaccard {:.3f})\n", pair_any, closest_any);
}

TEST_CASE("leakage settings: off, and out-of-range values") {
  const auto corpus = kbrl_rag_test::bundled_corpus();
  LeakageConfig off;
  off.enabled = false;
  const LeakageFilter filter(corpus[0].source, off);
  CHECK(filter.check(corpus[0].source) == LeakKind::none);
  LeakageConfig bad;
  bad.near_threshold = 1.5;
  CHECK_THROWS_AS(LeakageFilter("x = 1\n", bad), kbrl::core::InvalidArgument);
  bad.near_threshold = 0.8;
  bad.shingle_size = 0;
  CHECK_THROWS_AS(LeakageFilter("x = 1\n", bad), kbrl::core::InvalidArgument);
}
