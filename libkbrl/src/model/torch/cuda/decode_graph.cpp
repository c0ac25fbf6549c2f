// CUDA-graph capture and replay of the Sampler's decoding step. Compiled only where libtorch has
// CUDA (KBRL_CUDA_GRAPHS); sampler.cpp carries the stand-ins otherwise.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>

#include "../decode_graph.hpp"

namespace kbrl::model::detail {

namespace {

class CudaDecodeGraph final : public DecodeGraph {
 public:
  CudaDecodeGraph(const StepBody& body, const at::Tensor& padding, c10::Device device, GraphPool pool) {
    const auto R = padding.size(0);
    const at::TensorOptions on = at::TensorOptions().device(device);
    // Inputs and outputs live outside the graph's pool, at fixed addresses.
    inputs_ = padding.to(device);
    uniforms_ = at::full({R}, 0.5, on.dtype(at::kDouble));
    out_ = at::zeros({2, R}, on.dtype(at::kDouble));

    const c10::cuda::OptionalCUDAGuard device_guard(device);
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(side);
    {
      const c10::cuda::CUDAStreamGuard stream_guard(side);
      // One eager run first (cuBLAS workspaces, kernel choices): on padding rows only, which
      // write to the cache's spare block and nowhere else.
      body(inputs_, uniforms_, out_);
      graph_.capture_begin(pool);
      body(inputs_, uniforms_, out_);
      graph_.capture_end();
    }
    at::cuda::CUDAEvent captured;
    captured.record(side);
    captured.block(current);
  }

  void launch(const at::Tensor& host_inputs, const at::Tensor& host_uniforms, at::Tensor& host_out) override {
    inputs_.copy_(host_inputs, /*non_blocking=*/true);
    uniforms_.copy_(host_uniforms, /*non_blocking=*/true);
    graph_.replay();
    host_out.copy_(out_, /*non_blocking=*/true);
  }

  std::int64_t rows() const override { return inputs_.size(0); }

 private:
  at::Tensor inputs_, uniforms_, out_;
  at::cuda::CUDAGraph graph_;
};

}  // namespace

bool cuda_graphs_built() { return true; }

std::unique_ptr<DecodeGraph> capture_decode_graph(const StepBody& body, const at::Tensor& padding, c10::Device device,
                                                  GraphPool pool) {
  return std::make_unique<CudaDecodeGraph>(body, padding, device, pool);
}

GraphPool new_graph_pool() { return at::cuda::graph_pool_handle(); }

std::int64_t device_free_bytes(c10::Device device) {
  const c10::cuda::OptionalCUDAGuard guard(device);
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return -1;
  // Memory libtorch's allocator holds but does not use (an earlier cache, freed) is free to us
  // too: without it a second sampling call in the same process would see less than the first.
  const auto index = device.has_index() ? device.index() : c10::cuda::current_device();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  const auto idle = stats.reserved_bytes[0].current - stats.allocated_bytes[0].current;
  return static_cast<std::int64_t>(free) + std::max<std::int64_t>(0, idle);
}

}  // namespace kbrl::model::detail
