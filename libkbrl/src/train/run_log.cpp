#include "kbrl/train/run_log.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <numeric>

#include "kbrl/core/error.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/log/jsonl.hpp"
#include "kbrl/log/progress.hpp"
#include "kbrl/log/run_dir.hpp"
#include "kbrl/log/tensorboard.hpp"

namespace kbrl::train {

namespace fs = std::filesystem;

namespace {

double number_or_zero(const boost::json::object& m, const char* key) {
  const auto* v = m.if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<double>() : 0.0;
}

}  // namespace

CheckpointRecord checkpoint_paths(std::int64_t step) {
  const std::string name = fmt::format("checkpoints/step_{:06}", step + 1);
  CheckpointRecord c;
  c.step = step;
  c.state = name + "/state";
  c.adapter = name + "/adapter";
  return c;
}

fs::path resolve_init_adapter(const fs::path& path) {
  if (fs::is_regular_file(path / "adapter_config.json")) return path;
  if (fs::is_regular_file(path / "checkpoints.jsonl")) {
    const auto last = read_last_checkpoint(path);
    if (!last || last->adapter.empty())
      throw core::ConfigError((path / "checkpoints.jsonl").string(), "lora.init_adapter",
                              "the run has no checkpointed adapter yet");
    const fs::path adapter = path / last->adapter;
    if (!fs::is_regular_file(adapter / "adapter_config.json"))
      throw core::ConfigError(adapter.string(), "lora.init_adapter",
                              "the run's last checkpoint names this adapter folder, which has no adapter_config.json");
    return adapter;
  }
  throw core::ConfigError(path.string(), "lora.init_adapter",
                          fs::exists(path) ? "is neither a PEFT adapter folder (adapter_config.json) nor a run directory "
                                             "(checkpoints.jsonl)"
                                           : "no such folder (a PEFT adapter folder or a run directory)");
}

RunLog::RunLog(const RunConfig& config, std::FILE* progress)
    : path_(config.log_path), progress_(progress != nullptr ? progress : stderr), supervised_(config.train.mode == "sft") {
  fs::create_directories(path_);
  lock_ = std::make_unique<log::RunLock>(path_);
  write_resolved(config, path_ / "config.yaml");
  logs_ = std::fopen((path_ / "logs.log").c_str(), "a");
  if (logs_ == nullptr)
    throw core::Error(fmt::format("cannot open {}: {}", (path_ / "logs.log").string(), std::strerror(errno)));
}

RunLog::~RunLog() {
  if (logs_ != nullptr) std::fclose(logs_);
}

void RunLog::note(const std::string& line) {
  std::fprintf(progress_, "%s\n", line.c_str());
  std::fflush(progress_);
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  std::fprintf(logs_, "%s %s\n", stamp, line.c_str());
  std::fflush(logs_);
}

std::optional<CheckpointRecord> RunLog::last_checkpoint() const { return read_last_checkpoint(path_); }

std::optional<CheckpointRecord> read_last_checkpoint(const fs::path& run_dir) {
  const auto lines = log::read_last_jsonl(run_dir / "checkpoints.jsonl", 1);
  if (lines.empty()) return std::nullopt;
  const auto& last = lines.back();
  CheckpointRecord c;
  c.step = last.at("step").as_int64();
  c.state = std::string(last.at("state").as_string());
  if (const auto* a = last.if_contains("adapter"); a != nullptr && a->is_string()) c.adapter = std::string(a->as_string());
  if (const auto* o = last.if_contains("optimizer_steps"); o != nullptr && o->is_int64()) c.optimizer_steps = o->as_int64();
  if (const auto* w = last.if_contains("world_size"); w != nullptr && w->is_int64()) c.world_size = static_cast<int>(w->as_int64());
  return c;
}

void RunLog::start(std::int64_t next, std::int64_t total_steps) {
  total_steps_ = total_steps;
  // A kill after a step's metrics but before its checkpoint line redoes that step: its lines
  // (and any later ones) go, so each step appears once.
  const auto before_next = [next](const boost::json::object& o) {
    const auto* s = o.if_contains("step");
    return s == nullptr || !s->is_int64() || s->as_int64() < next;
  };
  log::filter_jsonl(path_ / "metrics.jsonl", before_next);
  log::filter_jsonl(path_ / "traces.jsonl", before_next);
  metrics_ = std::make_unique<log::JsonlWriter>(path_ / "metrics.jsonl");
  traces_ = std::make_unique<log::JsonlWriter>(path_ / "traces.jsonl");
  checkpoints_ = std::make_unique<log::JsonlWriter>(path_ / "checkpoints.jsonl");
  tb_ = std::make_unique<log::TensorBoardWriter>(path_ / "tb");
  // A resumed run redoes steps from `next` on (TensorBoard step next + 1): a session start there
  // makes TensorBoard drop what an earlier process wrote for them, so each step shows once.
  if (next > 0) {
    tb_->add_session_start(next + 1);
    tb_->flush();
  }
}

void RunLog::write_traces(std::int64_t step, const std::vector<core::TrajectoryGroup>& groups,
                          const std::vector<std::vector<std::vector<double>>>& advantages) {
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& trajectories = groups[g].trajectories;
    for (std::size_t i = 0; i < trajectories.size(); ++i) {
      const auto& transitions = trajectories[i].transitions;
      for (std::size_t t = 0; t < transitions.size(); ++t) {
        const auto& tr = transitions[t];
        double advantage = 0.0;
        if (g < advantages.size() && i < advantages[g].size() && t < advantages[g][i].size())
          advantage = advantages[g][i][t];
        boost::json::object o;
        o["step"] = step;
        o["group"] = g;
        o["sample"] = i;
        o["turn"] = t;
        o["problem_id"] = tr.eval ? tr.eval->problem_id : trajectories[i].problem_id;
        o["prompt"] = tr.prompt_text;
        o["completion"] = tr.completion.text;
        o["kernel"] = tr.completion.kernel;
        o["num_tokens"] = tr.completion.tokens.size();
        o["truncated"] = tr.completion.truncated;
        o["eval"] = tr.eval ? boost::json::value_from(*tr.eval) : boost::json::value(nullptr);
        o["reward"] = tr.reward;
        o["reward_terms"] = boost::json::value_from(tr.breakdown);
        o["advantage"] = advantage;
        o["done"] = tr.done;
        traces_->write(o);
      }
    }
  }
  traces_->flush();
}

void RunLog::write_traces(const std::vector<boost::json::object>& lines) {
  for (const auto& o : lines) traces_->write(o);
  traces_->flush();
}

void RunLog::write_metrics(const boost::json::object& m, const std::vector<double>& rewards,
                           const std::vector<double>& advantages, const std::vector<double>& speedups) {
  metrics_->write(m);
  metrics_->flush();
  const std::int64_t step = m.at("step").as_int64();
  for (const auto& [k, v] : m) {
    if (k == "step" || !v.is_number()) continue;
    tb_->add_scalar(k, v.to_number<double>(), step + 1);
  }
  if (!rewards.empty()) tb_->add_histogram("reward", rewards, step + 1);
  if (!advantages.empty()) tb_->add_histogram("advantage", advantages, step + 1);
  if (!speedups.empty()) tb_->add_histogram("speedup", speedups, step + 1);
  tb_->flush();
}

void RunLog::write_progress_line(const boost::json::object& m) {
  const std::int64_t step = m.at("step").as_int64();
  const double step_s = number_or_zero(m, "time/step");
  step_seconds_.push_back(step_s);
  const double mean_step =
      std::accumulate(step_seconds_.begin(), step_seconds_.end(), 0.0) / static_cast<double>(step_seconds_.size());
  const std::string eta = log::Progress::format_duration(mean_step * static_cast<double>(total_steps_ - step - 1));
  if (supervised_) {
    const auto* held_out = m.if_contains("sft/heldout_loss");
    note(fmt::format("step {}/{} done in {:.1f}s (train {:.1f}s, save {:.1f}s): loss {:.4f}{}; ETA {}", step + 1,
                     total_steps_, step_s, number_or_zero(m, "time/train"), number_or_zero(m, "time/save"),
                     number_or_zero(m, "sft/loss"),
                     held_out != nullptr && held_out->is_number()
                         ? fmt::format(", held-out loss {:.4f}", held_out->to_number<double>())
                         : std::string(),
                     eta));
    return;
  }
  note(fmt::format("step {}/{} done in {:.1f}s (sample {:.1f}s, eval wait {:.1f}s, train {:.1f}s, save {:.1f}s): "
                   "reward {:.3f}, correct {:.0f}%; ETA {}",
                   step + 1, total_steps_, step_s, number_or_zero(m, "time/sample"), number_or_zero(m, "time/eval_wait"),
                   number_or_zero(m, "time/train"), number_or_zero(m, "time/save"), number_or_zero(m, "reward/mean"),
                   100.0 * number_or_zero(m, "kernel/correct_rate"), eta));
}

void RunLog::write_checkpoint(const CheckpointRecord& c) {
  boost::json::object o;
  o["step"] = c.step;
  o["state"] = c.state;
  o["adapter"] = c.adapter;
  o["optimizer_steps"] = c.optimizer_steps;
  o["world_size"] = c.world_size;
  checkpoints_->write(o);
  checkpoints_->flush();
}

void RunLog::mark_finished() { lock_->mark_finished(); }
void RunLog::mark_stopped() { lock_->mark_stopped(); }

}  // namespace kbrl::train
