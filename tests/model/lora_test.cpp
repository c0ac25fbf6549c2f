#include "kbrl/model/torch/lora.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/model/torch/torch_tensors.hpp"
#include "kbrl/model/torch/train_forward.hpp"
#include "parity.hpp"
#include "test_files.hpp"

using namespace kbrl::model;
using kbrl::test::config_error_of;
using kbrl::test::contains;
namespace fs = std::filesystem;

namespace {

fs::path fixture(const std::string& name) { return kbrl::test::model_fixtures() / name; }

DecoderModel load_model(const std::string& name, c10::ScalarType dtype = at::kFloat) {
  LoadOptions o;
  o.dtype = dtype;
  return DecoderModel::load(fixture(name), o);
}

// Two rows of 7 tokens; the second left-padded by 2 (the first right-padded by 1 when asked).
std::pair<at::Tensor, at::Tensor> batch(bool right_pad_too) {
  const at::Tensor ids = at::tensor({5, 17, 42, 8, 91, 3, 60, 0, 0, 11, 29, 77, 4, 50}, at::kLong).view({2, 7});
  at::Tensor mask = at::ones({2, 7}, at::kLong);
  mask[1][0] = 0;
  mask[1][1] = 0;
  if (right_pad_too) mask[0][6] = 0;
  return {ids, mask};
}

// Random non-zero lora_B (and lora_A redrawn), so the adapter changes the logits.
void randomise(const LoraModel& lora, std::uint64_t seed, double scale = 0.1) {
  const c10::NoGradGuard no_grad;
  at::manual_seed(seed);
  for (const auto& [name, t] : lora.trainable_parameters()) t.copy_(at::randn(t.sizes(), t.options()) * scale);
}

std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kbrl::core::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("lora config validation names the field") {
  LoraConfig c;
  c.rank = 0;
  CHECK(contains(invalid_argument_of([&] { c.validate(); }), "rank"));
  c = {};
  c.dropout = 1.0;
  CHECK(contains(invalid_argument_of([&] { c.validate(); }), "dropout"));
  c = {};
  c.alpha = std::nan("");
  CHECK(contains(invalid_argument_of([&] { c.validate(); }), "alpha"));
  c = {};
  c.target_modules.clear();
  CHECK(contains(invalid_argument_of([&] { c.validate(); }), "target_modules"));
  c = {};
  c.target_modules = {"nothing_like_this"};
  auto m = load_model("llama3_gqa");
  CHECK(contains(invalid_argument_of([&] { LoraModel::attach(m, c); }), "no module"));
  // PEFT's matching: equal, or a suffix after a dot.
  c = {};
  CHECK(c.targets("model.layers.0.self_attn.q_proj"));
  CHECK_FALSE(c.targets("model.layers.0.self_attn.xq_proj"));
  CHECK_FALSE(c.targets("lm_head"));
  c.target_regex = R"(model\.layers\.1\..*_proj)";
  CHECK(c.targets("model.layers.1.mlp.up_proj"));
  CHECK_FALSE(c.targets("model.layers.0.mlp.up_proj"));
}

TEST_CASE("lora attach freezes the base and adapts the targeted projections") {
  auto m = load_model("qwen3_gqa");
  LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  const LoraModel lora = LoraModel::attach(m, c);
  const auto params = lora.trainable_parameters();
  CHECK(params.size() == 2 * 7 * static_cast<std::size_t>(m.config().num_hidden_layers));
  CHECK(params[0].first == "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  CHECK(params[1].first == "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
  for (const auto& [name, t] : params) {
    CHECK(t.requires_grad());
    CHECK(t.scalar_type() == at::kFloat);
  }
  for (const auto& [name, t] : named_tensors(m)) CHECK_FALSE(t.requires_grad());
  // lora_A is PEFT's kaiming-uniform: inside +-1/sqrt(in) and spread over it.
  const at::Tensor a = params[0].second;
  const double bound = 1.0 / std::sqrt(static_cast<double>(a.size(1)));
  CHECK(a.abs().max().item<double>() <= bound);
  CHECK(a.abs().max().item<double>() > 0.8 * bound);
  CHECK(at::equal(params[1].second, at::zeros_like(params[1].second)));
  CHECK(m.weights().layers[0].q_proj.lora->scale == 2.0);
  // Same seed, same A; rsLoRA scales by alpha / sqrt(r).
  auto m2 = load_model("qwen3_gqa");
  c.use_rslora = true;
  const LoraModel lora2 = LoraModel::attach(m2, c);
  CHECK(at::equal(lora2.trainable_parameters()[0].second, a));
  CHECK(m2.weights().layers[0].q_proj.lora->scale == 4.0);
  CHECK(contains(invalid_argument_of([&] { LoraModel::attach(m2, c); }), "already has an adapter"));
  // lm_head can be adapted unless it is the embedding.
  c.target_modules = {"lm_head"};
  auto untied = load_model("llama3_gqa");
  CHECK(LoraModel::attach(untied, c).modules() == std::vector<std::string>{"lm_head"});
  auto tied = load_model("qwen2_tied");
  CHECK(contains(invalid_argument_of([&] { LoraModel::attach(tied, c); }), "tied"));
}

TEST_CASE("lora with zero B leaves logits bit identical and merge matches the adapter") {
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    for (const std::string name : {"llama3_gqa", "qwen2_tied", "qwen3_gqa"}) {
      INFO(name << " " << c10::toString(dtype));
      auto m = load_model(name, dtype);
      const auto [ids, mask] = batch(false);
      const at::Tensor before = m.forward(ids, mask);
      LoraModel lora = LoraModel::attach(m, LoraConfig{});
      const c10::NoGradGuard no_grad;
      const at::Tensor zero_b = m.forward(ids, mask);
      CHECK(at::equal(before, zero_b));

      randomise(lora, 3);
      const at::Tensor adapted = m.forward(ids, mask);
      const double changed = kbrl::test::max_abs_diff(adapted, before);
      CHECK(changed > 1e-2);
      const DecoderModel merged = lora.merged();
      const double merge_diff = kbrl::test::max_abs_diff(merged.forward(ids, mask), adapted);
      const double scale = std::max(1.0, adapted.to(at::kDouble).abs().max().item<double>());
      std::cout << name << " " << c10::toString(dtype) << ": adapter moves logits by " << changed
                << ", merged vs adapter " << merge_diff << ", largest logit " << scale << "\n";
      // fp32: rounding only. bf16: the merged weight is rounded to bf16 once where the adapter
      // path rounds the sum; bf16 noise, as between kbrl and transformers (decoder_test).
      CHECK(merge_diff <= (dtype == at::kFloat ? 1e-6 : 2e-2) * scale);
      // The original model still carries its adapters; detach restores the base.
      lora.detach();
      CHECK(at::equal(m.forward(ids, mask), before));
    }
  }
}

TEST_CASE("inference forward records no graph when nothing requires grad") {
  auto m = load_model("llama3_gqa");
  const auto [ids, mask] = batch(false);
  CHECK_FALSE(m.forward(ids, mask).requires_grad());
  LoraModel lora = LoraModel::attach(m, LoraConfig{});
  CHECK(m.forward(ids, mask).requires_grad());  // the adapters are trainable
  const c10::NoGradGuard no_grad;
  CHECK_FALSE(m.forward(ids, mask).requires_grad());
}

TEST_CASE("token_logprobs equals log_softmax of the logits with padding on either side") {
  auto m = load_model("qwen3_gqa");
  LoraModel lora = LoraModel::attach(m, LoraConfig{});
  randomise(lora, 5);
  const auto [ids, mask] = batch(true);
  const at::Tensor targets = at::roll(ids, -1, 1);
  const at::Tensor logits = m.forward(ids, mask);
  const at::Tensor expected =
      at::log_softmax(logits.to(at::kFloat), -1).gather(2, targets.unsqueeze(2)).squeeze(2) * mask.to(at::kFloat);
  for (const std::int64_t chunk : {3, 1024}) {
    for (const bool ckpt : {false, true}) {
      TrainForwardOptions o;
      o.logprob_chunk_tokens = chunk;
      o.checkpoint_layers = ckpt;
      const at::Tensor lp = token_logprobs(m, ids, mask, targets, o);
      CHECK(lp.scalar_type() == at::kFloat);
      CHECK(lp.sizes() == ids.sizes());
      CHECK(lp.requires_grad());
      CHECK(kbrl::test::max_abs_diff(lp, expected) <= 1e-5);
      CHECK(lp[1][0].item<float>() == 0.0f);  // padding
      CHECK(lp[0][6].item<float>() == 0.0f);
    }
  }
  // A right-padded row computes what it computes alone.
  const at::Tensor alone = m.forward(ids.narrow(0, 0, 1).narrow(1, 0, 6));
  CHECK(kbrl::test::max_abs_diff(alone[0], logits[0].narrow(0, 0, 6)) <= 1e-5);
}

TEST_CASE("token_logprobs at a temperature is the log-softmax of logits over T, gradients included") {
  // Two paths: a frozen head (its gradient taken in the forward) and a head with an adapter.
  for (const bool head_adapter : {false, true}) {
    auto m = load_model("llama3_gqa", at::kDouble);
    LoraConfig c;
    c.rank = 2;
    c.alpha = 3;
    if (head_adapter) c.target_modules = {"q_proj", "down_proj", "lm_head"};
    LoraModel lora = LoraModel::attach(m, c, at::kDouble);
    randomise(lora, 13, 0.2);
    const auto [ids, mask] = batch(true);
    const at::Tensor targets = at::roll(ids, -1, 1);
    at::manual_seed(3);
    const at::Tensor weights = at::randn(ids.sizes(), at::kDouble) * mask.to(at::kDouble);
    const auto params = lora.parameters();
    for (const double t : {0.7, 1.3}) {
      INFO("head adapter " << head_adapter << ", temperature " << t);
      const at::Tensor ref_lp = at::log_softmax(m.forward(ids, mask) / t, -1).gather(2, targets.unsqueeze(2)).squeeze(2);
      const at::Tensor ref = (ref_lp * weights).sum();
      const auto ref_grads = torch::autograd::grad({ref}, params);
      TrainForwardOptions o;
      o.temperature = t;
      o.logprob_chunk_tokens = 5;
      const at::Tensor lp = token_logprobs(m, ids, mask, targets, o);
      CHECK(kbrl::test::max_abs_diff(lp, ref_lp.detach() * mask.to(at::kDouble)) <= 1e-12);
      const auto grads = torch::autograd::grad({(lp * weights).sum()}, params);
      double worst = 0;
      for (std::size_t i = 0; i < params.size(); ++i) worst = std::max(worst, kbrl::test::max_abs_diff(grads[i], ref_grads[i]));
      CHECK(worst <= 1e-12);
    }
    TrainForwardOptions bad;
    bad.temperature = 0;
    CHECK_THROWS_WITH(token_logprobs(m, ids, mask, targets, bad), Catch::Contains("temperature 0 must be finite and > 0"));
  }
}

namespace {

struct Grads {
  double loss = 0;
  std::vector<at::Tensor> grads;
};

Grads loss_and_grads(const DecoderModel& m, const LoraModel& lora, bool ckpt, const at::Tensor& weights,
                     std::int64_t chunk = 5) {
  const auto [ids, mask] = batch(true);
  TrainForwardOptions o;
  o.checkpoint_layers = ckpt;
  o.logprob_chunk_tokens = chunk;
  const at::Tensor loss = (token_logprobs(m, ids, mask, at::roll(ids, -1, 1), o) * weights).sum();
  Grads g;
  g.loss = loss.item<double>();
  const auto params = lora.parameters();
  g.grads = torch::autograd::grad({loss}, params);
  return g;
}

}  // namespace

TEST_CASE("lora gradients match central finite differences with and without checkpointing") {
  auto m = load_model("llama3_gqa", at::kDouble);
  LoraConfig c;
  c.rank = 2;
  c.alpha = 3;
  LoraModel lora = LoraModel::attach(m, c, at::kDouble);
  randomise(lora, 11, 0.2);
  at::manual_seed(1);
  const at::Tensor weights = at::randn({2, 7}, at::kDouble);
  const Grads plain = loss_and_grads(m, lora, false, weights);
  const Grads ckpt = loss_and_grads(m, lora, true, weights);
  CHECK(plain.loss == ckpt.loss);
  const auto params = lora.trainable_parameters();
  REQUIRE(plain.grads.size() == params.size());
  double worst_ckpt = 0;
  for (std::size_t i = 0; i < params.size(); ++i)
    worst_ckpt = std::max(worst_ckpt, kbrl::test::max_abs_diff(plain.grads[i], ckpt.grads[i]));
  CHECK(worst_ckpt == 0.0);

  // A few entries of A and B in the first and the last layer, attention and MLP.
  const double eps = 1e-6;
  double worst_rel = 0;
  int checked = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].first;
    if (!(contains(name, "layers.0.self_attn.q_proj") || contains(name, "layers.0.self_attn.v_proj") ||
          contains(name, "layers.1.mlp.down_proj") || contains(name, "layers.1.self_attn.o_proj")))
      continue;
    at::Tensor p = params[i].second;
    for (const std::int64_t flat : {std::int64_t{0}, p.numel() / 2, p.numel() - 1}) {
      double fd = 0;
      {
        const c10::NoGradGuard no_grad;
        at::Tensor e = p.view({-1})[flat];
        const double old = e.item<double>();
        e.fill_(old + eps);
        const double up = (token_logprobs(m, batch(true).first, batch(true).second,
                                          at::roll(batch(true).first, -1, 1)) * weights).sum().item<double>();
        e.fill_(old - eps);
        const double down = (token_logprobs(m, batch(true).first, batch(true).second,
                                            at::roll(batch(true).first, -1, 1)) * weights).sum().item<double>();
        e.fill_(old);
        fd = (up - down) / (2 * eps);
      }
      const double analytic = plain.grads[i].view({-1})[flat].item<double>();
      INFO(name << "[" << flat << "] analytic " << analytic << " fd " << fd);
      const double rel = std::abs(analytic - fd) / std::max(1e-3, std::abs(fd));
      CHECK(rel < 1e-6);
      worst_rel = std::max(worst_rel, rel);
      ++checked;
    }
  }
  CHECK(checked == 24);
  std::cout << "finite differences: " << checked << " entries, worst relative difference " << worst_rel << "\n";
  CHECK(worst_rel < 1e-6);
}

TEST_CASE("lora on a bf16 model trains fp32 adapters") {
  auto m = load_model("qwen2_tied", at::kBFloat16);
  LoraModel lora = LoraModel::attach(m, LoraConfig{});
  randomise(lora, 4);
  const auto [ids, mask] = batch(true);
  TrainForwardOptions o;
  o.checkpoint_layers = true;
  const at::Tensor lp = token_logprobs(m, ids, mask, at::roll(ids, -1, 1), o);
  CHECK(lp.scalar_type() == at::kFloat);
  const auto grads = torch::autograd::grad({lp.sum()}, lora.parameters());
  for (const auto& g : grads) {
    CHECK(g.scalar_type() == at::kFloat);
    CHECK(at::isfinite(g).all().item<bool>());
  }
  CHECK(grads[0].abs().max().item<double>() > 0);  // lora_A of q_proj: B is non-zero
}

TEST_CASE("checkpoint keeps nothing of fn and replays it in backward") {
  int calls = 0;
  const at::Tensor w = at::randn({4, 4}, at::kDouble).requires_grad_(true);
  const at::Tensor x = at::randn({3, 4}, at::kDouble).requires_grad_(true);
  const auto fn = [&](const at::Tensor& in) {
    ++calls;
    return at::tanh(at::matmul(in, w)).pow(2);
  };
  const at::Tensor y = checkpoint(fn, x, {w});
  CHECK(calls == 1);
  // The output's graph is one node whose inputs are x and w: fn's tanh and pow were not recorded.
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name().find("CheckpointFunction") != std::string::npos);
  const auto got = torch::autograd::grad({y.sum()}, {x, w});
  CHECK(calls == 2);
  const auto want = torch::autograd::grad({fn(x).sum()}, {x, w});
  CHECK(at::equal(got[0], want[0]));
  CHECK(at::equal(got[1], want[1]));
  // Without grad mode it is fn itself.
  const c10::NoGradGuard no_grad;
  calls = 0;
  CHECK_FALSE(checkpoint(fn, x, {w}).requires_grad());
  CHECK(calls == 1);
}

TEST_CASE("checkpointed layers replay the same dropout masks") {
  auto m = load_model("qwen3_gqa", at::kDouble);
  LoraConfig c;
  c.rank = 4;
  c.dropout = 0.3;
  LoraModel lora = LoraModel::attach(m, c, at::kDouble);
  randomise(lora, 2, 0.2);
  lora.set_training(true);
  const at::Tensor weights = at::ones({2, 7}, at::kDouble);
  at::manual_seed(42);
  const Grads plain = loss_and_grads(m, lora, false, weights);
  at::manual_seed(42);
  const Grads ckpt = loss_and_grads(m, lora, true, weights);
  at::manual_seed(43);
  const Grads other = loss_and_grads(m, lora, false, weights);
  CHECK(plain.loss == ckpt.loss);
  CHECK(plain.loss != other.loss);  // dropout is on
  for (std::size_t i = 0; i < plain.grads.size(); ++i) CHECK(kbrl::test::max_abs_diff(plain.grads[i], ckpt.grads[i]) == 0.0);
  // Evaluation mode: no dropout, the loss is deterministic.
  lora.set_training(false);
  at::manual_seed(1);
  const double a = loss_and_grads(m, lora, false, weights).loss;
  at::manual_seed(2);
  CHECK(loss_and_grads(m, lora, false, weights).loss == a);
}

TEST_CASE("lora save and load round trip bit for bit") {
  const auto dir = kbrl::test::scratch("lora_round_trip");
  auto m = load_model("llama3_gqa");
  LoraConfig c;
  c.rank = 3;
  c.alpha = 5.5;
  c.use_rslora = true;
  c.dropout = 0.05;
  c.target_modules = {"q_proj", "v_proj", "down_proj", "lm_head"};
  LoraModel lora = LoraModel::attach(m, c);
  randomise(lora, 9);
  lora.save(dir / "a", "tiny/llama3_gqa");

  auto m2 = load_model("llama3_gqa");
  const LoraModel back = LoraModel::load(m2, dir / "a");
  CHECK(back.config().rank == 3);
  CHECK(back.config().alpha == 5.5);
  CHECK(back.config().use_rslora);
  CHECK(back.config().dropout == 0.05);
  CHECK(back.modules() == lora.modules());
  CHECK(back.modules().back() == "lm_head");
  const auto p1 = lora.trainable_parameters(), p2 = back.trainable_parameters();
  REQUIRE(p1.size() == p2.size());
  for (std::size_t i = 0; i < p1.size(); ++i) {
    CHECK(p1[i].first == p2[i].first);
    CHECK(at::equal(p1[i].second, p2[i].second));
    CHECK(p2[i].second.requires_grad());
  }
  const auto [ids, mask] = batch(false);
  const c10::NoGradGuard no_grad;
  CHECK(at::equal(m.forward(ids, mask), m2.forward(ids, mask)));
  back.save(dir / "b", "tiny/llama3_gqa");
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    CHECK(kbrl::test::read_bytes(dir / "a" / f) == kbrl::test::read_bytes(dir / "b" / f));
  const auto file = load_tensors(dir / "a" / "adapter_model.safetensors");
  CHECK(file.contains("base_model.model.lm_head.lora_B.weight"));
  CHECK(file.at("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight").sizes() == at::IntArrayRef({3, 48}));
}

namespace {

// A saved adapter with one edit to its config or tensors.
fs::path bad_adapter(const std::string& test, const std::function<void(boost::json::object&)>& edit_config,
                     const std::function<void(std::map<std::string, at::Tensor>&)>& edit_tensors) {
  const auto dir = kbrl::test::scratch(test);
  auto m = load_model("llama3_gqa");
  LoraConfig c;
  c.rank = 2;
  LoraModel::attach(m, c).save(dir);
  auto config = boost::json::parse(kbrl::test::read_bytes(dir / "adapter_config.json")).as_object();
  edit_config(config);
  kbrl::test::write_bytes(dir / "adapter_config.json", boost::json::serialize(config));
  auto tensors = load_tensors(dir / "adapter_model.safetensors");
  edit_tensors(tensors);
  save_tensors(dir / "adapter_model.safetensors", tensors);
  return dir;
}

std::string load_error(const fs::path& dir) {
  auto m = load_model("llama3_gqa");
  return config_error_of([&] { LoraModel::load(m, dir); });
}

void no_edit_config(boost::json::object&) {}
void no_edit_tensors(std::map<std::string, at::Tensor>&) {}

}  // namespace

TEST_CASE("lora load refuses a missing tensor") {
  const auto e = load_error(bad_adapter("lora_missing", no_edit_config, [](auto& t) {
    t.erase("base_model.model.model.layers.1.mlp.up_proj.lora_B.weight");
  }));
  CHECK(contains(e, "adapter_model.safetensors"));
  CHECK(contains(e, "missing base_model.model.model.layers.1.mlp.up_proj.lora_B.weight (expected shape [48, 2])"));
}

TEST_CASE("lora load refuses a wrong shape") {
  const auto e = load_error(bad_adapter("lora_shape", no_edit_config, [](auto& t) {
    t["base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"] = at::zeros({3, 32});
  }));
  CHECK(contains(e, "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight: expected shape [2, 32] (r = 2), found [3, 32]"));
}

TEST_CASE("lora load refuses an unexpected tensor") {
  const auto e = load_error(bad_adapter("lora_unexpected", no_edit_config, [](auto& t) {
    t["base_model.model.lm_head.lora_A.weight"] = at::zeros({2, 32});
  }));
  CHECK(contains(e, "unexpected tensor base_model.model.lm_head.lora_A.weight"));
}

TEST_CASE("lora load refuses modules_to_save") {
  const auto e = load_error(bad_adapter(
      "lora_modules_to_save", [](auto& c) { c["modules_to_save"] = boost::json::array{"lm_head"}; }, no_edit_tensors));
  CHECK(contains(e, "adapter_config.json"));
  CHECK(contains(e, "modules_to_save"));
}

TEST_CASE("lora load refuses an unknown peft_type") {
  const auto e = load_error(bad_adapter("lora_peft_type", [](auto& c) { c["peft_type"] = "IA3"; }, no_edit_tensors));
  CHECK(contains(e, "peft_type"));
  CHECK(contains(e, "IA3"));
}

TEST_CASE("lora load refuses DoRA and trained biases") {
  CHECK(contains(load_error(bad_adapter("lora_dora", [](auto& c) { c["use_dora"] = true; }, no_edit_tensors)), "use_dora"));
  CHECK(contains(load_error(bad_adapter("lora_bias", [](auto& c) { c["bias"] = "lora_only"; }, no_edit_tensors)), "bias"));
  CHECK(contains(load_error(bad_adapter("lora_no_r", [](auto& c) { c.erase("r"); }, no_edit_tensors)), "field 'r': missing"));
}
