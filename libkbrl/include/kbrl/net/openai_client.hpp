// A client of the OpenAI-compatible HTTP API (OpenAI, vLLM, SGLang and the other servers that speak
// it): chat completions, completions, embeddings and the model list, with n samples, temperature,
// top-p, max tokens, stop sequences, a seed and per-token log-probabilities where the server
// returns them.
//
// Failures are retried as a shared, rate-limited server expects: a 429, a 5xx, a refused or
// dropped connection and a timed-out attempt are tried again after an exponential back-off with
// jitter, or after the server's Retry-After when it sends one, at most max_retries times; any
// other status (400, 401, 404, ...) fails at once with the server's error message. A limit on
// requests in flight keeps many callers (one per rollout) from flooding the server.
//
// The API key is read from the environment variable the config names; it is sent in the
// Authorization header and appears in no message, log or file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kbrl/core/error.hpp"
#include "kbrl/core/types.hpp"

namespace kbrl::net {

struct OpenAiClientConfig {
  std::string base_url;     // the API's root, /v1 included: "http://localhost:8000/v1"
  std::string api_key_env;  // the environment variable holding the key; empty: no key is sent
  int max_in_flight = 16;   // requests sent and not yet answered, over all threads
  int max_retries = 4;      // attempts after the first one, for the failures above
  double backoff_initial_s = 0.5;  // the first retry's delay; doubled each time, up to backoff_max_s,
  double backoff_max_s = 30;       // then drawn uniformly from [delay / 2, delay] (jitter)
  double max_retry_after_s = 120;  // a Retry-After longer than this fails the request instead
  double attempt_timeout_s = 600;  // one attempt, connect included (0: no limit)
  double connect_timeout_s = 10;
  std::uint64_t jitter_seed = 0;  // 0: a random seed
};

struct SamplingRequest {
  std::string model;
  std::vector<core::Message> messages;  // chat completions
  std::string prompt;                   // completions (when messages is empty)
  // Completions: the prompt as token ids, sent instead of `prompt` (the API takes either), so the
  // server reads exactly the tokens the caller's own chat template made.
  std::vector<std::int64_t> prompt_tokens;
  int n = 1;
  double temperature = 1.0;
  double top_p = 1.0;
  std::int64_t top_k = 0;  // > 0: sent as top_k (vLLM, SGLang, kbrl-serve; OpenAI has none)
  std::int64_t max_tokens = 1024;
  std::vector<std::string> stop;
  bool logprobs = false;  // each sampled token's log-probability
  // Asks for each sampled token as "token_id:<id>" (vLLM's return_tokens_as_token_ids, which
  // kbrl-serve honours too), read into SampledChoice::token_ids.
  bool tokens_as_ids = false;
  std::optional<std::int64_t> seed;
};

struct SampledChoice {
  std::string text;
  std::string finish_reason;  // "stop", "length", ... as the server says
  // With logprobs, one entry per sampled token (the server's token strings).
  std::vector<std::string> tokens;
  std::vector<double> logprobs;
  // With tokens_as_ids, the sampled token ids (empty when any token string is not "token_id:N").
  std::vector<std::int64_t> token_ids;
};

struct TokenUsage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t total_tokens = 0;
};

struct SamplingResponse {
  std::string id;
  std::string model;
  std::vector<SampledChoice> choices;  // in the server's index order
  TokenUsage usage;
  int attempts = 1;  // how many times the request was sent
};

// Embeddings of several inputs (OpenAiClient::embeddings), in input order.
struct EmbeddingsResponse {
  std::string model;
  std::size_t dimension = 0;    // floats per input (0 when there were no inputs)
  std::vector<float> vectors;   // inputs x dimension, row-major, as the server sent them
  TokenUsage usage;             // summed over the requests (completion_tokens 0)
  int requests = 0;             // POSTs made (one per batch)
  int attempts = 0;             // times they were sent, retries included
};

// A request that failed for good: the HTTP status (0 for a transport failure), the server's error
// type where it gave one, and how many times it was sent.
struct OpenAiError : core::Error {
  OpenAiError(const std::string& what, int http_status, std::string error_type, int attempts_made)
      : core::Error(what), status(http_status), type(std::move(error_type)), attempts(attempts_made) {}
  int status = 0;
  std::string type;
  int attempts = 0;
};

class OpenAiClient {
 public:
  // Throws core::InvalidArgument for a bad base_url or settings, or when api_key_env names an
  // unset or empty variable.
  explicit OpenAiClient(OpenAiClientConfig config);
  ~OpenAiClient();
  OpenAiClient(const OpenAiClient&) = delete;
  OpenAiClient& operator=(const OpenAiClient&) = delete;

  // POST <base>/chat/completions (request.messages) and POST <base>/completions (request.prompt).
  // Blocking and thread-safe; throws OpenAiError.
  SamplingResponse chat(const SamplingRequest& request);
  SamplingResponse complete(const SamplingRequest& request);
  // POST <base>/embeddings {"model", "input": [texts], "encoding_format": "float"}, `batch_size`
  // inputs per request; the batches are sent from up to max_in_flight threads at once and the
  // rows put back in input order. Blocking and thread-safe. Throws OpenAiError for the first batch
  // that fails for good (no batch is sent after it) or an answer that is not one embedding of one
  // size per input, core::InvalidArgument for an empty model or a batch size of 0. No inputs: no
  // request, an empty response.
  EmbeddingsResponse embeddings(const std::string& model, const std::vector<std::string>& inputs,
                                std::size_t batch_size = 64);
  // GET <base>/models: the ids the server serves.
  std::vector<std::string> models();
  // POST <base>/load_lora_adapter {"lora_name", "lora_path"} and <base>/unload_lora_adapter
  // {"lora_name"}: vLLM's runtime LoRA endpoints (VLLM_ALLOW_RUNTIME_LORA_UPDATING), which
  // kbrl-serve serves too. The path is read by the server, so it must see the same file system.
  // Throws OpenAiError (a server without them answers 404).
  void load_lora_adapter(const std::string& name, const std::string& path);
  void unload_lora_adapter(const std::string& name);

  struct Stats {
    std::int64_t requests = 0;  // calls made
    std::int64_t attempts = 0;  // times a request was sent
    std::int64_t retries = 0;   // attempts after a retryable failure
    std::int64_t failed = 0;    // calls that threw
    TokenUsage usage;           // summed over the answered calls
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Seconds a Retry-After header asks for: delta-seconds ("3", "1.5") or an HTTP date
// ("Wed, 21 Oct 2026 07:28:00 GMT", counted from `now`, a Unix time); nullopt when absent or
// unreadable; 0 for a date in the past.
std::optional<double> retry_after_seconds(std::string_view value, double now);

}  // namespace kbrl::net
