// An outside program using the installed library through its public headers only.
#include <kbrl/conformance/evaluator_suite.hpp>
#include <kbrl/core/json.hpp>
#include <kbrl/core/hash.hpp>
#include <kbrl/eval/scripted_evaluator.hpp>
#include <kbrl/net/http_client.hpp>
#include <kbrl/net/http_server.hpp>
#include <kbrl/rag/dense_index.hpp>
#include <kbrl/tokenizer/tokenizer.hpp>

#include <iostream>
#include <string>
#include <vector>

int main() {
  kbrl::core::Problem p;
  p.id = "consumer/1_Add";
  p.source = "import torch\n# comment\nx = 1\n";
  p.content_hash = kbrl::core::python_content_hash(p.source);
  const auto back = kbrl::core::from_json<kbrl::core::Problem>(kbrl::core::to_json(p));
  if (!(back == p)) return 1;
  // The tokenizer runs its pre-tokenizer on PCRE2, which libkbrl links privately: this proves
  // that the installed package brings it along.
  const auto tok = kbrl::tokenizer::Tokenizer::from_json(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
          "decoder": {"type": "ByteLevel"}})");
  if (tok.encode("ab ab") != std::vector<kbrl::tokenizer::TokenId>{2, 2} || tok.decode(std::vector<kbrl::tokenizer::TokenId>{2, 0}) != "aba") return 1;
  // The conformance suites as a user runs them on an evaluator of their own (here one that
  // answers each of the suite's candidates with the category it expects).
  kbrl::conformance::EvaluatorSuiteOptions suite;
  suite.base.problem = p;
  suite.base.candidate_source =
      "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n";
  kbrl::eval::ScriptedEvaluator scripted;
  for (const auto& c : kbrl::conformance::standard_candidates(suite.base.candidate_source))
    scripted.when([s = c.source](const kbrl::core::EvalRequest& r) { return r.candidate_source == s; },
                  kbrl::eval::scripted_result(c.categories.front()));
  suite.evaluator = &scripted;
  const auto report = kbrl::conformance::run_evaluator_suite(suite);
  if (!report.ok() || report.passed.size() + 1 != kbrl::conformance::evaluator_check_names().size()) {
    std::cerr << report.summary() << "\n";  // all but the destruction check, which needs make_evaluator
    return 1;
  }
  // The net module links OpenSSL privately (TLS): a server and a client talking on loopback prove
  // that the installed package brings it along.
  kbrl::net::HttpServerConfig server_config;
  server_config.host = "127.0.0.1";
  server_config.port = 0;
  kbrl::net::HttpServer server(server_config, [](const kbrl::net::HttpRequest& r) -> kbrl::net::HandlerResult {
    return kbrl::net::HttpResponse::text(200, "pong " + r.body);
  });
  kbrl::net::HttpClient client;
  const auto pong = client.request(kbrl::net::Url::parse("http://127.0.0.1:" + std::to_string(server.port()) + "/"),
                                   "POST", {}, "ping");
  if (pong.status != 200 || pong.body != "pong ping") return 1;
  // FAISS (static on Debian, with OpenMP, BLAS and LAPACK), linked privately where libkbrl was
  // built with it: a dense index of two vectors proves that the installed package brings it along.
  if (kbrl::rag::dense_retrieval_available()) {
    std::vector<kbrl::rag::CorpusEntry> entries(2);
    entries[0].id = "a";
    entries[1].id = "b";
    const auto index = kbrl::rag::DenseIndex::from_embeddings(entries, {"given", 2}, {1, 0, 0, 1});
    kbrl::rag::SearchOptions options;
    options.leakage.enabled = false;
    const auto found = index.search_embedding(std::vector<float>{0.1f, 1.0f}, "", options);
    if (found.hits.size() != 2 || index.entries()[found.hits[0].entry].id != "b") return 1;
  }
  std::cout << "kbrl consumer ok " << back.content_hash.substr(0, 12) << "\n";
  return 0;
}
