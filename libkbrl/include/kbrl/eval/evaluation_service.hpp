// EvaluationService: an Evaluator put on the network, as the routes of the evaluation API v1
// (docs/services.md). It owns what makes a shared evaluator safe to call over HTTP: strict
// request parsing, bearer-token auth, a bounded queue with all-or-nothing admission, idempotency
// by request_id backed by an fsync'ed on-disk journal, Prometheus metrics and draining.
// kbrl-evald composes it with a LocalEvaluator and net::HttpServer; tests call handle() directly.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/eval/evaluator.hpp"
#include "kbrl/log/jsonl.hpp"
#include "kbrl/net/http_server.hpp"

namespace kbrl::eval {

// One POST /v1/evaluations body, read strictly.
struct EvaluationBatch {
  std::vector<core::EvalRequest> requests;
  bool stream = true;
};

// Reads a POST /v1/evaluations body. Every unknown key, missing required key, wrong type or bad
// value is a core::ConfigError whose field is the path ("requests[3].options.seed"); `defaults`
// fill the options a request leaves out. Required: request_id (non-empty, unique in the batch),
// problem.id, problem.source, candidate_source, language.
EvaluationBatch parse_evaluation_batch(std::string_view body, const core::EvalOptions& defaults);

// SHA-256 of the request's canonical JSON (core::to_json): what the journal keys a request_id to,
// so that the same id with a different request is refused.
std::string request_sha256(const core::EvalRequest& request);

// True when the strings are equal, in a time that depends only on their lengths (token checks).
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

// The append-only journal of finished evaluations: DIR/journal.jsonl, one line
// {"request_id", "request_sha256", "result"} per evaluation, fsync'ed before the result is
// delivered. Loaded at start (a line torn by a kill is skipped and cut off), so a restarted
// server answers for what it finished.
class EvaluationJournal {
 public:
  struct Entry {
    std::string request_sha256;
    std::string result_json;  // the EvalResult's JSON text as delivered
  };
  // Throws core::Error when the folder or file cannot be created or opened.
  explicit EvaluationJournal(std::filesystem::path dir);
  const std::map<std::string, Entry>& entries() const { return entries_; }
  // Appends and fsyncs; throws core::Error when the line cannot be written.
  void append(const std::string& request_id, const std::string& request_sha256, const std::string& result_json);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::map<std::string, Entry> entries_;
  std::unique_ptr<log::JsonlWriter> writer_;
};

struct EvaluationServiceConfig {
  // What the evaluator can do at once, advertised by GET /v1/capacity; the service keeps
  // compile_workers + run_lanes requests in the evaluator and queues the rest.
  int compile_workers = 1;
  int run_lanes = 1;
  // Requests waiting for a slot; the server holds at most concurrency + max_queue unfinished ones
  // and refuses a batch that would exceed it (429). 0: 4 x (compile_workers + run_lanes).
  std::size_t max_queue = 0;
  std::size_t max_batch = 1024;  // requests per POST
  std::filesystem::path journal_dir;  // empty: no journal (idempotency lasts while the process runs)
  std::string token;                  // empty: no auth
  core::EvalOptions default_options;  // the options a request leaves out
  // Readiness: the evaluator's workers are up (LocalEvaluator::workers_ready). Null: ready.
  std::function<bool()> ready;
  // How long a drained server keeps answering polls for results nobody has fetched yet.
  double drain_poll_grace_s = 30;
};

class EvaluationService {
 public:
  // Loads the journal; starts compile_workers + run_lanes dispatch threads. Throws core::Error
  // when the journal cannot be opened, core::InvalidArgument for a bad configuration.
  EvaluationService(Evaluator& evaluator, EvaluationServiceConfig config);
  // Stops dispatching; queued requests are answered `internal` (call drain() first to finish them).
  ~EvaluationService();
  EvaluationService(const EvaluationService&) = delete;
  EvaluationService& operator=(const EvaluationService&) = delete;

  // The HTTP routes (a net::Handler): quick, never blocks on an evaluation.
  net::HandlerResult handle(const net::HttpRequest& request);

  // Draining (SIGTERM): readiness false and new POSTs answered 503 from now on.
  void begin_drain();
  // Blocks until every accepted request is finished and delivered: streams ended, results of
  // polled batches fetched (or drain_poll_grace_s passed since the last evaluation finished), or
  // `timeout_s` (<= 0: no limit). True when drained, false when the timeout came first. Results
  // not fetched within the grace stay in the journal.
  bool wait_drained(double timeout_s = 0);

  struct Capacity {
    int concurrency = 0, compile_workers = 0, run_lanes = 0;
    std::size_t queue_depth = 0, in_flight = 0, max_queue = 0;
    bool draining = false;
  };
  Capacity capacity() const;
  std::string metrics_text() const;  // Prometheus text format 0.0.4
  std::uint64_t evaluations_run() const;

 private:
  struct Entry;
  struct StreamState;
  using EntryPtr = std::shared_ptr<Entry>;

  net::HandlerResult route(const net::HttpRequest& request);
  net::HandlerResult post_evaluations(const net::HttpRequest& request);
  net::HttpResponse get_evaluation(const std::string& request_id);
  bool authorized(const net::HttpRequest& request) const;
  void dispatch_loop();
  void finish(const EntryPtr& entry, const core::EvalResult& result);
  int retry_after_s_locked() const;

  Evaluator& evaluator_;
  EvaluationServiceConfig config_;
  std::unique_ptr<EvaluationJournal> journal_;
  std::mutex journal_mu_;  // appends (each fsync'ed) happen outside mu_

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, EntryPtr> entries_;  // every request_id known: queued, running or done
  std::deque<EntryPtr> queue_;
  std::size_t in_flight_ = 0;
  std::size_t open_streams_ = 0;
  std::size_t unfetched_polls_ = 0;  // results of stream:false batches not yet fetched
  bool draining_ = false;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point last_finish_ = std::chrono::steady_clock::now();

  // Metrics (under mu_).
  std::uint64_t evaluations_total_ = 0, replayed_total_ = 0;
  double compile_seconds_ = 0, run_seconds_ = 0, eval_seconds_ = 0;
  std::map<std::string, std::uint64_t> results_by_category_;
  std::map<int, std::uint64_t> http_by_code_;

  std::vector<std::thread> dispatchers_;
};

}  // namespace kbrl::eval
