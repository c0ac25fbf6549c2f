#include "kbrl/env/dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "kbrl/core/error.hpp"
#include "kbrl/dataset/filter.hpp"
#include "kbrl/dataset/split.hpp"

namespace kbrl::env {

KernelBenchDataset::KernelBenchDataset(DatasetOptions options) : options_(std::move(options)) {
  if (options_.problems.empty()) throw core::InvalidArgument("dataset: no problems");
  if (options_.batch_size < 1) throw core::InvalidArgument("dataset: batch_size must be at least 1");
  if (options_.group_size < 1) throw core::InvalidArgument("dataset: group_size must be at least 1");
  if (!(options_.eval_fraction >= 0 && options_.eval_fraction < 1))
    throw core::InvalidArgument(fmt::format("dataset: eval_fraction {} is outside [0, 1)", options_.eval_fraction));
  if (!options_.eval_problems.empty()) {
    dataset::ProblemFilter held;
    for (const auto& g : options_.eval_problems) {
      held.include = {g};
      if (std::none_of(options_.problems.begin(), options_.problems.end(),
                       [&](const core::Problem& p) { return dataset::filter_matches(held, p); }))
        throw core::InvalidArgument(fmt::format("dataset: eval_problems '{}' matches no problem name or id", g));
    }
    held.include = options_.eval_problems;
    for (const auto& p : options_.problems) (dataset::filter_matches(held, p) ? eval_ : train_).push_back(p);
    if (train_.empty()) throw core::InvalidArgument("dataset: eval_problems hold out every problem, leaving none to train on");
  } else if (options_.eval_fraction > 0) {
    dataset::SplitOptions s;
    s.eval_fraction = options_.eval_fraction;
    s.seed = options_.seed;
    auto split = dataset::split_problems(options_.problems, s);
    train_ = std::move(split.train);
    eval_ = std::move(split.eval);
  } else {
    train_ = options_.problems;
  }
}

std::int64_t KernelBenchDataset::batches_per_epoch() const {
  return static_cast<std::int64_t>(train_.size()) / options_.batch_size;
}

std::vector<std::size_t> KernelBenchDataset::batch_indices(std::int64_t index) const {
  const std::int64_t per_epoch = batches_per_epoch();
  if (per_epoch < 1)
    throw core::InvalidArgument(fmt::format("dataset: {} training problems make no batch of {}", train_.size(),
                                            options_.batch_size));
  if (index < 0) throw core::InvalidArgument("dataset: negative batch index");
  const std::int64_t epoch = index / per_epoch, within = index % per_epoch;
  std::vector<std::size_t> order(train_.size());
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) {
    // A fresh generator per epoch, seeded by (seed, epoch): batch(i) needs no earlier state.
    std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(epoch) + 1);
    for (std::size_t i = order.size(); i > 1; --i) {
      std::uniform_int_distribution<std::size_t> pick(0, i - 1);
      std::swap(order[i - 1], order[pick(rng)]);
    }
  }
  const auto begin = order.begin() + within * options_.batch_size;
  return {begin, begin + options_.batch_size};
}

std::vector<std::unique_ptr<EnvGroupBuilder>> KernelBenchDataset::batch(std::int64_t index,
                                                                        eval::Evaluator& evaluator) const {
  std::vector<std::unique_ptr<EnvGroupBuilder>> out;
  for (const auto i : batch_indices(index))
    out.push_back(std::make_unique<KernelBenchGroupBuilder>(train_[i], options_.env, evaluator, options_.group_size,
                                                            options_.multi_turn, fmt::format("b{}", index)));
  return out;
}

std::vector<std::unique_ptr<EnvGroupBuilder>> KernelBenchDataset::eval_builders(int group_size,
                                                                                eval::Evaluator& evaluator) const {
  std::vector<std::unique_ptr<EnvGroupBuilder>> out;
  for (const auto& p : eval_)
    out.push_back(std::make_unique<KernelBenchGroupBuilder>(p, options_.env, evaluator, group_size, options_.multi_turn,
                                                            "eval"));
  return out;
}

std::vector<std::string> KernelBenchDataset::batch_problem_ids(std::int64_t index) const {
  std::vector<std::string> ids;
  for (const auto i : batch_indices(index)) ids.push_back(train_[i].id);
  return ids;
}

}  // namespace kbrl::env
