// RemoteEvaluator against in-process servers (net::HttpServer + EvaluationService over a
// ScriptedEvaluator) on loopback: endpoint parsing, least-loaded dispatch within the advertised
// capacity, re-dispatch when a server stops mid-batch with exactly one result per request, a
// server that joins through the endpoints file, 429 honoured, give-up with no server, and
// destruction answering what is pending. tests/integration/evald_fleet.py does it with processes.
#include <kbrl/core/error.hpp>
#include <kbrl/eval/evaluation_service.hpp>
#include <kbrl/eval/remote_evaluator.hpp>
#include <kbrl/eval/scripted_evaluator.hpp>
#include <kbrl/net/http_server.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "catch.hpp"

using namespace kbrl;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

struct TestServer {
  eval::ScriptedEvaluator evaluator;
  std::unique_ptr<eval::EvaluationService> service;
  std::unique_ptr<net::HttpServer> http;

  explicit TestServer(int run_lanes = 1, std::size_t max_queue = 0) {
    evaluator.otherwise(eval::scripted_result(core::ErrorCategory::none));
    eval::EvaluationServiceConfig c;
    c.compile_workers = 1;
    c.run_lanes = run_lanes;
    c.max_queue = max_queue;
    c.token = "t0ken";
    service = std::make_unique<eval::EvaluationService>(evaluator, c);
    net::HttpServerConfig hc;
    hc.host = "127.0.0.1";
    hc.port = 0;
    http = std::make_unique<net::HttpServer>(hc, [this](const net::HttpRequest& r) { return service->handle(r); });
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(http->port()); }
};

core::EvalRequest request(const std::string& id) {
  core::EvalRequest r;
  r.request_id = id;
  r.problem.id = "p";
  r.problem.source = "class Model: pass";
  r.candidate_source = "class ModelNew: pass";
  r.language = core::KernelLanguage::cpp;
  return r;
}

eval::RemoteEvaluatorConfig client(std::vector<std::string> endpoints) {
  eval::RemoteEvaluatorConfig c;
  c.endpoints = std::move(endpoints);
  c.token = "t0ken";
  c.refresh_s = 0.2;
  c.backoff_initial_s = 0.05;
  c.backoff_max_s = 0.5;
  c.give_up_after_s = 20;
  return c;
}

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

}  // namespace

TEST_CASE("endpoints: URLs, dns:// names and files, a bad entry is refused naming it") {
  const auto list = eval::remote_evaluator_config("http://a:1, https://b:2,dns://svc.ns:8470");
  CHECK(list.endpoints == std::vector<std::string>{"http://a:1", "https://b:2", "dns://svc.ns:8470"});
  const fs::path file = fs::path(KBRL_TEST_TMP) / "remote_endpoints.txt";
  fs::create_directories(file.parent_path());
  std::ofstream(file) << "# fleet\nhttp://a:1\n";
  CHECK(eval::remote_evaluator_config(file.string()).endpoints_file == file);
  // A file that a cluster job writes later is taken as it is.
  CHECK(eval::remote_evaluator_config("/shared/fleet/endpoints.txt").endpoints_file == "/shared/fleet/endpoints.txt");
  for (const std::string bad : {"ftp://x:1", "dns://nameonly", "dns://x:99999", "htp://x:1", "a,b", ""}) {
    INFO(bad);
    CHECK_THROWS_AS(eval::remote_evaluator_config(bad), core::InvalidArgument);
  }
  try {
    eval::remote_evaluator_config("http://a:1,ftp://b:2");
  } catch (const core::InvalidArgument& e) {
    CHECK(std::string(e.what()).find("ftp://b:2") != std::string::npos);
  }
}

TEST_CASE("every request is answered once, each server kept within its capacity, connections reused") {
  TestServer a, b;
  a.evaluator.hold();
  b.evaluator.hold();
  eval::RemoteEvaluator ev(client({a.url(), b.url()}));
  std::vector<std::future<core::EvalResult>> futures;
  for (int i = 0; i < 12; ++i) futures.push_back(ev.submit(request("r" + std::to_string(i))));
  // Both filled to their capacity of two, the rest waiting in the client; then b answers and
  // takes the rest while a holds its two. (Holding b too keeps the split from depending on how
  // fast b answers while requests are still being submitted.)
  REQUIRE(eventually([&] { return a.evaluator.pending() == 2 && b.evaluator.pending() == 2; }));
  CHECK(a.service->capacity().queue_depth == 0);
  CHECK(b.service->capacity().queue_depth == 0);
  b.evaluator.release();
  REQUIRE(eventually([&] { return b.service->evaluations_run() == 10; }));
  CHECK(a.evaluator.pending() == 2);
  CHECK(a.service->capacity().in_flight == 2);
  CHECK(a.service->capacity().queue_depth == 0);  // never more than its concurrency of ours
  a.evaluator.release();
  std::set<std::string> ids;
  for (auto& f : futures) {
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    const auto r = f.get();
    CHECK(r.error_category == core::ErrorCategory::none);
    ids.insert(r.request_id);
  }
  CHECK(ids.size() == 12);
  const auto s = ev.stats();
  CHECK(s.delivered == 12);
  CHECK(s.connections_opened < s.batches + 2);  // probes and batches share kept-alive connections
}

TEST_CASE("a server that stops mid-batch: its requests go to another, each answered once") {
  TestServer a, b;
  a.evaluator.hold();
  b.evaluator.hold();
  eval::RemoteEvaluator ev(client({a.url(), b.url()}));
  std::vector<std::future<core::EvalResult>> futures;
  for (int i = 0; i < 4; ++i) futures.push_back(ev.submit(request("r" + std::to_string(i))));
  REQUIRE(eventually([&] { return a.evaluator.pending() == 2 && b.evaluator.pending() == 2; }));
  a.http->stop();  // connections reset under the streams: a "dies"
  REQUIRE(eventually([&] { return ev.stats().redispatched >= 2; }));
  b.evaluator.release();
  for (auto& f : futures) {
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    CHECK(f.get().error_category == core::ErrorCategory::none);
  }
  CHECK(b.service->evaluations_run() == 4);
  CHECK(ev.stats().delivered == 4);
  a.evaluator.release();  // a's late results have nobody left to go to
}

TEST_CASE("a server added to the endpoints file receives work, a full queue's 429 is honoured") {
  TestServer a;
  TestServer b(1, 1);  // room for 3; a batch of 3 of ours plus the flood does not fit
  const fs::path file = fs::path(KBRL_TEST_TMP) / "remote_joining.txt";
  fs::create_directories(file.parent_path());
  std::ofstream(file) << a.url() << "\n";
  auto config = client({});
  config.endpoints_file = file;
  a.evaluator.hold();
  eval::RemoteEvaluator ev(config);
  std::vector<std::future<core::EvalResult>> futures;
  for (int i = 0; i < 6; ++i) futures.push_back(ev.submit(request("r" + std::to_string(i))));
  REQUIRE(eventually([&] { return a.evaluator.pending() == 2; }));
  // b starts with its slots and queue taken by someone else.
  b.evaluator.hold();
  eval::EvaluationService& sb = *b.service;
  net::HttpRequest flood;
  flood.method = "POST";
  flood.target = "/v1/evaluations";
  flood.headers = {{"Authorization", "Bearer t0ken"}};
  flood.body = R"({"requests": [)";
  for (int i = 0; i < 3; ++i)
    flood.body += std::string(i ? "," : "") + R"({"request_id": "f)" + std::to_string(i) +
                  R"(", "problem": {"id": "p", "source": "s"}, "candidate_source": "c", "language": "cpp"})";
  flood.body += R"(], "stream": false})";
  REQUIRE(std::get<net::HttpResponse>(sb.handle(flood)).status == 202);
  std::ofstream(file, std::ios::app) << b.url() << "\n";
  REQUIRE(eventually([&] { return ev.stats().queue_full >= 1; }));
  CHECK(ev.servers().count(b.url()) == 1);
  b.evaluator.release();  // the flood finishes; a still holds its two, so the rest must go to b
  REQUIRE(eventually([&] { return ev.stats().results_by_server[b.url()] == 4; }));
  a.evaluator.release();
  for (auto& f : futures) REQUIRE(f.wait_for(10s) == std::future_status::ready);
  CHECK(ev.stats().delivered == 6);
}

TEST_CASE("with no server reachable a request gets an internal result after give_up_after_s") {
  auto config = client({"http://127.0.0.1:1"});  // nothing listens on port 1
  config.give_up_after_s = 0.5;
  eval::RemoteEvaluator ev(config);
  auto f = ev.submit(request("lonely"));
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  const auto r = f.get();
  CHECK(r.request_id == "lonely");
  CHECK(r.error_category == core::ErrorCategory::internal);
  CHECK(r.error_message.find("127.0.0.1:1") != std::string::npos);
  CHECK(ev.stats().gave_up == 1);
}

TEST_CASE("destroying the evaluator answers pending requests, a wrong token is an internal result") {
  TestServer a;
  a.evaluator.hold();
  std::future<core::EvalResult> f;
  {
    eval::RemoteEvaluator ev(client({a.url()}));
    f = ev.submit(request("pending"));
    REQUIRE(eventually([&] { return a.evaluator.pending() == 1; }));
  }
  REQUIRE(f.wait_for(1s) == std::future_status::ready);
  CHECK(f.get().error_category == core::ErrorCategory::internal);
  a.evaluator.release();

  TestServer b;
  auto config = client({b.url()});
  config.token = "wrong";
  config.give_up_after_s = 1;
  eval::RemoteEvaluator ev(config);
  auto g = ev.submit(request("refused"));
  REQUIRE(g.wait_for(10s) == std::future_status::ready);
  const auto r = g.get();
  CHECK(r.error_category == core::ErrorCategory::internal);
  CHECK(r.error_message.find("401") != std::string::npos);
}

TEST_CASE("dns:// takes every address of the name, those that do not answer get no work") {
  TestServer a;  // on 127.0.0.1 only: localhost's ::1, where it resolves to one, is refused
  const auto port = std::to_string(a.http->port());
  eval::RemoteEvaluator ev(client({"dns://localhost:" + port}));
  std::vector<std::future<core::EvalResult>> futures;
  for (int i = 0; i < 5; ++i) futures.push_back(ev.submit(request("d" + std::to_string(i))));
  for (auto& f : futures) {
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    CHECK(f.get().error_category == core::ErrorCategory::none);
  }
  const auto servers = ev.servers();
  CHECK(servers.count("http://127.0.0.1:" + port) == 1);
  CHECK(servers.at("http://127.0.0.1:" + port) == 2);  // its advertised concurrency
  CHECK(ev.stats().results_by_server["http://127.0.0.1:" + port] == 5);
}
