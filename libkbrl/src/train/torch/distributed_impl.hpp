// The NCCL process group lives in its own translation unit (nccl/distributed_nccl.cpp), built only
// where libtorch has CUDA and nccl.h is found.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>

#include "kbrl/train/torch/distributed.hpp"

namespace kbrl::train::detail {

// At the end of a process group: every rank checks out through the store, and rank 0, whose
// process hosts the store, waits until all have, so that no rank loses the store while it still
// talks to it. Never throws (destructors call it).
void leave(c10d::Store& store, int rank, int world_size);

// Copies consecutive slices of `flat` back into `tensors` (each keeps its dtype and device).
void unflatten_into(const at::Tensor& flat, std::vector<at::Tensor>& tensors);

std::shared_ptr<ProcessGroup> make_nccl_group(const LaunchEnv& env, const c10::intrusive_ptr<c10d::Store>& store,
                                              std::chrono::milliseconds timeout);

}  // namespace kbrl::train::detail
