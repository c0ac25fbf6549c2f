#include "kbrl/train/torch/training_client.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <c10/core/GradMode.h>
#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "kbrl/core/json.hpp"
#include "kbrl/core/text.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/model/torch/torch_tensors.hpp"
#include "kbrl/model/torch/train_forward.hpp"

namespace kbrl::train {

using core::cat;
namespace fs = std::filesystem;

void validate(const Datum& d, LossKind kind, std::int64_t vocab, std::size_t index) {
  const std::size_t n = d.model_input.size();
  auto where = [&](const char* field) { return cat("datum ", index, ": ", field); };
  if (n == 0) throw core::InvalidArgument(where("model_input is empty"));
  if (d.target_tokens.size() != n)
    throw core::InvalidArgument(cat(where("target_tokens"), " has ", d.target_tokens.size(), " tokens, model_input ", n));
  if (!d.weights.empty() && d.weights.size() != n)
    throw core::InvalidArgument(cat(where("weights"), " has ", d.weights.size(), " values, model_input ", n));
  for (const auto* tokens : {&d.model_input, &d.target_tokens})
    for (const auto t : *tokens)
      if (t < 0 || t >= vocab)
        throw core::InvalidArgument(cat(where(tokens == &d.model_input ? "model_input" : "target_tokens"),
                                        " holds token ", t, " outside the vocabulary [0, ", vocab, ")"));
  for (const auto w : d.weights)
    if (!(w >= 0)) throw core::InvalidArgument(cat(where("weights"), " holds ", w, " (must be >= 0)"));
  if (kind != LossKind::kCrossEntropy) {
    if (d.logprobs.size() != n)
      throw core::InvalidArgument(cat(where("logprobs"), " has ", d.logprobs.size(), " values, model_input ", n,
                                      " (", loss_name(kind), " needs the sampler's logprobs)"));
    if (d.advantages.size() != n)
      throw core::InvalidArgument(cat(where("advantages"), " has ", d.advantages.size(), " values, model_input ", n,
                                      " (", loss_name(kind), " needs them)"));
  }
}

namespace {

void add_parameter(NamedParameters& out, std::set<const void*>& seen, std::string name, const at::Tensor& t) {
  if (!t.defined() || !seen.insert(t.unsafeGetTensorImpl()).second) return;
  t.requires_grad_(true);
  out.emplace_back(std::move(name), t);
}

}  // namespace

NamedParameters full_parameters(model::DecoderModel& m) {
  NamedParameters out;
  std::set<const void*> seen;
  auto& w = m.weights();
  add_parameter(out, seen, "model.embed_tokens.weight", w.embed_tokens);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    auto& l = w.layers[i];
    const std::string p = cat("model.layers.", i, ".");
    add_parameter(out, seen, p + "input_layernorm.weight", l.input_norm);
    add_parameter(out, seen, p + "post_attention_layernorm.weight", l.post_attention_norm);
    add_parameter(out, seen, p + "self_attn.q_norm.weight", l.q_norm);
    add_parameter(out, seen, p + "self_attn.k_norm.weight", l.k_norm);
  }
  add_parameter(out, seen, "model.norm.weight", w.norm);
  for (auto& [name, linear] : m.linears()) {
    add_parameter(out, seen, name + ".weight", linear->weight);
    add_parameter(out, seen, name + ".bias", linear->bias);
  }
  return out;
}

NamedParameters lora_parameters(model::DecoderModel& m) {
  NamedParameters out;
  std::set<const void*> seen;
  for (auto& [name, linear] : m.linears()) {
    if (!linear->lora) continue;
    add_parameter(out, seen, name + ".lora_A.weight", linear->lora->a);
    add_parameter(out, seen, name + ".lora_B.weight", linear->lora->b);
  }
  return out;
}

SamplingClient::SamplingClient(std::shared_ptr<const model::DecoderModel> model, model::TokenBytes token_bytes)
    : model_(std::move(model)), token_bytes_(std::move(token_bytes)) {}

std::vector<model::Sample> SamplingClient::generate(const std::vector<std::vector<std::int64_t>>& prompts,
                                                    std::int64_t n, const model::SamplingParams& params) const {
  const c10::NoGradGuard no_grad;
  return model::Sampler(*model_, token_bytes_).generate(prompts, n, params);
}

TrainingClient::TrainingClient(std::shared_ptr<model::DecoderModel> model, NamedParameters parameters,
                               TrainingClientOptions options)
    : model_(std::move(model)), parameters_(std::move(parameters)), options_(std::move(options)) {
  if (!model_) throw core::InvalidArgument("TrainingClient: model is null");
  if (parameters_.empty()) parameters_ = full_parameters(*model_);
  if (parameters_.empty()) throw core::InvalidArgument("TrainingClient: no trainable parameters");
  if (options_.micro_batch_tokens < 1)
    throw core::InvalidArgument(cat("TrainingClient: micro_batch_tokens must be >= 1, got ", options_.micro_batch_tokens));
  std::vector<at::Tensor> tensors;
  for (auto& [name, t] : parameters_) {
    t.requires_grad_(true);
    tensors.push_back(t);
  }
  if (distributed()) {
    // Every rank starts from rank 0's values (LoRA's random A differs per process otherwise).
    const c10::NoGradGuard no_grad;
    options_.process_group->broadcast(tensors, 0);
  }
  optimizer_ = std::make_unique<torch::optim::AdamW>(tensors, torch::optim::AdamWOptions());
}

TrainingClient::~TrainingClient() = default;

std::vector<std::vector<std::size_t>> TrainingClient::micro_batches(const std::vector<Datum>& datums) const {
  // Longest first, then greedy: a batch's padded size is rows * its first (longest) row.
  std::vector<std::size_t> order(datums.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return datums[a].model_input.size() > datums[b].model_input.size();
  });
  std::vector<std::vector<std::size_t>> out;
  std::int64_t longest = 0;
  for (const auto i : order) {
    const auto len = static_cast<std::int64_t>(datums[i].model_input.size());
    if (out.empty() || static_cast<std::int64_t>(out.back().size() + 1) * longest > options_.micro_batch_tokens) {
      out.emplace_back();
      longest = len;
    }
    out.back().push_back(i);
  }
  return out;
}

namespace {

// Right-padded [B, T] tensors of one micro-batch.
struct Batch {
  at::Tensor ids, mask, targets, weights, sampler_logprobs, advantages;
};

Batch make_batch(const std::vector<Datum>& datums, const std::vector<std::size_t>& rows, bool rl, c10::Device device) {
  std::size_t t_max = 0;
  for (const auto i : rows) t_max = std::max(t_max, datums[i].model_input.size());
  const std::size_t cells = rows.size() * t_max;
  std::vector<std::int64_t> ids(cells, 0), mask(cells, 0), targets(cells, 0);
  std::vector<float> weights(cells, 0.0F), sampler(cells, 0.0F), advantages(cells, 0.0F);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Datum& d = datums[rows[r]];
    for (std::size_t t = 0; t < d.model_input.size(); ++t) {
      const std::size_t c = r * t_max + t;
      ids[c] = d.model_input[t];
      mask[c] = 1;
      targets[c] = d.target_tokens[t];
      weights[c] = d.weights.empty() ? 1.0F : d.weights[t];
      if (rl) {
        sampler[c] = d.logprobs[t];
        advantages[c] = d.advantages[t];
      }
    }
  }
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(t_max)};
  auto make = [&](const auto& v, at::ScalarType type) { return at::tensor(v, type).view(shape).to(device); };
  return {make(ids, at::kLong),    make(mask, at::kLong),    make(targets, at::kLong),
          make(weights, at::kFloat), make(sampler, at::kFloat), make(advantages, at::kFloat)};
}

std::vector<float> row_values(const at::Tensor& logprobs, std::int64_t row, std::size_t n) {
  const at::Tensor c = logprobs[row].narrow(0, 0, static_cast<std::int64_t>(n)).to(at::kCPU, at::kFloat).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + n};
}

}  // namespace

ForwardBackwardResult TrainingClient::forward_backward(const std::vector<Datum>& datums, LossKind kind,
                                                       const LossConfig& config) {
  const std::int64_t vocab = model_->config().vocab_size;
  for (std::size_t i = 0; i < datums.size(); ++i) validate(datums[i], kind, vocab, i);
  const bool rl = kind != LossKind::kCrossEntropy;
  BatchTotals totals{0, 0};
  for (const auto& d : datums) {
    double s = d.weights.empty() ? static_cast<double>(d.model_input.size()) : 0.0;
    for (const auto w : d.weights) s += w;
    totals.weight_sum += s;
    totals.sequences += s > 0 ? 1 : 0;
  }
  if (distributed()) {  // the normalizers count the global batch
    const auto global = options_.process_group->sum({{"sequences", totals.sequences}, {"weight_sum", totals.weight_sum}});
    totals.weight_sum = global.at("weight_sum");
    totals.sequences = global.at("sequences");
  }
  ForwardBackwardResult result;
  result.logprobs.resize(datums.size());
  std::map<std::string, double> weighted;  // metric * weight, summed over micro-batches
  double weight = 0;
  double loss_total = 0;
  const c10::AutoGradMode grad(true);
  for (const auto& rows : micro_batches(datums)) {
    const Batch b = make_batch(datums, rows, rl, model_->device());
    const at::Tensor logp = model::token_logprobs(*model_, b.ids, b.mask, b.targets, options_.forward);
    LossInputs in{logp, b.sampler_logprobs, b.advantages, b.weights};
    const LossOutput out = compute_loss(kind, in, config, totals);
    if (out.loss.requires_grad()) out.loss.backward();
    loss_total += out.metrics.at("loss");  // every normalization is a sum of per-micro-batch parts
    const double w = out.metrics.at("weight");
    weight += w;
    for (const auto& [k, v] : out.metrics)
      if (k != "loss" && k != "weight") weighted[k] += v * w;
    const at::Tensor lp = logp.detach();
    for (std::size_t r = 0; r < rows.size(); ++r)
      result.logprobs[rows[r]] = row_values(lp, static_cast<std::int64_t>(r), datums[rows[r]].model_input.size());
  }
  if (distributed()) {
    // A rank without tokens still takes part: its sums are zero but its keys must match.
    weighted.try_emplace("entropy_proxy", 0.0);
    if (rl)
      for (const char* k : {"ratio", "clip_fraction", "kl_sampler"}) weighted.try_emplace(k, 0.0);
    auto all = weighted;
    all["loss"] = loss_total;
    all["weight"] = weight;
    all = options_.process_group->sum(all);
    loss_total = all.at("loss");
    weight = all.at("weight");
    for (auto& [k, v] : weighted) v = all.at(k);
  }
  for (const auto& [k, v] : weighted) result.metrics[k] = weight > 0 ? v / weight : 0.0;
  result.metrics["loss"] = loss_total;
  result.metrics["weight"] = weight;
  return result;
}

std::vector<std::vector<float>> TrainingClient::forward(const std::vector<Datum>& datums) {
  const std::int64_t vocab = model_->config().vocab_size;
  for (std::size_t i = 0; i < datums.size(); ++i) validate(datums[i], LossKind::kCrossEntropy, vocab, i);
  std::vector<std::vector<float>> out(datums.size());
  const c10::NoGradGuard no_grad;
  for (const auto& rows : micro_batches(datums)) {
    const Batch b = make_batch(datums, rows, false, model_->device());
    const at::Tensor lp = model::token_logprobs(*model_, b.ids, b.mask, b.targets, options_.forward);
    for (std::size_t r = 0; r < rows.size(); ++r)
      out[rows[r]] = row_values(lp, static_cast<std::int64_t>(r), datums[rows[r]].model_input.size());
  }
  return out;
}

std::map<std::string, double> TrainingClient::optim_step(const AdamParams& p) {
  if (!(p.lr >= 0) || !(p.eps > 0) || !(p.beta1 >= 0 && p.beta1 < 1) || !(p.beta2 >= 0 && p.beta2 < 1) ||
      !(p.weight_decay >= 0) || !(p.grad_clip_norm >= 0))
    throw core::InvalidArgument(cat("optim_step: bad AdamParams (lr ", p.lr, ", beta1 ", p.beta1, ", beta2 ", p.beta2,
                                    ", eps ", p.eps, ", weight_decay ", p.weight_decay, ", grad_clip_norm ",
                                    p.grad_clip_norm, ")"));
  for (auto& group : optimizer_->param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    o.lr(p.lr).betas({p.beta1, p.beta2}).eps(p.eps).weight_decay(p.weight_decay);
  }
  std::vector<at::Tensor> tensors;
  for (auto& [name, t] : parameters_) {
    if (!t.grad().defined()) t.mutable_grad() = at::zeros_like(t);
    tensors.push_back(t);
  }
  double norm = 0;
  {
    const c10::NoGradGuard no_grad;
    if (distributed()) {
      std::vector<at::Tensor> grads;
      for (auto& t : tensors) grads.push_back(t.mutable_grad());
      options_.process_group->all_reduce_sum(grads);
    }
    at::Tensor sq = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(model_->device()));
    for (const auto& t : tensors) sq = sq + t.grad().to(at::kDouble).pow(2).sum();
    norm = std::sqrt(sq.item<double>());
    if (p.grad_clip_norm > 0 && norm > p.grad_clip_norm) {
      const double scale = p.grad_clip_norm / (norm + 1e-6);
      for (auto& t : tensors) t.mutable_grad().mul_(scale);
    }
  }
  optimizer_->step();
  optimizer_->zero_grad(true);
  ++step_;
  return {{"grad_norm", norm}, {"lr", p.lr}, {"step", static_cast<double>(step_)}};
}

namespace {

// The generator of the model's GPU: "rng.cuda" for cuda:0 and an unindexed device, else "rng.cuda.<i>".
std::string cuda_rng_key(const c10::Device& d) {
  return d.has_index() && d.index() > 0 ? cat("rng.cuda.", static_cast<int>(d.index())) : std::string("rng.cuda");
}

// state.json's step, with its format checked.
std::int64_t state_step(const std::string& text, const fs::path& file) {
  boost::system::error_code ec;
  const boost::json::value v = core::parse_json(text, ec);
  if (ec || !v.is_object()) throw core::ConfigError(file.string(), "", "not a JSON object");
  const auto& o = v.as_object();
  const auto* format = o.if_contains("format");
  if (format == nullptr || !format->is_string() || format->as_string() != "kbrl.train_state.v1")
    throw core::ConfigError(file.string(), "format", "expected \"kbrl.train_state.v1\"");
  const auto* step = o.if_contains("step");
  if (step == nullptr || !step->is_int64() || step->as_int64() < 0)
    throw core::ConfigError(file.string(), "step", "missing or not a non-negative integer");
  return step->as_int64();
}

}  // namespace

void TrainingClient::save_state(const fs::path& dir) const {
  std::map<std::string, at::Tensor> params, optim;
  std::ostringstream names;
  bool first = true;
  for (const auto& [name, t] : parameters_) {
    params[name] = t.detach();
    names << (first ? "" : ", ") << '"' << name << '"';
    first = false;
    auto it = optimizer_->state().find(t.unsafeGetTensorImpl());
    if (it == optimizer_->state().end()) continue;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    optim[name + ".exp_avg"] = s.exp_avg();
    optim[name + ".exp_avg_sq"] = s.exp_avg_sq();
    optim[name + ".step"] = at::tensor(std::vector<std::int64_t>{s.step()}, at::kLong);
  }
  optim["rng.cpu"] = at::detail::getDefaultCPUGenerator().get_state();
  if (model_->device().is_cuda())
    optim[cuda_rng_key(model_->device())] = at::globalContext().defaultGenerator(model_->device()).get_state();
  if (distributed() && options_.process_group->rank() != 0) {
    options_.process_group->barrier();  // rank 0 writes; the others return once it is in place
    return;
  }

  fs::path target = dir;
  if (target.filename().empty()) target = target.parent_path();
  const fs::path tmp = target.parent_path() / (target.filename().string() + ".tmp");
  const fs::path old = target.parent_path() / (target.filename().string() + ".old");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  model::save_tensors(tmp / "parameters.safetensors", params);
  model::save_tensors(tmp / "optimizer.safetensors", optim);
  {
    std::ofstream out(tmp / "state.json", std::ios::binary | std::ios::trunc);
    out << "{\n  \"format\": \"kbrl.train_state.v1\",\n  \"step\": " << step_ << ",\n  \"parameters\": [" << names.str()
        << "]\n}\n";
    if (!out) throw core::ConfigError((tmp / "state.json").string(), "", "cannot write");
  }
  fs::remove_all(old);
  if (fs::exists(target)) fs::rename(target, old);
  fs::rename(tmp, target);
  fs::remove_all(old);
  if (distributed()) options_.process_group->barrier();
}

void TrainingClient::load_state(const fs::path& dir) {
  const fs::path json = dir / "state.json";
  const std::string text = core::read_file(json);
  const std::int64_t step = state_step(text, json);
  const auto params = model::load_tensors(dir / "parameters.safetensors");
  const auto optim = model::load_tensors(dir / "optimizer.safetensors");
  const fs::path pfile = dir / "parameters.safetensors";
  if (params.size() != parameters_.size())
    throw core::ConfigError(pfile.string(), "", cat("holds ", params.size(), " tensors, the client trains ", parameters_.size()));
  for (const auto& [name, t] : parameters_) {
    const auto it = params.find(name);
    if (it == params.end()) throw core::ConfigError(pfile.string(), name, "missing");
    if (it->second.sizes() != t.sizes())
      throw core::ConfigError(pfile.string(), name, cat("shape ", core::shape_string(it->second.sizes()),
                                                        ", expected ", core::shape_string(t.sizes())));
  }
  const c10::NoGradGuard no_grad;
  auto& state = optimizer_->state();
  state.clear();
  for (auto& [name, t] : parameters_) {
    t.copy_(params.at(name));
    const auto avg = optim.find(name + ".exp_avg");
    if (avg == optim.end()) continue;
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(optim.at(name + ".step").item<std::int64_t>());
    s->exp_avg(avg->second.to(t.options()).clone());
    s->exp_avg_sq(optim.at(name + ".exp_avg_sq").to(t.options()).clone());
    state[t.unsafeGetTensorImpl()] = std::move(s);
  }
  if (const auto rng = optim.find("rng.cpu"); rng != optim.end()) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng->second);
  }
  if (model_->device().is_cuda())
    if (const auto rng = optim.find(cuda_rng_key(model_->device())); rng != optim.end()) {
      at::Generator gen = at::globalContext().defaultGenerator(model_->device());
      gen.set_state(rng->second);
    }
  for (auto& [name, t] : parameters_) t.mutable_grad() = at::Tensor();
  step_ = step;
}

SamplingClient TrainingClient::sampling_client(model::TokenBytes token_bytes) const {
  return SamplingClient(model_, std::move(token_bytes));
}

}  // namespace kbrl::train
