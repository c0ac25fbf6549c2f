// The CPU evaluator tests' common ground: a small ReLU problem, a correct C++ kernel for it, pure
// Python candidates (quick: nothing to build), and a LocalEvaluator configuration with a work
// directory of its own per test and one shared precompiled header.
#pragma once

#include <kbrl/core/types.hpp>
#include <kbrl/eval/local_evaluator.hpp>

#include <filesystem>
#include <string>

namespace kbrl::testing {

inline constexpr const char* kReluProblem = R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

rows = 64
cols = 512

def get_inputs():
    return [torch.randn(rows, cols)]

def get_init_inputs():
    return []
)";

// A correct C++ kernel for the CPU backend (built by load_inline).
inline constexpr const char* kReluCpp = R"(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < xc.numel(); ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
  return y;
}
"""
ext = load_inline(name="relu_cpu", cpp_sources=source, functions=["relu_forward"],
                  extra_cflags=["-O2"], verbose=False)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_forward(x)
)";

// Pure-Python candidates: they need no build, so runtime behaviour is tested quickly.
inline std::string python_candidate(const std::string& prelude, const std::string& forward_body) {
  return "import torch\nimport torch.nn as nn\n" + prelude +
         "\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
         "    def forward(self, x):\n" +
         forward_body + "\n";
}

inline core::Problem relu_problem() {
  core::Problem p;
  p.id = "test/1_ReLU";
  p.name = "ReLU";
  p.source = kReluProblem;
  p.content_hash = "relu-test";
  return p;
}

inline core::EvalRequest request(const std::string& id, const std::string& candidate) {
  core::EvalRequest r;
  r.request_id = id;
  r.problem = relu_problem();
  r.candidate_source = candidate;
  r.language = core::KernelLanguage::cpp;
  r.options.timing_trials = 5;
  r.options.warmup_runs = 1;
  r.options.correctness_trials = 3;
  r.options.run_timeout_s = 60;
  r.options.compile_timeout_s = 300;
  return r;
}

inline eval::LocalEvaluatorConfig config(const std::string& name) {
  eval::LocalEvaluatorConfig c;
  c.platform = core::DevicePlatform::cpu;
  c.work_dir = std::filesystem::path(KBRL_TEST_TMP) / ("eval-" + name);
  std::filesystem::remove_all(c.work_dir);
  c.compile_workers = 2;
  // One precompiled header for all these tests (each would otherwise build its own, cold).
  c.compile_cache_dir = std::filesystem::path(KBRL_TEST_TMP) / "compile_cache";
  c.limits.address_space_bytes = 8ull << 30;
  // Most candidates here are plain Python, which the static checker rejects before they run;
  // these tests are about what happens at run time (the checker has tests of its own).
  c.static_checks = false;
  return c;
}

inline const std::string kCorrectPython = python_candidate("", "        return x.clamp_min(0.0)");

}  // namespace kbrl::testing
