#include <kbrl/core/error.hpp>
#include <kbrl/rag/bm25.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "catch.hpp"

using namespace kbrl::rag;

namespace {

// Three documents; avgdl = (3 + 2 + 4) / 3 = 3, N = 3.
Bm25Index three_documents() {
  Bm25Index index;
  index.add_document({"relu", "relu", "kernel"});
  index.add_document({"sigmoid", "kernel"});
  index.add_document({"relu", "matmul", "matmul", "add"});
  return index;
}

double score_of(const std::vector<ScoredDocument>& docs, std::size_t d) {
  for (const auto& s : docs)
    if (s.document == d) return s.score;
  return -1;
}

}  // namespace

TEST_CASE("BM25 scores equal the hand-computed values (k1 = 1.2, b = 0.75)") {
  const Bm25Index index = three_documents();
  CHECK(index.size() == 3);
  CHECK(index.vocabulary_size() == 5);
  CHECK(index.average_length() == Catch::Approx(3.0));
  // idf(relu): df = 2 -> ln(1 + 1.5 / 2.5) = ln 1.6.
  CHECK(index.idf("relu") == Catch::Approx(0.4700036292));
  CHECK(index.idf("absent") == Catch::Approx(std::log(1.0 + 3.5 / 0.5)));

  // relu: d0 tf 2, |d| 3: norm = 1.2 * (0.25 + 0.75 * 1) = 1.2, 2 * 2.2 / 3.2 = 1.375;
  //       d2 tf 1, |d| 4: norm = 1.2 * (0.25 + 0.75 * 4 / 3) = 1.5, 2.2 / 2.5 = 0.88.
  const auto relu = index.top({"relu"}, 10);
  REQUIRE(relu.size() == 2);
  CHECK(relu[0].document == 0);
  CHECK(relu[0].score == Catch::Approx(0.4700036292 * 1.375));
  CHECK(relu[1].document == 2);
  CHECK(relu[1].score == Catch::Approx(0.4700036292 * 0.88));

  // matmul kernel: matmul idf ln(1 + 2.5 / 1.5) = 0.9808292530, d2 tf 2: 4.4 / 3.5;
  // kernel idf ln 1.6: d0 tf 1, norm 1.2: 1; d1 tf 1, |d| 2: norm 0.9, 2.2 / 1.9.
  const auto q = index.top({"matmul", "kernel", "matmul"}, 10);  // a repeated query term counts once
  REQUIRE(q.size() == 3);
  CHECK(q[0].document == 2);
  CHECK(q[0].score == Catch::Approx(0.9808292530 * 4.4 / 3.5));
  CHECK(q[1].document == 1);
  CHECK(q[1].score == Catch::Approx(0.4700036292 * 2.2 / 1.9));
  CHECK(q[2].document == 0);
  CHECK(q[2].score == Catch::Approx(0.4700036292));

  // accept filters documents; limit cuts the ranking.
  const auto filtered = index.score_all({"kernel"}, [](std::size_t d) { return d != 1; });
  CHECK(filtered.size() == 1);
  CHECK(score_of(filtered, 0) == Catch::Approx(0.4700036292));
  CHECK(index.top({"matmul", "kernel"}, 1).size() == 1);
  CHECK(index.top({"unknown"}, 5).empty());
}

TEST_CASE("BM25 parameters change the scores as the formula says") {
  Bm25Index flat(Bm25Params{1.2, 0.0});  // b = 0: length ignored
  flat.add_document({"a", "b"});
  flat.add_document({"a", "c", "c", "c", "c", "c"});
  const auto s = flat.top({"a"}, 2);
  REQUIRE(s.size() == 2);
  CHECK(s[0].score == Catch::Approx(s[1].score));
  CHECK(s[0].document == 0);  // ties break by document number
  CHECK_THROWS_AS(Bm25Index(Bm25Params{-1.0, 0.5}), kbrl::core::InvalidArgument);
  CHECK_THROWS_AS(Bm25Index(Bm25Params{1.2, 1.5}), kbrl::core::InvalidArgument);
}

TEST_CASE("BM25 from_parts refuses parts that do not fit") {
  const Bm25Index index = three_documents();
  const auto rebuilt = Bm25Index::from_parts(index.params(), index.document_lengths(), index.terms(), index.postings());
  CHECK(rebuilt.top({"relu"}, 5)[0].score == Catch::Approx(index.top({"relu"}, 5)[0].score));
  auto postings = index.postings();
  postings[0][0].document = 7;
  CHECK_THROWS_AS(Bm25Index::from_parts(index.params(), index.document_lengths(), index.terms(), postings),
                  kbrl::core::InvalidArgument);
}
