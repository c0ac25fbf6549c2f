#include "kbrl/train/torch/losses.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "kbrl/core/text.hpp"
#include "kbrl/core/error.hpp"

namespace kbrl::train {

using core::cat;

const char* loss_name(LossKind kind) {
  switch (kind) {
    case LossKind::kCrossEntropy: return "cross_entropy";
    case LossKind::kImportanceSampling: return "importance_sampling";
    case LossKind::kPpo: return "ppo";
    case LossKind::kCispo: return "cispo";
  }
  return "?";
}

LossKind loss_kind_from_name(std::string_view name) {
  for (auto k : {LossKind::kCrossEntropy, LossKind::kImportanceSampling, LossKind::kPpo, LossKind::kCispo})
    if (name == loss_name(k)) return k;
  throw core::InvalidArgument(cat("loss: unknown name '", name,
                                  "' (cross_entropy, importance_sampling, ppo, cispo)"));
}

const char* normalization_name(Normalization n) {
  switch (n) {
    case Normalization::kSum: return "sum";
    case Normalization::kTokenMean: return "token_mean";
    case Normalization::kSequenceMean: return "sequence_mean";
    case Normalization::kConstant: return "constant";
  }
  return "?";
}

Normalization normalization_from_name(std::string_view name) {
  for (auto n : {Normalization::kSum, Normalization::kTokenMean, Normalization::kSequenceMean, Normalization::kConstant})
    if (name == normalization_name(n)) return n;
  throw core::InvalidArgument(cat("normalization: unknown name '", name,
                                  "' (sum, token_mean, sequence_mean, constant)"));
}

namespace {

void check_same_shape(const at::Tensor& ref, const at::Tensor& t, const char* field) {
  if (!t.defined()) throw core::InvalidArgument(cat("loss inputs: ", field, " is missing"));
  if (t.sizes() != ref.sizes())
    throw core::InvalidArgument(cat("loss inputs: ", field, " has shape ", core::shape_string(t.sizes()),
                                    ", logprobs ", core::shape_string(ref.sizes())));
}

double item(const at::Tensor& t) { return t.item<double>(); }

}  // namespace

LossOutput compute_loss(LossKind kind, const LossInputs& in, const LossConfig& config, const BatchTotals& totals) {
  if (!in.logprobs.defined() || in.logprobs.dim() != 2)
    throw core::InvalidArgument("loss inputs: logprobs must be [B, T]");
  check_same_shape(in.logprobs, in.weights, "weights");
  const bool rl = kind != LossKind::kCrossEntropy;
  if (rl) {
    check_same_shape(in.logprobs, in.sampler_logprobs, "sampler_logprobs");
    check_same_shape(in.logprobs, in.advantages, "advantages");
    if (!(config.clip_low > 0 && config.clip_low <= 1 && config.clip_high >= 1))
      throw core::InvalidArgument(cat("loss config: need 0 < clip_low <= 1 <= clip_high, got ", config.clip_low,
                                      ", ", config.clip_high));
  }
  if (config.normalization == Normalization::kConstant && !(config.constant > 0))
    throw core::InvalidArgument(cat("loss config: constant must be > 0, got ", config.constant));

  const at::Tensor& logp = in.logprobs;
  const at::Tensor w = in.weights.to(logp.scalar_type());
  at::Tensor per_token;  // the objective's negative per token, before weights
  at::Tensor ratio;
  if (!rl) {
    per_token = -logp;
  } else {
    const at::Tensor q = in.sampler_logprobs.to(logp.scalar_type());
    const at::Tensor a = in.advantages.to(logp.scalar_type());
    ratio = at::exp(logp - q);
    const at::Tensor clipped = at::clamp(ratio, config.clip_low, config.clip_high);
    switch (kind) {
      case LossKind::kImportanceSampling: per_token = -(ratio * a); break;
      case LossKind::kPpo: per_token = -at::minimum(ratio * a, clipped * a); break;
      case LossKind::kCispo: per_token = -(clipped.detach() * logp * a); break;
      case LossKind::kCrossEntropy: break;
    }
  }
  const at::Tensor weighted = per_token * w;

  at::Tensor loss;
  const double weight_sum = totals.weight_sum >= 0 ? totals.weight_sum : item(w.sum());
  switch (config.normalization) {
    case Normalization::kSum: loss = weighted.sum(); break;
    case Normalization::kConstant: loss = weighted.sum() / config.constant; break;
    case Normalization::kTokenMean: loss = weighted.sum() / (weight_sum > 0 ? weight_sum : 1.0); break;
    case Normalization::kSequenceMean: {
      const at::Tensor row_w = w.sum(1);
      const at::Tensor has = row_w > 0;
      const double sequences = totals.sequences >= 0 ? totals.sequences : item(has.sum());
      const at::Tensor per_row = weighted.sum(1) / at::where(has, row_w, at::ones_like(row_w));
      loss = per_row.sum() / (sequences > 0 ? sequences : 1.0);
      break;
    }
  }

  LossOutput out;
  out.loss = loss;
  const c10::NoGradGuard no_grad;
  const double ws = item(w.sum());
  auto wmean = [&](const at::Tensor& t) { return ws > 0 ? item((t.detach() * w).sum()) / ws : 0.0; };
  out.metrics["weight"] = ws;
  out.metrics["loss"] = item(loss.detach());
  out.metrics["entropy_proxy"] = wmean(-logp);
  if (rl) {
    const at::Tensor r = ratio.detach();
    out.metrics["ratio"] = wmean(r);
    out.metrics["clip_fraction"] = wmean(((r < config.clip_low) | (r > config.clip_high)).to(w.scalar_type()));
    out.metrics["kl_sampler"] = wmean(r - 1 - at::log(r));
  }
  return out;
}

}  // namespace kbrl::train
