// Dense retrieval without a model: DenseIndex over the bundled corpus with HashingEmbedder (hashed
// code terms), checked against a brute-force ranking of the same vectors; the language filter;
// leakage control (the labeled copies of tests/data/retrieval/leakage.jsonl, and a problem with
// more copies than the first candidates hold); save and load, corrupt files and a load with
// another embedder refused; a dense index in prompts through load_retriever and the embedder
// settings (a checkpoint loader standing in for the model, and a real HTTP server answering
// /v1/embeddings), and the settings refused clearly. Skipped where kbrl was built without FAISS.
#include <kbrl/core/error.hpp>
#include <kbrl/core/json.hpp>
#include <kbrl/net/http_server.hpp>
#include <kbrl/rag/corpus_index.hpp>
#include <kbrl/rag/dense_index.hpp>
#include <kbrl/rag/embedder_settings.hpp>
#include <kbrl/rag/hashing_embedder.hpp>
#include <kbrl/rag/retrieval_prompt.hpp>
#include <kbrl/rag/retriever.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include <fmt/format.h>

#include "catch.hpp"
#include "rag_fixtures.hpp"

using namespace kbrl::rag;
using kbrl_rag_test::config_error_of;
using kbrl_rag_test::contains;

namespace {

#define SKIP_WITHOUT_FAISS()                                                                   \
  do {                                                                                         \
    if (!dense_retrieval_available()) KBRL_SKIP("kbrl was built without FAISS (libfaiss-dev)"); \
  } while (false)

double dot(const std::vector<float>& a, const float* b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

std::shared_ptr<Embedder> hashing(std::size_t dim = 256) { return std::make_shared<HashingEmbedder>(dim); }

// An embedder that counts its calls and texts, and can claim another identity.
class CountingEmbedder final : public Embedder {
 public:
  explicit CountingEmbedder(EmbedderIdentity id) : id_(std::move(id)), inner_(id_.dimension) {}
  EmbedderIdentity identity() override { return id_; }
  std::vector<float> embed(const std::vector<std::string>& texts) override {
    ++calls;
    texts_seen += texts.size();
    return inner_.embed(texts);
  }
  std::size_t calls = 0;
  std::size_t texts_seen = 0;

 private:
  EmbedderIdentity id_;
  HashingEmbedder inner_;
};

std::map<std::string, std::string> labels_of(const boost::json::object& row) {
  std::map<std::string, std::string> out;
  for (const auto& [id, kind] : row.at("leaks").as_object()) out[std::string(id)] = std::string(kind.as_string());
  return out;
}

}  // namespace

TEST_CASE("hashing embedder: deterministic unit vectors of code terms") {
  HashingEmbedder e(64);
  CHECK(e.identity() == EmbedderIdentity{"kbrl-hashing-terms-v1", 64});
  const std::vector<std::string> texts{"import torch\ny = torch.relu(x)\n", "y = F.relu(x)\n", "1 + 2\n", ""};
  const auto v = e.embed(texts);
  REQUIRE(v.size() == 4 * 64);
  CHECK(v == HashingEmbedder(64).embed(texts));
  for (std::size_t r = 0; r < 2; ++r) CHECK(dot(std::vector<float>(v.begin() + r * 64, v.begin() + (r + 1) * 64), v.data() + r * 64) == Catch::Approx(1.0).epsilon(1e-6));
  // Both mention relu: their cosine is positive; a text without terms is the zero vector.
  CHECK(dot(std::vector<float>(v.begin(), v.begin() + 64), v.data() + 64) > 0.1);
  CHECK(std::all_of(v.begin() + 2 * 64, v.end(), [](float x) { return x == 0.0f; }));
  CHECK_THROWS_AS(HashingEmbedder(0), kbrl::core::InvalidArgument);

  std::vector<float> rows{3, 4, 0, 0, 0, 0};
  normalize_rows(rows, 2);
  CHECK(rows == std::vector<float>{0.6f, 0.8f, 0, 0, 0, 0});
  CHECK_THROWS_AS(normalize_rows(rows, 4), kbrl::core::InvalidArgument);
}

TEST_CASE("dense search ranks by cosine exactly as a brute-force ranking does") {
  SKIP_WITHOUT_FAISS();
  const auto corpus = kbrl_rag_test::bundled_corpus();
  auto embedder = std::make_shared<CountingEmbedder>(EmbedderIdentity{"counting", 128});
  DenseBuildOptions options;
  options.batch_size = 10;
  std::vector<std::size_t> progress;
  options.progress = [&](std::size_t done, std::size_t total) {
    CHECK(total == corpus.size());
    progress.push_back(done);
  };
  const auto index = DenseIndex::build(corpus, embedder, options);
  CHECK(embedder->calls == (corpus.size() + 9) / 10);
  CHECK(embedder->texts_seen == corpus.size());
  CHECK(progress.back() == corpus.size());
  CHECK(index.identity() == EmbedderIdentity{"counting", 128});
  REQUIRE(index.entries().size() == corpus.size());

  HashingEmbedder reference(128);
  const auto all = reference.embed([&] {
    std::vector<std::string> s;
    for (const auto& e : corpus) s.push_back(e.source);
    return s;
  }());
  for (std::size_t i = 0; i < corpus.size(); ++i)
    CHECK(index.vector(i) == std::vector<float>(all.begin() + i * 128, all.begin() + (i + 1) * 128));

  const auto queries = kbrl_rag_test::read_jsonl_objects(kbrl_rag_test::data_dir() / "queries.jsonl");
  double recall_total = 0;
  for (const auto& q : queries) {
    const std::string source(q.at("source").as_string());
    const auto qv = reference.embed({source});
    // Brute force: every entry's cosine, best first, ties by entry order.
    std::vector<std::pair<double, std::size_t>> brute;
    for (std::size_t i = 0; i < corpus.size(); ++i) brute.emplace_back(dot(qv, all.data() + i * 128), i);
    std::stable_sort(brute.begin(), brute.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    SearchOptions off;
    off.leakage.enabled = false;
    const SearchResult r = index.search(source, off);
    REQUIRE(r.hits.size() == 5);
    for (std::size_t i = 0; i < 5; ++i) {
      INFO("query " << q.at("id").as_string() << " rank " << i);
      CHECK(r.hits[i].score == Catch::Approx(brute[i].first).margin(1e-5));
      // Equal scores may come in either order; distinct ones must match the brute force.
      if (i + 1 < brute.size() && std::fabs(brute[i].first - brute[i + 1].first) > 1e-5 &&
          (i == 0 || std::fabs(brute[i].first - brute[i - 1].first) > 1e-5))
        CHECK(r.hits[i].entry == brute[i].second);
    }
    // The labeled queries are other problems: with the filter on, nothing is excluded.
    const SearchResult filtered = index.search(source);
    CHECK(filtered.excluded.empty());
    std::set<std::string> relevant;
    for (const auto& x : q.at("relevant").as_array()) relevant.insert(std::string(x.as_string()));
    std::size_t found = 0;
    for (const auto& h : filtered.hits) found += relevant.count(index.entries()[h.entry].id);
    recall_total += static_cast<double>(found) / static_cast<double>(relevant.size());
  }
  // Not a bar (a hashed bag of terms is a baseline, not a model): docs/retrieval.md quotes it.
  std::cout << fmt::format("hashing embedder (128 dimensions): mean recall@5 {:.3f} over {} labeled queries\n",
                           recall_total / static_cast<double>(queries.size()), queries.size());
}

TEST_CASE("dense search: k, the language filter and search_embedding") {
  SKIP_WITHOUT_FAISS();
  const auto index = DenseIndex::build(kbrl_rag_test::bundled_corpus(), hashing());
  const std::string problem =
      "import torch\nclass Model:\n    def forward(self, x):\n        return torch.softmax(x, dim=0) * 2\n";
  std::size_t triton = 0;
  for (const auto& e : index.entries()) triton += e.language == "triton" ? 1 : 0;
  REQUIRE(triton > 0);
  REQUIRE(triton < index.entries().size());
  SearchOptions options;
  options.k = 3;
  CHECK(index.search(problem, options).hits.size() == 3);
  options.k = index.entries().size();
  options.language = "triton";
  const auto r = index.search(problem, options);
  CHECK(r.hits.size() == triton);  // every Triton entry, and only those
  for (const auto& hit : r.hits) CHECK(index.entries()[hit.entry].language == "triton");
  CHECK(std::is_sorted(r.hits.begin(), r.hits.end(), [](const SearchHit& a, const SearchHit& b) { return a.score > b.score; }));
  options.language = "hip";
  CHECK(index.search(problem, options).hits.empty());
  options.language.clear();
  options.k = 0;
  CHECK(index.search(problem, options).hits.empty());

  // The same ranking from a vector given directly (not normalized: the index normalizes it).
  auto v = HashingEmbedder(256).embed({problem});
  for (float& x : v) x *= 3.0f;
  SearchOptions five;
  const auto a = index.search(problem, five);
  const auto b = index.search_embedding(v, problem, five);
  REQUIRE(a.hits.size() == b.hits.size());
  for (std::size_t i = 0; i < a.hits.size(); ++i) {
    CHECK(a.hits[i].entry == b.hits[i].entry);
    CHECK(a.hits[i].score == Catch::Approx(b.hits[i].score).margin(1e-6));
  }
  CHECK_THROWS_AS(index.search_embedding(std::vector<float>(7, 1.0f), problem, five), kbrl::core::InvalidArgument);
}

TEST_CASE("dense search leaves the labeled copies out and counts them") {
  SKIP_WITHOUT_FAISS();
  const auto index = DenseIndex::build(kbrl_rag_test::bundled_corpus(), hashing());
  const auto rows = kbrl_rag_test::read_jsonl_objects(kbrl_rag_test::data_dir() / "leakage.jsonl");
  REQUIRE(rows.size() >= 12);
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
    CHECK(r.hits.size() + r.excluded.size() == index.entries().size());  // dense ranks every entry
    for (const auto& hit : r.hits) CHECK(expected.count(index.entries()[hit.entry].id) == 0);
    // With k = 5, the leaks passed over on the way are the expected ones ranked above the 5th hit.
    const SearchResult top = index.search(source);
    CHECK(top.hits.size() == 5);
    for (const auto& x : top.excluded) CHECK(expected.count(index.entries()[x.entry].id) == 1);
  }
}

TEST_CASE("dense search finds k clean hits behind more copies than its first candidates") {
  SKIP_WITHOUT_FAISS();
  // 40 copies of one problem (a comment added: each an exact leak) ahead of everything
  // else: the first search depth (k + 16) holds only copies, so the index must search deeper.
  auto corpus = kbrl_rag_test::bundled_corpus();
  const std::string problem = corpus.at(0).source;
  for (int i = 0; i < 40; ++i) {
    CorpusEntry copy = corpus.at(0);
    copy.id = fmt::format("copy/{}", i);
    copy.source = fmt::format("# copy {}\n{}", i, problem);
    corpus.push_back(copy);
  }
  const auto index = DenseIndex::build(corpus, hashing());
  const SearchResult r = index.search(problem);
  CHECK(r.hits.size() == 5);
  CHECK(r.excluded_count(LeakKind::exact) == 41);  // the original and its 40 copies
  for (const auto& hit : r.hits) CHECK(index.entries()[hit.entry].id.rfind("copy/", 0) != 0);
  SearchOptions off;
  off.leakage.enabled = false;
  const SearchResult unfiltered = index.search(problem, off);
  CHECK(unfiltered.excluded.empty());
  CHECK(unfiltered.hits.size() == 5);
}

TEST_CASE("a dense index saved and loaded answers the same, and only with its own embedder") {
  SKIP_WITHOUT_FAISS();
  const auto dir = kbrl_rag_test::fresh_dir("dense_save_load");
  const auto index = DenseIndex::build(kbrl_rag_test::bundled_corpus(), hashing());
  index.save(dir / "corpus.kbrldix");
  CHECK(index_kind(dir / "corpus.kbrldix") == IndexKind::dense);
  const auto loaded = DenseIndex::load(dir / "corpus.kbrldix", hashing());
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
    CHECK(a.language == b.language);
    CHECK(index.vector(i) == loaded.vector(i));
  }
  CHECK(loaded.identity() == index.identity());
  const auto queries = kbrl_rag_test::read_jsonl_objects(kbrl_rag_test::data_dir() / "queries.jsonl");
  SearchOptions triton;
  triton.language = "triton";
  for (const auto& q : queries) {
    const std::string source(q.at("source").as_string());
    for (const auto& options : {SearchOptions{}, triton}) {
      const auto x = index.search(source, options);
      const auto y = loaded.search(source, options);
      REQUIRE(x.hits.size() == y.hits.size());
      for (std::size_t i = 0; i < x.hits.size(); ++i) {
        CHECK(x.hits[i].entry == y.hits[i].entry);
        CHECK(x.hits[i].score == y.hits[i].score);
      }
    }
  }
  CHECK(loaded.serialize() == index.serialize());

  // Another embedder: another dimension, or another model of the same dimension.
  auto e = config_error_of([&] { DenseIndex::load(dir / "corpus.kbrldix", hashing(128)); });
  CHECK(e.where() == (dir / "corpus.kbrldix").string());
  CHECK(contains(e.what(), "built with embeddings of 'kbrl-hashing-terms-v1' (256 dimensions)"));
  CHECK(contains(e.what(), "(128 dimensions)"));
  e = config_error_of([&] {
    DenseIndex::load(dir / "corpus.kbrldix", std::make_shared<CountingEmbedder>(EmbedderIdentity{"other-model", 256}));
  });
  CHECK(contains(e.what(), "'other-model' (256 dimensions)"));

  // Without an embedder: vectors only, until the right one is attached.
  auto bare = DenseIndex::load(dir / "corpus.kbrldix");
  CHECK_THROWS_WITH(bare.search("import torch\n"), Catch::Matchers::ContainsSubstring("needs the embedder it was built with"));
  const auto v = HashingEmbedder(256).embed({"import torch\nx = torch.relu(x)\n"});
  CHECK(bare.search_embedding(v, "", SearchOptions{}).hits.size() == 5);
  CHECK_THROWS_AS(bare.attach(hashing(64)), kbrl::core::InvalidArgument);
  bare.attach(hashing());
  CHECK(bare.search("import torch\nx = torch.relu(x)\n").hits.size() == 5);
}

TEST_CASE("a corrupt, truncated or foreign dense index file is refused clearly") {
  SKIP_WITHOUT_FAISS();
  const auto dir = kbrl_rag_test::fresh_dir("dense_corrupt");
  const std::string bytes = DenseIndex::build(kbrl_rag_test::bundled_corpus(), hashing(32)).serialize();
  const auto where = (dir / "x.kbrldix").string();

  std::string flipped = bytes;
  flipped[bytes.size() - 100] = static_cast<char>(flipped[bytes.size() - 100] ^ 0x40);  // inside the vectors
  auto e = config_error_of([&] { DenseIndex::deserialize(flipped, where); });
  CHECK(e.where() == where);
  CHECK(contains(e.what(), "checksum"));

  e = config_error_of([&] { DenseIndex::deserialize(bytes.substr(0, bytes.size() - 10), where); });
  CHECK(contains(e.what(), "truncated"));

  std::string version = bytes;
  version[8] = 9;
  e = config_error_of([&] { DenseIndex::deserialize(version, where); });
  CHECK(contains(e.what(), "version 9"));
  CHECK(contains(e.what(), "rebuild"));

  e = config_error_of([&] { DenseIndex::deserialize("{\"not\": \"an index\"}", where); });
  CHECK(contains(e.what(), "not a kbrl retrieval index"));

  // Each kind read as the other says what it is.
  const std::string bm25 = CorpusIndex::build(kbrl_rag_test::bundled_corpus()).serialize();
  e = config_error_of([&] { DenseIndex::deserialize(bm25, where); });
  CHECK(contains(e.what(), "a BM25 retrieval index"));
  e = config_error_of([&] { CorpusIndex::deserialize(bytes, where); });
  CHECK(contains(e.what(), "a dense retrieval index"));
  kbrl_rag_test::write_file(dir / "bm25.kbrlidx", bm25);
  CHECK(index_kind(dir / "bm25.kbrlidx") == IndexKind::bm25);
  kbrl_rag_test::write_file(dir / "other.bin", "KBRL but not an index");
  e = config_error_of([&] { index_kind(dir / "other.bin"); });
  CHECK(contains(e.what(), "not a kbrl retrieval index"));
  e = config_error_of([&] { index_kind(dir / "missing.kbrldix"); });
  CHECK(e.where() == (dir / "missing.kbrldix").string());
}

TEST_CASE("dense index: embeddings given directly, and bad input") {
  SKIP_WITHOUT_FAISS();
  auto corpus = kbrl_rag_test::bundled_corpus();
  corpus.resize(3);
  std::vector<float> v{1, 0, 0, 0, 1, 0, 2, 2, 0};  // normalized by the index
  const auto index = DenseIndex::from_embeddings(corpus, {"given", 3}, v);
  const auto r = index.search_embedding(std::vector<float>{1, 0.1f, 0}, "", SearchOptions{});
  REQUIRE(r.hits.size() == 3);
  CHECK(r.hits[0].entry == 0);
  CHECK(r.hits[0].score == Catch::Approx(1.0 / std::sqrt(1.01)).margin(1e-6));
  CHECK(r.hits[1].entry == 2);
  CHECK(r.hits[1].score == Catch::Approx(std::sqrt(0.5) * 1.1 / std::sqrt(1.01)).margin(1e-6));
  CHECK(index.vector(2) == std::vector<float>{static_cast<float>(std::sqrt(0.5)), static_cast<float>(std::sqrt(0.5)), 0});
  CHECK_THROWS_AS(DenseIndex::from_embeddings(corpus, {"given", 3}, std::vector<float>(8, 1.0f)), kbrl::core::InvalidArgument);
  std::vector<float> nan_rows(9, 1.0f);
  nan_rows[4] = std::nanf("");
  CHECK_THROWS_AS(DenseIndex::from_embeddings(corpus, {"given", 3}, nan_rows), kbrl::core::Error);
  CHECK_THROWS_AS(DenseIndex::build(corpus, nullptr), kbrl::core::InvalidArgument);
}

TEST_CASE("without FAISS, dense retrieval says that it needs it") {
  if (dense_retrieval_available()) KBRL_SKIP("kbrl was built with FAISS");
  try {
    DenseIndex::build(kbrl_rag_test::bundled_corpus(), hashing());
    FAIL("no error");
  } catch (const kbrl::core::Error& e) {
    CHECK(contains(e.what(), "needs FAISS"));
  }
}

namespace {

// A checkpoint loader that loads no model: the hashing embedder of `dim` dimensions, counted.
struct HashingLoader {
  std::size_t dim = 256;
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  std::shared_ptr<Embedder> operator()(const EmbedderSettings&, std::string& description) const {
    ++*calls;
    description = "hashing, no model";
    return std::make_shared<HashingEmbedder>(dim);
  }
};

// A real HTTP server answering POST /v1/embeddings with the hashing embedder's vectors.
struct HashingEmbeddingsServer {
  std::unique_ptr<kbrl::net::HttpServer> server;
  std::shared_ptr<std::atomic<int>> requests = std::make_shared<std::atomic<int>>(0);
  HashingEmbeddingsServer() {
    kbrl::net::HttpServerConfig c;
    c.host = "127.0.0.1";
    c.port = 0;
    c.threads = 2;
    auto count = requests;
    server = std::make_unique<kbrl::net::HttpServer>(c, [count](const kbrl::net::HttpRequest& r) -> kbrl::net::HandlerResult {
      if (r.path() != "/v1/embeddings") return kbrl::net::HttpResponse::json(404, R"({"error":"no such route"})");
      ++*count;
      const auto body = kbrl::core::parse_json(r.body).as_object();
      std::vector<std::string> texts;
      for (const auto& t : body.at("input").as_array()) texts.emplace_back(t.as_string());
      const std::size_t dim = 256;
      const auto rows = HashingEmbedder(dim).embed(texts);
      boost::json::array data;
      for (std::size_t i = 0; i < texts.size(); ++i) {
        boost::json::array v;
        for (std::size_t j = 0; j < dim; ++j) v.push_back(static_cast<double>(rows[i * dim + j]));
        data.push_back(boost::json::object{{"object", "embedding"}, {"index", i}, {"embedding", std::move(v)}});
      }
      const boost::json::object o{{"object", "list"}, {"data", std::move(data)}, {"model", body.at("model")}};
      return kbrl::net::HttpResponse::json(200, boost::json::serialize(o));
    });
  }
  ~HashingEmbeddingsServer() { server->stop(); }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(server->port()) + "/v1"; }
};

std::string as_key(const std::string& field) { return "prompt.retrieval." + field; }

std::vector<std::string> example_ids(const kbrl::prompt::RetrievedExamples& r) {
  std::vector<std::string> ids;
  for (const auto& e : r.examples) ids.push_back(e.id);
  return ids;
}

}  // namespace

TEST_CASE("a dense index in prompts through load_retriever answers as a direct query") {
  SKIP_WITHOUT_FAISS();
  const auto dir = kbrl_rag_test::fresh_dir("dense_load_retriever");
  const auto index = DenseIndex::build(kbrl_rag_test::bundled_corpus(), hashing());
  const auto path = dir / "corpus.kbrldix";
  index.save(path);
  const auto checkpoint = dir / "kbrl-hashing-terms-v1";  // only a folder: the loader reads nothing
  std::filesystem::create_directories(checkpoint);
  EmbedderSettings in_process;
  in_process.checkpoint = checkpoint.string();
  HashingLoader loader;
  HashingEmbeddingsServer server;
  EmbedderSettings served;
  served.endpoint = server.base();
  served.model = "kbrl-hashing-terms-v1";  // the served model's name is the identity's

  const auto queries = kbrl_rag_test::read_jsonl_objects(kbrl_rag_test::data_dir() / "queries.jsonl");
  REQUIRE(queries.size() >= 3);
  SearchOptions triton;
  triton.language = "triton";
  for (const auto& [settings, name] : {std::pair{in_process, "checkpoint"}, std::pair{served, "endpoint"}}) {
    INFO(name);
    const auto retriever = load_retriever(path, settings, loader);
    REQUIRE(dynamic_cast<const DenseIndex*>(retriever.get()) != nullptr);
    CHECK(retriever->entries().size() == index.entries().size());
    for (const auto& q : queries) {
      const std::string source(q.at("source").as_string());
      for (const auto& options : {SearchOptions{}, triton}) {
        const auto direct = index.search(source, options);
        const auto loaded = retriever->search(source, options);
        REQUIRE(loaded.hits.size() == direct.hits.size());
        for (std::size_t i = 0; i < direct.hits.size(); ++i) {
          CHECK(loaded.hits[i].entry == direct.hits[i].entry);
          CHECK(loaded.hits[i].score == Catch::Approx(direct.hits[i].score).margin(1e-5));
        }
        CHECK(loaded.excluded.size() == direct.excluded.size());
      }
    }
  }
  CHECK(*loader.calls == 1);
  CHECK(*server.requests > 0);

  // Through the prompt's provider (what kbrl-train and kbrl-eval make): the examples a direct
  // query of the index selects.
  RetrievalPromptConfig config;
  config.index = path.string();
  config.embedder = in_process;
  config.language = "any";
  config.k = 3;
  REQUIRE_FALSE(check_retrieval_config(config, as_key).has_value());
  const auto provider = make_example_provider(config, kbrl::core::KernelLanguage::triton, {}, as_key, loader);
  for (const auto& q : queries) {
    kbrl::core::Problem problem;
    problem.id = std::string(q.at("id").as_string());
    problem.source = std::string(q.at("source").as_string());
    const auto shown = provider->examples_for(problem);
    const auto direct = select_examples(index, problem.source, config, "");
    CHECK(shown->retrieved == direct.retrieved);
    CHECK(example_ids(*shown) == example_ids(direct));
    CHECK_FALSE(shown->examples.empty());
  }
  CHECK(*loader.calls == 2);
}

TEST_CASE("a dense index without its embedder, or with another one, is refused naming the setting") {
  SKIP_WITHOUT_FAISS();
  const auto dir = kbrl_rag_test::fresh_dir("dense_load_retriever_refusals");
  const auto path = dir / "corpus.kbrldix";
  DenseIndex::build(kbrl_rag_test::bundled_corpus(), hashing()).save(path);
  CHECK(DenseIndex::read_identity(path) == EmbedderIdentity{"kbrl-hashing-terms-v1", 256});
  const auto checkpoint = dir / "model";
  std::filesystem::create_directories(checkpoint);
  EmbedderSettings in_process;
  in_process.checkpoint = checkpoint.string();

  // No embedder: the error names the key and the embedder the index was built with.
  auto e = config_error_of([&] { load_retriever(path, {}, HashingLoader{}, as_key); });
  CHECK(e.where() == path.string());
  CHECK(e.field() == "prompt.retrieval.embeddings_endpoint");
  CHECK(contains(e.what(), "a dense index of embeddings of 'kbrl-hashing-terms-v1' (256 dimensions)"));
  CHECK(contains(e.what(), "no embedder is given"));
  CHECK(contains(e.what(), "prompt.retrieval.embeddings_model kbrl-hashing-terms-v1"));
  CHECK(contains(e.what(), "prompt.retrieval.embeddings_checkpoint"));
  // ... and already when the configuration is checked (kbrl-train's start), before any model loads.
  RetrievalPromptConfig config;
  config.index = path.string();
  const auto problem = check_retrieval_config(config, as_key);
  REQUIRE(problem.has_value());
  CHECK(problem->field == "embeddings_endpoint");
  CHECK(contains(problem->message, "'kbrl-hashing-terms-v1' (256 dimensions)"));
  e = config_error_of([&] { make_example_provider(config, kbrl::core::KernelLanguage::triton, {}, as_key); });
  CHECK(e.field() == "prompt.retrieval.embeddings_endpoint");

  // Another embedder: another dimension, or another model name of the same dimension.
  HashingLoader narrow;
  narrow.dim = 128;
  e = config_error_of([&] { load_retriever(path, in_process, narrow, as_key); });
  CHECK(e.where() == path.string());
  CHECK(contains(e.what(), "built with embeddings of 'kbrl-hashing-terms-v1' (256 dimensions)"));
  CHECK(contains(e.what(), "'kbrl-hashing-terms-v1' (128 dimensions)"));
  const CheckpointEmbedderLoader other = [](const EmbedderSettings&, std::string&) -> std::shared_ptr<Embedder> {
    return std::make_shared<CountingEmbedder>(EmbedderIdentity{"other-model", 256});
  };
  e = config_error_of([&] { load_retriever(path, in_process, other, as_key); });
  CHECK(contains(e.what(), "'other-model' (256 dimensions)"));
  config.embedder = in_process;
  CHECK_FALSE(check_retrieval_config(config, as_key).has_value());  // the identity is known once loaded
  e = config_error_of([&] { make_example_provider(config, kbrl::core::KernelLanguage::triton, {}, as_key, narrow); });
  CHECK(contains(e.what(), "(128 dimensions)"));

  // A checkpoint where this program has no libtorch (no loader), or that is not a folder.
  e = config_error_of([&] { load_retriever(path, in_process, {}, as_key); });
  CHECK(e.field() == "prompt.retrieval.embeddings_checkpoint");
  CHECK(contains(e.what(), "needs libtorch"));
  CHECK(contains(e.what(), "prompt.retrieval.embeddings_endpoint"));
  auto missing = in_process;
  missing.checkpoint = (dir / "no_such_model").string();
  e = config_error_of([&] { load_retriever(path, missing, HashingLoader{}, as_key); });
  CHECK(e.field() == "prompt.retrieval.embeddings_checkpoint");
  CHECK(contains(e.what(), "not a folder"));
}

TEST_CASE("embedder settings: a BM25 index takes none, and bad combinations are named") {
  const auto dir = kbrl_rag_test::fresh_dir("embedder_settings");
  const auto bm25 = dir / "corpus.kbrlidx";
  CorpusIndex::build(kbrl_rag_test::bundled_corpus()).save(bm25);
  EmbedderSettings served;
  served.endpoint = "http://127.0.0.1:9/v1";
  served.model = "some-model";
  auto e = config_error_of([&] { load_retriever(bm25, served, {}, as_key); });
  CHECK(e.field() == "prompt.retrieval.embeddings_endpoint");
  CHECK(contains(e.what(), "is a BM25 index"));
  RetrievalPromptConfig config;
  config.index = bm25.string();
  config.embedder = served;
  const auto problem = check_retrieval_config(config, as_key);
  REQUIRE(problem.has_value());
  CHECK(problem->field == "embeddings_endpoint");
  CHECK(load_retriever(bm25)->entries().size() == 36);  // without settings, as before
  config.index.clear();
  CHECK_FALSE(check_retrieval_config(config, as_key).has_value());  // retrieval off: not read

  const auto field_of = [](const EmbedderSettings& s) {
    const auto p = check_embedder_settings(s, as_key);
    return p ? p->field + ": " + p->message : std::string("fine");
  };
  CHECK(field_of({}) == "fine");
  CHECK(field_of(served) == "fine");
  auto no_model = served;
  no_model.model.clear();
  CHECK(contains(field_of(no_model), "embeddings_model: prompt.retrieval.embeddings_endpoint needs the served model's name"));
  auto both = served;
  both.checkpoint = dir.string();
  CHECK(contains(field_of(both), "embeddings_checkpoint: give prompt.retrieval.embeddings_endpoint or"));
  EmbedderSettings stray;
  stray.device = "cuda";
  CHECK(contains(field_of(stray), "embeddings_device: is for prompt.retrieval.embeddings_checkpoint"));
  EmbedderSettings key_alone;
  key_alone.api_key_env = "KEY";
  CHECK(contains(field_of(key_alone), "embeddings_api_key_env: is for prompt.retrieval.embeddings_endpoint"));
  EmbedderSettings negative;
  negative.checkpoint = dir.string();
  negative.max_tokens = -1;
  CHECK(contains(field_of(negative), "embeddings_max_tokens: -1 is below 0"));
  auto dtype = negative;
  dtype.max_tokens = 0;
  dtype.dtype = "fp8";
  CHECK(contains(field_of(dtype), "embeddings_dtype: 'fp8' is none of"));
  e = config_error_of([&] { make_embedder({}, {}, as_key); });
  CHECK(contains(e.what(), "no embedder"));
}
