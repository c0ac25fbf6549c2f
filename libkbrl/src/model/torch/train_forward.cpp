// Checkpointing is a custom autograd function: its forward runs under no-grad (autograd
// functions always do) and keeps the input, the closure and the generator state; its backward
// replays the closure and differentiates the replay. The generator state makes dropout draw the
// same masks both times, as torch.utils.checkpoint's preserve_rng_state does.
#include "kbrl/model/torch/train_forward.hpp"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"

namespace kbrl::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Replay : torch::CustomClassHolder {
  std::function<at::Tensor(const at::Tensor&)> fn;
  at::Tensor rng_state;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
};

at::Generator default_generator(c10::Device device) { return at::globalContext().defaultGenerator(device); }

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, at::TensorList params,
                            c10::intrusive_ptr<Replay> replay) {
    {
      at::Generator gen = default_generator(replay->device);
      const std::lock_guard<std::mutex> lock(gen.mutex());
      replay->rng_state = gen.get_state();
    }
    ctx->save_for_backward({input});
    ctx->saved_data["replay"] = c10::IValue::make_capsule(replay);
    ctx->saved_data["params"] = static_cast<std::int64_t>(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) ctx->saved_data[core::cat("p", i)] = params[i];
    return replay->fn(input);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    const at::Tensor saved = ctx->get_saved_variables()[0];
    const auto n = static_cast<std::size_t>(ctx->saved_data["params"].toInt());
    std::vector<at::Tensor> params;
    for (std::size_t i = 0; i < n; ++i) params.push_back(ctx->saved_data[core::cat("p", i)].toTensor());

    const at::Tensor input = saved.detach().requires_grad_(saved.requires_grad());
    at::Tensor output;
    {
      at::Generator gen = default_generator(replay->device);
      at::Tensor current;
      {
        const std::lock_guard<std::mutex> lock(gen.mutex());
        current = gen.get_state();
        gen.set_state(replay->rng_state);
      }
      try {
        const c10::AutoGradMode grad(true);
        output = replay->fn(input);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(current);
        throw;
      }
      const std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(current);
    }
    // Differentiate with respect to what requires grad; the rest gets an undefined gradient.
    std::vector<at::Tensor> wrt;
    if (input.requires_grad()) wrt.push_back(input);
    for (const auto& p : params)
      if (p.requires_grad()) wrt.push_back(p);
    variable_list grads(2 + n);  // input, params, the replay (not a tensor)
    if (wrt.empty() || !output.requires_grad()) return grads;
    const variable_list got = torch::autograd::grad({output}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                                    /*create_graph=*/false, /*allow_unused=*/true);
    std::size_t k = 0;
    if (input.requires_grad()) grads[0] = got[k++];
    for (std::size_t i = 0; i < n; ++i)
      if (params[i].requires_grad()) grads[1 + i] = got[k++];
    return grads;
  }
};

// log p(target) of a chunk of tokens through a frozen lm_head, with d/dx computed in the same
// pass: d log p(t) / dx = (onehot(t) - softmax(logits)) W. Keeping that [n, hidden] product
// instead of the logits (or recomputing them in backward) costs one [n, vocab] buffer for the
// duration of the forward and no second pass over the head in backward.
struct HeadLogprobFunction : torch::autograd::Function<HeadLogprobFunction> {
  // head: the weight, and the bias where there is one.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList head, const at::Tensor& targets,
                            std::int64_t acc, double temperature) {
    const auto acc_type = static_cast<at::ScalarType>(acc);
    const at::Tensor& weight = head[0];
    ctx->saved_data["head"] = static_cast<std::int64_t>(head.size());
    at::Tensor logits = at::linear(x, weight, head.size() > 1 ? head[1] : at::Tensor()).to(acc_type);  // [n, V]
    if (temperature != 1.0) logits.div_(temperature);
    const at::Tensor lse = at::logsumexp(logits, {1}, /*keepdim=*/true);
    const at::Tensor t = targets.unsqueeze(1);
    const at::Tensor lp = (logits.gather(1, t) - lse).squeeze(1);
    if (x.requires_grad()) {
      at::Tensor& g = logits.sub_(lse).exp_().neg_();  // -softmax, in place
      g.scatter_add_(1, t, at::ones_like(t, g.options()));
      if (temperature != 1.0) g.div_(temperature);  // d(z / T) / dz
      ctx->save_for_backward({at::matmul(g.to(weight.scalar_type()), weight)});  // [n, hidden]
    }
    return lp;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    variable_list grads(4 + static_cast<std::size_t>(ctx->saved_data["head"].toInt()));  // x, head, targets, acc, T
    if (!saved.empty() && saved[0].defined())
      grads[0] = (saved[0].to(grad_outputs[0].scalar_type()) * grad_outputs[0].unsqueeze(1)).to(saved[0].scalar_type());
    return grads;
  }
};

}  // namespace

at::Tensor checkpoint(std::function<at::Tensor(const at::Tensor&)> fn, const at::Tensor& input,
                      const std::vector<at::Tensor>& params) {
  const bool needs_grad = at::GradMode::is_enabled() &&
                          (input.requires_grad() ||
                           std::any_of(params.begin(), params.end(), [](const at::Tensor& p) { return p.requires_grad(); }));
  if (!needs_grad) return fn(input);
  auto replay = c10::make_intrusive<Replay>();
  replay->fn = std::move(fn);
  replay->device = input.device();
  return CheckpointFunction::apply(input, at::TensorList(params), replay);
}

at::Tensor token_logprobs(const DecoderModel& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                          const at::Tensor& targets, const TrainForwardOptions& options) {
  if (targets.sizes() != input_ids.sizes())
    throw core::InvalidArgument(core::cat("token_logprobs: targets ", core::shape_string(targets.sizes()),
                                            " do not match input_ids ", core::shape_string(input_ids.sizes())));
  if (options.logprob_chunk_tokens <= 0)
    throw core::InvalidArgument("token_logprobs: TrainForwardOptions.logprob_chunk_tokens must be positive");
  if (!(options.temperature > 0) || !std::isfinite(options.temperature))
    throw core::InvalidArgument(core::cat("token_logprobs: TrainForwardOptions.temperature ", options.temperature,
                                          " must be finite and > 0"));
  const at::Tensor h = model.hidden_states(input_ids, attention_mask, options);  // [B, T, hidden]
  const auto B = h.size(0), T = h.size(1), H = h.size(2);
  const auto dev = h.device();
  const at::Tensor real = attention_mask.defined() ? attention_mask.to(dev).to(at::kBool).reshape({B * T})
                                                   : at::ones({B * T}, h.options().dtype(at::kBool));
  at::Tensor tgt = targets.to(dev, at::kLong).reshape({B * T});
  const auto V = model.config().vocab_size;
  const at::Tensor bad = real & ((tgt < 0) | (tgt >= V));
  if (bad.any().item<bool>())
    throw core::InvalidArgument(core::cat("token_logprobs: targets at real positions must lie in [0, ", V, ")"));
  tgt = tgt.masked_fill(real.logical_not(), 0);

  const Linear& head = model.weights().lm_head;
  std::vector<at::Tensor> head_params;
  for (const at::Tensor& t : {head.weight, head.bias})
    if (t.defined() && t.requires_grad()) head_params.push_back(t);
  if (head.lora) {
    if (head.lora->a.requires_grad()) head_params.push_back(head.lora->a);
    if (head.lora->b.requires_grad()) head_params.push_back(head.lora->b);
  }
  const at::ScalarType acc = model.dtype() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor flat = h.reshape({B * T, H});
  std::vector<at::Tensor> pieces;
  for (std::int64_t start = 0; start < B * T; start += options.logprob_chunk_tokens) {
    const auto n = std::min(options.logprob_chunk_tokens, B * T - start);
    if (head_params.empty() && !head.lora) {  // a frozen head: its gradient computed in the forward
      std::vector<at::Tensor> weights = {head.weight};
      if (head.bias.defined()) weights.push_back(head.bias);
      pieces.push_back(HeadLogprobFunction::apply(flat.narrow(0, start, n), at::TensorList(weights),
                                                  tgt.narrow(0, start, n), static_cast<std::int64_t>(acc),
                                                  options.temperature));
      continue;
    }
    const at::Tensor t = tgt.narrow(0, start, n).unsqueeze(1);  // [n, 1]
    pieces.push_back(checkpoint(
        [&head, t, acc, temperature = options.temperature](const at::Tensor& x) {
          at::Tensor logits = head.forward(x).to(acc);  // [n, V]
          if (temperature != 1.0) logits = logits / temperature;
          return logits.gather(1, t).squeeze(1) - at::logsumexp(logits, {1});
        },
        flat.narrow(0, start, n), head_params));
  }
  const at::Tensor out = at::cat(pieces).masked_fill(real.logical_not(), 0.0);
  return out.view({B, T});
}

}  // namespace kbrl::model
