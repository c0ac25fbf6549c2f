// Rollouts sampled by an OpenAI-compatible inference server (kbrl-serve, or vLLM with runtime
// LoRA loading) instead of the policy in this process (part of kbrl::torch; kbrl-train's
// sampling.backend=openai). The policy still renders the prompts (its chat template, as token
// ids) and decodes the answers; the server gets the prompt's ids and returns the sampled ids
// with their log-probabilities, which the losses use as the sampler's. After each optimizer step
// the trainer saves its LoRA adapters and the server loads them under a new name
// (ServedAdapters), so every batch is sampled from the weights it would be sampled from in the
// process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kbrl/net/openai_client.hpp"
#include "kbrl/train/torch/policy.hpp"

namespace kbrl::train {

// The policy's adapters on a server: publish(v) saves the live adapters (the weights after v
// steps) into <dir>/v<v>, loads them as "<prefix>-v<v>" and unloads (and deletes) the version
// before it. The first call checks what sampling needs: the server answers, loads adapters and
// returns per-token log-probabilities with token ids; otherwise it throws core::Error saying
// which is missing.
class ServedAdapters {
 public:
  ServedAdapters(const Policy& policy, net::OpenAiClient& client, std::filesystem::path dir, std::string prefix);
  // The served name of version v (loaded now if it is not the one loaded).
  std::string publish(std::int64_t version);
  std::int64_t loads() const { return loads_; }

 private:
  void check_server(const std::string& name);
  const Policy& policy_;
  net::OpenAiClient& client_;
  std::filesystem::path dir_;
  std::string prefix_;
  std::int64_t loaded_ = -1;
  std::int64_t loads_ = 0;
};

// The TokenCompleter of sampling.backend=openai: one completions request per conversation (its
// prompt as token ids, n samples, seed mixed from the call's seed and the conversation's key, so
// a conversation's samples do not depend on what shares the call), sent concurrently.
class ServerCompleter : public TokenCompleter {
 public:
  ServerCompleter(const Policy& policy, net::OpenAiClient& client, std::string model, model::SamplingParams params);
  std::vector<core::Transition> complete(const std::vector<std::vector<core::Message>>& conversations,
                                         std::int64_t n, std::uint64_t seed,
                                         const std::vector<std::uint64_t>& prompt_keys) override;

 private:
  const Policy& policy_;
  net::OpenAiClient& client_;
  std::string model_;
  model::SamplingParams params_;
};

// A server's answer as the in-process sampler's Sample: ids and log-probabilities (which must be
// there and agree in length), and how it stopped ("length": max tokens; otherwise a stop token
// when the last id is one of `stop_ids`, else a stop string). Throws core::Error naming what the
// server left out.
model::Sample sample_of_choice(const net::SampledChoice& choice, const std::vector<std::int64_t>& stop_ids);

}  // namespace kbrl::train
