// The in-process training client (part of kbrl::torch), shaped like Tinker's: forward_backward
// accumulates gradients of a loss over datums, optim_step applies AdamW, save_state/load_state
// checkpoint the trainable parameters with the optimizer, and a SamplingClient samples from the
// live weights. docs/training.md: the API, the losses and the state layout.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kbrl/model/torch/decoder.hpp"
#include "kbrl/model/torch/sampler.hpp"
#include "kbrl/train/data_processing.hpp"  // Datum, completion_datum
#include "kbrl/train/torch/distributed.hpp"
#include "kbrl/train/torch/losses.hpp"

namespace torch::optim {
class AdamW;
}

namespace kbrl::train {

// Throws core::InvalidArgument naming datum `index` and the field: empty input, lengths that
// differ, token ids outside [0, vocab), negative weights, or RL fields missing for an RL loss.
void validate(const Datum& datum, LossKind kind, std::int64_t vocab, std::size_t index);

struct ForwardBackwardResult {
  std::vector<std::vector<float>> logprobs;  // per datum, per token: log p(target) before the update
  std::map<std::string, double> metrics;     // compute_loss's, combined over micro-batches
};

struct AdamParams {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double grad_clip_norm = 0.0;  // > 0: clip the global L2 norm of the gradients to this
};

struct TrainingClientOptions {
  // Datums are packed into micro-batches whose padded size (rows * longest row) stays within
  // this many tokens (a longer datum goes alone); gradients accumulate, so the result equals
  // one batch up to floating-point rounding.
  std::int64_t micro_batch_tokens = 8192;
  model::TrainForwardOptions forward;
  // Data parallel (distributed.hpp): each rank passes its own slice of the batch to
  // forward_backward; normalizers, metrics and gradients are summed over ranks, so every rank
  // takes the step one process with the whole batch would. Rank 0's initial parameters are
  // broadcast, and only rank 0 writes save_state. Null or a world of one: a single process.
  std::shared_ptr<ProcessGroup> process_group;
};

// Named trainable tensors. full_parameters: every weight of the model (full fine-tuning; a
// tied head appears once), with requires_grad set. lora_parameters: every adapter's A and B.
using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;
NamedParameters full_parameters(model::DecoderModel& model);
NamedParameters lora_parameters(model::DecoderModel& model);

// Samples from the model the TrainingClient trains, without copying its weights: what it
// returns reflects every optim_step so far.
class SamplingClient {
 public:
  explicit SamplingClient(std::shared_ptr<const model::DecoderModel> model, model::TokenBytes token_bytes = {});
  std::vector<model::Sample> generate(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t n,
                                      const model::SamplingParams& params) const;

 private:
  std::shared_ptr<const model::DecoderModel> model_;
  model::TokenBytes token_bytes_;
};

class TrainingClient {
 public:
  // parameters: the tensors to train (requires_grad is set on them); empty: full_parameters.
  explicit TrainingClient(std::shared_ptr<model::DecoderModel> model, NamedParameters parameters = {},
                          TrainingClientOptions options = {});
  ~TrainingClient();
  TrainingClient(const TrainingClient&) = delete;
  TrainingClient& operator=(const TrainingClient&) = delete;

  // Adds the gradient of the loss over `datums` to the parameters' gradients (they accumulate
  // until optim_step), and returns the current logprobs and the loss metrics. The normalizers
  // (token_mean, sequence_mean) count the whole `datums`, whatever the micro-batching.
  ForwardBackwardResult forward_backward(const std::vector<Datum>& datums, LossKind kind,
                                         const LossConfig& config = {});
  // Current logprobs only, no gradient.
  std::vector<std::vector<float>> forward(const std::vector<Datum>& datums);

  // Clips, applies one AdamW step and clears the gradients. Metrics: "grad_norm" (before
  // clipping), "lr", "step" (the count after this step).
  std::map<std::string, double> optim_step(const AdamParams& params);

  // <dir>/parameters.safetensors, <dir>/optimizer.safetensors (with the CPU generator's state and
  // the model device's CUDA generator's), <dir>/state.json, written to a temporary sibling and
  // renamed into place; under data parallelism rank 0 writes and every rank waits for it.
  // load_state needs the same parameter names and shapes.
  void save_state(const std::filesystem::path& dir) const;
  void load_state(const std::filesystem::path& dir);

  SamplingClient sampling_client(model::TokenBytes token_bytes = {}) const;

  std::int64_t step() const { return step_; }
  const NamedParameters& parameters() const { return parameters_; }
  const model::DecoderModel& model() const { return *model_; }

 private:
  std::vector<std::vector<std::size_t>> micro_batches(const std::vector<Datum>& datums) const;
  bool distributed() const { return options_.process_group && options_.process_group->world_size() > 1; }

  std::shared_ptr<model::DecoderModel> model_;
  NamedParameters parameters_;
  TrainingClientOptions options_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::int64_t step_ = 0;
};

}  // namespace kbrl::train
