// RemoteEvaluator: the Evaluator interface over a fleet of kbrl-evald servers (docs/services.md).
// Servers come from a list, a file that is re-read, or a DNS name re-resolved (a Kubernetes
// headless Service), so they can join and leave. Each server is kept at or below the concurrency
// it advertises, least loaded first, over kept-alive connections; a request whose server fails
// (connection error, timeout, 5xx, draining, vanished) is sent elsewhere with back-off, and every
// request gets exactly one result: `internal` when no server answered for give_up_after_s.
#pragma once

#include <cstdint>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/eval/evaluator.hpp"

namespace kbrl::eval {

struct RemoteEvaluatorConfig {
  // Servers: http://host:port or https://host:port URLs, and dns://name:port entries (every A
  // and AAAA record of the name, as http://address:port, re-resolved every refresh_s).
  std::vector<std::string> endpoints;
  // A file of the same entries, one per line ('#' starts a comment), re-read every refresh_s; it
  // may appear later (requests wait for servers up to give_up_after_s).
  std::filesystem::path endpoints_file;
  // The bearer token: `token`, else the first line of token_file, else the variable token_env,
  // else the first line of the file that the variable <token_env>_FILE names.
  std::string token;
  std::filesystem::path token_file;
  std::string token_env = "KBRL_EVALD_TOKEN";
  std::filesystem::path ca_file;  // TLS: trusted CAs; empty: the system's
  bool verify_tls = true;
  double refresh_s = 2.0;          // endpoints re-read and capacities re-asked this often
  double connect_timeout_s = 5.0;
  // How long one batch may take on a server before it counts as lost; 0: the sum of its
  // requests' compile and run timeouts plus a minute.
  double request_timeout_s = 0;
  double backoff_initial_s = 0.25;  // after a failure, doubled per attempt, with jitter...
  double backoff_max_s = 10.0;      // ...up to this
  double give_up_after_s = 600;     // a request no server took for this long gets an `internal` result
  int max_batch = 64;               // requests per POST
};

// "URL[,URL...]" (entries as above, dns:// included) or the path of an endpoints file (text
// without "://"; it need not exist yet): what
// kbrl-eval's --endpoints and kbrl-train's evaluator.endpoints take. Throws
// core::InvalidArgument naming the entry.
RemoteEvaluatorConfig remote_evaluator_config(std::string_view endpoints);

class RemoteEvaluator : public Evaluator {
 public:
  // Throws core::InvalidArgument for a malformed entry or no endpoints at all.
  explicit RemoteEvaluator(RemoteEvaluatorConfig config);
  // Pending requests are answered `internal`; no thread is left waiting on a server.
  ~RemoteEvaluator() override;
  RemoteEvaluator(const RemoteEvaluator&) = delete;
  RemoteEvaluator& operator=(const RemoteEvaluator&) = delete;

  std::future<core::EvalResult> submit(core::EvalRequest request) override;

  struct Stats {
    std::uint64_t submitted = 0;
    std::uint64_t delivered = 0;      // results handed to callers (each request once)
    std::uint64_t batches = 0;        // POSTs sent
    std::uint64_t redispatched = 0;   // requests sent again after their server failed
    std::uint64_t queue_full = 0;     // 429 answers honoured
    std::uint64_t draining = 0;       // 503 answers
    std::uint64_t server_failures = 0;  // connection errors, timeouts, 5xx, streams cut short
    std::uint64_t gave_up = 0;        // `internal` after give_up_after_s
    std::size_t connections_opened = 0;
    std::map<std::string, std::uint64_t> results_by_server;  // origin -> results it delivered
  };
  Stats stats() const;
  // The servers known now (origins), with the concurrency each advertised (0: not reached yet).
  std::map<std::string, int> servers() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
  std::thread dispatcher_, refresher_;
};

}  // namespace kbrl::eval
