// kbrl-serve's routes (docs/services.md, "kbrl-serve"): the OpenAI-compatible API over a
// ServedModel and its Batcher. Requests are read and checked on the io thread (a bad one gets an
// OpenAI-style error object at once); what passes becomes a SamplingJob, and the answer, whole or
// as server-sent events, is written from the sampling thread as the tokens come.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <string>

#include "batcher.hpp"
#include "kbrl/net/http_server.hpp"
#include "served_model.hpp"

namespace kbrl::serve {

struct OpenAiServiceConfig {
  std::string served_model_name;  // the base model's id
  std::string api_key;            // empty: no Authorization check
  std::int64_t max_model_len = 0;  // prompt + completion tokens at most; 0: no limit
  int max_n = 128;                 // n at most
  // A chat request without max_tokens gets what the context leaves, at most this many (the
  // sampler reserves the cache for max_tokens up front).
  std::int64_t default_max_tokens = 4096;
};

class OpenAiService {
 public:
  // `log` gets one line per request and per adapter load or unload.
  OpenAiService(ServedModel& model, Batcher& batcher, OpenAiServiceConfig config,
                std::function<void(const std::string&)> log);
  net::HandlerResult handle(const net::HttpRequest& request);

 private:
  net::HandlerResult models(const net::HttpRequest& r, const std::string& one);
  net::HandlerResult sample(const net::HttpRequest& r, bool chat);
  net::HandlerResult embeddings(const net::HttpRequest& r);
  net::HandlerResult load_adapter(const net::HttpRequest& r);
  net::HandlerResult unload_adapter(const net::HttpRequest& r);
  std::string next_id(const char* prefix);

  ServedModel& model_;
  Batcher& batcher_;
  OpenAiServiceConfig config_;
  std::function<void(const std::string&)> log_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
  std::atomic<std::uint64_t> counter_{0};
  std::int64_t created_;
};

}  // namespace kbrl::serve
