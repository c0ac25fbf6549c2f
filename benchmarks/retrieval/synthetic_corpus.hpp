// Deterministic synthetic corpus for the retrieval benchmark (and its smoke test): KernelBench-
// shaped PyTorch programs composed from 1 to 4 of 64 torch operations, with random names, shapes,
// docstrings and helper code, each paired with a short CUDA or Triton stub. Same n and seed, same
// corpus, on any machine (splitmix64, no std:: distributions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kbrl/rag/corpus.hpp"

namespace kbrl_bench {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t state_;
};

inline const std::vector<std::string>& synthetic_ops() {
  static const std::vector<std::string> ops{
      "torch.relu(x)", "torch.sigmoid(x)", "torch.tanh(x)", "torch.nn.functional.gelu(x)", "F.silu(x)",
      "F.leaky_relu(x, negative_slope=0.1)", "F.elu(x)", "F.softplus(x)", "F.hardtanh(x)", "torch.exp(x)",
      "torch.log1p(torch.abs(x))", "torch.sqrt(torch.abs(x) + 1e-6)", "torch.clamp(x, min=-1.0, max=1.0)",
      "x * self.scale", "x + self.bias", "torch.softmax(x, dim=-1)", "torch.log_softmax(x, dim=-1)",
      "torch.sum(x, dim=-1, keepdim=True)", "torch.mean(x, dim=-1, keepdim=True)",
      "torch.amax(x, dim=-1, keepdim=True)", "torch.cumsum(x, dim=-1)", "torch.cumprod(x, dim=-1)",
      "torch.matmul(x, self.weight)", "x @ self.weight", "self.linear(x)", "F.layer_norm(x, x.shape[-1:])",
      "x / (x.norm(dim=-1, keepdim=True) + 1e-6)", "torch.flip(x, dims=[-1])", "torch.sort(x, dim=-1)[0]",
      "torch.tril(x)", "torch.triu(x)", "x.transpose(-1, -2).contiguous().transpose(-1, -2)",
      "torch.where(x > 0, x, x * 0.01)", "torch.round(x)", "torch.sign(x) * x", "torch.erf(x)", "torch.sin(x)",
      "torch.cos(x)", "torch.reciprocal(x.abs() + 1.0)", "torch.rsqrt(x.abs() + 1.0)", "torch.square(x)",
      "torch.pow(x, 3)", "torch.nan_to_num(x)", "F.dropout(x, p=0.0)", "F.hardswish(x)", "F.hardsigmoid(x)",
      "F.mish(x)", "F.selu(x)", "F.celu(x)", "F.softsign(x)", "F.tanhshrink(x)", "F.logsigmoid(x)",
      "F.relu6(x)", "F.normalize(x, dim=-1)", "torch.roll(x, shifts=1, dims=-1)", "x.flatten(1).view_as(x)",
      "torch.maximum(x, self.bias)", "torch.minimum(x, self.bias)", "torch.lerp(x, self.bias, 0.5)",
      "torch.addcmul(x, x, self.scale)", "torch.fmod(x, 2.0)", "torch.frac(x)", "torch.trunc(x)",
      "torch.logit(torch.sigmoid(x))"};
  return ops;
}

inline std::string synthetic_problem(SplitMix64& rng, std::size_t* first_op = nullptr) {
  static const std::vector<std::string> words{"fused", "kernel", "tensor", "block", "layer", "module", "residual",
                                              "attention", "projection", "gate", "norm", "scale", "shift", "mix"};
  const auto& ops = synthetic_ops();
  const std::size_t n_ops = 1 + rng.below(4);
  std::string body;
  std::string doc = "Applies";
  for (std::size_t i = 0; i < n_ops; ++i) {
    const std::size_t op = rng.below(ops.size());
    if (i == 0 && first_op != nullptr) *first_op = op;
    body += fmt::format("        x = {}\n", ops[op]);
    doc += " " + words[rng.below(words.size())];
  }
  const std::size_t hidden = 64u << rng.below(6);
  const std::size_t batch = 1u << (1 + rng.below(8));
  std::string helpers;
  for (std::size_t h = 0, n = rng.below(3); h < n; ++h)
    helpers += fmt::format("\n\ndef helper_{0}_{1}(t):\n    # reshapes {2} for the {3} path\n    return t.reshape(t.shape[0], -1)\n",
                           words[rng.below(words.size())], rng.below(1000), words[rng.below(words.size())],
                           words[rng.below(words.size())]);
  return fmt::format(
      "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
      "class Model(nn.Module):\n    \"\"\"{0}.\"\"\"\n\n"
      "    def __init__(self, hidden: int):\n        super().__init__()\n"
      "        self.weight = nn.Parameter(torch.randn(hidden, hidden))\n"
      "        self.bias = nn.Parameter(torch.zeros(hidden))\n        self.scale = nn.Parameter(torch.ones(hidden))\n"
      "        self.linear = nn.Linear(hidden, hidden)\n\n"
      "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n{1}        return x\n{2}\n\n"
      "batch_size = {3}\nhidden = {4}\n\n\ndef get_inputs():\n    return [torch.randn(batch_size, hidden)]\n\n\n"
      "def get_init_inputs():\n    return [hidden]\n",
      doc, body, helpers, batch, hidden);
}

// n entries; ids "synthetic/<i>"; a third Triton, the rest CUDA.
inline std::vector<kbrl::rag::CorpusEntry> synthetic_corpus(std::size_t n, std::uint64_t seed = 42) {
  SplitMix64 rng(seed);
  std::vector<kbrl::rag::CorpusEntry> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    kbrl::rag::CorpusEntry e;
    e.id = fmt::format("synthetic/{}", i);
    e.source = synthetic_problem(rng);
    e.language = i % 3 == 0 ? "triton" : "cuda";
    e.kernel = e.language == "triton"
                   ? fmt::format("@triton.jit\ndef k{}(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    pass\n", i)
                   : fmt::format("__global__ void k{}(const float* x, float* y, int n) {{ }}\n", i);
    e.speedup = 0.5 + static_cast<double>(rng.below(300)) / 100.0;
    e.origin = fmt::format("synthetic:{}", i + 1);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace kbrl_bench
