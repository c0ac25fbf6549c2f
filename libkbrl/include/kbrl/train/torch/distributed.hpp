// Data-parallel training across processes (part of kbrl::torch). Each process (rank) owns one
// device and a slice of the batch; the TrainingClient sums the loss normalizers and the gradients
// over all ranks, so every rank takes the same optimizer step as one process holding the whole
// batch would. Processes find each other the way torchrun and Slurm launch them (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) through libtorch's TCPStore; on CUDA devices
// the collectives run on NCCL (libtorch's ProcessGroupNCCL). docs/training.md: the launch.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kbrl::train {

// Where this process sits in the job.
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // the GPU index on this host
  int local_world_size = 1;  // ranks on this host
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool distributed() const { return world_size > 1; }
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun's names), falling back to
// SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID under srun. LOCAL_WORLD_SIZE (torchrun), else
// SLURM_NTASKS_PER_NODE or the first count of SLURM_TASKS_PER_NODE, else WORLD_SIZE (one host),
// is the number of ranks on this host. Nothing set: a single process. Throws
// core::ConfigError naming the variable for a malformed or inconsistent value (a rank outside
// [0, WORLD_SIZE), a port outside 1-65535, MASTER_ADDR missing when WORLD_SIZE > 1).
LaunchEnv launch_env_from_environment();

// The collectives data parallelism needs, over all ranks of the job.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  // Joins the job: rank 0 hosts the TCPStore at MASTER_ADDR:MASTER_PORT and the others connect
  // (waiting up to `timeout`). Tensors on a CUDA device go through NCCL; CPU tensors through the
  // store itself (adequate for the small models of development and CI, not for real training).
  static std::shared_ptr<ProcessGroup> join(const LaunchEnv& env, bool cuda,
                                            std::chrono::milliseconds timeout = std::chrono::minutes(5));

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  virtual std::string backend() const = 0;  // "nccl" or "store"

  // In place: every rank ends with the elementwise sum over ranks, identical on all ranks.
  virtual void all_reduce_sum(std::vector<at::Tensor>& tensors) = 0;
  // In place: every rank ends with rank `root`'s values.
  virtual void broadcast(std::vector<at::Tensor>& tensors, int root = 0) = 0;
  virtual void barrier() = 0;

  // Sums named scalars over ranks (metrics, normalizers); the same map on every rank.
  std::map<std::string, double> sum(const std::map<std::string, double>& values);

  // Every rank's bytes, in rank order, on every rank (trajectories and metrics for rank 0's run
  // files). Built on all_reduce_sum: each rank fills its own span of a zeroed buffer.
  std::vector<std::string> all_gather(const std::string& mine);

 protected:
  ProcessGroup(int rank, int world_size) : rank_(rank), world_size_(world_size) {}

 private:
  int rank_;
  int world_size_;
};

// The step a run resumes at, one past the last checkpoint of `run_dir` as rank 0 reads it (0 for
// a new run), the same on every rank of `group` (null: one rank). A run resumes only on as many
// ranks as it started on: otherwise throws core::ConfigError naming checkpoints.jsonl.
std::int64_t resume_step(const std::filesystem::path& run_dir, const std::shared_ptr<ProcessGroup>& group);

}  // namespace kbrl::train
