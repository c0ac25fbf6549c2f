// The Sampler's decoding step, shared by its eager loop and by the CUDA-graph replay of it
// (cuda/decode_graph.cpp, built where libtorch has CUDA).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kbrl/model/torch/decoder.hpp"
#include "kbrl/model/torch/sampler.hpp"

namespace kbrl::model::detail {

// logits [R, vocab], uniforms [R] float64 (unused when greedy) -> (tokens [R] int64, their
// log-probabilities [R] float32 under the sampling distribution). No host synchronization.
std::pair<at::Tensor, at::Tensor> draw_tokens(const at::Tensor& logits, const SamplingParams& params,
                                              const at::Tensor& uniforms);

// A decode step (DecoderModel::decode_step on the last tokens, then draw_tokens) captured once
// in a CUDA graph for a fixed batch and attention span, replayed once per token.
class DecodeGraph {
 public:
  virtual ~DecodeGraph() = default;
  // One step: uniforms for every row (any value for greedy or finished rows); returns the host
  // tensor [2, B] float64: the drawn tokens and their log-probabilities. The cache advances one
  // column (its host length too).
  virtual at::Tensor step(const std::vector<double>& uniforms) = 0;
  // The cache columns the step attends to: steps run while cache.length() < span().
  virtual std::int64_t span() const = 0;
};

// Whether this build of kbrl can capture CUDA graphs (libtorch with CUDA).
bool cuda_graphs_built();

// Captures the step for `cache` (batch B, the model's device) whose rows last drew
// `last_tokens` [B] (host); span: cache.length() < span <= cache.capacity(). The graph keeps
// references to the cache's tensors: the cache must not be replaced or resized while it lives.
// Throws where cuda_graphs_built() is false.
std::unique_ptr<DecodeGraph> capture_decode_graph(const DecoderModel& model, KvCache& cache,
                                                  const std::vector<std::int64_t>& last_tokens,
                                                  const SamplingParams& params, std::int64_t span);

}  // namespace kbrl::model::detail
