// No fmt here: torch's include directory carries another fmt (kbrl/core/text.hpp).
#include "kbrl/train/torch/rl_loop.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"
#include "kbrl/dataset/filter.hpp"
#include "kbrl/dataset/load.hpp"
#include "kbrl/env/dataset.hpp"
#include "kbrl/eval/local_evaluator.hpp"
#include "kbrl/eval/settings.hpp"
#include "kbrl/log/run_dir.hpp"
#include "kbrl/train/data_processing.hpp"
#include "kbrl/train/metrics.hpp"
#include "kbrl/train/rollouts.hpp"
#include "kbrl/train/run_log.hpp"
#include "kbrl/train/torch/policy.hpp"
#include "kbrl/train/torch/training_client.hpp"

namespace kbrl::train {

using core::cat;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

class Loop {
 public:
  Loop(const RunConfig& config, Policy& policy, eval::Evaluator& evaluator, const env::RlDataset& dataset,
       const RlLoopOptions& options)
      : config_(config), options_(options), policy_(policy), evaluator_(evaluator), dataset_(dataset) {}

  RlLoopResult run() {
    if (config_.train.async)
      throw core::ConfigError("config", "train.async",
                              "asynchronous sampling is not supported yet by the in-process trainer; set it to false");
    if (!policy_.has_lora())
      throw core::InvalidArgument("run_rl_loop: the policy has no LoRA adapters (attach_lora or load_lora first)");
    RunLog log(config_, options_.progress);
    log_ = &log;
    const std::int64_t per_epoch = dataset_.batches_per_epoch();
    if (per_epoch < 1)
      throw core::ConfigError("config", "dataset.batch_size",
                              cat("the training split has fewer problems than one batch of ", config_.dataset.batch_size));
    total_steps_ = config_.dataset.max_steps > 0 ? config_.dataset.max_steps : per_epoch * config_.dataset.num_epochs;
    TrainingClientOptions to;
    to.micro_batch_tokens = config_.train.micro_batch_tokens;
    to.forward.checkpoint_layers = config_.train.activation_checkpointing;
    client_ = std::make_unique<TrainingClient>(policy_.decoder(), lora_parameters(*policy_.decoder()), to);

    RlLoopResult result;
    result.total_steps = total_steps_;
    result.first_step = resume();
    std::int64_t step = result.first_step;
    bool stopped = false;
    while (step < total_steps_) {
      if (options_.stop != nullptr && options_.stop->load()) {
        stopped = true;
        break;
      }
      if (last_of_this_run(step - 1)) break;
      run_step(step);
      ++step;
    }
    result.steps_done = step;
    if (stopped || step < total_steps_) log.mark_stopped();
    else log.mark_finished();
    result.stopped = stopped;
    return result;
  }

 private:
  void warn(const std::string& text) const {
    if (options_.warn) options_.warn(text);
    else std::cerr << "kbrl-train: warning: " << text << "\n";
  }

  // The next step to run: one past the last checkpoint, with its state loaded; the run log
  // drops what later steps had written.
  std::int64_t resume() {
    std::int64_t next = 0;
    if (const auto last = log_->last_checkpoint()) {
      next = last->step + 1;
      client_->load_state(log_->path() / last->state);
      std::cerr << "kbrl-train: resuming " << log_->path().string() << " at step " << next << " of " << total_steps_
                << "\n";
    }
    first_step_ = next;
    log_->start(next, total_steps_);
    return next;
  }

  // max_steps_this_run ends this invocation after `step`.
  bool last_of_this_run(std::int64_t step) const {
    return options_.max_steps_this_run > 0 && step + 1 - first_step_ >= options_.max_steps_this_run;
  }

  // A pure function of (seed, step): a resumed run samples what the first would have. Call c
  // of the step's rollouts adds c.
  std::uint64_t sampling_seed(std::int64_t step) const {
    return config_.seed * 1000003ULL + static_cast<std::uint64_t>(step) * 7919ULL;
  }

  model::SamplingParams sampling_params() const {
    model::SamplingParams p;
    p.max_tokens = config_.sampling.max_tokens;
    p.temperature = config_.sampling.temperature;
    p.top_p = config_.sampling.top_p;
    p.top_k = config_.sampling.top_k;
    return p;
  }

  RolloutResult rollouts(const std::vector<std::unique_ptr<env::EnvGroupBuilder>>& builders, std::int64_t seed_step,
                         std::string label) const {
    PolicyCompleter completer(policy_, sampling_params());
    RolloutOptions o;
    o.groups_per_call = config_.sampling.groups_per_call;
    o.seed = sampling_seed(seed_step);
    o.progress = options_.progress != nullptr ? options_.progress : stderr;
    o.progress_label = std::move(label);
    o.max_turns = config_.env.multi_turn ? config_.env.max_turns : 1;
    return do_group_rollouts(builders, completer, o);
  }

  // One rollout per held-out problem with the current weights: eval/* metrics.
  void evaluate_held_out(std::int64_t step, boost::json::object& m) {
    const auto builders = dataset_.eval_builders(1, evaluator_);
    if (builders.empty()) return;
    // Seeds apart from the training steps' (whose calls count up from step * 7919).
    const auto r = rollouts(builders, step + (std::int64_t{1} << 40), cat("eval after step ", step + 1));
    add_held_out_metrics(m, r.groups);
  }

  void run_step(std::int64_t step) {
    const auto t_step = Clock::now();
    const auto builders = dataset_.batch(step, evaluator_);
    const auto rollout = rollouts(builders, step, cat("step ", step + 1, "/", total_steps_, " rollouts"));

    const auto t_train = Clock::now();
    DataOptions data_options;
    data_options.advantages.returns = config_.reward.multi_turn;
    data_options.advantages.std_normalize = config_.train.advantage_std_normalize;
    data_options.remove_constant_reward_groups = config_.train.remove_constant_reward_groups;
    const TrainingData data = assemble_training_data(rollout.groups, data_options);
    if (data.constant_groups == builders.size())
      warn(cat("step ", step + 1, ": every group's rewards are uniform (", data.constant_groups,
               " groups): no learning signal this step",
               config_.train.remove_constant_reward_groups ? ", no update" : ""));
    boost::json::object m;
    m["step"] = step;
    std::map<std::string, double> train_metrics;
    if (!data.datums.empty()) train_metrics = train_on(data.datums);
    const double train_s = seconds(t_train);

    // Checkpoint first, then metrics, then the checkpoint's line: a kill in between redoes the
    // step from the previous checkpoint, and the resume drops this step's metrics and traces.
    const auto t_save = Clock::now();
    const bool last = step + 1 == total_steps_;
    const bool stop_requested =
        (options_.stop != nullptr && options_.stop->load()) || last_of_this_run(step);
    const bool save = config_.save_every > 0 ? ((step + 1) % config_.save_every == 0 || last || stop_requested)
                                             : (last || stop_requested);
    std::optional<CheckpointRecord> checkpoint;
    if (save) {
      checkpoint = checkpoint_paths(step);
      client_->save_state(log_->path() / checkpoint->state);
      policy_.save_lora(log_->path() / checkpoint->adapter);
    }
    const double save_s = seconds(t_save);

    const auto rewards = transition_rewards(rollout.groups);
    add_stats(m, "reward/", rewards);
    add_rollout_metrics(m, rollout.groups, config_.env.multi_turn);
    add_stats(m, "advantage/", data.used_advantages);
    for (const auto& [k, v] : train_metrics) m[k] = v;
    if (config_.eval_every > 0 && ((step + 1) % config_.eval_every == 0 || last)) {
      const auto t_eval = Clock::now();
      evaluate_held_out(step, m);
      m["time/eval_held_out"] = seconds(t_eval);
    }
    m["groups/total"] = static_cast<double>(builders.size());
    m["groups/constant"] = static_cast<double>(data.constant_groups);
    m["groups/used"] = static_cast<double>(data.groups_used);
    m["datums"] = static_cast<double>(data.datums.size());
    m["time/sample"] = rollout.sample_seconds;
    m["time/eval_wait"] = rollout.wait_seconds;
    m["time/train"] = train_s;
    m["time/save"] = save_s;
    m["time/step"] = seconds(t_step);
    log_->write_traces(step, rollout.groups, data.advantages);
    log_->write_metrics(m, rewards, data.used_advantages, correct_speedups(rollout.groups));
    log_->write_progress_line(m);
    if (checkpoint) {
      checkpoint->optimizer_steps = client_->step();
      log_->write_checkpoint(*checkpoint);
    }
  }

  std::map<std::string, double> train_on(const std::vector<Datum>& datums) {
    LossConfig lc;
    lc.normalization = normalization_from_name(config_.train.normalization);
    lc.clip_low = config_.train.clip_low;
    lc.clip_high = config_.train.clip_high;
    AdamParams adam;
    adam.lr = config_.train.learning_rate;
    adam.beta1 = config_.train.beta1;
    adam.beta2 = config_.train.beta2;
    adam.eps = config_.train.eps;
    adam.weight_decay = config_.train.weight_decay;
    adam.grad_clip_norm = config_.train.grad_clip;
    const LossKind kind = loss_kind_from_name(config_.train.loss);
    const int substeps = std::max(1, std::min<int>(config_.train.num_substeps, static_cast<int>(datums.size())));
    std::map<std::string, double> out;
    for (int s = 0; s < substeps; ++s) {
      std::vector<Datum> part;
      for (std::size_t i = static_cast<std::size_t>(s); i < datums.size(); i += static_cast<std::size_t>(substeps))
        part.push_back(datums[i]);
      const auto fb = client_->forward_backward(part, kind, lc);
      const auto opt = client_->optim_step(adam);
      for (const auto& [k, v] : fb.metrics) out["train/" + k] += v / substeps;
      for (const auto& [k, v] : opt) out["train/" + k] = v;
    }
    return out;
  }

  const RunConfig& config_;
  const RlLoopOptions& options_;
  Policy& policy_;
  eval::Evaluator& evaluator_;
  const env::RlDataset& dataset_;
  RunLog* log_ = nullptr;
  std::unique_ptr<TrainingClient> client_;
  std::int64_t total_steps_ = 0;
  std::int64_t first_step_ = 0;
};

// --- kbrl-train's composition from a RunConfig ---------------------------------------------

PolicyOptions policy_options(const RunConfig& config) {
  const auto& m = config.model;
  if (m.path.empty()) throw core::ConfigError("config", "model.path", "is required (a Hugging Face checkpoint folder)");
  PolicyOptions o;
  o.model = m.path;
  o.device = m.device;
  o.dtype = m.dtype;
  o.chat_template = m.chat_template;
  return o;
}

model::LoraConfig lora_config(const RunConfig& config) {
  const auto& l = config.lora;
  model::LoraConfig lc;
  lc.rank = l.rank;
  lc.alpha = l.alpha;
  lc.use_rslora = l.rslora;
  lc.dropout = l.dropout;
  lc.target_modules = l.target_modules;
  lc.seed = config.seed;
  return lc;
}

eval::LocalEvaluatorConfig run_evaluator_config(const RunConfig& config) {
  eval::LocalEvaluatorConfig ec = eval::local_evaluator_config(config.evaluator);
  if (ec.work_dir.empty()) ec.work_dir = fs::path(config.log_path) / "eval_work";  // a run keeps its builds beside it
  return ec;
}

env::DatasetOptions dataset_options(const RunConfig& config, const reward::RewardRegistry& registry) {
  const auto& d = config.dataset;
  env::DatasetOptions o;
  o.problems = dataset::filter_problems(dataset::load_problems(d.problems), problem_filter(d));
  if (o.problems.empty())
    throw core::ConfigError("config", "dataset.problems", cat("no problems in ", d.problems, " pass the filters"));
  o.eval_fraction = d.eval_fraction;
  o.seed = config.seed;
  o.batch_size = d.batch_size;
  o.group_size = d.group_size;
  o.shuffle = d.shuffle;
  o.multi_turn = config.env.multi_turn;
  auto& e = o.env;
  e.prompt.language = core::parse_kernel_language(config.prompt.language);
  e.prompt.precision = core::parse_precision(config.prompt.precision);
  e.prompt.one_shot = config.prompt.one_shot;
  e.prompt.thinking_instruction = config.prompt.thinking;
  e.prompt.hardware = config.prompt.hardware;
  e.eval = config.evaluator.options;
  e.reward = config.reward;
  e.registry = &registry;
  e.max_turns = config.env.max_turns;
  e.early_stop = config.env.early_stop;
  e.early_stop_min_speedup = config.env.early_stop_min_speedup;
  e.kernel_excerpt_chars = config.env.kernel_excerpt_chars;
  e.error_excerpt_chars = config.env.error_excerpt_chars;
  return o;
}

}  // namespace

RlLoopResult run_rl_loop(const RunConfig& config, Policy& policy, eval::Evaluator& evaluator,
                         const env::RlDataset& dataset, const RlLoopOptions& options) {
  return Loop(config, policy, evaluator, dataset, options).run();
}

RlLoopResult run_rl_loop(const RunConfig& config, const RlLoopOptions& options, const reward::RewardRegistry& registry) {
  if (config.train.async)
    throw core::ConfigError("config", "train.async",
                            "asynchronous sampling is not supported yet by the in-process trainer; set it to false");
  // Another live process on this run directory: say so now, not after minutes of loading a
  // model (the loop takes the lock itself; this only answers early).
  if (fs::is_directory(config.log_path))
    if (const auto status = log::read_run_status(config.log_path); status.state == "running")
      throw core::Error(cat(config.log_path, " is being run by process ", status.pid, " on ", status.host,
                            ": one training process per run directory"));
  // The cheap checks first: problems, then the checkpoint, then the evaluator's workers.
  const env::KernelBenchDataset dataset(dataset_options(config, registry));
  Policy policy(policy_options(config));
  if (!config.lora.init_adapter.empty()) policy.load_lora(config.lora.init_adapter);
  else policy.attach_lora(lora_config(config));
  // evaluator.endpoints: the fleet of kbrl-evald servers (docs/services.md); else this machine.
  std::unique_ptr<eval::Evaluator> evaluator;
  if (config.evaluator.endpoints.empty()) evaluator = std::make_unique<eval::LocalEvaluator>(run_evaluator_config(config));
  else evaluator = eval::make_evaluator(config.evaluator);
  return run_rl_loop(config, policy, *evaluator, dataset, options);
}

}  // namespace kbrl::train
