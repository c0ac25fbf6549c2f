// EvaluationService's routes called directly (no sockets), over a ScriptedEvaluator that holds its
// results until told: strict parsing with the field named, auth, the all-or-nothing queue bound,
// idempotency (attach, replay, 409), the journal across a restart with a torn last line, polling,
// draining and the metrics text. tests/integration/evald_fleet.py runs the same over HTTP.
#include <kbrl/core/hash.hpp>
#include <kbrl/core/json.hpp>
#include <kbrl/eval/evaluation_service.hpp>
#include <kbrl/eval/scripted_evaluator.hpp>

#include <boost/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "catch.hpp"

using namespace kbrl;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

// A response body written by the service: every chunk, and whether finish() came.
class CollectingStream : public net::ResponseStream {
 public:
  bool write(std::string chunk) override {
    std::lock_guard lock(mu_);
    body_ += chunk;
    return true;
  }
  void finish() override {
    std::lock_guard lock(mu_);
    ++finished_;
  }
  std::vector<std::string> lines() const {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    std::size_t start = 0;
    for (auto nl = body_.find('\n'); nl != std::string::npos; nl = body_.find('\n', start = nl + 1))
      out.push_back(body_.substr(start, nl - start)), start = nl + 1;
    return out;
  }
  int finished() const {
    std::lock_guard lock(mu_);
    return finished_;
  }

 private:
  mutable std::mutex mu_;
  std::string body_;
  int finished_ = 0;
};

core::EvalRequest request(const std::string& id, const std::string& candidate = "class ModelNew: pass") {
  core::EvalRequest r;
  r.request_id = id;
  r.problem.id = "p1";
  r.problem.source = "class Model: pass";
  r.candidate_source = candidate;
  r.language = core::KernelLanguage::cpp;
  return r;
}

std::string batch_body(const std::vector<core::EvalRequest>& requests, bool stream = true) {
  json::array a;
  for (const auto& r : requests) a.push_back(json::value_from(r));
  return json::serialize(json::object{{"requests", a}, {"stream", stream}});
}

net::HttpRequest http(std::string method, std::string target, std::string body = {}, std::string token = "secret") {
  net::HttpRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.body = std::move(body);
  if (!token.empty()) r.headers.emplace_back("Authorization", "Bearer " + token);
  return r;
}

net::HttpResponse plain(const net::HandlerResult& r) {
  REQUIRE(std::holds_alternative<net::HttpResponse>(r));
  return std::get<net::HttpResponse>(r);
}

std::string error_of(const net::HttpResponse& r) {
  return std::string(core::parse_json(r.body).as_object().at("error").as_string());
}

// Starts a streamed response the way the server does, after the handler returned.
std::shared_ptr<CollectingStream> start(const net::HandlerResult& r) {
  REQUIRE(std::holds_alternative<net::StreamingResponse>(r));
  const auto& s = std::get<net::StreamingResponse>(r);
  CHECK(s.status == 200);
  auto stream = std::make_shared<CollectingStream>();
  s.start(stream);
  return stream;
}

template <class Pred>
bool eventually(Pred pred, double seconds = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

eval::EvaluationServiceConfig config(const fs::path& journal = {}) {
  eval::EvaluationServiceConfig c;
  c.compile_workers = 1;
  c.run_lanes = 1;
  c.max_queue = 2;
  c.token = "secret";
  c.journal_dir = journal;
  return c;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(KBRL_TEST_TMP) / "eval_service" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("a malformed batch is refused with 400 naming the field") {
  eval::ScriptedEvaluator ev;
  eval::EvaluationService service(ev, config());
  const auto status_and_error = [&](const std::string& body) {
    const auto r = plain(service.handle(http("POST", "/v1/evaluations", body)));
    return std::make_pair(r.status, error_of(r));
  };
  auto good = json::value_from(request("a")).as_object();

  auto [code, message] = status_and_error("{\"requests\": [");
  CHECK(code == 400);
  CHECK(message.find("not valid JSON") != std::string::npos);

  std::tie(code, message) = status_and_error(R"({"requests": [], "stream": true})");
  CHECK(code == 400);
  CHECK(message.find("'requests'") != std::string::npos);

  std::tie(code, message) = status_and_error(json::serialize(json::object{{"requests", json::array{good}}, {"streaming", true}}));
  CHECK(code == 400);
  CHECK(message.find("'streaming'") != std::string::npos);

  auto unknown_option = good;
  unknown_option["options"].as_object()["trails"] = 3;
  std::tie(code, message) = status_and_error(json::serialize(json::object{{"requests", json::array{good, unknown_option}}}));
  CHECK(code == 400);
  CHECK(message.find("'requests[1].options.trails'") != std::string::npos);

  auto no_source = good;
  no_source["problem"].as_object().erase("source");
  std::tie(code, message) = status_and_error(json::serialize(json::object{{"requests", json::array{no_source}}}));
  CHECK(code == 400);
  CHECK(message.find("'requests[0].problem.source'") != std::string::npos);
  CHECK(message.find("missing") != std::string::npos);

  auto bad_language = good;
  bad_language["language"] = "fortran";
  std::tie(code, message) = status_and_error(json::serialize(json::object{{"requests", json::array{bad_language}}}));
  CHECK(code == 400);
  CHECK(message.find("'requests[0].language'") != std::string::npos);

  auto no_id = good;
  no_id["request_id"] = "";
  std::tie(code, message) = status_and_error(json::serialize(json::object{{"requests", json::array{no_id}}}));
  CHECK(code == 400);
  CHECK(message.find("'requests[0].request_id'") != std::string::npos);

  std::tie(code, message) = status_and_error(json::serialize(json::object{{"requests", json::array{good, good}}}));
  CHECK(code == 400);
  CHECK(message.find("'requests[1].request_id'") != std::string::npos);
  CHECK(message.find("twice") != std::string::npos);

  auto bad_seed = good;
  bad_seed["options"].as_object()["seed"] = -1;
  std::tie(code, message) = status_and_error(json::serialize(json::object{{"requests", json::array{bad_seed}}}));
  CHECK(code == 400);
  CHECK(message.find("'requests[0].options.seed'") != std::string::npos);
  CHECK(ev.submitted() == 0);  // nothing of a refused batch reaches the evaluator
}

TEST_CASE("missing options take the server's defaults, given ones are the request's") {
  auto c = config();
  c.default_options.timing_trials = 7;
  c.default_options.correctness_trials = 2;
  const auto body = R"({"requests": [{"request_id": "x", "problem": {"id": "p", "source": "s"},
                        "candidate_source": "c", "language": "cpp", "options": {"correctness_trials": 4}}]})";
  const auto batch = eval::parse_evaluation_batch(body, c.default_options);
  REQUIRE(batch.requests.size() == 1);
  CHECK(batch.stream);
  CHECK(batch.requests[0].options.timing_trials == 7);
  CHECK(batch.requests[0].options.correctness_trials == 4);
  CHECK(batch.requests[0].problem.content_hash == core::python_content_hash("s"));
}

TEST_CASE("auth: a wrong or missing token is 401 with WWW-Authenticate, the probes need none") {
  eval::ScriptedEvaluator ev;
  auto c = config();
  bool ready = false;
  c.ready = [&] { return ready; };
  eval::EvaluationService service(ev, c);
  for (const std::string token : {"", "wrong", "secre", "secrett"}) {
    const auto r = plain(service.handle(http("GET", "/v1/capacity", {}, token)));
    CHECK(r.status == 401);
    CHECK(r.header("WWW-Authenticate") == "Bearer");
  }
  CHECK(plain(service.handle(http("POST", "/v1/evaluations", batch_body({request("a")}), "nope"))).status == 401);
  CHECK(plain(service.handle(http("GET", "/metrics", {}, ""))).status == 401);
  CHECK(plain(service.handle(http("GET", "/healthz", {}, ""))).status == 200);
  CHECK(plain(service.handle(http("GET", "/readyz", {}, ""))).status == 503);
  ready = true;
  CHECK(plain(service.handle(http("GET", "/readyz", {}, ""))).status == 200);
  CHECK(plain(service.handle(http("GET", "/v1/nothing"))).status == 404);
  const auto wrong_method = plain(service.handle(http("DELETE", "/v1/evaluations")));
  CHECK(wrong_method.status == 405);
  CHECK(wrong_method.header("Allow") == "POST");
  const auto cap = core::parse_json(plain(service.handle(http("GET", "/v1/capacity"))).body).as_object();
  CHECK(cap.at("concurrency").as_int64() == 2);
  CHECK(cap.at("max_queue").as_int64() == 2);
  CHECK(cap.at("draining").as_bool() == false);
  CHECK(eval::constant_time_equal("abc", "abc"));
  CHECK_FALSE(eval::constant_time_equal("abc", "abd"));
  CHECK_FALSE(eval::constant_time_equal("abc", "abcd"));
}

TEST_CASE("results stream as they finish, one line per request, then the stream ends") {
  eval::ScriptedEvaluator ev;
  ev.otherwise(eval::scripted_result(core::ErrorCategory::none));
  ev.hold();
  eval::EvaluationService service(ev, config());
  auto stream = start(service.handle(http("POST", "/v1/evaluations", batch_body({request("a"), request("b")}))));
  REQUIRE(eventually([&] { return ev.pending() == 2; }));
  CHECK(stream->lines().empty());
  ev.release();
  REQUIRE(eventually([&] { return stream->finished() == 1; }));
  const auto lines = stream->lines();
  REQUIRE(lines.size() == 2);
  std::set<std::string> ids;
  for (const auto& l : lines) ids.insert(core::from_json<core::EvalResult>(l).request_id);
  CHECK(ids == std::set<std::string>{"a", "b"});
}

TEST_CASE("the queue is bounded: a batch that does not fit is refused whole with 429 and Retry-After") {
  eval::ScriptedEvaluator ev;
  ev.otherwise(eval::scripted_result(core::ErrorCategory::none));
  ev.hold();
  eval::EvaluationService service(ev, config());  // 2 in flight, 2 queued
  auto s1 = start(service.handle(http("POST", "/v1/evaluations", batch_body({request("a"), request("b")}))));
  REQUIRE(eventually([&] { return ev.pending() == 2; }));
  auto s2 = start(service.handle(http("POST", "/v1/evaluations", batch_body({request("c")}))));
  const auto full = plain(service.handle(http("POST", "/v1/evaluations", batch_body({request("d"), request("e")}))));
  CHECK(full.status == 429);
  CHECK_FALSE(full.header("Retry-After").empty());
  const auto body = core::parse_json(full.body).as_object();
  CHECK(body.at("queue_depth").as_int64() == 1);
  CHECK(body.at("max_queue").as_int64() == 2);
  // One request still fits: all or nothing is per batch.
  auto s3 = start(service.handle(http("POST", "/v1/evaluations", batch_body({request("d")}))));
  CHECK(service.capacity().queue_depth == 2);
  ev.release();  // from now on answered at once: c and d go through too
  REQUIRE(eventually([&] { return s1->finished() && s2->finished() && s3->finished(); }));
  CHECK(service.evaluations_run() == 4);
  CHECK(service.metrics_text().find("kbrl_evald_http_requests_total{code=\"429\"} 1") != std::string::npos);
}

TEST_CASE("idempotency: an id in flight attaches, a finished one replays, a different request is 409") {
  eval::ScriptedEvaluator ev;
  ev.otherwise(eval::scripted_result(core::ErrorCategory::correctness, "values differ"));
  ev.hold();
  eval::EvaluationService service(ev, config());
  auto first = start(service.handle(http("POST", "/v1/evaluations", batch_body({request("a")}))));
  REQUIRE(eventually([&] { return ev.pending() == 1; }));
  auto attached = start(service.handle(http("POST", "/v1/evaluations", batch_body({request("a")}))));
  const auto conflict = plain(service.handle(http("POST", "/v1/evaluations", batch_body({request("a", "class ModelNew: x = 1")}))));
  CHECK(conflict.status == 409);
  CHECK(error_of(conflict).find("'a'") != std::string::npos);
  ev.release();
  REQUIRE(eventually([&] { return first->finished() && attached->finished(); }));
  REQUIRE(attached->lines().size() == 1);
  CHECK(attached->lines() == first->lines());
  auto replay = start(service.handle(http("POST", "/v1/evaluations", batch_body({request("a")}))));
  CHECK(replay->finished() == 1);
  CHECK(replay->lines() == first->lines());
  CHECK(ev.submitted() == 1);
  CHECK(service.evaluations_run() == 1);
  const auto metrics = service.metrics_text();
  CHECK(metrics.find("kbrl_evald_replayed_total 2") != std::string::npos);
  CHECK(metrics.find("kbrl_evald_results_total{category=\"correctness\"} 1") != std::string::npos);
}

TEST_CASE("the journal answers for finished work after a restart, past a torn last line") {
  const fs::path dir = fresh_dir("journal");
  std::string delivered;
  {
    eval::ScriptedEvaluator ev;
    ev.otherwise(eval::scripted_result(core::ErrorCategory::none));
    eval::EvaluationService service(ev, config(dir));
    auto s = start(service.handle(http("POST", "/v1/evaluations", batch_body({request("a"), request("b")}))));
    REQUIRE(eventually([&] { return s->finished() == 1; }));
    delivered = s->lines()[0];
  }
  {
    std::ofstream torn(dir / "journal.jsonl", std::ios::app);
    torn << R"({"request_id": "c", "request_sha256": "0", "res)";  // a kill mid-write
  }
  eval::ScriptedEvaluator ev;
  ev.otherwise(eval::scripted_result(core::ErrorCategory::compile, "boom"));
  eval::EvaluationService service(ev, config(dir));
  auto s = start(service.handle(http("POST", "/v1/evaluations", batch_body({request("a"), request("b"), request("c")}))));
  REQUIRE(eventually([&] { return s->finished() == 1; }));
  CHECK(s->lines().size() == 3);
  CHECK(ev.submitted() == 1);  // only c: a and b came from the journal
  CHECK(ev.requests().at(0).request_id == "c");
  const auto replayed = plain(service.handle(http("GET", "/v1/evaluations/" + core::from_json<core::EvalResult>(delivered).request_id)));
  CHECK(replayed.status == 200);
  // A different request under a journaled id is refused even after the restart.
  CHECK(plain(service.handle(http("POST", "/v1/evaluations", batch_body({request("a", "other")})))).status == 409);
  // Every line of the file is whole again (the torn one was cut before appending).
  std::ifstream in(dir / "journal.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    CHECK_NOTHROW(core::parse_json(line));
    ++n;
  }
  CHECK(n == 3);
}

TEST_CASE("stream false: 202, then polling by id: queued or running, the result, 404 for unknown ids") {
  eval::ScriptedEvaluator ev;
  ev.otherwise(eval::scripted_result(core::ErrorCategory::none));
  ev.hold();
  auto c = config();
  c.max_queue = 4;
  eval::EvaluationService service(ev, c);
  const auto accepted = plain(service.handle(http("POST", "/v1/evaluations", batch_body({request("a"), request("b"), request("c")}, false))));
  CHECK(accepted.status == 202);
  CHECK(core::parse_json(accepted.body).as_object().at("accepted").as_int64() == 3);
  REQUIRE(eventually([&] { return ev.pending() == 2; }));
  const auto poll = [&](const std::string& id) { return plain(service.handle(http("GET", "/v1/evaluations/" + id))); };
  CHECK(poll("c").status == 202);
  CHECK(core::parse_json(poll("c").body).as_object().at("status").as_string() == "queued");
  CHECK(core::parse_json(poll("a").body).as_object().at("status").as_string() == "running");
  CHECK(poll("zzz").status == 404);
  service.begin_drain();
  CHECK_FALSE(service.wait_drained(0.2));  // work still pending
  const auto refused = plain(service.handle(http("POST", "/v1/evaluations", batch_body({request("d")}))));
  CHECK(refused.status == 503);
  CHECK_FALSE(refused.header("Retry-After").empty());
  CHECK(plain(service.handle(http("GET", "/readyz", {}, ""))).status == 503);
  ev.release();
  REQUIRE(eventually([&] { return poll("c").status == 200; }));
  CHECK_FALSE(service.wait_drained(0.2));  // a and b are finished but not fetched yet
  CHECK(poll("a").status == 200);
  CHECK(poll("b").status == 200);
  CHECK(service.wait_drained(5));
  // Unfetched results hold the drain only for drain_poll_grace_s.
  auto c2 = config();
  c2.drain_poll_grace_s = 0.3;
  eval::ScriptedEvaluator ev2;
  ev2.otherwise(eval::scripted_result(core::ErrorCategory::none));
  eval::EvaluationService short_grace(ev2, c2);
  CHECK(plain(short_grace.handle(http("POST", "/v1/evaluations", batch_body({request("x")}, false)))).status == 202);
  short_grace.begin_drain();
  CHECK_FALSE(short_grace.wait_drained(0.1));
  CHECK(short_grace.wait_drained(5));
  CHECK(core::from_json<core::EvalResult>(poll("b").body).request_id == "b");
}
