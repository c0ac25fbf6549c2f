// Training losses (part of kbrl::torch): supervised cross-entropy and the policy-gradient
// objectives of RL (importance sampling, PPO, CISPO), as pure functions of per-token tensors.
// docs/training.md: the formulas, the normalization options and where kbrl differs from Tinker.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace kbrl::train {

enum class LossKind { kCrossEntropy, kImportanceSampling, kPpo, kCispo };
// "cross_entropy", "importance_sampling", "ppo", "cispo"; unknown names throw core::InvalidArgument.
const char* loss_name(LossKind kind);
LossKind loss_kind_from_name(std::string_view name);

// How the per-token terms (already multiplied by the weights) become one number.
enum class Normalization {
  kSum,           // sum over tokens (Tinker's convention: the caller normalizes)
  kTokenMean,     // sum / (sum of weights in the whole batch)
  kSequenceMean,  // each sequence: sum / its weight sum; then mean over sequences with weight
  kConstant,      // sum / LossConfig::constant (Dr. GRPO: a fixed token budget)
};
const char* normalization_name(Normalization n);
Normalization normalization_from_name(std::string_view name);

struct LossConfig {
  Normalization normalization = Normalization::kSum;
  double constant = 1.0;  // kConstant's divisor, > 0
  // Bounds on the ratio p/q for ppo and cispo (Tinker's clip_low_threshold / clip_high_threshold).
  double clip_low = 0.8;
  double clip_high = 1.2;
};

// Per-token inputs, all [B, T] float (padding: weight 0). sampler_logprobs and advantages are
// unused by cross_entropy and may be undefined there.
struct LossInputs {
  at::Tensor logprobs;          // log p(target) under the current policy, differentiable
  at::Tensor sampler_logprobs;  // log q(target) under the policy that sampled it
  at::Tensor advantages;
  at::Tensor weights;
};

// Normalizers that span a whole batch when the loss is computed micro-batch by micro-batch:
// the denominators must be the batch's, not the micro-batch's. Negative: take them from the inputs.
struct BatchTotals {
  double weight_sum = -1;    // sum of all weights
  double sequences = -1;     // sequences with a positive weight sum
};

struct LossOutput {
  at::Tensor loss;  // scalar, differentiable
  // Weighted means over this call's tokens: "loss" (the value), "ratio" (p/q), "clip_fraction"
  // (tokens whose ratio lies outside [clip_low, clip_high]), "kl_sampler" (k3 estimate of
  // KL(q || p): r - 1 - log r), "entropy_proxy" (-log p). Cross-entropy: "loss" and
  // "entropy_proxy" only. "weight" is the sum of weights, for combining calls.
  std::map<std::string, double> metrics;
};

LossOutput compute_loss(LossKind kind, const LossInputs& inputs, const LossConfig& config = {},
                        const BatchTotals& totals = {});

}  // namespace kbrl::train
