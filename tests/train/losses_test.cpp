// The losses on small hand-computed cases: values, gradients (cispo's stop-gradient, ppo's
// clipped tokens), normalizations and metrics, and the errors for bad inputs.
#include "kbrl/train/torch/losses.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "catch.hpp"
#include "kbrl/core/error.hpp"

using namespace kbrl::train;

namespace {

const double ln2 = std::log(2.0);

// Three tokens: ratios p/q = 2, 0.5, 1 and advantages 1, -1, 2, all weight 1.
struct Case {
  at::Tensor logp = at::log(at::tensor({0.5, 0.25, 0.5}, at::kDouble)).view({1, 3}).requires_grad_(true);
  at::Tensor q = at::log(at::tensor({0.25, 0.5, 0.5}, at::kDouble)).view({1, 3});
  at::Tensor a = at::tensor({1.0, -1.0, 2.0}, at::kDouble).view({1, 3});
  at::Tensor w = at::ones({1, 3}, at::kDouble);
  LossInputs inputs() const { return {logp, q, a, w}; }
};

std::vector<double> grad_of(LossKind kind, const LossConfig& config = {}) {
  Case c;
  compute_loss(kind, c.inputs(), config).loss.backward();
  const at::Tensor g = c.logp.grad().view({3});
  return {g[0].item<double>(), g[1].item<double>(), g[2].item<double>()};
}

}  // namespace

TEST_CASE("cross entropy is minus the weighted sum of logprobs") {
  Case c;
  // -(ln 0.5 + ln 0.25 + ln 0.5) = ln2 + 2 ln2 + ln2 = 4 ln2
  const auto out = compute_loss(LossKind::kCrossEntropy, c.inputs());
  CHECK(out.loss.item<double>() == Catch::Approx(4 * ln2).epsilon(1e-12));
  CHECK(out.metrics.at("entropy_proxy") == Catch::Approx(4 * ln2 / 3).epsilon(1e-12));
  // d/dlogp = -w
  const auto g = grad_of(LossKind::kCrossEntropy);
  CHECK(g == std::vector<double>{-1.0, -1.0, -1.0});
}

TEST_CASE("importance sampling weights advantages by the ratio") {
  Case c;
  // -(2*1 + 0.5*(-1) + 1*2) = -3.5; gradient -r*A = -2, 0.5, -2
  const auto out = compute_loss(LossKind::kImportanceSampling, c.inputs());
  CHECK(out.loss.item<double>() == Catch::Approx(-3.5).epsilon(1e-12));
  CHECK(out.metrics.at("ratio") == Catch::Approx(3.5 / 3).epsilon(1e-12));
  // k3: (2 - 1 - ln2) + (0.5 - 1 + ln2) + 0 = 0.5, mean over 3 tokens
  CHECK(out.metrics.at("kl_sampler") == Catch::Approx(0.5 / 3).epsilon(1e-12));
  const auto g = grad_of(LossKind::kImportanceSampling);
  CHECK(g[0] == Catch::Approx(-2.0));
  CHECK(g[1] == Catch::Approx(0.5));
  CHECK(g[2] == Catch::Approx(-2.0));
}

TEST_CASE("ppo takes the min of the clipped and unclipped objectives") {
  Case c;
  // bounds [0.8, 1.2]: token 0 min(2*1, 1.2*1) = 1.2 (clipped), token 1 min(0.5*-1, 0.8*-1) =
  // -0.8 (clipped), token 2 ratio 1: 2. Loss -(1.2 - 0.8 + 2) = -2.4.
  const auto out = compute_loss(LossKind::kPpo, c.inputs());
  CHECK(out.loss.item<double>() == Catch::Approx(-2.4).epsilon(1e-12));
  CHECK(out.metrics.at("clip_fraction") == Catch::Approx(2.0 / 3).epsilon(1e-12));
  // Clipped tokens get no gradient; token 2: -r*A = -2.
  const auto g = grad_of(LossKind::kPpo);
  CHECK(g[0] == 0.0);
  CHECK(g[1] == 0.0);
  CHECK(g[2] == Catch::Approx(-2.0));
}

TEST_CASE("ppo keeps the unclipped term when it is the smaller one") {
  // ratio 2 with advantage -1: min(-2, 1.2*-1) = -2, the unclipped term: loss 2, gradient -r*A = 2.
  at::Tensor logp = at::log(at::tensor({0.5}, at::kDouble)).view({1, 1}).requires_grad_(true);
  const LossInputs in{logp, at::log(at::tensor({0.25}, at::kDouble)).view({1, 1}),
                      at::tensor({-1.0}, at::kDouble).view({1, 1}), at::ones({1, 1}, at::kDouble)};
  const auto out = compute_loss(LossKind::kPpo, in);
  CHECK(out.loss.item<double>() == Catch::Approx(2.0).epsilon(1e-12));
  out.loss.backward();
  CHECK(logp.grad().item<double>() == Catch::Approx(2.0).epsilon(1e-12));
}

TEST_CASE("cispo clips the ratio and stops its gradient") {
  Case c;
  // -(1.2 * ln0.5 * 1 + 0.8 * ln0.25 * -1 + 1 * ln0.5 * 2) = -(-1.2 + 1.6 - 2) ln2 = 1.6 ln2
  const auto out = compute_loss(LossKind::kCispo, c.inputs());
  CHECK(out.loss.item<double>() == Catch::Approx(1.6 * ln2).epsilon(1e-12));
  // With the stop-gradient, d/dlogp = -clip(r) * A = -1.2, 0.8, -2. Without it, token 2 (ratio
  // 1, inside the bounds) would get -(r + r logp) A = -(1 - ln2) * 2 = -0.61 instead of -2.
  const auto g = grad_of(LossKind::kCispo);
  CHECK(g[0] == Catch::Approx(-1.2).epsilon(1e-12));
  CHECK(g[1] == Catch::Approx(0.8).epsilon(1e-12));
  CHECK(g[2] == Catch::Approx(-2.0).epsilon(1e-12));
}

TEST_CASE("normalizations divide the weighted sum as documented") {
  // Per-token CE terms [[ln2, ln2], [2 ln2, (weight 0)]]: sum 4 ln2 over weight 3.
  const at::Tensor logp = at::log(at::tensor({0.5, 0.5, 0.25, 0.1}, at::kDouble)).view({2, 2});
  const at::Tensor w = at::tensor({1.0, 1.0, 1.0, 0.0}, at::kDouble).view({2, 2});
  const LossInputs in{logp, {}, {}, w};
  LossConfig c;
  c.normalization = Normalization::kSum;
  CHECK(compute_loss(LossKind::kCrossEntropy, in, c).loss.item<double>() == Catch::Approx(4 * ln2).epsilon(1e-12));
  c.normalization = Normalization::kTokenMean;
  CHECK(compute_loss(LossKind::kCrossEntropy, in, c).loss.item<double>() == Catch::Approx(4 * ln2 / 3).epsilon(1e-12));
  // row 0: 2 ln2 / 2 = ln2, row 1: 2 ln2 / 1; mean 1.5 ln2
  c.normalization = Normalization::kSequenceMean;
  CHECK(compute_loss(LossKind::kCrossEntropy, in, c).loss.item<double>() == Catch::Approx(1.5 * ln2).epsilon(1e-12));
  c.normalization = Normalization::kConstant;
  c.constant = 8;
  CHECK(compute_loss(LossKind::kCrossEntropy, in, c).loss.item<double>() == Catch::Approx(0.5 * ln2).epsilon(1e-12));
  // Batch totals from outside (a micro-batch of a larger batch): 4 ln2 / 10
  c.normalization = Normalization::kTokenMean;
  CHECK(compute_loss(LossKind::kCrossEntropy, in, c, {10, -1}).loss.item<double>() ==
        Catch::Approx(0.4 * ln2).epsilon(1e-12));
}

TEST_CASE("bad loss inputs and names throw") {
  Case c;
  LossInputs in = c.inputs();
  in.advantages = at::ones({1, 2}, at::kDouble);
  CHECK_THROWS_AS(compute_loss(LossKind::kPpo, in), kbrl::core::InvalidArgument);
  in.advantages = at::Tensor();
  CHECK_THROWS_AS(compute_loss(LossKind::kCispo, in), kbrl::core::InvalidArgument);
  CHECK_NOTHROW(compute_loss(LossKind::kCrossEntropy, in));
  CHECK_THROWS_AS(loss_kind_from_name("grpo"), kbrl::core::InvalidArgument);
  CHECK(loss_kind_from_name("cispo") == LossKind::kCispo);
  CHECK(normalization_from_name("sequence_mean") == Normalization::kSequenceMean);
}
