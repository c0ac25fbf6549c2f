// The policy (part of kbrl::torch): a Hugging Face checkpoint's tokenizer, chat renderer and stop
// tokens with its decoder and optional LoRA adapters, everything between a conversation and
// sampled tokens and back to a core::Completion. kbrl-train samples and trains it (its decoder
// is the TrainingClient's model); `kbrl-eval model` samples it. PolicyCompleter is the policy as
// rollouts (train/rollouts.hpp) see it.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/model/torch/decoder.hpp"
#include "kbrl/model/torch/lora.hpp"
#include "kbrl/model/torch/sampler.hpp"
#include "kbrl/prompt/chat_renderer.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"
#include "kbrl/train/rollouts.hpp"

namespace kbrl::train {

struct PolicyOptions {
  std::filesystem::path model;         // Hugging Face checkpoint folder: config.json, *.safetensors, tokenizer.json
  std::string device = "auto";         // auto (cuda:0 when there is a GPU), cpu, cuda, cuda:N
  std::string dtype = "auto";          // auto (bf16 on a GPU, fp32 on the CPU), bf16, fp32
  std::string chat_template = "auto";  // auto (from the tokenizer's special tokens) or a renderer name
  // The decoder's attention (model::LoadOptions::attention): kAuto is fused on CUDA and
  // transformers' eager order on the CPU; kFused takes scaled_dot_product_attention on the CPU
  // too, several times faster for long sequences (supervised training on the CPU uses it).
  model::AttentionKernel attention = model::AttentionKernel::kAuto;
};

// "auto" resolved: cuda:0 when libtorch sees a GPU, else the CPU. Throws core::InvalidArgument
// for a name libtorch does not read as a device.
c10::Device resolve_device(const std::string& name);
// "auto" resolved for `device` ("bf16" on a GPU, "fp32" elsewhere). Throws core::InvalidArgument
// for anything but auto, bf16 and fp32.
std::string resolve_dtype(const std::string& dtype, const c10::Device& device);

class Policy {
 public:
  // Loads tokenizer.json, the chat renderer, the stop tokens (the checkpoint's end-of-sequence
  // tokens, then the renderer's one-token stop sequences) and the weights. Bad checkpoint files
  // throw core::ConfigError naming the file; bad options core::InvalidArgument.
  explicit Policy(PolicyOptions options);
  ~Policy();
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  // Fresh adapters (lora_A drawn from config.seed, lora_B zero), or a PEFT adapter folder's.
  // A policy takes adapters once.
  void attach_lora(const model::LoraConfig& config);
  void load_lora(const std::filesystem::path& adapter_dir);
  bool has_lora() const { return lora_.has_value(); }
  const model::LoraModel& lora() const;
  // The adapters as a PEFT folder, naming the checkpoint as their base model.
  void save_lora(const std::filesystem::path& dir) const;
  // Dropout on the adapters' input (their config's dropout) while training: on around a
  // supervised forward_backward, off (the default) for sampling and evaluation.
  void set_lora_training(bool training);

  const PolicyOptions& options() const { return options_; }
  c10::Device device() const { return decoder_->device(); }
  const std::string& dtype_name() const { return dtype_; }  // "bf16" or "fp32"
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const prompt::ChatRenderer& renderer() const { return *renderer_; }
  const std::vector<std::int64_t>& stop_token_ids() const { return stop_ids_; }
  // Shared with the TrainingClient that trains it: samples follow every optimizer step.
  const std::shared_ptr<model::DecoderModel>& decoder() const { return decoder_; }

  // The conversation as the policy reads it, ready for its answer (generation prompt added).
  std::vector<tokenizer::TokenId> prompt_tokens(const std::vector<core::Message>& conversation) const;
  std::string prompt_text(const std::vector<core::Message>& conversation) const;

  // Samples from the current weights without gradients (model::Sampler semantics); the
  // policy's stop tokens are added to params.stop_token_ids. prompt_keys: Sampler::generate's.
  std::vector<model::Sample> generate(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t n,
                                      model::SamplingParams params,
                                      const std::vector<std::uint64_t>& prompt_keys = {}) const;
  // The same from another decoder of this checkpoint (a sampling snapshot).
  std::vector<model::Sample> generate(const model::DecoderModel& decoder,
                                      const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t n,
                                      model::SamplingParams params, const std::vector<std::uint64_t>& prompt_keys,
                                      const model::SamplerOptions& sampler_options) const;

  // A decoder that shares this policy's base weights but holds its own copy of the LoRA
  // adapters (needs adapters): an asynchronous loop samples from it while the trainer updates
  // the live ones, and copies a finished step's adapters into it between batches.
  std::shared_ptr<model::DecoderModel> adapter_snapshot() const;
  // A sample as a Completion: tokens, num_tokens, truncated (stopped by max_tokens) and the text
  // decoded without its stop token and without special tokens.
  core::Completion completion(const model::Sample& sample) const;

 private:
  PolicyOptions options_;
  std::string dtype_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<prompt::ChatRenderer> renderer_;
  std::vector<std::int64_t> stop_ids_;
  model::TokenBytes token_bytes_;
  std::shared_ptr<model::DecoderModel> decoder_;
  std::optional<model::LoraModel> lora_;
};

// The policy behind rollouts' TokenCompleter: every call samples with `params` (max_tokens,
// temperature, top_p, top_k; the seed is the call's). With `decoder` set it samples from that
// decoder (an adapter_snapshot) with `sampler_options` instead of the policy's own.
class PolicyCompleter : public TokenCompleter {
 public:
  PolicyCompleter(const Policy& policy, model::SamplingParams params,
                  std::shared_ptr<const model::DecoderModel> decoder = nullptr, model::SamplerOptions sampler_options = {});
  std::vector<core::Transition> complete(const std::vector<std::vector<core::Message>>& conversations,
                                         std::int64_t n, std::uint64_t seed,
                                         const std::vector<std::uint64_t>& prompt_keys) override;

 private:
  const Policy& policy_;
  model::SamplingParams params_;
  std::shared_ptr<const model::DecoderModel> decoder_;
  model::SamplerOptions sampler_options_;
};

}  // namespace kbrl::train
