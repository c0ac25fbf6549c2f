// CUDA-graph capture and replay of the Sampler's decode step. Compiled only where libtorch has
// CUDA (KBRL_CUDA_GRAPHS); sampler.cpp carries the stand-in otherwise.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "../decode_graph.hpp"

namespace kbrl::model::detail {

namespace {

class CudaDecodeGraph final : public DecodeGraph {
 public:
  CudaDecodeGraph(const DecoderModel& model, KvCache& cache, const std::vector<std::int64_t>& last_tokens,
                  const SamplingParams& params, std::int64_t span)
      : model_(model), cache_(cache), params_(params), span_(span) {
    const c10::Device device = model.device();
    const auto B = static_cast<std::int64_t>(last_tokens.size());
    const at::TensorOptions on = at::TensorOptions().device(device);
    // Inputs and outputs live outside the graph's pool, at fixed addresses.
    ids_ = at::tensor(last_tokens, at::kLong).view({B, 1}).to(device);
    column_ = at::full({1}, cache.length(), on.dtype(at::kLong));
    uniforms_ = at::full({B}, 0.5, on.dtype(at::kDouble));
    out_ = at::zeros({2, B}, on.dtype(at::kDouble));

    const c10::cuda::OptionalCUDAGuard device_guard(device);
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(side);
    {
      const c10::cuda::CUDAStreamGuard stream_guard(side);
      // One eager run first (cuBLAS workspaces, kernel choices), then its state changes undone:
      // the column it wrote is written again, with the same values, by the first replay.
      const at::Tensor lengths = cache.lengths().clone();
      const at::Tensor ids = ids_.clone();
      body();
      cache.lengths().copy_(lengths);
      ids_.copy_(ids);
      column_.fill_(cache.length());
      graph_.capture_begin();
      body();
      graph_.capture_end();
    }
    at::cuda::CUDAEvent captured;
    captured.record(side);
    captured.block(current);
  }

  at::Tensor step(const std::vector<double>& uniforms) override {
    uniforms_.copy_(at::tensor(uniforms, at::kDouble));
    graph_.replay();
    cache_.note_decoded(1);
    return out_.to(at::kCPU);  // waits for the step
  }

  std::int64_t span() const override { return span_; }

 private:
  void body() {
    const at::Tensor logits = model_.decode_step(ids_, cache_, column_, span_).squeeze(1);  // [B, vocab]
    const auto [next, logprobs] = draw_tokens(logits, params_, uniforms_);
    out_.select(0, 0).copy_(next);
    out_.select(0, 1).copy_(logprobs);
    ids_.copy_(next.unsqueeze(1));
  }

  const DecoderModel& model_;
  KvCache& cache_;
  SamplingParams params_;
  std::int64_t span_;
  at::Tensor ids_, column_, uniforms_, out_;
  at::cuda::CUDAGraph graph_;
};

}  // namespace

bool cuda_graphs_built() { return true; }

std::unique_ptr<DecodeGraph> capture_decode_graph(const DecoderModel& model, KvCache& cache,
                                                  const std::vector<std::int64_t>& last_tokens,
                                                  const SamplingParams& params, std::int64_t span) {
  return std::make_unique<CudaDecodeGraph>(model, cache, last_tokens, params, span);
}

}  // namespace kbrl::model::detail
