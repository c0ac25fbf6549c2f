// No fmt here: torch's include directory carries another fmt (kbrl/core/text.hpp).
#include "kbrl/train/torch/rl_loop.hpp"

#include <boost/json.hpp>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "kbrl/core/cpus.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"
#include "kbrl/dataset/filter.hpp"
#include "kbrl/dataset/load.hpp"
#include "kbrl/env/dataset.hpp"
#include "kbrl/eval/local_evaluator.hpp"
#include "kbrl/eval/settings.hpp"
#include "kbrl/log/run_dir.hpp"
#include "kbrl/rag/retrieval_prompt.hpp"
#include "kbrl/train/torch/checkpoint_embedder.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"
#include "kbrl/model/torch/torch_tensors.hpp"
#include "kbrl/train/data_processing.hpp"
#include "kbrl/train/metrics.hpp"
#include "kbrl/train/rollouts.hpp"
#include "kbrl/train/run_log.hpp"
#include "kbrl/train/sft_data.hpp"
#include "kbrl/train/torch/distributed.hpp"
#include "kbrl/net/openai_client.hpp"
#include "kbrl/train/torch/policy.hpp"
#include "kbrl/train/torch/server_sampling.hpp"
#include "kbrl/train/torch/training_client.hpp"

namespace kbrl::train {

using core::cat;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Rollouts that stop at the next sampling call once `cancel` is set: a stopping asynchronous run
// does not finish sampling a batch it will never train.
struct Cancelled {};

struct ScopeExit {
  std::function<void()> f;
  explicit ScopeExit(std::function<void()> fn) : f(std::move(fn)) {}
  ~ScopeExit() { f(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;
};
class CancellableCompleter : public TokenCompleter {
 public:
  CancellableCompleter(std::unique_ptr<TokenCompleter> inner, const std::atomic<bool>* cancel)
      : inner_(std::move(inner)), cancel_(cancel) {}
  std::vector<core::Transition> complete(const std::vector<std::vector<core::Message>>& conversations, std::int64_t n,
                                         std::uint64_t seed, const std::vector<std::uint64_t>& prompt_keys) override {
    if (cancel_ != nullptr && cancel_->load()) throw Cancelled{};
    return inner_->complete(conversations, n, seed, prompt_keys);
  }

 private:
  std::unique_ptr<TokenCompleter> inner_;
  const std::atomic<bool>* cancel_;
};

// One batch as this rank sampled it: its share of the groups, their rollouts with the last
// turn's evaluations in flight, and the weights it was sampled with.
struct Sampled {
  std::int64_t step = 0;
  std::int64_t version = 0;  // sampled with the weights after this many steps
  std::size_t total_groups = 0;
  // Heap-held: the pending rollouts point at them.
  std::vector<std::unique_ptr<env::EnvGroupBuilder>> builders;
  std::unique_ptr<TokenCompleter> completer;
  std::optional<PendingRollouts> pending;
  std::optional<RolloutResult> result;  // once every evaluation is in (the pipeline's waiter)
  double sample_start = 0, sample_end = 0, eval_end = 0;  // seconds since the loop started
};

// The LoRA tensors of a decoder, in lora_parameters' order (the TrainingClient's).
std::vector<at::Tensor> adapter_tensors(model::DecoderModel& decoder) {
  std::vector<at::Tensor> out;
  for (auto& [name, linear] : decoder.linears()) {
    if (!linear->lora) continue;
    out.push_back(linear->lora->a);
    out.push_back(linear->lora->b);
  }
  return out;
}

class Loop {
 public:
  Loop(const RunConfig& config, Policy& policy, eval::Evaluator& evaluator, const env::RlDataset& dataset,
       const RlLoopOptions& options)
      : config_(config), options_(options), policy_(policy), evaluator_(evaluator), dataset_(dataset),
        path_(config.log_path), t0_(Clock::now()) {
    if (options_.process_group && options_.process_group->world_size() > 1) {
      group_ = options_.process_group;
      rank_ = group_->rank();
      world_ = group_->world_size();
    }
  }

  ~Loop() { stop_sampler(); }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  RlLoopResult run() {
    if (!policy_.has_lora())
      throw core::InvalidArgument("run_rl_loop: the policy has no LoRA adapters (attach_lora or load_lora first)");
    const std::int64_t per_epoch = dataset_.batches_per_epoch();
    if (per_epoch < 1)
      throw core::ConfigError("config", "dataset.batch_size",
                              cat("the training split has fewer problems than one batch of ", config_.dataset.batch_size));
    k_ = config_.train.max_steps_off_policy;
    if (config_.sampling.backend == "openai") start_server_sampling();
    // Where the run stands is settled before rank 0 takes the run directory: a launch that may
    // not resume it leaves its files as they were.
    const std::int64_t next = resume_step(path_, group_);
    if (writer()) log_ = std::make_unique<RunLog>(config_, options_.progress);
    total_steps_ = config_.dataset.max_steps > 0 ? config_.dataset.max_steps : per_epoch * config_.dataset.num_epochs;
    TrainingClientOptions to;
    to.micro_batch_tokens = config_.train.micro_batch_tokens;
    to.forward.checkpoint_layers = config_.train.activation_checkpointing;
    // The policy's log p of each sampled token is taken from the distribution it was drawn from,
    // as the sampler's logprobs are: at temperature 0.7 p and q are otherwise two distributions
    // (KL ~0.1 per token on the CPU demo), and the ratio p/q biases every update.
    if (config_.sampling.temperature > 0) to.forward.temperature = config_.sampling.temperature;
    to.process_group = group_;
    client_ = std::make_unique<TrainingClient>(policy_.decoder(), lora_parameters(*policy_.decoder()), to);

    RlLoopResult result;
    result.total_steps = total_steps_;
    result.first_step = resume(next);
    end_ = options_.max_steps_this_run > 0 ? std::min(total_steps_, first_step_ + options_.max_steps_this_run)
                                           : total_steps_;
    if (k_ > 0) start_sampler();
    std::int64_t step = result.first_step;
    bool stopped = false;
    while (step < end_) {
      if (stop_agreed_ || (world_ == 1 && stop_requested_here())) {
        stopped = true;
        break;
      }
      run_step(step, next_batch(step));
      ++step;
    }
    stop_sampler();
    result.steps_done = step;
    if (writer()) {
      if (stopped || step < total_steps_) log_->mark_stopped();
      else log_->mark_finished();
    }
    result.stopped = stopped;
    result.rank = rank_;
    return result;
  }

 private:
  bool writer() const { return rank_ == 0; }
  bool stop_requested_here() const { return options_.stop != nullptr && options_.stop->load(); }
  double now_s() const { return seconds(t0_); }

  void warn(const std::string& text) const {
    if (!writer()) return;
    if (options_.warn) options_.warn(text);
    else if (log_) log_->note("kbrl-train: warning: " + text);
    else std::cerr << "kbrl-train: warning: " << text << "\n";
  }

  std::FILE* progress() const {
    // One progress display: rank 0's, and none from a sampler thread (it would interleave).
    if (!writer() || k_ > 0) return nullptr;
    return options_.progress != nullptr ? options_.progress : stderr;
  }

  // Loads step `next`'s state on every rank; the run log drops what later steps had written.
  std::int64_t resume(std::int64_t next) {
    if (next > 0) {
      client_->load_state(path_ / checkpoint_paths(next - 1).state);
      if (writer())
        log_->note(cat("kbrl-train: resuming ", path_.string(), " at step ", next, " of ", total_steps_,
                       world_ > 1 ? cat(" on ", world_, " ranks") : std::string()));
    }
    first_step_ = next;
    if (writer()) log_->start(next, total_steps_);
    if (k_ > 0) load_versions(next);
    return next;
  }

  // --- sampling ---------------------------------------------------------------------------

  // A pure function of (seed, step): a resumed run samples what the first would have. Turn t of
  // the step's rollouts adds t.
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

  // Two threads sample at once only in the pipeline, and then neither captures CUDA graphs: a
  // capture forbids work from other threads on the device (cudaStreamCaptureModeGlobal).
  model::SamplerOptions sampler_options() const {
    model::SamplerOptions o;
    o.cuda_graphs = k_ == 0;
    return o;
  }

  RolloutOptions rollout_options(std::int64_t seed_step, std::string label, std::vector<std::uint64_t> keys) const {
    RolloutOptions o;
    o.groups_per_call = config_.sampling.groups_per_call;
    o.seed = sampling_seed(seed_step);
    o.group_keys = std::move(keys);
    o.progress = progress();
    o.progress_label = std::move(label);
    o.max_turns = config_.env.multi_turn ? config_.env.max_turns : 1;
    return o;
  }

  // sampling.backend=openai: the server samples from the adapters this loop publishes there.
  void start_server_sampling() {
    if (k_ > 0)
      throw core::ConfigError("config", "sampling.backend",
                              "openai sampling runs synchronous steps only for now: set train.max_steps_off_policy=0");
    if (world_ > 1)
      throw core::ConfigError("config", "sampling.backend",
                              "openai sampling runs on one rank for now (the server is shared; launch one process)");
    net::OpenAiClientConfig c;
    c.base_url = config_.sampling.endpoint;
    c.api_key_env = config_.sampling.api_key_env;
    c.max_in_flight = config_.sampling.max_in_flight;
    c.max_retries = config_.sampling.max_retries;
    c.attempt_timeout_s = config_.sampling.request_timeout_s;
    server_ = std::make_unique<net::OpenAiClient>(c);
    fs::path run = fs::absolute(path_).lexically_normal();
    if (!run.has_filename()) run = run.parent_path();
    served_ = std::make_unique<ServedAdapters>(policy_, *server_, path_ / "served_adapters", run.filename().string());
  }

  // Who samples version `version` of the weights: the server (its adapters published first), or
  // `decoder` in this process.
  std::unique_ptr<TokenCompleter> completer_for(std::int64_t version,
                                                std::shared_ptr<const model::DecoderModel> decoder) const {
    if (served_)
      return std::make_unique<ServerCompleter>(policy_, *server_, served_->publish(version), sampling_params());
    return std::make_unique<PolicyCompleter>(policy_, sampling_params(), std::move(decoder), sampler_options());
  }

  // This rank's share of a batch: groups g with g % world == rank, keyed by g so that each draws
  // what it draws in a run of one rank.
  template <class Builders>
  std::vector<std::uint64_t> take_share(Builders& all, Builders& mine) const {
    std::vector<std::uint64_t> keys;
    for (std::size_t g = static_cast<std::size_t>(rank_); g < all.size(); g += static_cast<std::size_t>(world_)) {
      mine.push_back(std::move(all[g]));
      keys.push_back(g);
    }
    return keys;
  }

  // Samples this rank's share of batch `step` (its evaluations submitted as it goes), from
  // `decoder` (null: the live policy) holding the weights after `version` steps.
  std::unique_ptr<Sampled> sample_batch(std::int64_t step, std::shared_ptr<const model::DecoderModel> decoder,
                                        std::int64_t version) const {
    auto b = std::make_unique<Sampled>();
    b->step = step;
    b->version = version;
    b->sample_start = now_s();
    auto all = dataset_.batch(step, evaluator_);
    b->total_groups = all.size();
    auto keys = take_share(all, b->builders);
    b->completer = std::make_unique<CancellableCompleter>(completer_for(version, std::move(decoder)), &cancel_);
    b->pending.emplace(start_group_rollouts(
        b->builders, *b->completer,
        rollout_options(step, cat("step ", step + 1, "/", total_steps_, " rollouts"), std::move(keys))));
    b->sample_end = now_s();
    return b;
  }

  std::unique_ptr<Sampled> next_batch(std::int64_t step) {
    if (k_ == 0) return sample_batch(step, nullptr, step);
    const auto t = Clock::now();
    const ScopeExit waited([&] { batch_wait_s_ = seconds(t); });
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return sampler_error_ || (!ready_.empty() && ready_.front()->step == step); });
    if (!ready_.empty() && ready_.front()->step == step) {
      auto b = std::move(ready_.front());
      ready_.pop_front();
      return b;
    }
    std::rethrow_exception(sampler_error_);
  }

  // --- the pipeline (train.max_steps_off_policy = k >= 1) ------------------------------------
  // Batch s is sampled from the weights after step v(s) = s - k (the oldest kept, at the start
  // of a run or when a checkpoint holds no older ones), taken from versions_: the trainer adds
  // each finished step's adapters there, the sampler thread copies the ones it needs into a
  // snapshot decoder of its own (the base weights are shared, read-only). So sampling never
  // reads adapters the optimizer is writing, and which weights sample which batch does not
  // depend on timing: a resumed run samples what the first one did.

  std::int64_t version_for(std::int64_t step) const { return std::max(oldest_version_, step - k_); }

  std::vector<at::Tensor> live_adapters() const {
    std::vector<at::Tensor> out;
    const c10::NoGradGuard no_grad;
    for (const auto& [name, t] : client_->parameters()) out.push_back(t.detach().clone());
    return out;
  }

  fs::path versions_file(std::int64_t step) const {
    return path_ / fs::path(checkpoint_paths(step).state).parent_path() / "sampler_adapters.safetensors";
  }

  // The weights of the steps before `next` that batches next .. next + k - 1 sample with, from
  // the checkpoint of step next - 1; the live weights are version `next`.
  void load_versions(std::int64_t next) {
    versions_[next] = live_adapters();
    oldest_version_ = next;
    if (next == 0) return;
    const fs::path file = versions_file(next - 1);
    if (!fs::exists(file)) {
      warn(cat(file.string(), " is missing (the run was checkpointed with train.max_steps_off_policy 0): the next ", k_,
               " batches sample from the resumed weights"));
      return;
    }
    const auto tensors = model::load_tensors(file);
    const auto& params = client_->parameters();
    for (std::int64_t v = std::max<std::int64_t>(0, next - k_); v < next; ++v) {
      std::vector<at::Tensor> adapters;
      for (const auto& [name, t] : params) {
        const auto it = tensors.find(cat("v", v, ".", name));
        if (it == tensors.end()) break;
        adapters.push_back(it->second.to(t.options()));
      }
      if (adapters.size() != params.size()) continue;  // checkpointed with a smaller k
      versions_[v] = std::move(adapters);
      oldest_version_ = std::min(oldest_version_, v);
    }
  }

  // Rank 0 writes the versions a resume at step + 1 needs beside the checkpoint of `step`.
  void save_versions(std::int64_t step) const {
    std::map<std::string, at::Tensor> out;
    const auto& params = client_->parameters();
    for (const auto& [v, adapters] : versions_)
      if (v <= step && v >= step + 1 - k_)
        for (std::size_t i = 0; i < params.size(); ++i) out[cat("v", v, ".", params[i].first)] = adapters[i];
    const fs::path file = versions_file(step);
    fs::create_directories(file.parent_path());
    model::save_tensors(file, out, {{"format", "kbrl.sampler_adapters.v1"}});
  }

  // After step `step`: its weights are version step + 1; versions no batch will need go.
  void publish_version(std::int64_t step) {
    auto adapters = live_adapters();  // cloned on this thread, before the sampler can see them
    const std::lock_guard lock(mutex_);
    versions_[step + 1] = std::move(adapters);
    for (auto it = versions_.begin(); it != versions_.end() && it->first < step + 1 - k_;) it = versions_.erase(it);
    changed_.notify_all();
  }

  void start_sampler() {
    snapshot_ = policy_.adapter_snapshot();
    sampler_ = std::thread([this] {
      try {
        for (std::int64_t s = first_step_; s < end_; ++s) {
          const std::int64_t v = version_for(s);
          std::vector<at::Tensor> adapters;
          {
            std::unique_lock lock(mutex_);
            changed_.wait(lock, [&] { return cancel_.load() || versions_.count(v) > 0; });
            if (cancel_.load()) return;
            adapters = versions_.at(v);
          }
          {
            const c10::NoGradGuard no_grad;
            const auto into = adapter_tensors(*snapshot_);
            for (std::size_t i = 0; i < into.size(); ++i) into[i].copy_(adapters.at(i));
          }
          auto b = sample_batch(s, snapshot_, v);
          const std::lock_guard lock(mutex_);
          sampled_.push_back(std::move(b));
          changed_.notify_all();
        }
      } catch (const Cancelled&) {
      } catch (...) {
        fail(std::current_exception());
      }
    });
    // The waiter collects each batch's evaluations as they finish (and so times them), in
    // order, while the trainer may still be busy with an earlier batch.
    waiter_ = std::thread([this] {
      try {
        for (std::int64_t s = first_step_; s < end_; ++s) {
          std::unique_ptr<Sampled> b;
          {
            std::unique_lock lock(mutex_);
            changed_.wait(lock, [&] { return cancel_.load() || !sampled_.empty(); });
            if (cancel_.load()) return;
            b = std::move(sampled_.front());
            sampled_.pop_front();
          }
          b->result = finish_group_rollouts(std::move(*b->pending));
          b->pending.reset();
          b->eval_end = now_s();
          const std::lock_guard lock(mutex_);
          ready_.push_back(std::move(b));
          changed_.notify_all();
        }
      } catch (...) {
        fail(std::current_exception());
      }
    });
  }

  void fail(std::exception_ptr error) {
    const std::lock_guard lock(mutex_);
    if (!sampler_error_) sampler_error_ = std::move(error);
    changed_.notify_all();
  }

  void stop_sampler() {
    if (!sampler_.joinable()) return;
    {
      const std::lock_guard lock(mutex_);
      cancel_ = true;
      changed_.notify_all();
    }
    sampler_.join();
    waiter_.join();
    // Batches sampled ahead of a stop: never trained, redone by a resume.
    sampled_.clear();
    ready_.clear();
  }

  // --- a step ------------------------------------------------------------------------------

  struct Gathered {
    std::vector<core::TrajectoryGroup> groups;  // the whole batch, in batch order
    double sample_seconds = 0, wait_seconds = 0;  // the slowest rank's
    bool stop = false;                            // any rank was asked to stop
  };

  // Every rank's groups on every rank (each rank trains its share of the datums of all of them,
  // rank 0 writes them), and whether any rank was asked to stop.
  Gathered gather(RolloutResult mine, std::size_t total_groups) const {
    Gathered out;
    out.sample_seconds = mine.sample_seconds;
    out.wait_seconds = mine.wait_seconds;
    out.stop = stop_requested_here();
    if (!group_) {
      out.groups = std::move(mine.groups);
      return out;
    }
    boost::json::object o;
    o["groups"] = boost::json::value_from(mine.groups);
    o["sample_seconds"] = mine.sample_seconds;
    o["wait_seconds"] = mine.wait_seconds;
    o["stop"] = out.stop;
    const auto parts = group_->all_gather(boost::json::serialize(o));
    std::vector<std::vector<core::TrajectoryGroup>> per_rank;
    for (const auto& p : parts) {
      const auto v = core::parse_json(p).as_object();
      per_rank.push_back(boost::json::value_to<std::vector<core::TrajectoryGroup>>(v.at("groups")));
      out.sample_seconds = std::max(out.sample_seconds, v.at("sample_seconds").to_number<double>());
      out.wait_seconds = std::max(out.wait_seconds, v.at("wait_seconds").to_number<double>());
      out.stop = out.stop || v.at("stop").as_bool();
    }
    out.groups.resize(total_groups);
    for (std::size_t g = 0; g < total_groups; ++g) {
      auto& from = per_rank.at(g % static_cast<std::size_t>(world_));
      const std::size_t i = g / static_cast<std::size_t>(world_);
      if (i >= from.size()) throw core::Error(cat("data parallel: rank ", g % world_, " sent no group ", g));
      out.groups[g] = std::move(from[i]);
    }
    return out;
  }

  // One rollout per held-out problem with the current weights: eval/* metrics.
  void evaluate_held_out(std::int64_t step, boost::json::object& m) {
    auto all = dataset_.eval_builders(1, evaluator_);
    if (all.empty()) return;
    const std::size_t total = all.size();
    std::vector<std::unique_ptr<env::EnvGroupBuilder>> mine;
    auto keys = take_share(all, mine);
    const auto completer = completer_for(step + 1, policy_.decoder());
    // Seeds apart from the training steps' (whose turns count up from step * 7919).
    const auto r = do_group_rollouts(
        mine, *completer, rollout_options(step + (std::int64_t{1} << 40), cat("eval after step ", step + 1), std::move(keys)));
    const auto gathered = gather(r, total);
    if (writer()) add_held_out_metrics(m, gathered.groups);
  }

  void run_step(std::int64_t step, std::unique_ptr<Sampled> batch) {
    if (!batch->result) {
      batch->result = finish_group_rollouts(std::move(*batch->pending));
      batch->pending.reset();
      batch->eval_end = now_s();
    }
    RolloutResult rollout = std::move(*batch->result);
    const double eval_end = batch->eval_end;
    const double eval_start =
        rollout.first_submission ? std::chrono::duration<double>(*rollout.first_submission - t0_).count() : eval_end;
    Gathered batch_data = gather(std::move(rollout), batch->total_groups);
    if (batch_data.stop) stop_agreed_ = true;

    // A batch sampled from weights more than k steps old trains nothing (the pipeline's gate
    // keeps this from happening; the check keeps the losses' importance ratios bounded anyway).
    const std::int64_t lag = step - batch->version;
    const bool stale = k_ > 0 && lag > k_;
    const double train_start = now_s();
    DataOptions data_options;
    data_options.advantages.returns = config_.reward.multi_turn;
    data_options.advantages.std_normalize = config_.train.advantage_std_normalize;
    data_options.advantages.negative_weight = config_.train.negative_advantage_weight;
    data_options.remove_constant_reward_groups = config_.train.remove_constant_reward_groups;
    data_options.mask_truncated = config_.train.mask_truncated;
    TrainingData data = assemble_training_data(batch_data.groups, data_options);
    if (stale) data.datums.clear();
    const auto& groups = batch_data.groups;
    if (data.constant_groups == groups.size())
      warn(cat("step ", step + 1, ": every group's rewards are uniform (", data.constant_groups,
               " groups): no learning signal this step",
               config_.train.remove_constant_reward_groups ? ", no update" : ""));
    boost::json::object m;
    m["step"] = step;
    std::map<std::string, double> train_metrics;
    if (!data.datums.empty()) train_metrics = train_on(data.datums, step);
    const double train_end = now_s();
    if (k_ > 0) publish_version(step);

    // Checkpoint first, then metrics, then the checkpoint's line: a kill in between redoes the
    // step from the previous checkpoint, and the resume drops this step's metrics and traces.
    const auto t_save = Clock::now();
    const bool last = step + 1 == total_steps_;
    // One rank: a stop asked for while this step trained still saves it (more ranks agree on a
    // stop at the next step's gather, and save then).
    if (world_ == 1 && stop_requested_here()) stop_agreed_ = true;
    const bool stop_now = stop_agreed_ || step + 1 >= end_;
    const bool save = config_.save_every > 0 ? ((step + 1) % config_.save_every == 0 || last || stop_now)
                                             : (last || stop_now);
    std::optional<CheckpointRecord> checkpoint;
    if (save) {
      checkpoint = checkpoint_paths(step);
      client_->save_state(path_ / checkpoint->state);  // every rank: rank 0 writes, the others wait
      if (writer()) {
        policy_.save_lora(path_ / checkpoint->adapter);
        if (k_ > 0) save_versions(step);
      }
    }
    const double save_s = seconds(t_save);

    if (config_.eval_every > 0 && ((step + 1) % config_.eval_every == 0 || last)) {
      const auto t_eval = Clock::now();
      evaluate_held_out(step, m);
      m["time/eval_held_out"] = seconds(t_eval);
    }
    if (!writer()) return;
    const auto rewards = transition_rewards(groups);
    add_stats(m, "reward/", rewards);
    add_rollout_metrics(m, groups, config_.env.multi_turn);
    add_stats(m, "advantage/", data.used_advantages);
    for (const auto& [k, v] : train_metrics) m[k] = v;
    m["groups/total"] = static_cast<double>(groups.size());
    m["groups/constant"] = static_cast<double>(data.constant_groups);
    m["groups/used"] = stale ? 0.0 : static_cast<double>(data.groups_used);
    m["datums"] = static_cast<double>(data.datums.size());
    if (config_.train.mask_truncated) m["datums/truncated_masked"] = static_cast<double>(data.truncated_masked);
    if (k_ > 0) {
      m["async/policy_lag"] = static_cast<double>(lag);
      m["async/dropped_stale"] = stale ? static_cast<double>(groups.size()) : 0.0;
    }
    m["time/sample"] = batch_data.sample_seconds;
    m["time/eval_wait"] = batch_data.wait_seconds;
    m["time/train"] = train_end - train_start;
    m["time/save"] = save_s;
    if (k_ > 0) m["time/batch_wait"] = batch_wait_s_;  // the trainer idle, waiting for the pipeline
    // The timeline (seconds since this process started the loop, rank 0's clock): sampling,
    // evaluation (first submission to last result) and training of this batch.
    const double step_end = now_s();
    m["time/sample_start"] = batch->sample_start;
    m["time/sample_end"] = batch->sample_end;
    m["time/eval_start"] = eval_start;
    m["time/eval_end"] = eval_end;
    m["time/train_start"] = train_start;
    m["time/train_end"] = train_end;
    m["time/step_end"] = step_end;
    // Since the previous step ended (the first: since its batch began sampling).
    m["time/step"] = step_end - (previous_step_end_ ? *previous_step_end_ : batch->sample_start);
    previous_step_end_ = step_end;
    for (const auto& line : retrieval_notes(groups, retrieval_noted_)) log_->note("kbrl-train: " + line);
    log_->write_traces(step, groups, data.advantages);
    log_->write_metrics(m, rewards, data.used_advantages, correct_speedups(groups));
    log_->write_progress_line(m);
    if (checkpoint) {
      checkpoint->optimizer_steps = client_->step();
      checkpoint->world_size = world_;
      log_->write_checkpoint(*checkpoint);
    }
  }

  std::map<std::string, double> train_on(const std::vector<Datum>& datums, std::int64_t step) {
    LossConfig lc;
    lc.normalization = normalization_from_name(config_.train.normalization);
    lc.clip_low = config_.train.clip_low;
    lc.clip_high = config_.train.clip_high;
    AdamParams adam;
    adam.lr = config_.train.learning_rate;
    // A fresh AdamW moves every coordinate by about the learning rate on its first steps,
    // whatever its gradient: a warmup keeps those steps small (from a tightly fitted warm start).
    const int warmup = config_.train.warmup_steps;
    if (step < warmup) adam.lr *= static_cast<double>(step + 1) / warmup;
    adam.beta1 = config_.train.beta1;
    adam.beta2 = config_.train.beta2;
    adam.eps = config_.train.eps;
    adam.weight_decay = config_.train.weight_decay;
    adam.grad_clip_norm = config_.train.grad_clip;
    const LossKind kind = loss_kind_from_name(config_.train.loss);
    const int substeps = std::max(1, std::min<int>(config_.train.num_substeps, static_cast<int>(datums.size())));
    std::map<std::string, double> out;
    for (int s = 0; s < substeps; ++s) {
      // Substep s trains datums s, s + substeps, ...; under data parallelism each rank takes every
      // world-th of them (the client sums the normalizers and gradients over the ranks).
      std::vector<Datum> part;
      std::size_t j = 0;
      for (std::size_t i = static_cast<std::size_t>(s); i < datums.size(); i += static_cast<std::size_t>(substeps), ++j)
        if (j % static_cast<std::size_t>(world_) == static_cast<std::size_t>(rank_)) part.push_back(datums[i]);
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
  fs::path path_;
  Clock::time_point t0_;
  std::shared_ptr<ProcessGroup> group_;  // null: one rank
  int rank_ = 0, world_ = 1;
  std::unique_ptr<RunLog> log_;  // rank 0's
  std::unique_ptr<TrainingClient> client_;
  std::unique_ptr<net::OpenAiClient> server_;  // sampling.backend=openai
  std::unique_ptr<ServedAdapters> served_;
  std::int64_t total_steps_ = 0;
  std::int64_t first_step_ = 0;
  std::int64_t end_ = 0;  // this invocation stops before it
  std::int64_t k_ = 0;    // train.max_steps_off_policy
  bool stop_agreed_ = false;
  std::optional<double> previous_step_end_;
  std::set<std::string> retrieval_noted_;  // problems whose retrieved examples the run log has shown

  // The pipeline: versions_ and ready_ are shared with the sampler thread under mutex_.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::int64_t, std::vector<at::Tensor>> versions_;
  std::int64_t oldest_version_ = 0;
  std::deque<std::unique_ptr<Sampled>> sampled_;  // evaluations in flight
  std::deque<std::unique_ptr<Sampled>> ready_;    // evaluated, for the trainer
  double batch_wait_s_ = 0;  // the trainer's wait for its last batch
  std::exception_ptr sampler_error_;
  std::atomic<bool> cancel_{false};
  std::shared_ptr<model::DecoderModel> snapshot_;
  std::thread sampler_, waiter_;
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

// prompt.retrieval.index: each problem's retrieved examples before its task, their token budget
// counted with the policy's own tokenizer (the checkpoint's tokenizer.json).
std::shared_ptr<const prompt::ExampleProvider> example_provider(const RunConfig& config) {
  const auto& r = config.prompt.retrieval;
  if (!r.enabled()) return nullptr;
  if (config.model.path.empty()) throw core::ConfigError("config", "model.path", "is required (a Hugging Face checkpoint folder)");
  auto tok = std::make_shared<const tokenizer::Tokenizer>(
      tokenizer::Tokenizer::from_file(fs::path(config.model.path) / "tokenizer.json"));
  rag::TokenCounter count = [tok](std::string_view text) { return tok->encode(text).size(); };
  return rag::make_example_provider(r, core::parse_kernel_language(config.prompt.language), std::move(count),
                                    [](const std::string& field) { return "prompt.retrieval." + field; },
                                    load_checkpoint_embedder);
}

env::DatasetOptions dataset_options(const RunConfig& config, const reward::RewardRegistry& registry) {
  const auto& d = config.dataset;
  env::DatasetOptions o;
  const fs::path problems = problems_path(config);
  o.problems = dataset::filter_problems(dataset::load_problems(problems), problem_filter(d));
  if (o.problems.empty())
    throw core::ConfigError("config", "dataset.problems", cat("no problems in ", problems.string(), " pass the filters"));
  o.eval_fraction = d.eval_fraction;
  o.eval_problems = d.eval_problems;
  o.seed = config.seed;
  o.batch_size = d.batch_size;
  o.group_size = d.group_size;
  o.shuffle = d.shuffle;
  o.multi_turn = config.env.multi_turn;
  auto& e = o.env;
  e.prompt = task_prompt_options(config);  // what SFT's corpus examples are asked, too (sft_data.hpp)
  e.prompt.examples = example_provider(config);
  e.eval = config.evaluator.options;
  e.reward = config.reward;
  e.registry = &registry;
  e.max_turns = config.env.max_turns;
  e.early_stop = config.env.early_stop;
  e.early_stop_min_speedup = config.env.early_stop_min_speedup;
  e.kernel_excerpt_chars = config.env.kernel_excerpt_chars;
  e.error_excerpt_chars = config.env.error_excerpt_chars;
  e.keep_thinking = config.env.keep_thinking;
  e.thinking_excerpt_chars = config.env.thinking_excerpt_chars;
  return o;
}

}  // namespace

RlLoopResult run_rl_loop(const RunConfig& config, Policy& policy, eval::Evaluator& evaluator,
                         const env::RlDataset& dataset, const RlLoopOptions& options) {
  return Loop(config, policy, evaluator, dataset, options).run();
}

eval::LocalEvaluatorConfig evaluator_for_rank(const RunConfig& config, int rank, int world_size, int local_rank,
                                              int local_world_size) {
  eval::LocalEvaluatorConfig ec = eval::local_evaluator_config(config.evaluator);
  if (ec.work_dir.empty()) ec.work_dir = fs::path(config.log_path) / "eval_work";  // a run keeps its builds beside it
  if (world_size <= 1) return ec;
  // Ranks on one host share the compile cache (its PCHs are large and safe to share between
  // work dirs), not a work dir.
  if (ec.compile_cache_dir.empty()) ec.compile_cache_dir = ec.work_dir / "compile_cache";
  ec.work_dir /= cat("rank", rank);
  if (ec.devices.empty()) ec.devices = {local_rank};
  if (ec.compile_workers == 0) {
    const unsigned cores = core::available_cpus();
    ec.compile_workers = std::max(1, static_cast<int>(cores) / std::max(1, local_world_size));
  }
  return ec;
}

RlLoopResult run_rl_loop(const RunConfig& config, const RlLoopOptions& options, const reward::RewardRegistry& registry) {
  const LaunchEnv launch = launch_env_from_environment();
  // Another live process on this run directory: say so now, not after minutes of loading a
  // model (the loop takes the lock itself; this only answers early). Rank 0 alone takes it.
  if (launch.rank == 0 && fs::is_directory(config.log_path))
    if (const auto status = log::read_run_status(config.log_path); status.state == "running")
      throw core::Error(cat(config.log_path, " is being run by process ", status.pid, " on ", status.host,
                            ": one training process per run directory"));
  // The cheap checks first: problems, then the checkpoint, then the evaluator's workers.
  const env::KernelBenchDataset dataset(dataset_options(config, registry));
  PolicyOptions po = policy_options(config);
  RlLoopOptions loop_options = options;
  if (launch.distributed()) {
    // Each rank trains on its own GPU: cuda:LOCAL_RANK (a config written for one process, with
    // device cuda:0, runs unchanged). On the CPU the ranks' collectives go through the TCPStore
    // (development and tests).
    const c10::Device device = resolve_device(po.device == "cuda" ? std::string("auto") : po.device);
    if (device.is_cuda()) {
      if (launch.rank == 0 && po.device != "auto" && po.device != "cuda")
        std::cerr << "kbrl-train: model.device is " << po.device << "; under torchrun each rank takes cuda:LOCAL_RANK\n";
      po.device = cat("cuda:", launch.local_rank);
    }
    const auto& gpus = config.evaluator.local.devices;
    if (launch.rank == 0 && launch.local_world_size > 1 && !gpus.empty() && gpus.size() < static_cast<std::size_t>(launch.local_world_size))
      std::cerr << "kbrl-train: warning: evaluator.gpus names " << gpus.size() << " GPU(s) for the "
                << launch.local_world_size << " ranks of each host: their timing runs share them; leave it empty to "
                << "give each rank its own GPU\n";
    if (!loop_options.process_group) loop_options.process_group = ProcessGroup::join(launch, device.is_cuda());
  }
  Policy policy(po);
  if (!config.lora.init_adapter.empty()) policy.load_lora(resolve_init_adapter(config.lora.init_adapter));
  else policy.attach_lora(lora_config(config));
  // evaluator.endpoints: the fleet of kbrl-evald servers (docs/services.md), shared by every rank;
  // else a LocalEvaluator on this machine, one per rank (evaluator_for_rank).
  std::unique_ptr<eval::Evaluator> evaluator;
  if (config.evaluator.endpoints.empty())
    evaluator = std::make_unique<eval::LocalEvaluator>(
        evaluator_for_rank(config, launch.rank, launch.world_size, launch.local_rank, launch.local_world_size));
  else
    evaluator = eval::make_evaluator(config.evaluator);
  return run_rl_loop(config, policy, *evaluator, dataset, loop_options);
}

}  // namespace kbrl::train
