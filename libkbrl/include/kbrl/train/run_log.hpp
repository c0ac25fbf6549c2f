// A training run's directory as the loop writes it (no torch): the lock and run.json, the
// resolved config.yaml, metrics.jsonl, traces.jsonl, TensorBoard scalars and histograms under
// tb/, checkpoints.jsonl, and the progress line after each step. It also reads back where a run
// stands: the last checkpoint line is the last complete step, and the lines of later steps (a
// kill between a step's metrics line and its checkpoint line) are dropped before the step is
// redone, so each step appears once. docs/training-runs.md: the layout and the resume rules.
#pragma once

#include <boost/json/object.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/train/run_config.hpp"

namespace kbrl::log {
class JsonlWriter;
class RunLock;
class TensorBoardWriter;
}  // namespace kbrl::log

namespace kbrl::train {

// One line of checkpoints.jsonl: the step it completes (0-based) and where its files are,
// relative to the run directory.
struct CheckpointRecord {
  std::int64_t step = 0;
  std::string state;    // TrainingClient::save_state's folder
  std::string adapter;  // the PEFT adapter folder
  std::int64_t optimizer_steps = 0;
  // The ranks that trained it (data parallelism): a run resumes on as many (absent: 1).
  int world_size = 1;
};

// The last line of <run_dir>/checkpoints.jsonl; none for a new run.
std::optional<CheckpointRecord> read_last_checkpoint(const std::filesystem::path& run_dir);

// Where the checkpoint of `step` goes: checkpoints/step_<step + 1, six digits>/{state,adapter}.
CheckpointRecord checkpoint_paths(std::int64_t step);

// lora.init_adapter as a folder to load: a PEFT adapter folder (adapter_config.json) as it is, or
// a run directory's (checkpoints.jsonl) last checkpointed adapter, so that an RL run can start
// from a supervised run by naming it. Throws core::ConfigError naming lora.init_adapter otherwise.
std::filesystem::path resolve_init_adapter(const std::filesystem::path& path);

class RunLog {
 public:
  // Creates config.log_path, takes its lock (another live process on it: core::Error naming
  // its host and pid) and writes config.yaml. Progress lines go to `progress` (stderr if null).
  explicit RunLog(const RunConfig& config, std::FILE* progress = nullptr);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // The last line of checkpoints.jsonl; none for a new run.
  std::optional<CheckpointRecord> last_checkpoint() const;

  // Begins writing at step `next` of `total_steps`: drops the metrics and traces lines of steps
  // >= next, then opens the files for appending and a new TensorBoard event file.
  void start(std::int64_t next, std::int64_t total_steps);

  // One line per transition (step, group, sample, turn, problem_id, prompt, completion, kernel,
  // num_tokens, truncated, eval, reward, reward_terms, advantage, done). advantages[g][i][t] as
  // in TrainingData (a missing one is written as 0).
  void write_traces(std::int64_t step, const std::vector<core::TrajectoryGroup>& groups,
                    const std::vector<std::vector<std::vector<double>>>& advantages);
  // Trace lines of another kind (a supervised step's examples); each must carry "step".
  void write_traces(const std::vector<boost::json::object>& lines);
  // The step's metrics line (it must carry "step"), then every number in it as a TensorBoard
  // scalar at step + 1, and the histograms of the lists that are not empty.
  void write_metrics(const boost::json::object& metrics, const std::vector<double>& rewards,
                     const std::vector<double>& advantages, const std::vector<double>& speedups);
  // "step 3/10 done in 4.2s (sample ..., eval wait ..., train ..., save ...): reward ..., correct
  // ..%; ETA ..." from the metrics' time/*, reward/mean and kernel/correct_rate; through note().
  // A supervised run (train.mode=sft): "step 3/10 done in 0.4s (train ..., save ...): loss ...,
  // held-out loss ...; ETA ..." from time/*, sft/loss and sft/heldout_loss.
  void write_progress_line(const boost::json::object& metrics);
  // One line for the console (the progress stream) and for <run>/logs.log, which keeps every such
  // line with its UTC time: what the console showed, without the progress bars' redraws.
  void note(const std::string& line);
  // The line that makes the step complete: written last.
  void write_checkpoint(const CheckpointRecord& checkpoint);

  void mark_finished();
  void mark_stopped();

 private:
  std::filesystem::path path_;
  std::FILE* progress_;
  std::FILE* logs_ = nullptr;  // <run>/logs.log, appended to
  std::unique_ptr<log::RunLock> lock_;
  std::unique_ptr<log::JsonlWriter> metrics_, traces_, checkpoints_;
  std::unique_ptr<log::TensorBoardWriter> tb_;
  std::int64_t total_steps_ = 0;
  std::vector<double> step_seconds_;
  bool supervised_ = false;  // train.mode=sft
};

}  // namespace kbrl::train
