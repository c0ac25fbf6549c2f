#include "kbrl/train/torch/server_sampling.hpp"

#include <algorithm>
#include <cmath>
#include <future>
#include <system_error>
#include <utility>

#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"

namespace kbrl::train {
namespace fs = std::filesystem;
using core::cat;

namespace {

// splitmix64's finalizer over (seed, key): the request seed of one conversation.
std::int64_t request_seed(std::uint64_t seed, std::uint64_t key) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (key + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<std::int64_t>(z >> 1);  // JSON readers take it as a non-negative integer
}

net::SamplingRequest request_for(const std::string& model, const model::SamplingParams& params) {
  net::SamplingRequest r;
  r.model = model;
  r.temperature = params.temperature;
  r.top_p = params.top_p;
  r.top_k = params.top_k;
  r.max_tokens = params.max_tokens;
  r.logprobs = true;
  r.tokens_as_ids = true;
  return r;
}

}  // namespace

model::Sample sample_of_choice(const net::SampledChoice& choice, const std::vector<std::int64_t>& stop_ids) {
  if (choice.logprobs.empty() && !choice.text.empty())
    throw core::Error("the server returned no log-probabilities (the losses need the sampler's); sampling.backend=openai "
                      "needs a server that honours logprobs on /v1/completions");
  if (choice.token_ids.size() != choice.logprobs.size())
    throw core::Error("the server returned no token ids with its log-probabilities; sampling.backend=openai needs "
                      "return_tokens_as_token_ids (vLLM, kbrl-serve)");
  model::Sample s;
  s.tokens = choice.token_ids;
  for (const double lp : choice.logprobs) {
    if (!std::isfinite(lp)) throw core::Error("the server returned a log-probability that is not a finite number");
    s.logprobs.push_back(static_cast<float>(lp));
  }
  if (choice.finish_reason == "length") {
    s.stop_reason = model::StopReason::kMaxTokens;
  } else if (!s.tokens.empty() && std::find(stop_ids.begin(), stop_ids.end(), s.tokens.back()) != stop_ids.end()) {
    s.stop_reason = model::StopReason::kStopToken;
  } else {
    s.stop_reason = model::StopReason::kStopString;
  }
  return s;
}

ServedAdapters::ServedAdapters(const Policy& policy, net::OpenAiClient& client, fs::path dir, std::string prefix)
    : policy_(policy), client_(client), dir_(fs::absolute(std::move(dir))), prefix_(std::move(prefix)) {
  if (!policy_.has_lora())
    throw core::InvalidArgument("sampling.backend=openai serves the policy's LoRA adapters: set lora.rank above 0");
}

void ServedAdapters::check_server(const std::string& name) {
  // One token of the adapter just loaded: the answer must carry an id and a log-probability.
  auto r = request_for(name, {});
  r.prompt_tokens = {policy_.prompt_tokens(std::vector<core::Message>{core::Message{"user", "Hello"}}).front()};
  r.max_tokens = 1;
  r.temperature = 1.0;
  const auto answer = client_.complete(r);
  if (answer.choices.empty()) throw core::Error(cat("the server at ", name, " answered a completion with no choices"));
  const auto& c = answer.choices.front();
  if (c.logprobs.empty())
    throw core::Error("the server returns no log-probabilities on /v1/completions (the losses need the sampler's): "
                      "sampling.backend=openai cannot train with it");
  if (c.token_ids.empty())
    throw core::Error("the server does not return token ids (return_tokens_as_token_ids): sampling.backend=openai "
                      "cannot match its tokens to the policy's");
}

std::string ServedAdapters::publish(std::int64_t version) {
  const std::string name = cat(prefix_, "-v", version);
  if (version == loaded_) return name;
  const fs::path where = dir_ / cat("v", version);
  policy_.save_lora(where);
  if (loaded_ < 0) {
    // A run resumed against the server its first launch used finds its last name still loaded
    // there, with the adapters of a step now redone: that one goes first (absent is fine).
    try {
      client_.unload_lora_adapter(name);
    } catch (const net::OpenAiError&) {
    }
  }
  try {
    client_.load_lora_adapter(name, where.string());
  } catch (const net::OpenAiError& e) {
    throw core::Error(cat("the server could not load the policy's adapter ", name, " from ", where.string(), ": ",
                          e.what(),
                          e.status == 404 ? " (it has no /v1/load_lora_adapter: kbrl-serve has one; vLLM needs "
                                            "--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
                                          : ""));
  }
  ++loads_;
  if (loaded_ < 0) check_server(name);
  if (loaded_ >= 0) {
    const std::string old = cat(prefix_, "-v", loaded_);
    client_.unload_lora_adapter(old);
    std::error_code ec;
    fs::remove_all(dir_ / cat("v", loaded_), ec);
  }
  loaded_ = version;
  return name;
}

ServerCompleter::ServerCompleter(const Policy& policy, net::OpenAiClient& client, std::string model,
                                 model::SamplingParams params)
    : policy_(policy), client_(client), model_(std::move(model)), params_(std::move(params)) {}

std::vector<core::Transition> ServerCompleter::complete(const std::vector<std::vector<core::Message>>& conversations,
                                                        std::int64_t n, std::uint64_t seed,
                                                        const std::vector<std::uint64_t>& prompt_keys) {
  std::vector<std::vector<tokenizer::TokenId>> ids;
  std::vector<std::future<net::SamplingResponse>> answers;
  for (std::size_t p = 0; p < conversations.size(); ++p) {
    ids.push_back(policy_.prompt_tokens(conversations[p]));
    auto r = request_for(model_, params_);
    r.prompt_tokens.assign(ids.back().begin(), ids.back().end());
    r.n = static_cast<int>(n);
    r.seed = request_seed(seed, prompt_keys.empty() ? p : prompt_keys[p]);
    // The client bounds what is on the wire (sampling.max_in_flight); the rest wait their turn.
    answers.push_back(std::async(std::launch::async, [this, r = std::move(r)] { return client_.complete(r); }));
  }
  std::vector<core::Transition> out(conversations.size() * static_cast<std::size_t>(n));
  std::exception_ptr failure;
  for (std::size_t p = 0; p < answers.size(); ++p) {
    try {
      const auto answer = answers[p].get();
      if (answer.choices.size() != static_cast<std::size_t>(n))
        throw core::Error(cat("the server answered ", answer.choices.size(), " choices where ", n, " were asked for"));
      const std::string text = policy_.prompt_text(conversations[p]);
      for (std::size_t s = 0; s < answer.choices.size(); ++s) {
        auto sample = sample_of_choice(answer.choices[s], policy_.stop_token_ids());
        sample.prompt_index = p;
        sample.sample_index = s;
        auto& t = out[p * static_cast<std::size_t>(n) + s];
        t.observation = conversations[p];
        t.prompt_tokens = ids[p];
        t.prompt_text = text;
        t.completion = policy_.completion(sample);
        t.logprobs = std::move(sample.logprobs);
      }
    } catch (...) {
      if (!failure) failure = std::current_exception();  // the other requests are still waited for
    }
  }
  if (failure) std::rethrow_exception(failure);
  return out;
}

}  // namespace kbrl::train
