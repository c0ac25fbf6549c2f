// The KernelBench problems as an RlDataset (env.hpp): a held-out eval split, then every epoch a
// seeded shuffle of the training problems cut into batches of batch_size problems, each a group
// of group_size envs. batch(i) depends only on (seed, i), so a resumed run gets exactly the batch
// it would have had.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kbrl/env/kernelbench_env.hpp"

namespace kbrl::env {

struct DatasetOptions {
  std::vector<core::Problem> problems;  // loaded and filtered
  double eval_fraction = 0.2;           // held out for evaluation (0: none)
  // Globs on problem names or ids (dataset::ProblemFilter's syntax) naming the held-out problems
  // instead: when set, eval_fraction is not used, and every glob must match a problem.
  std::vector<std::string> eval_problems;
  std::uint64_t seed = 0;
  int batch_size = 4;  // problems per batch
  int group_size = 4;  // rollouts per problem
  bool shuffle = true;
  bool multi_turn = false;
  EnvOptions env;
};

class KernelBenchDataset : public RlDataset {
 public:
  // Throws core::InvalidArgument for no problems, batch_size or group_size below 1, an
  // eval_fraction outside [0, 1), or eval_problems that match no problem or every problem.
  explicit KernelBenchDataset(DatasetOptions options);

  // Full batches per epoch (a last partial batch is dropped, as each batch must be complete).
  std::int64_t batches_per_epoch() const override;
  std::vector<std::unique_ptr<EnvGroupBuilder>> batch(std::int64_t index, eval::Evaluator& evaluator) const override;
  // The held-out problems, group_size envs each.
  std::vector<std::unique_ptr<EnvGroupBuilder>> eval_builders(int group_size,
                                                              eval::Evaluator& evaluator) const override;
  // Problem ids of batch `index`, in order (for logs and tests).
  std::vector<std::string> batch_problem_ids(std::int64_t index) const;

  const std::vector<core::Problem>& train_problems() const { return train_; }
  const std::vector<core::Problem>& eval_problems() const { return eval_; }

 private:
  std::vector<std::size_t> batch_indices(std::int64_t index) const;

  DatasetOptions options_;
  std::vector<core::Problem> train_, eval_;
};

}  // namespace kbrl::env
