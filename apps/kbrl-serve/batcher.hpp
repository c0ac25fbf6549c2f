// kbrl-serve's batcher: requests from every connection wait in one queue; one sampling thread
// takes what is waiting and samples it with continuous batching, one ServedModel::stream per
// group of requests that draw from the same distribution (adapter, temperature, top_p, top_k):
// rows that finish leave at once, and a request that arrives while a group runs joins it at the
// next step when it is first in the queue and draws from the same distribution. Each request keeps
// its own n, max_tokens and stop strings: its rows are cut where they would have stopped alone.
// That is exact, not approximate: the sampler draws each row's tokens from uniforms keyed by
// (prompt key, sample, step), and a request's prompt keys come from its own seed, so a row's
// tokens do not depend on what else is in the batch or how long the others run.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "served_model.hpp"

namespace kbrl::serve {

struct SamplingJob {
  std::string adapter;  // "" = the base model
  std::vector<std::vector<std::int64_t>> prompts;
  std::int64_t n = 1;  // rows per prompt; row index = prompt * n + sample
  double temperature = 1.0;
  double top_p = 1.0;
  std::int64_t top_k = 0;
  std::int64_t max_tokens = 16;
  std::vector<std::string> stop;  // matched on the decoded text; cut before the match
  std::uint64_t seed = 0;         // prompt i's draws are keyed by (seed, i)
};

// One row's progress, in order; text is held back while it might be the start of a stop string.
struct RowUpdate {
  std::size_t row = 0;
  std::string text;                  // new text
  std::vector<std::int64_t> tokens;  // new tokens (a stop token included; its text is not)
  std::vector<float> logprobs;       // theirs, under the distribution drawn from
  const char* finish_reason = nullptr;  // "stop" or "length" on the row's last update
};

struct JobCallbacks {
  std::function<void(const RowUpdate&)> update;  // on the sampling thread
  // Once, after the last update (error == nullptr) or on failure (then some rows may not have
  // finished). On the sampling thread, or on the submitting one when the batcher is stopped.
  std::function<void(const std::string* error)> done;
  std::function<bool()> alive;  // optional: false ends the job's rows early (the client is gone)
};

// The decoded text of one row, cut by the row's own limit and stop strings (exposed for tests).
class RowText {
 public:
  RowText(const tokenizer::Tokenizer& tokenizer, const std::vector<std::string>& stop, std::int64_t max_tokens);
  // One token; fills `out` (text, tokens, logprobs, finish_reason). True when the row ended.
  bool add(std::int64_t token, float logprob, bool sampler_finished, bool stop_token, RowUpdate& out);
  bool finished() const { return finished_; }
  std::int64_t tokens() const { return count_; }

 private:
  tokenizer::StreamDecoder decoder_;
  const std::vector<std::string>* stop_;
  std::size_t longest_stop_ = 0;
  std::int64_t max_tokens_;
  std::int64_t count_ = 0;
  std::string text_;
  std::size_t sent_ = 0;
  bool finished_ = false;
};

struct BatcherConfig {
  std::size_t max_batch = 64;  // rows (prompts x n) decoded together at most
  double batch_wait_ms = 5;    // after the first request arrives, wait this long for others
};

class Batcher {
 public:
  // `log` gets one line per batch.
  Batcher(ServedModel& model, BatcherConfig config, std::function<void(const std::string&)> log);
  ~Batcher();  // stop()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  void submit(SamplingJob job, JobCallbacks callbacks);
  // Refuses new jobs and waits until every accepted one is done.
  void drain();
  // Fails the waiting jobs ("the server is stopping"), lets the running batch finish, joins.
  void stop();

  struct Stats {
    std::int64_t batches = 0;
    std::int64_t jobs = 0;
    std::int64_t joined = 0;         // jobs that joined a batch while it ran
    std::int64_t largest_batch = 0;  // jobs it started with
  };
  Stats stats() const;

 private:
  struct Entry {
    SamplingJob job;
    JobCallbacks callbacks;
    std::size_t rows() const { return job.prompts.size() * static_cast<std::size_t>(job.n); }
  };
  void run();
  void run_batch(std::vector<Entry>& batch);
  // Streams the group, and the requests that join it (moved from the queue into `joined`,
  // appended to `group`); returns the tokens drawn.
  std::int64_t run_group(std::vector<Entry*>& group, std::deque<Entry>& joined);
  // The first waiting request if it may join a running group: its distribution, max_tokens
  // <= max_tokens, prompts no longer than `longest`, and nothing else wants the device.
  Entry* take_joiner(const SamplingJob& like, std::int64_t max_tokens, std::size_t longest, std::deque<Entry>& joined);

  ServedModel& model_;
  BatcherConfig config_;
  std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Entry> queue_;
  bool running_batch_ = false;
  bool accepting_ = true;
  bool stopping_ = false;
  Stats stats_;
  std::thread thread_;
};

// The prompt key of prompt `index` of a request with `seed`: splitmix64 of the two.
std::uint64_t prompt_key(std::uint64_t seed, std::uint64_t index);

}  // namespace kbrl::serve
