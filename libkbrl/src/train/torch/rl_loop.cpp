#include "kbrl/train/torch/rl_loop.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <numeric>
#include <optional>
#include <sstream>

#include "kbrl/core/text.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/dataset/filter.hpp"
#include "kbrl/dataset/load.hpp"
#include "kbrl/env/advantages.hpp"
#include "kbrl/env/dataset.hpp"
#include "kbrl/env/env.hpp"
#include "kbrl/env/kernelbench_env.hpp"
#include "kbrl/eval/local_evaluator.hpp"
#include "kbrl/log/jsonl.hpp"
#include "kbrl/log/progress.hpp"
#include "kbrl/log/run_dir.hpp"
#include "kbrl/log/tensorboard.hpp"
#include "kbrl/tokenizer/chat_tokens.hpp"
#include "kbrl/model/torch/decoder.hpp"
#include "kbrl/model/torch/lora.hpp"
#include "kbrl/model/torch/sampler.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"
#include "kbrl/prompt/chat_renderer.hpp"
#include "kbrl/reward/terms.hpp"
#include "kbrl/train/torch/training_client.hpp"

namespace kbrl::train {

using core::cat;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

c10::Device resolve_device(const std::string& name) {
  if (name == "auto") return at::hasCUDA() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  return c10::Device(name);
}

// The summary of a list of numbers for metrics.
void add_stats(boost::json::object& m, const std::string& prefix, const std::vector<double>& v) {
  if (v.empty()) return;
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double var = 0;
  for (const double x : v) var += (x - mean) * (x - mean);
  m[prefix + "mean"] = mean;
  m[prefix + "std"] = std::sqrt(var / static_cast<double>(v.size()));
  m[prefix + "min"] = *std::min_element(v.begin(), v.end());
  m[prefix + "max"] = *std::max_element(v.begin(), v.end());
}

double rate(const std::vector<double>& flags) {
  return flags.empty() ? 0.0 : std::accumulate(flags.begin(), flags.end(), 0.0) / static_cast<double>(flags.size());
}

// One episode in flight.
struct Rollout {
  std::size_t group = 0, sample = 0;
  std::unique_ptr<env::Env> env;
  env::Observation observation;
  bool done = false;
  struct Turn {
    std::vector<std::int64_t> prompt_tokens;
    std::vector<std::int64_t> tokens;
    std::vector<float> logprobs;
    std::string prompt_text;
    env::StepResult result;
  };
  std::vector<Turn> turns;
};

core::Completion to_completion(const model::Sample& s, const tokenizer::Tokenizer& tokenizer) {
  core::Completion c;
  c.tokens.assign(s.tokens.begin(), s.tokens.end());
  c.num_tokens = static_cast<int>(s.tokens.size());
  c.truncated = s.stop_reason == model::StopReason::kMaxTokens;
  std::vector<tokenizer::TokenId> text_ids(s.tokens.begin(), s.tokens.end());
  if (!c.truncated && !text_ids.empty()) text_ids.pop_back();  // the stop token itself
  c.text = tokenizer.decode(text_ids, /*skip_special_tokens=*/true);
  return c;
}

class Trainer {
 public:
  Trainer(const RunConfig& config, const RlLoopOptions& options, const reward::RewardRegistry& registry)
      : config_(config), options_(options), registry_(registry), log_path_(config.log_path) {}

  RlLoopResult run() {
    fs::create_directories(log_path_);
    lock_.emplace(log_path_);
    write_resolved(config_, log_path_ / "config.yaml");
    setup();
    RlLoopResult result;
    result.total_steps = total_steps_;
    result.first_step = resume();
    metrics_ = std::make_unique<log::JsonlWriter>(log_path_ / "metrics.jsonl");
    traces_ = std::make_unique<log::JsonlWriter>(log_path_ / "traces.jsonl");
    checkpoints_ = std::make_unique<log::JsonlWriter>(log_path_ / "checkpoints.jsonl");
    std::int64_t step = result.first_step;
    std::int64_t ran = 0;
    bool stopped = false;
    while (step < total_steps_) {
      if (options_.stop != nullptr && options_.stop->load()) {
        stopped = true;
        break;
      }
      if (options_.max_steps_this_run > 0 && ran >= options_.max_steps_this_run) break;
      run_step(step);
      ++step;
      ++ran;
    }
    result.steps_done = step;
    if (stopped) {
      lock_->mark_stopped();
    } else if (step >= total_steps_) {
      lock_->mark_finished();
    }
    result.stopped = stopped;
    return result;
  }

 private:
  void warn(const std::string& text) const {
    if (options_.warn) options_.warn(text);
    else std::cerr << "kbrl-train: warning: " << text << "\n";
  }

  void setup() {
    const auto& m = config_.model;
    if (m.path.empty()) throw core::ConfigError("config", "model.path", "is required (a Hugging Face checkpoint folder)");
    const fs::path model_dir = m.path;
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(model_dir / "tokenizer.json"));
    renderer_ = tokenizer::chat_renderer_for(m.chat_template, *tokenizer_, model_dir);
    stop_ids_ = tokenizer::checkpoint_stop_ids(model_dir, *tokenizer_);
    for (const auto id : tokenizer::stop_sequence_ids(*renderer_, *tokenizer_))
      if (std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) stop_ids_.push_back(id);

    model::LoadOptions load;
    load.device = resolve_device(m.device);
    const std::string dtype = m.dtype == "auto" ? (load.device.is_cuda() ? "bf16" : "fp32") : m.dtype;
    load.dtype = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
    model_ = std::make_shared<model::DecoderModel>(model::DecoderModel::load(model_dir, load));
    const auto& l = config_.lora;
    if (!l.init_adapter.empty()) {
      lora_.emplace(model::LoraModel::load(*model_, l.init_adapter));
    } else {
      model::LoraConfig lc;
      lc.rank = l.rank;
      lc.alpha = l.alpha;
      lc.use_rslora = l.rslora;
      lc.dropout = l.dropout;
      lc.target_modules = l.target_modules;
      lc.seed = config_.seed;
      lora_.emplace(model::LoraModel::attach(*model_, lc));
    }
    TrainingClientOptions to;
    to.micro_batch_tokens = config_.train.micro_batch_tokens;
    to.forward.checkpoint_layers = config_.train.activation_checkpointing;
    client_ = std::make_unique<TrainingClient>(model_, lora_parameters(*model_), to);

    eval::LocalEvaluatorConfig ec = eval::local_evaluator_config(config_.evaluator);
    if (ec.work_dir.empty()) ec.work_dir = log_path_ / "eval_work";  // a run keeps its builds beside it
    evaluator_ = std::make_unique<eval::LocalEvaluator>(ec);

    dataset_ = std::make_unique<env::KernelBenchDataset>(make_dataset_options(), *evaluator_);
    const std::int64_t per_epoch = dataset_->batches_per_epoch();
    if (per_epoch < 1)
      throw core::ConfigError("config", "dataset.batch_size",
                              cat("the training split has fewer problems than one batch of ", config_.dataset.batch_size));
    total_steps_ = config_.dataset.max_steps > 0 ? config_.dataset.max_steps : per_epoch * config_.dataset.num_epochs;
    tb_ = std::make_unique<log::TensorBoardWriter>(log_path_ / "tb");
  }

  env::DatasetOptions make_dataset_options() const {
    const auto& d = config_.dataset;
    env::DatasetOptions o;
    o.problems = dataset::filter_problems(dataset::load_problems(d.problems), problem_filter(d));
    if (o.problems.empty())
      throw core::ConfigError("config", "dataset.problems", cat("no problems in ", d.problems, " pass the filters"));
    o.eval_fraction = d.eval_fraction;
    o.seed = config_.seed;
    o.batch_size = d.batch_size;
    o.group_size = d.group_size;
    o.shuffle = d.shuffle;
    o.multi_turn = config_.env.multi_turn;
    auto& e = o.env;
    e.prompt.language = core::parse_kernel_language(config_.prompt.language);
    e.prompt.precision = core::parse_precision(config_.prompt.precision);
    e.prompt.one_shot = config_.prompt.one_shot;
    e.prompt.thinking_instruction = config_.prompt.thinking;
    e.prompt.hardware = config_.prompt.hardware;
    e.eval = config_.evaluator.options;
    e.reward = config_.reward;
    e.registry = &registry_;
    e.max_turns = config_.env.max_turns;
    e.early_stop = config_.env.early_stop;
    e.early_stop_min_speedup = config_.env.early_stop_min_speedup;
    e.kernel_excerpt_chars = config_.env.kernel_excerpt_chars;
    e.error_excerpt_chars = config_.env.error_excerpt_chars;
    return o;
  }

  // The next step to run: one past the last checkpoint, with its state loaded.
  std::int64_t resume() {
    const fs::path file = log_path_ / "checkpoints.jsonl";
    std::int64_t next = 0;
    if (fs::exists(file)) {
      const auto lines = log::read_jsonl(file);
      if (!lines.empty()) {
        const auto& last = lines.back();
        next = last.at("step").as_int64() + 1;
        client_->load_state(log_path_ / std::string(last.at("state").as_string()));
        std::cerr << "kbrl-train: resuming " << log_path_.string() << " at step " << next << " of " << total_steps_
                  << "\n";
      }
    }
    // A kill after a step's metrics but before its checkpoint line redoes that step: its lines
    // (and any later ones) go, so each step appears once.
    const auto before_next = [next](const boost::json::object& o) {
      const auto* s = o.if_contains("step");
      return s == nullptr || !s->is_int64() || s->as_int64() < next;
    };
    log::filter_jsonl(log_path_ / "metrics.jsonl", before_next);
    log::filter_jsonl(log_path_ / "traces.jsonl", before_next);
    return next;
  }

  model::SamplingParams sampling_params(std::int64_t step, std::size_t call) const {
    model::SamplingParams p;
    p.max_tokens = config_.sampling.max_tokens;
    p.temperature = config_.sampling.temperature;
    p.top_p = config_.sampling.top_p;
    p.top_k = config_.sampling.top_k;
    p.stop_token_ids.assign(stop_ids_.begin(), stop_ids_.end());
    // A pure function of (seed, step, call): a resumed run samples what the first would have.
    p.seed = config_.seed * 1000003ULL + static_cast<std::uint64_t>(step) * 7919ULL + call;
    return p;
  }

  // Samples and steps every rollout until all are done. Returns the sampling and waiting times.
  std::pair<double, double> play(std::vector<Rollout>& rollouts, std::int64_t step, log::Progress& progress) {
    double sample_s = 0, wait_s = 0;
    std::size_t call = 0;
    const std::size_t groups = rollouts.empty() ? 0 : rollouts.back().group + 1;
    const SamplingClient sampler = client_->sampling_client(model::token_bytes_of(*tokenizer_));
    for (int turn = 0;; ++turn) {
      std::vector<std::pair<Rollout*, std::future<env::StepResult>>> pending;
      const auto chunk = static_cast<std::size_t>(std::max(1, config_.sampling.groups_per_call));
      for (std::size_t g0 = 0; g0 < groups; g0 += chunk) {
        // The first turn of a group is one prompt sampled group_size times; later turns differ
        // per rollout (each carries its own feedback).
        const bool shared = turn == 0;
        std::vector<std::vector<Rollout*>> members;  // per prompt: the rollouts it serves
        for (std::size_t g = g0; g < std::min(groups, g0 + chunk); ++g) {
          std::vector<Rollout*> active;
          for (auto& r : rollouts)
            if (r.group == g && !r.done) active.push_back(&r);
          if (active.empty()) continue;
          if (shared) members.push_back(active);
          else
            for (auto* r : active) members.push_back({r});
        }
        if (members.empty()) continue;
        std::vector<std::vector<std::int64_t>> prompts;
        std::vector<std::string> texts;
        for (const auto& m : members) {
          const auto& messages = m.front()->observation.messages;
          const auto ids = tokenizer::render_chat_ids(*renderer_, *tokenizer_, messages, true);
          prompts.emplace_back(ids.begin(), ids.end());
          texts.push_back(renderer_->render(messages, true));
        }
        const std::int64_t n = shared ? static_cast<std::int64_t>(members.front().size()) : 1;
        const auto t = Clock::now();
        const auto samples = sampler.generate(prompts, n, sampling_params(step, call++));
        sample_s += seconds(t);
        for (const auto& s : samples) {
          Rollout* r = members[s.prompt_index][shared ? s.sample_index : 0];
          Rollout::Turn tr;
          tr.prompt_tokens = prompts[s.prompt_index];
          tr.prompt_text = texts[s.prompt_index];
          tr.tokens = s.tokens;
          tr.logprobs = s.logprobs;
          r->turns.push_back(std::move(tr));
          // Submits the evaluation now: it runs while the next chunk samples.
          pending.emplace_back(r, r->env->step(to_completion(s, *tokenizer_)));
        }
      }
      if (pending.empty()) break;
      const auto t = Clock::now();
      for (auto& [r, future] : pending) {
        env::StepResult res = future.get();
        r->done = res.done || !res.next.has_value();
        if (!r->done) r->observation = *res.next;
        const bool correct = res.eval.correct;
        r->turns.back().result = std::move(res);
        progress.advance(1, cat("turn ", turn + 1, correct ? ", correct" : ""));
      }
      wait_s += seconds(t);
    }
    return {sample_s, wait_s};
  }

  static std::vector<Rollout> start_rollouts(const std::vector<std::unique_ptr<env::EnvGroupBuilder>>& builders) {
    std::vector<Rollout> rollouts;
    for (std::size_t g = 0; g < builders.size(); ++g) {
      auto envs = builders[g]->make_envs();
      for (std::size_t s = 0; s < envs.size(); ++s) {
        Rollout r;
        r.group = g;
        r.sample = s;
        r.env = std::move(envs[s]);
        r.observation = r.env->initial_observation();
        rollouts.push_back(std::move(r));
      }
    }
    return rollouts;
  }

  // One rollout per held-out problem with the current weights: eval/* metrics.
  void evaluate_held_out(std::int64_t step, boost::json::object& m) {
    const auto builders = dataset_->eval_builders(1);
    if (builders.empty()) return;
    auto rollouts = start_rollouts(builders);
    const long expected = static_cast<long>(rollouts.size()) * (config_.env.multi_turn ? config_.env.max_turns : 1);
    log::Progress progress(cat("eval after step ", step + 1), expected, options_.progress ? options_.progress : stderr);
    // Seeds apart from the training steps' (whose calls count up from step * 7919).
    play(rollouts, step + (std::int64_t{1} << 40), progress);
    progress.finish();
    std::vector<double> reward, correct, format, speedup;
    for (const auto& r : rollouts) {
      double total = 0;
      bool solved = false, formatted = false;
      for (const auto& t : r.turns) {
        total += t.result.reward;
        solved = solved || t.result.eval.correct;
        formatted = formatted || t.result.eval.format_ok;
        if (t.result.eval.correct && t.result.eval.speedup) speedup.push_back(*t.result.eval.speedup);
      }
      reward.push_back(total);
      correct.push_back(solved ? 1 : 0);
      format.push_back(formatted ? 1 : 0);
    }
    m["eval/problems"] = static_cast<double>(rollouts.size());
    m["eval/reward_mean"] = rate(reward);
    m["eval/correct_rate"] = rate(correct);
    m["eval/format_rate"] = rate(format);
    m["eval/speedup_mean"] = speedup.empty() ? 0.0 : rate(speedup);
  }

  void run_step(std::int64_t step) {
    const auto t_step = Clock::now();
    auto builders = dataset_->batch(step);
    std::vector<Rollout> rollouts = start_rollouts(builders);
    const long expected = static_cast<long>(rollouts.size()) * (config_.env.multi_turn ? config_.env.max_turns : 1);
    log::Progress progress(cat("step ", step + 1, "/", total_steps_, " rollouts"), expected,
                           options_.progress ? options_.progress : stderr);
    const auto [sample_s, wait_s] = play(rollouts, step, progress);
    progress.finish();

    // Advantages per group (and per turn), then the datums.
    const auto t_train = Clock::now();
    std::vector<std::vector<double>> advantages(rollouts.size());
    std::size_t constant_groups = 0, groups_used = 0;
    std::vector<bool> skipped(builders.size(), false);
    std::vector<double> all_rewards, all_adv;
    for (std::size_t g = 0; g < builders.size(); ++g) {
      std::vector<std::size_t> members;
      std::vector<std::vector<double>> rewards;
      for (std::size_t i = 0; i < rollouts.size(); ++i)
        if (rollouts[i].group == g) {
          members.push_back(i);
          std::vector<double> r;
          for (const auto& t : rollouts[i].turns) r.push_back(t.result.reward);
          rewards.push_back(std::move(r));
        }
      const auto adv = env::turn_advantages(rewards, advantage_options());
      const bool constant = env::constant_group(rewards);
      if (constant) ++constant_groups;
      const bool skip = constant && config_.train.remove_constant_reward_groups;
      skipped[g] = skip;
      if (!skip) ++groups_used;
      for (std::size_t k = 0; k < members.size(); ++k) {
        advantages[members[k]] = skip ? std::vector<double>(adv[k].size(), 0.0) : adv[k];
        if (!skip) all_adv.insert(all_adv.end(), adv[k].begin(), adv[k].end());
      }
    }
    if (constant_groups == builders.size())
      warn(cat("step ", step + 1, ": every group's rewards are uniform (", constant_groups,
               " groups): no learning signal this step", config_.train.remove_constant_reward_groups ? ", no update" : ""));
    std::vector<Datum> datums;
    for (std::size_t i = 0; i < rollouts.size(); ++i) {
      const auto& r = rollouts[i];
      for (std::size_t t = 0; t < r.turns.size(); ++t) {
        all_rewards.push_back(r.turns[t].result.reward);
        if (r.turns[t].tokens.empty() || skipped[r.group]) continue;
        datums.push_back(completion_datum(r.turns[t].prompt_tokens, r.turns[t].tokens, r.turns[t].logprobs,
                                          static_cast<float>(advantages[i][t])));
      }
    }
    boost::json::object m;
    m["step"] = step;
    std::map<std::string, double> train_metrics;
    if (!datums.empty()) train_metrics = train_on(datums);
    const double train_s = seconds(t_train);

    // Checkpoint first, then metrics, then the checkpoint's line: a kill in between redoes the
    // step from the previous checkpoint, and the resume drops this step's metrics and traces.
    const auto t_save = Clock::now();
    const bool last = step + 1 == total_steps_;
    const bool stop_requested = options_.stop != nullptr && options_.stop->load();
    const bool save = config_.save_every > 0 ? ((step + 1) % config_.save_every == 0 || last || stop_requested) : (last || stop_requested);
    std::string state_rel, adapter_rel;
    if (save) {
      std::string number = std::to_string(step + 1);
      number.insert(0, number.size() < 6 ? 6 - number.size() : 0, '0');
      const std::string name = "checkpoints/step_" + number;
      state_rel = name + "/state";
      adapter_rel = name + "/adapter";
      client_->save_state(log_path_ / state_rel);
      lora_->save(log_path_ / adapter_rel, config_.model.path);
    }
    const double save_s = seconds(t_save);

    fill_metrics(m, rollouts, all_rewards, all_adv, train_metrics);
    if (config_.eval_every > 0 && ((step + 1) % config_.eval_every == 0 || last)) {
      const auto t_eval = Clock::now();
      evaluate_held_out(step, m);
      m["time/eval_held_out"] = seconds(t_eval);
    }
    m["groups/total"] = static_cast<double>(builders.size());
    m["groups/constant"] = static_cast<double>(constant_groups);
    m["groups/used"] = static_cast<double>(groups_used);
    m["datums"] = static_cast<double>(datums.size());
    m["time/sample"] = sample_s;
    m["time/eval_wait"] = wait_s;
    m["time/train"] = train_s;
    m["time/save"] = save_s;
    m["time/step"] = seconds(t_step);
    write_traces(step, rollouts, advantages);
    metrics_->write(m);
    metrics_->flush();
    log_tensorboard(step, m, all_rewards, all_adv, rollouts);
    // The run's phase line: where the step's time went, and when the run should end.
    step_seconds_.push_back(m["time/step"].to_number<double>());
    const double mean_step = std::accumulate(step_seconds_.begin(), step_seconds_.end(), 0.0) /
                             static_cast<double>(step_seconds_.size());
    std::fprintf(options_.progress ? options_.progress : stderr,
                 "step %lld/%lld done in %.1fs (sample %.1fs, eval wait %.1fs, train %.1fs, save %.1fs): reward %.3f, "
                 "correct %.0f%%; ETA %s\n",
                 static_cast<long long>(step + 1), static_cast<long long>(total_steps_), m["time/step"].to_number<double>(),
                 sample_s, wait_s, train_s, save_s, m["reward/mean"].to_number<double>(),
                 100.0 * m["kernel/correct_rate"].to_number<double>(),
                 log::Progress::format_duration(mean_step * static_cast<double>(total_steps_ - step - 1)).c_str());
    if (save) {
      boost::json::object c;
      c["step"] = step;
      c["state"] = state_rel;
      c["adapter"] = adapter_rel;
      c["optimizer_steps"] = client_->step();
      checkpoints_->write(c);
      checkpoints_->flush();
    }
  }

  env::AdvantageOptions advantage_options() const {
    env::AdvantageOptions o;
    o.gamma = config_.env.multi_turn ? config_.env.gamma : 0.0;
    o.std_normalize = config_.train.advantage_std_normalize;
    return o;
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

  void fill_metrics(boost::json::object& m, const std::vector<Rollout>& rollouts, const std::vector<double>& rewards,
                    const std::vector<double>& adv, const std::map<std::string, double>& train) const {
    add_stats(m, "reward/", rewards);
    std::vector<double> format, compiled, correct, cheat, speedups, turns, success, prompt_tokens, completion_tokens;
    std::map<int, std::vector<double>> turn_correct;
    for (const auto& r : rollouts) {
      bool solved = false;
      for (std::size_t t = 0; t < r.turns.size(); ++t) {
        const auto& e = r.turns[t].result.eval;
        format.push_back(e.format_ok ? 1 : 0);
        compiled.push_back(e.compiled ? 1 : 0);
        correct.push_back(e.correct ? 1 : 0);
        cheat.push_back(reward::is_static_check_failure(e) ? 1 : 0);
        if (e.correct && e.speedup) speedups.push_back(*e.speedup);
        turn_correct[static_cast<int>(t)].push_back(e.correct ? 1 : 0);
        prompt_tokens.push_back(static_cast<double>(r.turns[t].prompt_tokens.size()));
        completion_tokens.push_back(static_cast<double>(r.turns[t].tokens.size()));
        solved = solved || e.correct;
      }
      turns.push_back(static_cast<double>(r.turns.size()));
      success.push_back(solved ? 1 : 0);
    }
    m["kernel/format_rate"] = rate(format);
    m["kernel/compile_rate"] = rate(compiled);
    m["kernel/correct_rate"] = rate(correct);
    m["kernel/cheat_rate"] = rate(cheat);
    m["kernel/speedup_mean"] = speedups.empty() ? 0.0 : rate(speedups);
    m["kernel/evaluations"] = static_cast<double>(format.size());
    if (config_.env.multi_turn) {
      m["multiturn/success_rate"] = rate(success);
      m["multiturn/avg_turns"] = rate(turns);
      for (const auto& [t, v] : turn_correct) m[cat("multiturn/turn_", t + 1, "/correct_rate")] = rate(v);
    }
    m["tokens/prompt"] = std::accumulate(prompt_tokens.begin(), prompt_tokens.end(), 0.0);
    m["tokens/completion"] = std::accumulate(completion_tokens.begin(), completion_tokens.end(), 0.0);
    m["tokens/completion_mean"] = rate(completion_tokens);
    add_stats(m, "advantage/", adv);
    for (const auto& [k, v] : train) m[k] = v;
  }

  void write_traces(std::int64_t step, const std::vector<Rollout>& rollouts,
                    const std::vector<std::vector<double>>& advantages) {
    for (std::size_t i = 0; i < rollouts.size(); ++i) {
      const auto& r = rollouts[i];
      for (std::size_t t = 0; t < r.turns.size(); ++t) {
        const auto& tr = r.turns[t];
        boost::json::object o;
        o["step"] = step;
        o["group"] = r.group;
        o["sample"] = r.sample;
        o["turn"] = t;
        o["problem_id"] = tr.result.eval.problem_id;
        o["prompt"] = tr.prompt_text;
        o["completion"] = tr.result.completion.text;
        o["kernel"] = tr.result.completion.kernel;
        o["num_tokens"] = tr.tokens.size();
        o["truncated"] = tr.result.completion.truncated;
        o["eval"] = boost::json::value_from(tr.result.eval);
        o["reward"] = tr.result.reward;
        o["reward_terms"] = boost::json::value_from(tr.result.breakdown);
        o["advantage"] = t < advantages[i].size() ? advantages[i][t] : 0.0;
        o["done"] = tr.result.done;
        traces_->write(o);
      }
    }
    traces_->flush();
  }

  void log_tensorboard(std::int64_t step, const boost::json::object& m, const std::vector<double>& rewards,
                       const std::vector<double>& adv, const std::vector<Rollout>& rollouts) {
    for (const auto& [k, v] : m) {
      if (k == "step" || !v.is_number()) continue;
      tb_->add_scalar(k, v.to_number<double>(), step + 1);
    }
    std::vector<double> speedups;
    for (const auto& r : rollouts)
      for (const auto& t : r.turns)
        if (t.result.eval.correct && t.result.eval.speedup) speedups.push_back(*t.result.eval.speedup);
    if (!rewards.empty()) tb_->add_histogram("reward", rewards, step + 1);
    if (!adv.empty()) tb_->add_histogram("advantage", adv, step + 1);
    if (!speedups.empty()) tb_->add_histogram("speedup", speedups, step + 1);
    tb_->flush();
  }

  RunConfig config_;
  RlLoopOptions options_;
  const reward::RewardRegistry& registry_;
  fs::path log_path_;
  std::optional<log::RunLock> lock_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<prompt::ChatRenderer> renderer_;
  std::vector<tokenizer::TokenId> stop_ids_;
  std::shared_ptr<model::DecoderModel> model_;
  std::optional<model::LoraModel> lora_;
  std::unique_ptr<TrainingClient> client_;
  std::unique_ptr<eval::LocalEvaluator> evaluator_;
  std::unique_ptr<env::KernelBenchDataset> dataset_;
  std::int64_t total_steps_ = 0;
  std::vector<double> step_seconds_;
  std::unique_ptr<log::TensorBoardWriter> tb_;
  std::unique_ptr<log::JsonlWriter> metrics_, traces_, checkpoints_;
};

}  // namespace

RlLoopResult run_rl_loop(const RunConfig& config, const RlLoopOptions& options, const reward::RewardRegistry& registry) {
  if (config.train.async)
    throw core::ConfigError("config", "train.async",
                            "asynchronous sampling is not supported yet by the in-process trainer; set it to false");
  Trainer trainer(config, options, registry);
  return trainer.run();
}

}  // namespace kbrl::train
