// CUDA-graph capture and replay of the Sampler's decoding step (cuda/decode_graph.cpp, built
// where libtorch has CUDA; sampler.cpp carries stand-ins otherwise).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

namespace kbrl::model::detail {

// The step: inputs [R, 5 + W] int32 (per row: token, position, slot, context length, feedback
// row, then the block table), uniforms [R] float64 -> out [2, R] float64 (drawn tokens, their
// logprobs). All three on the device.
using StepBody = std::function<void(const at::Tensor& inputs, const at::Tensor& uniforms, at::Tensor& out)>;

class DecodeGraph {
 public:
  virtual ~DecodeGraph() = default;
  // Enqueues on the current stream, without waiting: host_inputs [rows(), 5 + W] int32 and
  // host_uniforms [rows()] float64 copied into the graph's buffers, the replay, and its out copied
  // to host_out [2, rows()] float64. The host tensors are pinned, and must stay untouched until
  // the stream has passed this step.
  virtual void launch(const at::Tensor& host_inputs, const at::Tensor& host_uniforms, at::Tensor& host_out) = 0;
  virtual std::int64_t rows() const = 0;
};

// Whether this build of kbrl can capture CUDA graphs (libtorch with CUDA).
bool cuda_graphs_built();

// Captures `body` for `rows` rows whose inputs start as `padding` [rows, 4 + W] int32 (host):
// rows that must not touch real state (a step on them is harmless). Graphs given the same pool
// (from new_graph_pool) share their memory: replay them one at a time.
using GraphPool = std::pair<unsigned long long, unsigned long long>;  // libtorch's MempoolId_t
std::unique_ptr<DecodeGraph> capture_decode_graph(const StepBody& body, const at::Tensor& padding, c10::Device device,
                                                  GraphPool pool);
GraphPool new_graph_pool();

// Device memory free now (bytes), or -1 where it cannot be known.
std::int64_t device_free_bytes(c10::Device device);

}  // namespace kbrl::model::detail
