// Static-check policies end to end on the CPU backend: a level-2 style problem (a convolution, a
// bias, ReLU and a scale) answered by keeping the PyTorch convolution and fusing the rest in a C++
// kernel. Under `kernelbench` and `fusion` it builds, is correct, is timed and earns a speed
// reward; under `strict` it is refused before building and its reward is zero. Every result names
// the policy it was judged under.
#include <kbrl/core/types.hpp>
#include <kbrl/eval/local_evaluator.hpp>
#include <kbrl/reward/reward.hpp>

#include <cmath>
#include <filesystem>
#include <string>

#include "catch.hpp"
#include "cpu_evaluator_fixtures.hpp"

using namespace kbrl;
using core::ErrorCategory;

namespace {

constexpr const char* kConvEpilogueProblem = R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scale = scale

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x + self.bias)
        return x * self.scale

batch_size = 4
in_channels = 3
out_channels = 8
height, width = 24, 24
kernel_size = 3
bias_shape = (out_channels, 1, 1)
scale = 1.5

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape, scale]
)";

// The convolution stays an nn.Conv2d; bias, ReLU and scale are one pass of a C++ kernel.
constexpr const char* kFusedEpilogue = R"(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
torch::Tensor bias_relu_scale(torch::Tensor x, torch::Tensor bias, double scale) {
  auto xc = x.contiguous();
  auto bc = bias.contiguous();
  auto y = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  const float* b = bc.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const int64_t channels = xc.size(1);
  const int64_t plane = xc.size(2) * xc.size(3);
  const int64_t n = xc.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i] + b[(i / plane) % channels];
    out[i] = v > 0.f ? v * static_cast<float>(scale) : 0.f;
  }
  return y;
}
"""
ext = load_inline(name="bias_relu_scale_cpu", cpp_sources=source, functions=["bias_relu_scale"],
                  extra_cflags=["-O2"], verbose=False)

class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scale = scale

    def forward(self, x):
        x = self.conv(x)
        return ext.bias_relu_scale(x, self.bias.view(-1), self.scale)
)";

core::EvalRequest conv_request(const std::string& id) {
  core::EvalRequest r = testing::request(id, kFusedEpilogue);
  r.problem.id = "level2/1_Conv2d_BiasReLU_Scale";
  r.problem.name = "Conv2d_BiasReLU_Scale";
  r.problem.level = 2;
  r.problem.source = kConvEpilogueProblem;
  r.problem.content_hash = "conv-epilogue-test";
  return r;
}

}  // namespace

TEST_CASE("a kept convolution with a fused epilogue is correct with a speed reward under kernelbench and fusion, "
          "zero under strict") {
  core::Completion completion;
  completion.text = std::string("<KERNEL>\n") + kFusedEpilogue + "</KERNEL>";
  completion.kernel = kFusedEpilogue;
  completion.has_kernel_block = true;
  completion.format_ok = true;
  const auto reward_config = reward::RewardConfig::preset("kbrl_stage3");
  REQUIRE(reward_config.weights.count("speed") == 1);
  // One work directory: the policy is not part of a build's key, so the candidate is built once.
  auto c = testing::config("policy");
  c.static_checks = true;
  for (const std::string policy : {"strict", "kernelbench", "fusion"}) {
    INFO("policy " << policy);
    c.static_check_policy = policy;
    eval::LocalEvaluator ev(c);
    const auto r = ev.evaluate({conv_request(policy)}).at(0);
    INFO(r.error_message);
    CHECK(r.metadata.at("static_check_policy") == policy);
    const auto reward = reward::compute_reward(r, completion, reward_config);
    if (policy == "strict") {
      CHECK(r.error_category == ErrorCategory::static_check);
      CHECK_FALSE(r.compiled);
      REQUIRE(!r.static_findings.empty());
      CHECK(r.static_findings[0].rule == "reference_op_in_forward");
      CHECK(reward.zeroed_by_static_check);
      CHECK(reward.total == 0.0);
      continue;
    }
    CHECK(r.error_category == ErrorCategory::none);
    CHECK(r.static_ok);
    CHECK(r.compiled);
    CHECK(r.correct);
    // The kept convolution is reported, as a warning.
    bool warned = false;
    for (const auto& f : r.static_findings) warned = warned || f.rule == "reference_op_in_forward";
    CHECK(warned);
    REQUIRE(r.speedup.has_value());
    CHECK(*r.speedup > 0.0);
    CHECK_FALSE(reward.zeroed_by_static_check);
    REQUIRE(reward.values.count("speed") == 1);
    CHECK(std::isfinite(reward.values.at("speed")));
    CHECK(reward.total > 0.0);
  }
}

TEST_CASE("an unknown policy is refused when the evaluator is made") {
  auto c = testing::config("policy-unknown");
  c.static_check_policy = "lenient";
  CHECK_THROWS_WITH(eval::LocalEvaluator(c), Catch::Matchers::ContainsSubstring("known: strict, kernelbench, fusion"));
}
