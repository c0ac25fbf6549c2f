// The state of a training run directory: who is running it (run.json, and an flock on run.lock
// held for the life of the process), and what listing tools read back: running, finished,
// stopped, or crashed (run.json says running but nobody holds the lock: the process died).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kbrl::log {

struct RunStatus {
  std::string path;
  std::string state;  // "running", "finished", "stopped", "crashed", "new" (no run.json yet)
  std::int64_t steps = 0;               // completed steps: the last line of metrics.jsonl's step + 1
  std::optional<double> last_reward;    // reward/mean of the last step
  std::optional<std::int64_t> checkpoint_step;  // the step of checkpoints.jsonl's last line: a resume goes on after it
  std::string started, updated;         // UTC, ISO 8601
  int pid = 0;
  std::string host;
};

class RunLock {
 public:
  // Takes <dir>/run.lock (flock, released by the kernel when the process dies, however it dies)
  // and writes <dir>/run.json with state "running". Throws core::Error naming the directory, the
  // host and pid of the holder when another process runs it.
  explicit RunLock(const std::filesystem::path& dir);
  ~RunLock();  // releases the lock; run.json keeps the last state written
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  void mark_finished() { write_state("finished"); }
  void mark_stopped() { write_state("stopped"); }

 private:
  void write_state(const std::string& state);

  std::filesystem::path dir_;
  int fd_ = -1;
  std::string started_;
};

RunStatus read_run_status(const std::filesystem::path& dir);
// Every directory under `root` (at any depth, not inside a run) that holds run.json, by path.
std::vector<RunStatus> list_runs(const std::filesystem::path& root);

std::string format_run_table(const std::vector<RunStatus>& runs);
std::string format_run_status(const RunStatus& run);

}  // namespace kbrl::log
