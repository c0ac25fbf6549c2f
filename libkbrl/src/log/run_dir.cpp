#include "kbrl/log/run_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>

#include "kbrl/core/json.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/log/jsonl.hpp"

namespace kbrl::log {

namespace fs = std::filesystem;

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char host[256] = "";
  ::gethostname(host, sizeof host - 1);
  return host;
}

std::optional<boost::json::object> read_json_object(const fs::path& p) {
  // A run's files are read while it runs: one missing or half written is not an error here.
  std::optional<std::string> text;
  try {
    text = core::read_file_if_exists(p);
  } catch (const core::Error&) {
  }
  if (!text) return std::nullopt;
  boost::system::error_code ec;
  auto v = core::parse_json(*text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  return v.as_object();
}

// Whether some process holds <dir>/run.lock.
bool lock_held(const fs::path& dir) {
  const int fd = ::open((dir / "run.lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
  ::close(fd);
  return held;
}

}  // namespace

RunLock::RunLock(const fs::path& dir) : dir_(dir), started_(utc_now()) {
  fs::create_directories(dir_);
  fd_ = ::open((dir_ / "run.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw core::Error(fmt::format("cannot create {}", (dir_ / "run.lock").string()));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    const auto info = read_json_object(dir_ / "run.json");
    std::string who = "another process";
    if (info && info->contains("pid"))
      who = fmt::format("process {} on {}", boost::json::serialize(info->at("pid")),
                        info->contains("host") ? std::string(info->at("host").as_string()) : std::string("?"));
    throw core::Error(fmt::format("{} is being run by {}: one training process per run directory", dir_.string(), who));
  }
  write_state("running");
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

void RunLock::write_state(const std::string& state) {
  boost::json::object o{{"state", state},     {"pid", ::getpid()},     {"host", host_name()},
                        {"started", started_}, {"updated", utc_now()}};
  core::write_file_atomically(dir_ / "run.json", boost::json::serialize(o) + "\n");
}

RunStatus read_run_status(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw core::InvalidArgument(fmt::format("{} is not a directory", dir.string()));
  RunStatus s;
  s.path = dir.string();
  const auto info = read_json_object(dir / "run.json");
  if (!info) {
    s.state = "new";
  } else {
    auto str = [&](const char* k) { return info->contains(k) && info->at(k).is_string() ? std::string(info->at(k).as_string()) : std::string(); };
    s.state = str("state");
    s.started = str("started");
    s.updated = str("updated");
    s.host = str("host");
    if (info->contains("pid") && info->at("pid").is_int64()) s.pid = static_cast<int>(info->at("pid").as_int64());
    if (s.state == "running" && !lock_held(dir)) s.state = "crashed";
  }
  // Only the last lines matter, and the files grow by a line per step: read from their ends.
  const auto last_metrics = read_last_jsonl(dir / "metrics.jsonl", 1);
  if (!last_metrics.empty()) {
    const auto& last = last_metrics.back();
    const auto* r = last.if_contains("reward/mean");
    if (r != nullptr && r->is_number()) s.last_reward = r->to_number<double>();
    const auto* st = last.if_contains("step");
    // A line without its step (not one kbrl writes) leaves counting the lines.
    s.steps = st != nullptr && st->is_int64() ? st->as_int64() + 1
                                              : static_cast<std::int64_t>(read_jsonl(dir / "metrics.jsonl").size());
  }
  const auto last_checkpoint = read_last_jsonl(dir / "checkpoints.jsonl", 1);
  if (!last_checkpoint.empty()) {
    const auto* st = last_checkpoint.back().if_contains("step");
    if (st != nullptr && st->is_int64()) s.checkpoint_step = st->as_int64();
  }
  return s;
}

std::vector<RunStatus> list_runs(const fs::path& root) {
  if (!fs::is_directory(root)) throw core::InvalidArgument(fmt::format("{} is not a directory", root.string()));
  std::vector<RunStatus> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    if (!it->is_directory()) continue;
    if (fs::exists(it->path() / "run.json")) {
      out.push_back(read_run_status(it->path()));
      it.disable_recursion_pending();  // checkpoints and logs inside a run are not runs
    }
  }
  std::sort(out.begin(), out.end(), [](const RunStatus& a, const RunStatus& b) { return a.path < b.path; });
  return out;
}

std::string format_run_table(const std::vector<RunStatus>& runs) {
  if (runs.empty()) return "no runs\n";
  std::size_t w = 3;
  for (const auto& r : runs) w = std::max(w, r.path.size());
  std::string out = fmt::format("{:<{}}  {:<8}  {:>6}  {:>11}  {}\n", "run", w, "state", "steps", "last reward", "updated");
  for (const auto& r : runs)
    out += fmt::format("{:<{}}  {:<8}  {:>6}  {:>11}  {}\n", r.path, w, r.state, r.steps,
                       r.last_reward ? fmt::format("{:.4f}", *r.last_reward) : std::string("-"), r.updated);
  return out;
}

std::string format_run_status(const RunStatus& r) {
  return fmt::format("run:         {}\nstate:       {}\nsteps:       {}\nlast reward: {}\ncheckpoint:  {}\n"
                     "started:     {}\nupdated:     {}\nprocess:     {} on {}\n",
                     r.path, r.state, r.steps, r.last_reward ? fmt::format("{:.4f}", *r.last_reward) : std::string("-"),
                     r.checkpoint_step ? fmt::format("step {}", *r.checkpoint_step) : std::string("-"), r.started,
                     r.updated, r.pid, r.host);
}

}  // namespace kbrl::log
