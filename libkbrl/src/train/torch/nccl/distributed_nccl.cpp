// Data-parallel collectives on NCCL through libtorch's ProcessGroupNCCL.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "kbrl/core/text.hpp"
#include "../distributed_impl.hpp"
#include "kbrl/core/error.hpp"

namespace kbrl::train::detail {

using core::cat;

namespace {

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(const LaunchEnv& env, const c10::intrusive_ptr<c10d::Store>& store, std::chrono::milliseconds timeout)
      : ProcessGroup(env.rank, env.world_size),
        device_(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank)),
        store_(store) {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    const c10::cuda::CUDAGuard guard(device_);
    group_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("kbrl/nccl/", store),
                                                         env.rank, env.world_size, options);
  }

  ~NcclProcessGroup() override {
    try {
      group_->shutdown();
    } catch (...) {  // NOLINT: a failing shutdown at exit has nobody left to tell
    }
    leave(*store_, rank(), world_size());
  }
  NcclProcessGroup(const NcclProcessGroup&) = delete;
  NcclProcessGroup& operator=(const NcclProcessGroup&) = delete;

  std::string backend() const override { return "nccl"; }

  void all_reduce_sum(std::vector<at::Tensor>& tensors) override {
    if (tensors.empty()) return;
    // One flat buffer per call: a single NCCL launch instead of one per parameter.
    at::Tensor flat = flatten(tensors);
    std::vector<at::Tensor> io{flat};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    group_->allreduce(io, opts)->wait();
    unflatten(flat, tensors);
  }

  void broadcast(std::vector<at::Tensor>& tensors, int root) override {
    if (tensors.empty()) return;
    at::Tensor flat = flatten(tensors);
    std::vector<at::Tensor> io{flat};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    group_->broadcast(io, opts)->wait();
    unflatten(flat, tensors);
  }

  void barrier() override {
    std::vector<at::Tensor> t{at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device_))};
    all_reduce_sum(t);
    t[0].item<float>();  // waits for the collective itself, not only its enqueueing
  }

 private:
  // Tensors of one dtype on this rank's GPU; mixed dtypes or host tensors travel as fp64.
  at::Tensor flatten(const std::vector<at::Tensor>& tensors) const {
    const at::ScalarType type = common_type(tensors);
    std::vector<at::Tensor> parts;
    parts.reserve(tensors.size());
    for (const auto& t : tensors) parts.push_back(t.detach().to(device_, type).reshape({-1}));
    return at::cat(parts);
  }
  static void unflatten(const at::Tensor& flat, std::vector<at::Tensor>& tensors) { unflatten_into(flat, tensors); }
  at::ScalarType common_type(const std::vector<at::Tensor>& tensors) const {
    const at::ScalarType first = tensors.front().scalar_type();
    for (const auto& t : tensors)
      if (t.scalar_type() != first || !t.is_cuda() || t.device() != device_) return at::kDouble;
    return first;
  }

  c10::Device device_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(const LaunchEnv& env, const c10::intrusive_ptr<c10d::Store>& store,
                                              std::chrono::milliseconds timeout) {
  try {
    return std::make_shared<NcclProcessGroup>(env, store, timeout);
  } catch (const c10::Error& e) {
    throw core::Error(cat("data parallel: rank ", env.rank, " could not set up NCCL on cuda:", env.local_rank, ": ",
                          e.what_without_backtrace()));
  }
}

}  // namespace kbrl::train::detail
