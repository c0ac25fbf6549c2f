#include "kbrl/eval/evaluation_service.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iostream>
#include <limits>
#include <set>

#include "kbrl/core/error.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/core/json_reader.hpp"

namespace kbrl::eval {

namespace fs = std::filesystem;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

// ---- request parsing ------------------------------------------------------------------------

namespace {

const json::value& required(const core::JsonReader& r, const json::object& o, std::string_view prefix,
                            std::string_view key) {
  const json::value* v = core::JsonReader::member(o, key);
  if (v == nullptr) r.fail(core::JsonReader::field_name(prefix, key), "missing (required)");
  return *v;
}

int at_least(const core::JsonReader& r, const json::value& v, const std::string& field, int lo) {
  const int n = r.integer(v, field);
  if (n < lo) r.fail(field, fmt::format("{} is below {}", n, lo));
  return n;
}

double positive(const core::JsonReader& r, const json::value& v, const std::string& field) {
  const double d = r.number(v, field);
  if (d <= 0) r.fail(field, fmt::format("{} is not above 0", d));
  return d;
}

core::EvalOptions read_options(const core::JsonReader& r, const json::value& v, const std::string& path,
                               core::EvalOptions o) {
  const auto& obj = r.object(v, path);
  r.only_keys(obj, path,
              {"correctness_trials", "timing_trials", "warmup_runs", "measure_performance", "seed", "atol", "rtol",
               "compile_timeout_s", "run_timeout_s", "input_families", "kernelbench_inputs"});
  const auto f = [&](std::string_view key) { return core::JsonReader::field_name(path, key); };
  const auto m = [&](std::string_view key) { return core::JsonReader::member(obj, key); };
  if (auto* x = m("correctness_trials")) o.correctness_trials = at_least(r, *x, f("correctness_trials"), 1);
  if (auto* x = m("timing_trials")) o.timing_trials = at_least(r, *x, f("timing_trials"), 1);
  if (auto* x = m("warmup_runs")) o.warmup_runs = at_least(r, *x, f("warmup_runs"), 0);
  if (auto* x = m("measure_performance")) o.measure_performance = r.boolean(*x, f("measure_performance"));
  // null clears what the server's defaults set: the request is the authority on its own options.
  if (obj.contains("seed")) {
    const json::value& s = obj.at("seed");
    if (s.is_null()) o.seed.reset();
    else if (s.is_uint64()) o.seed = s.get_uint64();
    else if (s.is_int64() && s.get_int64() >= 0) o.seed = static_cast<std::uint64_t>(s.get_int64());
    else r.fail(f("seed"), fmt::format("expected a non-negative integer or null, got {}", json::serialize(s)));
  }
  for (const auto& [key, slot] : {std::pair<std::string_view, std::optional<double>*>{"atol", &o.atol}, {"rtol", &o.rtol}}) {
    if (!obj.contains(key)) continue;
    *slot = r.optional_number(obj.at(key), f(key));
    if (*slot && **slot < 0) r.fail(f(key), fmt::format("{} is below 0", **slot));
  }
  if (auto* x = m("compile_timeout_s")) o.compile_timeout_s = positive(r, *x, f("compile_timeout_s"));
  if (auto* x = m("run_timeout_s")) o.run_timeout_s = positive(r, *x, f("run_timeout_s"));
  if (auto* x = m("input_families")) o.input_families = r.boolean(*x, f("input_families"));
  if (auto* x = m("kernelbench_inputs")) o.kernelbench_inputs = r.boolean(*x, f("kernelbench_inputs"));
  return o;
}

core::Problem read_problem(const core::JsonReader& r, const json::value& v, const std::string& path) {
  const auto& obj = r.object(v, path);
  r.only_keys(obj, path, {"id", "level", "number", "name", "source", "content_hash", "origin", "needs_weights"});
  const auto f = [&](std::string_view key) { return core::JsonReader::field_name(path, key); };
  core::Problem p;
  p.id = r.string(required(r, obj, path, "id"), f("id"));
  if (p.id.empty()) r.fail(f("id"), "must not be empty");
  p.source = r.string(required(r, obj, path, "source"), f("source"));
  if (auto* x = core::JsonReader::member(obj, "level")) p.level = at_least(r, *x, f("level"), 0);
  if (auto* x = core::JsonReader::member(obj, "number")) p.number = at_least(r, *x, f("number"), 0);
  if (auto* x = core::JsonReader::member(obj, "name")) p.name = r.string(*x, f("name"));
  if (auto* x = core::JsonReader::member(obj, "origin")) p.origin = r.string(*x, f("origin"));
  if (auto* x = core::JsonReader::member(obj, "needs_weights")) p.needs_weights = r.boolean(*x, f("needs_weights"));
  // The evaluator keys reference timings by it: computed here when the caller left it out, and
  // checked when given, so that a wrong hash cannot borrow another problem's baseline.
  const std::string hash = core::python_content_hash(p.source);
  if (auto* x = core::JsonReader::member(obj, "content_hash")) {
    p.content_hash = r.string(*x, f("content_hash"));
    if (!p.content_hash.empty() && p.content_hash != hash)
      r.fail(f("content_hash"), fmt::format("does not match the source (its hash is {})", hash));
  }
  p.content_hash = hash;
  return p;
}

core::EvalRequest read_request(const core::JsonReader& r, const json::value& v, const std::string& path,
                               const core::EvalOptions& defaults) {
  const auto& obj = r.object(v, path);
  r.only_keys(obj, path, {"request_id", "problem", "candidate_source", "language", "precision", "options"});
  const auto f = [&](std::string_view key) { return core::JsonReader::field_name(path, key); };
  core::EvalRequest q;
  q.request_id = r.string(required(r, obj, path, "request_id"), f("request_id"));
  if (q.request_id.empty()) r.fail(f("request_id"), "must not be empty (it is the idempotency key)");
  if (q.request_id.size() > 512) r.fail(f("request_id"), "longer than 512 characters");
  q.problem = read_problem(r, required(r, obj, path, "problem"), f("problem"));
  q.candidate_source = r.string(required(r, obj, path, "candidate_source"), f("candidate_source"));
  q.language = r.name(required(r, obj, path, "language"), f("language"), core::parse_kernel_language);
  if (auto* x = core::JsonReader::member(obj, "precision")) q.precision = r.name(*x, f("precision"), core::parse_precision);
  q.options = defaults;
  if (auto* x = core::JsonReader::member(obj, "options")) q.options = read_options(r, *x, f("options"), defaults);
  return q;
}

}  // namespace

EvaluationBatch parse_evaluation_batch(std::string_view body, const core::EvalOptions& defaults) {
  const core::JsonReader r("request body");
  const json::value doc = r.parse(body);
  const auto& obj = r.object(doc, "");
  r.only_keys(obj, "", {"requests", "stream"});
  EvaluationBatch batch;
  const auto& requests = r.array(required(r, obj, "", "requests"), "requests");
  if (requests.empty()) r.fail("requests", "empty: a batch needs at least one request");
  std::set<std::string> ids;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const std::string path = fmt::format("requests[{}]", i);
    batch.requests.push_back(read_request(r, requests[i], path, defaults));
    if (!ids.insert(batch.requests.back().request_id).second)
      r.fail(path + ".request_id", fmt::format("'{}' appears twice in the batch", batch.requests.back().request_id));
  }
  if (auto* x = core::JsonReader::member(obj, "stream")) batch.stream = r.boolean(*x, "stream");
  return batch;
}

std::string request_sha256(const core::EvalRequest& request) { return core::sha256_hex(core::to_json(request)); }

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  // Every byte of the longer string is looked at whatever the contents: only the lengths show in
  // the time taken, and the token's length is no secret worth a side channel.
  const std::size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

// ---- journal ----------------------------------------------------------------------------------

EvaluationJournal::EvaluationJournal(fs::path dir) : path_(std::move(dir) / "journal.jsonl") {
  for (const auto& line : log::read_jsonl(path_)) {
    const json::value* id = line.if_contains("request_id");
    const json::value* sha = line.if_contains("request_sha256");
    const json::value* result = line.if_contains("result");
    if (id == nullptr || !id->is_string() || sha == nullptr || !sha->is_string() || result == nullptr ||
        !result->is_object())
      continue;  // not a line of ours: that request is simply evaluated again if asked for
    entries_[std::string(id->get_string())] = {std::string(sha->get_string()), json::serialize(*result)};
  }
  writer_ = std::make_unique<log::JsonlWriter>(path_);  // cuts a torn last line
}

void EvaluationJournal::append(const std::string& request_id, const std::string& request_sha256,
                               const std::string& result_json) {
  writer_->write(json::object{{"request_id", request_id},
                              {"request_sha256", request_sha256},
                              {"result", core::parse_json(result_json)}});
  writer_->flush(true);
  entries_[request_id] = {request_sha256, result_json};
}

// ---- the service ------------------------------------------------------------------------------

struct EvaluationService::StreamState {
  std::mutex mu;
  std::shared_ptr<net::ResponseStream> stream;  // set when the server starts the body
  std::vector<std::string> early;               // lines finished before that
  std::size_t remaining = 0;
  bool finished = false;
};

struct EvaluationService::Entry {
  enum class State { queued, running, done };
  std::string id, sha;
  core::EvalRequest request;
  State state = State::queued;
  std::string result_json;
  std::vector<std::shared_ptr<StreamState>> streams;  // waiting for this result
  bool poll_pending = false;                         // accepted by a stream:false batch, not fetched yet
  bool forget_when_fetched = false;                  // an `internal` result kept only for its poller
};

namespace {

std::string error_body(std::string_view message) { return json::serialize(json::object{{"error", message}}); }

net::HttpResponse error(int status, std::string_view message) { return net::HttpResponse::json(status, error_body(message)); }

// RFC 3986 percent-decoding of one path segment; malformed escapes are kept as they are.
std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// "<line>\n" written to a stream; the stream ends after its last line.
bool deliver_line(const std::shared_ptr<net::ResponseStream>& stream, const std::string& line) {
  return stream->write(line + "\n");
}

}  // namespace

EvaluationService::EvaluationService(Evaluator& evaluator, EvaluationServiceConfig config)
    : evaluator_(evaluator), config_(std::move(config)) {
  if (config_.compile_workers < 0 || config_.run_lanes < 1)
    throw core::InvalidArgument("evaluation service: compile_workers must be >= 0 and run_lanes >= 1");
  const int concurrency = config_.compile_workers + config_.run_lanes;
  if (config_.max_queue == 0) config_.max_queue = 4 * static_cast<std::size_t>(concurrency);
  if (config_.max_batch == 0) throw core::InvalidArgument("evaluation service: max_batch must be at least 1");
  if (!config_.journal_dir.empty()) {
    journal_ = std::make_unique<EvaluationJournal>(config_.journal_dir);
    for (const auto& [id, e] : journal_->entries()) {
      auto entry = std::make_shared<Entry>();
      entry->id = id;
      entry->sha = e.request_sha256;
      entry->state = Entry::State::done;
      entry->result_json = e.result_json;
      entries_.emplace(id, std::move(entry));
    }
  }
  for (int i = 0; i < concurrency; ++i) dispatchers_.emplace_back([this] { dispatch_loop(); });
}

EvaluationService::~EvaluationService() {
  std::deque<EntryPtr> queued;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    queued.swap(queue_);
    cv_.notify_all();
  }
  for (auto& t : dispatchers_) t.join();
  for (auto& e : queued) {
    core::EvalResult r;
    r.request_id = e->id;
    r.problem_id = e->request.problem.id;
    r.error_category = core::ErrorCategory::internal;
    r.error_message = "the evaluation service stopped before this request ran";
    finish(e, r);
  }
}

void EvaluationService::dispatch_loop() {
  while (true) {
    EntryPtr entry;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      entry = queue_.front();
      queue_.pop_front();
      entry->state = Entry::State::running;
      ++in_flight_;
    }
    core::EvalResult result;
    try {
      auto future = evaluator_.submit(entry->request);
      // Waited for in slices: a service stopped without a drain (a second signal) must not wait
      // for a build; the evaluator answers the abandoned future later, to nobody.
      while (future.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
        std::lock_guard lock(mu_);
        if (stopping_) throw core::Error("the evaluation service stopped before this request finished");
      }
      result = future.get();
    } catch (const std::exception& e) {
      result.request_id = entry->id;
      result.problem_id = entry->request.problem.id;
      result.error_category = core::ErrorCategory::internal;
      result.error_message = fmt::format("evaluator: {}", e.what());
    }
    {
      std::lock_guard lock(mu_);
      --in_flight_;
      if (!stopping_) ++evaluations_total_;  // else it was abandoned, not run to its end
      const auto stage = [&](const char* name) {
        auto it = result.stage_seconds.find(name);
        return it == result.stage_seconds.end() ? 0.0 : it->second;
      };
      compile_seconds_ += stage("compile");
      run_seconds_ += stage("run");
      eval_seconds_ += stage("total");
    }
    finish(entry, result);
  }
}

void EvaluationService::finish(const EntryPtr& entry, const core::EvalResult& given) {
  core::EvalResult result = given;
  result.request_id = entry->id;
  const std::string line = core::to_json(result);
  // An `internal` result is the evaluator's failure, not the candidate's: it is delivered but not
  // remembered, so that a retry of the same request_id is evaluated again.
  const bool remember = result.error_category != core::ErrorCategory::internal;
  if (remember && journal_) {
    try {
      std::lock_guard lock(journal_mu_);  // the writer is not thread-safe; the routes need not wait on fsync
      journal_->append(entry->id, entry->sha, line);
    } catch (const std::exception& e) {
      std::cerr << fmt::format("kbrl-evald: journal: {} (the result of '{}' is delivered but not kept)\n", e.what(),
                               entry->id);
    }
  }
  std::vector<std::shared_ptr<StreamState>> streams;
  {
    std::lock_guard lock(mu_);
    entry->state = Entry::State::done;
    entry->result_json = line;
    entry->request = {};  // only the result is needed from now on
    streams.swap(entry->streams);
    ++results_by_category_[std::string(core::to_string(result.error_category))];
    last_finish_ = Clock::now();
    if (!remember) {
      if (entry->poll_pending) {
        entry->forget_when_fetched = true;  // kept until its poller has seen it
      } else if (auto it = entries_.find(entry->id); it != entries_.end() && it->second == entry) {
        entries_.erase(it);
      }
    }
    cv_.notify_all();
  }
  std::size_t closed = 0;
  for (auto& st : streams) {
    std::lock_guard lock(st->mu);
    --st->remaining;
    if (!st->stream) {
      st->early.push_back(line);
      continue;
    }
    deliver_line(st->stream, line);  // a client gone is fine: the result is in the journal
    if (st->remaining == 0 && !st->finished) {
      st->finished = true;
      st->stream->finish();
      ++closed;
    }
  }
  if (closed > 0) {
    std::lock_guard lock(mu_);
    open_streams_ -= closed;
    cv_.notify_all();
  }
}

bool EvaluationService::authorized(const net::HttpRequest& request) const {
  if (config_.token.empty()) return true;
  const std::string_view auth = request.header("Authorization");
  constexpr std::string_view scheme = "Bearer ";
  if (auth.size() < scheme.size()) return false;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(auth[i])) != std::tolower(static_cast<unsigned char>(scheme[i])))
      return false;
  return constant_time_equal(auth.substr(scheme.size()), config_.token);
}

int EvaluationService::retry_after_s_locked() const {
  // The time the queue ahead needs at the mean evaluation time seen so far: a client that comes
  // back then finds room, and one that comes back sooner only adds load.
  const double mean = evaluations_total_ > 0 ? eval_seconds_ / static_cast<double>(evaluations_total_) : 1.0;
  const double concurrency = config_.compile_workers + config_.run_lanes;
  const double wait = mean * static_cast<double>(queue_.size()) / concurrency;
  return static_cast<int>(std::clamp(std::ceil(wait), 1.0, 60.0));
}

net::HandlerResult EvaluationService::handle(const net::HttpRequest& request) {
  net::HandlerResult result;
  try {
    result = route(request);
  } catch (const std::exception& e) {
    result = error(500, fmt::format("internal error: {}", e.what()));
  }
  const int code = std::holds_alternative<net::HttpResponse>(result) ? std::get<net::HttpResponse>(result).status
                                                                     : std::get<net::StreamingResponse>(result).status;
  std::lock_guard lock(mu_);
  ++http_by_code_[code];
  return result;
}

net::HandlerResult EvaluationService::route(const net::HttpRequest& request) {
  std::string_view path = request.target;
  if (const auto q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  const auto method_not_allowed = [](std::string_view allow) {
    net::HttpResponse r = error(405, fmt::format("method not allowed (allowed: {})", allow));
    r.headers.emplace_back("Allow", std::string(allow));
    return r;
  };
  const auto unauthorized = [] {
    net::HttpResponse r = error(401, "missing or wrong bearer token (Authorization: Bearer <token>)");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  };
  const bool get = request.method == "GET" || request.method == "HEAD";

  // Probes need no token: Kubernetes calls them without one.
  if (path == "/healthz") return get ? net::HttpResponse::text(200, "ok\n") : net::HandlerResult(method_not_allowed("GET"));
  if (path == "/readyz") {
    if (!get) return method_not_allowed("GET");
    bool draining = false;
    {
      std::lock_guard lock(mu_);
      draining = draining_;
    }
    if (draining) return net::HttpResponse::text(503, "not ready: draining\n");
    if (config_.ready && !config_.ready()) return net::HttpResponse::text(503, "not ready: the evaluator's workers are starting\n");
    return net::HttpResponse::text(200, "ready\n");
  }
  const bool known = path == "/metrics" || path == "/v1/capacity" || path == "/v1/evaluations" ||
                     path.starts_with("/v1/evaluations/");
  if (!known) return error(404, fmt::format("no such resource: {}", path));
  if (!authorized(request)) return unauthorized();

  if (path == "/metrics") {
    if (!get) return method_not_allowed("GET");
    return net::HttpResponse::text(200, metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/v1/capacity") {
    if (!get) return method_not_allowed("GET");
    const Capacity c = capacity();
    return net::HttpResponse::json(200, json::serialize(json::object{{"concurrency", c.concurrency},
                                                                     {"compile_workers", c.compile_workers},
                                                                     {"run_lanes", c.run_lanes},
                                                                     {"queue_depth", c.queue_depth},
                                                                     {"in_flight", c.in_flight},
                                                                     {"max_queue", c.max_queue},
                                                                     {"draining", c.draining}}));
  }
  if (path == "/v1/evaluations") {
    if (request.method != "POST") return method_not_allowed("POST");
    return post_evaluations(request);
  }
  if (!get) return method_not_allowed("GET");
  const std::string id = percent_decode(path.substr(std::string_view("/v1/evaluations/").size()));
  return get_evaluation(id);
}

net::HandlerResult EvaluationService::post_evaluations(const net::HttpRequest& request) {
  {
    std::lock_guard lock(mu_);
    if (draining_) {
      net::HttpResponse r = error(503, "draining: this server accepts no new evaluations; send them elsewhere");
      r.headers.emplace_back("Retry-After", "5");
      return r;
    }
  }
  EvaluationBatch batch;
  try {
    batch = parse_evaluation_batch(request.body, config_.default_options);
  } catch (const core::ConfigError& e) {
    return error(400, e.what());
  }
  if (batch.requests.size() > config_.max_batch)
    return error(413, fmt::format("request body: field 'requests': {} requests, more than this server's --max-batch {}",
                                  batch.requests.size(), config_.max_batch));
  std::vector<std::string> shas;
  for (const auto& r : batch.requests) shas.push_back(request_sha256(r));

  auto state = std::make_shared<StreamState>();
  state->remaining = batch.requests.size();
  std::vector<EntryPtr> entries(batch.requests.size());
  {
    std::lock_guard lock(mu_);
    if (draining_) {  // checked again: a drain may have begun while the body was parsed
      net::HttpResponse r = error(503, "draining: this server accepts no new evaluations; send them elsewhere");
      r.headers.emplace_back("Retry-After", "5");
      return r;
    }
    std::size_t fresh = 0;
    for (std::size_t i = 0; i < batch.requests.size(); ++i) {
      auto it = entries_.find(batch.requests[i].request_id);
      if (it == entries_.end()) {
        ++fresh;
        continue;
      }
      if (it->second->sha != shas[i])
        return error(409, fmt::format("request body: field 'requests[{}].request_id': '{}' was already used for a "
                                      "different request (request ids are idempotency keys)",
                                      i, batch.requests[i].request_id));
      entries[i] = it->second;
    }
    // All or nothing: a batch partly admitted would leave the client to sort out which half to
    // resend. The server holds at most concurrency + max_queue unfinished requests: those that go
    // straight into a free slot never wait in the queue.
    const std::size_t concurrency = static_cast<std::size_t>(config_.compile_workers + config_.run_lanes);
    const std::size_t held = queue_.size() + in_flight_;
    const std::size_t room = config_.max_queue + concurrency - std::min(held, config_.max_queue + concurrency);
    if (fresh > room) {
      net::HttpResponse r = net::HttpResponse::json(
          429, json::serialize(json::object{
                   {"error", fmt::format("queue full: {} waiting and {} running, room for {} more, the batch needs {}",
                                         queue_.size(), in_flight_, room, fresh)},
                   {"queue_depth", queue_.size()},
                   {"in_flight", in_flight_},
                   {"concurrency", concurrency},
                   {"max_queue", config_.max_queue}}));
      r.headers.emplace_back("Retry-After", std::to_string(retry_after_s_locked()));
      return r;
    }
    for (std::size_t i = 0; i < batch.requests.size(); ++i) {
      if (entries[i]) {
        ++replayed_total_;
      } else {
        auto e = std::make_shared<Entry>();
        e->id = batch.requests[i].request_id;
        e->sha = shas[i];
        e->request = std::move(batch.requests[i]);
        entries_.emplace(e->id, e);
        queue_.push_back(e);
        entries[i] = std::move(e);
      }
      Entry& e = *entries[i];
      if (batch.stream) {
        if (e.state == Entry::State::done) {
          state->early.push_back(e.result_json);
          --state->remaining;
        } else {
          e.streams.push_back(state);
        }
      } else if (e.state != Entry::State::done && !e.poll_pending) {
        e.poll_pending = true;
        ++unfetched_polls_;
      }
    }
    if (batch.stream) ++open_streams_;
    cv_.notify_all();
  }

  if (!batch.stream) {
    json::array ids;
    for (const auto& e : entries) ids.emplace_back(e->id);
    return net::HttpResponse::json(202, json::serialize(json::object{{"accepted", entries.size()}, {"request_ids", ids}}));
  }
  net::StreamingResponse s;
  s.status = 200;
  s.headers = {{"Content-Type", "application/x-ndjson"}, {"Cache-Control", "no-store"}};
  s.start = [this, state](std::shared_ptr<net::ResponseStream> stream) {
    bool closed = false;
    {
      std::lock_guard lock(state->mu);
      state->stream = std::move(stream);
      for (const auto& line : state->early) deliver_line(state->stream, line);
      state->early.clear();
      if (state->remaining == 0 && !state->finished) {
        state->finished = true;
        state->stream->finish();
        closed = true;
      }
    }
    if (closed) {
      std::lock_guard lock(mu_);
      --open_streams_;
      cv_.notify_all();
    }
  };
  return s;
}

net::HttpResponse EvaluationService::get_evaluation(const std::string& request_id) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(request_id);
  if (it == entries_.end()) return error(404, fmt::format("no evaluation with request_id '{}'", request_id));
  Entry& e = *it->second;
  if (e.state == Entry::State::done) {
    net::HttpResponse r = net::HttpResponse::json(200, e.result_json);
    if (e.poll_pending) {
      e.poll_pending = false;
      --unfetched_polls_;
      cv_.notify_all();
      if (e.forget_when_fetched) entries_.erase(it);
    }
    return r;
  }
  return net::HttpResponse::json(
      202, json::serialize(json::object{{"request_id", request_id},
                                        {"status", e.state == Entry::State::queued ? "queued" : "running"}}));
}

void EvaluationService::begin_drain() {
  std::lock_guard lock(mu_);
  draining_ = true;
  cv_.notify_all();
}

bool EvaluationService::wait_drained(double timeout_s) {
  std::unique_lock lock(mu_);
  const auto deadline = timeout_s > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                           std::chrono::duration<double>(timeout_s))
                                      : Clock::time_point::max();
  const auto grace = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.drain_poll_grace_s));
  while (true) {
    const bool evaluated = queue_.empty() && in_flight_ == 0;
    const bool streamed = open_streams_ == 0;
    const bool polled = unfetched_polls_ == 0 || Clock::now() >= last_finish_ + grace;
    if (evaluated && streamed && polled) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    // Polls expire without an event: wake at the grace's end too.
    auto until = deadline;
    if (evaluated && streamed) until = std::min(until, last_finish_ + grace);
    cv_.wait_until(lock, std::min(until, now + std::chrono::seconds(1)));
  }
}

EvaluationService::Capacity EvaluationService::capacity() const {
  std::lock_guard lock(mu_);
  Capacity c;
  c.compile_workers = config_.compile_workers;
  c.run_lanes = config_.run_lanes;
  c.concurrency = c.compile_workers + c.run_lanes;
  c.queue_depth = queue_.size();
  c.in_flight = in_flight_;
  c.max_queue = config_.max_queue;
  c.draining = draining_;
  return c;
}

std::uint64_t EvaluationService::evaluations_run() const {
  std::lock_guard lock(mu_);
  return evaluations_total_;
}

std::string EvaluationService::metrics_text() const {
  std::lock_guard lock(mu_);
  std::string out;
  const auto metric = [&](std::string_view name, std::string_view type, std::string_view help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  metric("kbrl_evald_queue_depth", "gauge", "Accepted requests waiting for an evaluation slot.");
  out += fmt::format("kbrl_evald_queue_depth {}\n", queue_.size());
  metric("kbrl_evald_in_flight", "gauge", "Requests being evaluated now.");
  out += fmt::format("kbrl_evald_in_flight {}\n", in_flight_);
  metric("kbrl_evald_max_queue", "gauge", "The queue's bound (--max-queue).");
  out += fmt::format("kbrl_evald_max_queue {}\n", config_.max_queue);
  metric("kbrl_evald_draining", "gauge", "1 while the server drains (SIGTERM).");
  out += fmt::format("kbrl_evald_draining {}\n", draining_ ? 1 : 0);
  metric("kbrl_evald_evaluations_total", "counter", "Evaluations actually run.");
  out += fmt::format("kbrl_evald_evaluations_total {}\n", evaluations_total_);
  metric("kbrl_evald_replayed_total", "counter",
         "Requests answered from the journal or attached to an evaluation already running.");
  out += fmt::format("kbrl_evald_replayed_total {}\n", replayed_total_);
  metric("kbrl_evald_results_total", "counter", "Results delivered, by error category (none: correct).");
  for (const auto& [category, n] : results_by_category_)
    out += fmt::format("kbrl_evald_results_total{{category=\"{}\"}} {}\n", category, n);
  metric("kbrl_evald_compile_seconds_total", "counter", "Seconds spent in the compile stage.");
  out += fmt::format("kbrl_evald_compile_seconds_total {}\n", compile_seconds_);
  metric("kbrl_evald_run_seconds_total", "counter", "Seconds spent in the run stage.");
  out += fmt::format("kbrl_evald_run_seconds_total {}\n", run_seconds_);
  metric("kbrl_evald_http_requests_total", "counter", "HTTP requests answered by the routes, by status code.");
  for (const auto& [code, n] : http_by_code_) out += fmt::format("kbrl_evald_http_requests_total{{code=\"{}\"}} {}\n", code, n);
  return out;
}

}  // namespace kbrl::eval
