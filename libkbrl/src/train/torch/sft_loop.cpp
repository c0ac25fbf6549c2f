// No fmt here: torch's include directory carries another fmt (kbrl/core/text.hpp).
#include "kbrl/train/torch/sft_loop.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/core/text.hpp"
#include "kbrl/log/run_dir.hpp"
#include "kbrl/train/run_log.hpp"
#include "kbrl/train/sft_data.hpp"
#include "kbrl/train/torch/distributed.hpp"
#include "kbrl/train/torch/policy.hpp"
#include "kbrl/train/torch/training_client.hpp"

namespace kbrl::train {

using core::cat;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// One example's loss: the mean negative log-probability of its answer tokens (weight 1).
struct ExampleLoss {
  std::size_t index = 0;  // into the split
  double nll_sum = 0;
  double tokens = 0;
};

boost::json::object stats_json(const SftReadStats& s) {
  boost::json::object o;
  o["rows"] = s.rows;
  o["kept"] = s.kept;
  o["incorrect"] = s.incorrect;
  o["other_level"] = s.other_level;
  o["empty"] = s.empty;
  o["duplicates"] = s.duplicates;
  o["other_language"] = s.other_language;
  o["no_model_new"] = s.no_model_new;
  return o;
}

std::size_t total_tokens(const std::vector<SftSequence>& seqs, bool answer) {
  std::size_t n = 0;
  for (const auto& s : seqs) n += answer ? s.answer.size() : s.prompt.size();
  return n;
}

class SftLoop {
 public:
  SftLoop(const RunConfig& config, Policy& policy, const RlLoopOptions& options)
      : config_(config), options_(options), policy_(policy), path_(config.log_path) {
    if (options_.process_group && options_.process_group->world_size() > 1) {
      group_ = options_.process_group;
      rank_ = group_->rank();
      world_ = group_->world_size();
    }
  }

  RlLoopResult run() {
    if (!policy_.has_lora())
      throw core::InvalidArgument("run_sft_loop: the policy has no LoRA adapters (attach_lora or load_lora first)");
    // The data first: a run that cannot train says so before it touches the run directory.
    const auto t_data = Clock::now();
    const auto end_of_turn = answer_end_token(policy_.renderer(), policy_.tokenizer(), policy_.stop_token_ids());
    data_ = prepare_sft_data(config_, policy_.renderer(), policy_.tokenizer(), end_of_turn);
    const double data_seconds = seconds(t_data);
    total_steps_ = sft_total_steps(config_.sft, data_.train.size());
    const std::int64_t next = resume_step(path_, group_);
    if (writer()) log_ = std::make_unique<RunLog>(config_, options_.progress);
    TrainingClientOptions to;
    to.micro_batch_tokens = config_.train.micro_batch_tokens;
    to.forward.checkpoint_layers = config_.train.activation_checkpointing;
    to.process_group = group_;
    client_ = std::make_unique<TrainingClient>(policy_.decoder(), lora_parameters(*policy_.decoder()), to);
    if (next > 0) {
      client_->load_state(path_ / checkpoint_paths(next - 1).state);
      if (writer())
        log_->note(cat("kbrl-train: resuming ", path_.string(), " at step ", next, " of ", total_steps_,
                       world_ > 1 ? cat(" on ", world_, " ranks") : std::string()));
    }
    if (writer()) {
      log_->start(next, total_steps_);
      write_data_summary(next, data_seconds);
    }
    const std::int64_t end = options_.max_steps_this_run > 0 ? std::min(total_steps_, next + options_.max_steps_this_run)
                                                             : total_steps_;
    RlLoopResult result;
    result.first_step = next;
    result.total_steps = total_steps_;
    std::int64_t step = next;
    bool stopped = false;
    while (step < end) {
      if (stop_agreed()) {
        stopped = true;
        break;
      }
      run_step(step, end);
      ++step;
      if (stop_now_) {
        stopped = step < total_steps_;
        break;
      }
    }
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

  // Every rank stops together: any rank's request counts (one collective per step).
  bool stop_agreed() const {
    if (!group_) return stop_requested_here();
    return group_->sum({{"stop", stop_requested_here() ? 1.0 : 0.0}}).at("stop") > 0;
  }

  void warn(const std::string& text) const {
    if (!writer()) return;
    if (options_.warn) options_.warn(text);
    else if (log_) log_->note("kbrl-train: warning: " + text);
    else std::cerr << "kbrl-train: warning: " << text << "\n";
  }

  // What trains, in <run>/sft_data.json and the log: the files, what reading left out and why, the
  // split, the tokens; and a fingerprint of the training examples, so that a resume on changed
  // files says that its batches are not the first invocation's.
  void write_data_summary(std::int64_t next, double data_seconds) {
    std::string ids;
    for (std::size_t i = 0; i < data_.train.size(); ++i)
      ids += cat(data_.train_ids[i], '\t', data_.train[i].prompt.size(), '\t', data_.train[i].answer.size(), '\n');
    const std::string fingerprint = core::sha256_hex(ids);
    const fs::path file = path_ / "sft_data.json";
    if (next > 0)
      if (const auto old = core::read_file_if_exists(file)) {
        boost::system::error_code ec;
        const auto v = core::parse_json(*old, ec);
        const auto* f = !ec && v.is_object() ? v.as_object().if_contains("train_fingerprint") : nullptr;
        if (f != nullptr && f->is_string() && f->as_string() != fingerprint)
          warn("the training examples differ from those the run started with (sft.data, its mapping, "
               "sft.max_tokens or the seed changed): the batches from here on are not the ones it would have had");
      }
    boost::json::object o;
    o["format"] = "kbrl.sft_data.v1";
    o["files"] = boost::json::value_from(config_.sft.data);
    o["heldout_files"] = boost::json::value_from(config_.sft.heldout_data);
    o["read"] = stats_json(data_.read);
    if (!config_.sft.heldout_data.empty()) o["heldout_read"] = stats_json(data_.heldout_read);
    o["train_examples"] = data_.train.size();
    o["heldout_examples"] = data_.heldout.size();
    o["overlong_skipped"] = data_.overlong_skipped;
    o["truncated"] = data_.truncated;
    o["train_prompt_tokens"] = total_tokens(data_.train, false);
    o["train_answer_tokens"] = total_tokens(data_.train, true);
    o["heldout_answer_tokens"] = total_tokens(data_.heldout, true);
    o["steps_per_epoch"] = sft_steps_per_epoch(data_.train.size(), config_.sft.batch_size);
    o["total_steps"] = total_steps_;
    o["train_fingerprint"] = fingerprint;
    o["heldout_ids"] = boost::json::value_from(data_.heldout_ids);
    core::write_file_atomically(file, boost::json::serialize(o) + "\n");
    log_->note(cat("kbrl-train: sft data: ", describe(data_.read),
                   config_.sft.heldout_data.empty() ? std::string() : cat("; held-out files: ", describe(data_.heldout_read)),
                   "; ", data_.train.size(), " training and ", data_.heldout.size(), " held-out examples",
                   data_.overlong_skipped > 0 ? cat(", ", data_.overlong_skipped, " over sft.max_tokens left out") : "",
                   data_.truncated > 0 ? cat(", ", data_.truncated, " cut to sft.max_tokens") : "", "; ",
                   total_tokens(data_.train, true), " answer tokens to train on, ",
                   sft_steps_per_epoch(data_.train.size(), config_.sft.batch_size), " steps per epoch (read in ",
                   static_cast<int>(data_seconds * 10) / 10.0, "s)"));
    if (data_.heldout.empty())
      warn("no held-out examples (sft.heldout_fraction rounds to none, or sft.heldout_data is empty): no sft/heldout_loss");
  }

  // This rank's share of `indices`: every world_size-th, starting at its rank.
  std::vector<std::size_t> share(const std::vector<std::size_t>& indices) const {
    std::vector<std::size_t> out;
    for (std::size_t j = static_cast<std::size_t>(rank_); j < indices.size(); j += static_cast<std::size_t>(world_))
      out.push_back(indices[j]);
    return out;
  }

  // Every rank's per-example losses on every rank (rank 0 writes them), in the split's order
  // whatever the number of ranks.
  std::vector<ExampleLoss> gather(std::vector<ExampleLoss> mine) const {
    const auto by_index = [](const ExampleLoss& x, const ExampleLoss& y) { return x.index < y.index; };
    if (!group_) {
      std::sort(mine.begin(), mine.end(), by_index);
      return mine;
    }
    boost::json::array rows;
    for (const auto& l : mine) rows.push_back(boost::json::array{l.index, l.nll_sum, l.tokens});
    std::vector<ExampleLoss> all;
    for (const auto& part : group_->all_gather(boost::json::serialize(rows))) {
      const boost::json::value parsed = core::parse_json(part);
      for (const auto& v : parsed.as_array()) {
        const auto& t = v.as_array();
        all.push_back({static_cast<std::size_t>(t[0].to_number<std::int64_t>()), t[1].to_number<double>(),
                       t[2].to_number<double>()});
      }
    }
    std::sort(all.begin(), all.end(), by_index);
    return all;
  }

  static std::vector<ExampleLoss> example_losses(const std::vector<std::size_t>& indices, const std::vector<Datum>& datums,
                                                 const std::vector<std::vector<float>>& logprobs) {
    std::vector<ExampleLoss> out;
    for (std::size_t i = 0; i < datums.size(); ++i) {
      ExampleLoss l;
      l.index = indices[i];
      for (std::size_t t = 0; t < logprobs[i].size(); ++t) {
        const double w = datums[i].weights.empty() ? 1.0 : datums[i].weights[t];
        l.nll_sum -= w * logprobs[i][t];
        l.tokens += w;
      }
      out.push_back(l);
    }
    return out;
  }

  boost::json::object trace(std::int64_t step, const char* split, const std::vector<std::string>& ids,
                            const std::vector<SftSequence>& seqs, const ExampleLoss& l) const {
    boost::json::object o;
    o["step"] = step;
    o["split"] = split;
    o["example"] = ids[l.index];
    o["prompt_tokens"] = seqs[l.index].prompt.size();
    o["answer_tokens"] = seqs[l.index].answer.size();
    o["truncated"] = seqs[l.index].truncated;
    o["loss"] = l.tokens > 0 ? l.nll_sum / l.tokens : 0.0;
    return o;
  }

  // The token-mean loss over the held-out answers with the current weights (no dropout).
  double held_out_loss(std::int64_t step, std::vector<boost::json::object>& traces) {
    std::vector<std::size_t> all(data_.heldout.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    const auto mine = share(all);
    std::vector<Datum> datums;
    for (const auto i : mine) datums.push_back(sft_datum(data_.heldout[i]));
    const auto logprobs = datums.empty() ? std::vector<std::vector<float>>{} : client_->forward(datums);
    const auto losses = gather(example_losses(mine, datums, logprobs));
    double nll = 0, tokens = 0;
    for (const auto& l : losses) {
      nll += l.nll_sum;
      tokens += l.tokens;
      traces.push_back(trace(step, "heldout", data_.heldout_ids, data_.heldout, l));
    }
    return tokens > 0 ? nll / tokens : 0.0;
  }

  void run_step(std::int64_t step, std::int64_t end) {
    const auto t_step = Clock::now();
    const auto batch = sft_batch(config_.sft, config_.seed, data_.train.size(), step);
    const auto mine = share(batch);
    std::vector<Datum> datums;
    for (const auto i : mine) datums.push_back(sft_datum(data_.train[i]));

    LossConfig lc;
    lc.normalization = Normalization::kTokenMean;  // the batch's answer tokens, over every rank
    AdamParams adam;
    adam.lr = sft_learning_rate(config_, step, total_steps_);
    adam.beta1 = config_.train.beta1;
    adam.beta2 = config_.train.beta2;
    adam.eps = config_.train.eps;
    adam.weight_decay = config_.train.weight_decay;
    adam.grad_clip_norm = config_.train.grad_clip;
    policy_.set_lora_training(true);
    const auto fb = client_->forward_backward(datums, LossKind::kCrossEntropy, lc);
    policy_.set_lora_training(false);
    const auto opt = client_->optim_step(adam);
    const auto losses = gather(example_losses(mine, datums, fb.logprobs));
    const double train_s = seconds(t_step);

    // As run_rl_loop: a stop asked for while this step trained still saves it (ranks agree first).
    const bool last = step + 1 == total_steps_;
    if (world_ == 1 ? stop_requested_here() : stop_agreed()) stop_now_ = true;
    const bool save = (step + 1) % config_.save_every == 0 || last || stop_now_ || step + 1 >= end;
    const auto t_save = Clock::now();
    std::optional<CheckpointRecord> checkpoint;
    if (save) {
      checkpoint = checkpoint_paths(step);
      client_->save_state(path_ / checkpoint->state);  // every rank: rank 0 writes, the others wait
      if (writer()) policy_.save_lora(path_ / checkpoint->adapter);
    }
    const double save_s = seconds(t_save);

    std::vector<boost::json::object> traces;
    for (const auto& l : losses) traces.push_back(trace(step, "train", data_.train_ids, data_.train, l));
    boost::json::object m;
    m["step"] = step;
    if (!data_.heldout.empty() && ((config_.eval_every > 0 && (step + 1) % config_.eval_every == 0) || last)) {
      const auto t_heldout = Clock::now();
      m["sft/heldout_loss"] = held_out_loss(step, traces);
      m["time/heldout"] = seconds(t_heldout);
    }
    if (!writer()) return;
    std::size_t prompt_tokens = 0, truncated = 0;
    for (const auto i : batch) {
      prompt_tokens += data_.train[i].prompt.size();
      truncated += data_.train[i].truncated ? 1 : 0;
    }
    const auto per_epoch = sft_steps_per_epoch(data_.train.size(), config_.sft.batch_size);
    m["sft/loss"] = fb.metrics.at("loss");
    m["sft/grad_norm"] = opt.at("grad_norm");
    m["sft/lr"] = opt.at("lr");
    m["sft/examples"] = static_cast<double>(batch.size());
    m["sft/truncated"] = static_cast<double>(truncated);
    m["sft/epoch"] = static_cast<double>(step + 1) / static_cast<double>(per_epoch);
    m["tokens/answer"] = fb.metrics.at("weight");
    m["tokens/prompt"] = static_cast<double>(prompt_tokens);
    m["train/step"] = static_cast<double>(client_->step());
    m["time/train"] = train_s;
    m["time/save"] = save_s;
    m["time/step"] = seconds(t_step);
    log_->write_traces(traces);
    log_->write_metrics(m, {}, {}, {});
    log_->write_progress_line(m);
    if (checkpoint) {
      checkpoint->optimizer_steps = client_->step();
      checkpoint->world_size = world_;
      log_->write_checkpoint(*checkpoint);
    }
  }

  const RunConfig& config_;
  const RlLoopOptions& options_;
  Policy& policy_;
  fs::path path_;
  std::shared_ptr<ProcessGroup> group_;  // null: one rank
  int rank_ = 0, world_ = 1;
  SftData data_;
  std::int64_t total_steps_ = 0;
  bool stop_now_ = false;
  std::unique_ptr<RunLog> log_;  // rank 0's
  std::unique_ptr<TrainingClient> client_;
};

}  // namespace

RlLoopResult run_sft_loop(const RunConfig& config, Policy& policy, const RlLoopOptions& options) {
  return SftLoop(config, policy, options).run();
}

RlLoopResult run_sft_loop(const RunConfig& config, const RlLoopOptions& options) {
  const LaunchEnv launch = launch_env_from_environment();
  if (launch.rank == 0 && fs::is_directory(config.log_path))
    if (const auto status = log::read_run_status(config.log_path); status.state == "running")
      throw core::Error(cat(config.log_path, " is being run by process ", status.pid, " on ", status.host,
                            ": one training process per run directory"));
  const auto& m = config.model;
  if (m.path.empty()) throw core::ConfigError("config", "model.path", "is required (a Hugging Face checkpoint folder)");
  PolicyOptions po;
  po.model = m.path;
  po.device = m.device;
  po.dtype = m.dtype;
  po.chat_template = m.chat_template;
  // On the CPU the portable attention's [T, T] masked softmax dominates a long example's step
  // (0.78 s against 0.13 s fused per layer for one 2,300-token row on 2 cores); on CUDA auto is
  // fused already. Supervised training needs no bitwise parity with transformers' eager order.
  po.attention = model::AttentionKernel::kFused;
  RlLoopOptions loop_options = options;
  if (launch.distributed()) {
    // As run_rl_loop: each rank on cuda:LOCAL_RANK; on the CPU the collectives go through the store.
    const c10::Device device = resolve_device(po.device == "cuda" ? std::string("auto") : po.device);
    if (device.is_cuda()) po.device = cat("cuda:", launch.local_rank);
    if (!loop_options.process_group) loop_options.process_group = ProcessGroup::join(launch, device.is_cuda());
  }
  Policy policy(po);
  if (!config.lora.init_adapter.empty()) {
    policy.load_lora(resolve_init_adapter(config.lora.init_adapter));
  } else {
    model::LoraConfig lc;
    lc.rank = config.lora.rank;
    lc.alpha = config.lora.alpha;
    lc.use_rslora = config.lora.rslora;
    lc.dropout = config.lora.dropout;
    lc.target_modules = config.lora.target_modules;
    lc.seed = config.seed;
    policy.attach_lora(lc);
  }
  return run_sft_loop(config, policy, loop_options);
}

}  // namespace kbrl::train
