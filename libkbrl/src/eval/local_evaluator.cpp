#include "kbrl/eval/local_evaluator.hpp"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fmt/format.h>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "kbrl/core/cpus.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/check/candidate_checks.hpp"
#include "kbrl/check/static_check.hpp"
#include "kbrl/eval/subprocess.hpp"
#include "kbrl/eval/worker_protocol.hpp"
#include "kbrl/log/jsonl.hpp"

#ifndef KBRL_DEFAULT_PYTHON
#define KBRL_DEFAULT_PYTHON "python3"
#endif
#ifndef KBRL_WORKER_SOURCE_PATH
#define KBRL_WORKER_SOURCE_PATH ""
#endif
#ifndef KBRL_WORKER_INSTALL_PATH
#define KBRL_WORKER_INSTALL_PATH ""
#endif
#ifndef KBRL_WORKER_FROM_LIBDIR
#define KBRL_WORKER_FROM_LIBDIR ""
#endif
#ifndef KBRL_WORKER_FROM_BINDIR
#define KBRL_WORKER_FROM_BINDIR ""
#endif

namespace kbrl::eval {
namespace fs = std::filesystem;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using core::ErrorCategory;
using core::EvalResult;

std::string default_python() {
  if (const char* p = std::getenv("KBRL_PYTHON"); p != nullptr && *p != '\0') return p;
  if (fs::exists(KBRL_DEFAULT_PYTHON)) return KBRL_DEFAULT_PYTHON;
  return "python3";
}

namespace {
// The worker of the installation this code runs from, wherever its prefix was installed or moved
// to: <libdir>/../share/kbrl/ seen from a shared libkbrl, <bindir>/../share/kbrl/ from a program
// that libkbrl is linked into. Empty when neither exists (a build tree, say).
fs::path installed_worker_script() {
  static const char anchor = 0;  // an address inside whichever file holds libkbrl's code
  std::vector<fs::path> candidates;
  Dl_info info{};
  if (::dladdr(&anchor, &info) != 0 && info.dli_fname != nullptr && fs::path(info.dli_fname).is_absolute())
    candidates.push_back(fs::path(info.dli_fname).parent_path() / KBRL_WORKER_FROM_LIBDIR);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / KBRL_WORKER_FROM_BINDIR);
  for (const auto& c : candidates)
    if (c.filename() == "kbrl_worker.py" && fs::is_regular_file(c, ec)) return c.lexically_normal();
  return {};
}
}  // namespace

fs::path default_worker_script() {
  if (const char* p = std::getenv("KBRL_WORKER_SCRIPT"); p != nullptr && *p != '\0') return p;
  if (auto installed = installed_worker_script(); !installed.empty()) return installed;
  for (const char* candidate : {KBRL_WORKER_INSTALL_PATH, KBRL_WORKER_SOURCE_PATH})
    if (*candidate != '\0' && fs::exists(candidate)) return candidate;
  return KBRL_WORKER_SOURCE_PATH;
}

fs::path default_work_dir() {
  if (const char* p = std::getenv("KBRL_WORK_DIR"); p != nullptr && *p != '\0') return p;
  if (const char* p = std::getenv("XDG_CACHE_HOME"); p != nullptr && *p != '\0') return fs::path(p) / "kbrl";
  if (const char* p = std::getenv("HOME"); p != nullptr && *p != '\0') return fs::path(p) / ".cache" / "kbrl";
  return fs::temp_directory_path() / "kbrl";
}

std::string nvidia_device_node(int index, const fs::path& driver_gpus) {
  std::vector<fs::path> gpus;  // named by PCI bus id (0000:18:00.0): sorted, in bus order
  std::error_code ec;
  for (fs::directory_iterator it(driver_gpus, ec), end; !ec && it != end; it.increment(ec)) gpus.push_back(it->path());
  std::sort(gpus.begin(), gpus.end());
  if (index >= 0 && static_cast<std::size_t>(index) < gpus.size()) {
    std::ifstream in(gpus[static_cast<std::size_t>(index)] / "information");
    for (std::string line; std::getline(in, line);) {
      const std::string key = "Device Minor:";
      if (line.rfind(key, 0) != 0) continue;
      const auto digits = line.find_first_of("0123456789", key.size());
      if (digits != std::string::npos) return "/dev/nvidia" + std::to_string(std::stoi(line.substr(digits)));
    }
  }
  return fmt::format("/dev/nvidia{}", index);
}

namespace {

struct Job {
  core::EvalRequest req;
  std::promise<EvalResult> promise;
  EvalResult result;
  std::string job_id;
  std::string build_key;
  fs::path build_dir;
  fs::path problem_path;
  std::uint64_t seed = 0;
  int lost_workers = 0;  // workers that died under this job (not the candidate's doing)
  std::uint64_t compile_order = 0;  // place in the order of submission to the compile queue
  Clock::time_point submitted = Clock::now();
};
using JobPtr = std::shared_ptr<Job>;

// One long-lived Python worker and the thread that feeds it.
struct Lane {
  std::string name;
  bool compile = false;
  std::string device;  // "cpu", "cuda:0" (inside the lane's own CUDA_VISIBLE_DEVICES)
  std::map<std::string, std::string> env;
  std::vector<std::string> sandbox_devices;  // device nodes the sandbox lets this lane see
  std::unique_ptr<Subprocess> proc;
  std::atomic<pid_t> pid{-1};  // of the running worker, readable from other threads
  std::atomic<pid_t> starting_pid{-1};  // of a worker still importing torch (the destructor stops it)
  std::string torch_version;
  std::string timing_method;  // how the worker times runs: part of the reference-timing cache key
  std::string isolation;      // how the worker keeps a job's child to its build directory
  std::string device_name;  // reported by the first run on this lane
  std::thread thread;
  bool warm_tried = false;              // start_workers(): this lane tried to start its worker
  std::atomic<bool> started_once{false};  // a worker of this lane has started (workers_ready)
};

enum class CallStatus { ok, timeout, lost, start_failed };
struct CallResult {
  CallStatus status = CallStatus::lost;
  json::object reply;
  std::string detail;
};

std::uint64_t random_seed() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng() % (1ull << 62);
}

// Creates `dir` and its `subdirs`, and writes a file there; throws core::Error naming the directory
// as `what` and why it cannot be written.
void make_writable_dir(const fs::path& dir, const char* what, std::initializer_list<const char*> subdirs) {
  try {
    fs::create_directories(dir);
    for (const char* sub : subdirs) fs::create_directories(dir / sub);
    const auto probe = dir / ".write-probe";
    core::write_file_atomically(probe, "");
    fs::remove(probe);
  } catch (const std::exception& e) {
    throw core::Error(fmt::format("evaluator: the {} {} cannot be written: {}", what, dir.string(), e.what()));
  }
}

// Whether argv runs and exits 0 within a few seconds; its standard error goes to stderr_path.
bool command_works(const std::vector<std::string>& argv, const fs::path& stderr_path = "/dev/null") {
  try {
    Subprocess::Options o;
    o.argv = argv;
    o.stderr_path = stderr_path;
    Subprocess p(o);
    p.read_line(Clock::now() + std::chrono::seconds(10));
    for (int i = 0; i < 100 && p.running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return !p.running() && p.exit_description() == "exit 0";
  } catch (const core::Error&) {
    return false;
  }
}

std::string detect_cuda_arch() {
  try {
    Subprocess::Options o;
    o.argv = {"nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"};
    o.stderr_path = "/dev/null";
    Subprocess p(o);
    auto line = p.read_line(Clock::now() + std::chrono::seconds(20));
    if (line && !line->empty() && std::isdigit(static_cast<unsigned char>((*line)[0]))) return *line;
  } catch (const core::Error&) {
  }
  return "";
}

}  // namespace

struct LocalEvaluator::Impl {
  LocalEvaluatorConfig config;
  std::vector<std::string> sandbox_prefix;  // bwrap argv, empty when not sandboxed

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<JobPtr> compile_queue;
  std::deque<JobPtr> run_queue;
  std::map<std::string, std::vector<JobPtr>> compiling;  // build key -> jobs waiting on that build
  bool stopping = false;
  bool warm_requested = false;  // start_workers() was called
  Stats stats;
  std::vector<std::unique_ptr<Lane>> lanes;
  std::map<std::string, core::TimingStats> baselines;
  std::unique_ptr<log::JsonlWriter> baseline_log;  // <work_dir>/baselines.jsonl, opened at the first new baseline
  // On the CPU backend builds and timed runs share the cores: a run waits for the builds in
  // flight and no build runs beside it, so timings are not taken under load. While a run waits
  // for a build, a lane that frees up would idle until the run could start: it builds instead,
  // as long as another build is still in flight (the run could not start anyway) and the job was
  // submitted before the run became ready (so that a stream of new submissions cannot hold a
  // run back for ever). Draining the lanes for every ready run left one core idle for the rest
  // of the other's build each time (docs/evaluator.md, "CPU timing").
  int active_compiles = 0;
  int runs_active = 0;
  std::uint64_t compile_orders = 0;              // jobs submitted to the compile queue so far
  std::multiset<std::uint64_t> run_barriers;     // per waiting run: compile_orders when it became ready
  bool exclusive_cpu() const { return config.platform == core::DevicePlatform::cpu; }
  bool stopping_now() {
    std::lock_guard lock(mu);
    return stopping;
  }
  // Builds in flight, on every backend: while they leave cores idle, a build compiles its binding
  // file beside nvcc's front ends (sooner done); beyond that, after them, so that a source that
  // fails to compile costs no binding compile (fast_build.binding_early).
  std::atomic<int> compiles_in_flight{0};
  // The CPUs this evaluator may use (affinity mask, cgroup quota), read once: it sizes the compile
  // lanes, each build's parallelism and every job's CPU-time limit.
  const unsigned cpus = core::available_cpus();
  std::uint64_t next_job = 0;

  explicit Impl(LocalEvaluatorConfig c) : config(std::move(c)) {}

  // The static checker's severities (config.static_check_policy's, config.static_check_severity
  // over them) and how results' metadata names them ("fusion; side_stream=off", "off").
  std::map<std::string, core::Severity> severity;
  std::string static_check_label;

  // ---- set-up -------------------------------------------------------------------------------

  void validate_and_fill() {
    if (config.python.empty()) config.python = default_python();
    if (config.worker_script.empty()) config.worker_script = default_worker_script();
    if (config.work_dir.empty()) config.work_dir = default_work_dir();
    if (!fs::is_regular_file(config.worker_script))
      throw core::InvalidArgument(fmt::format("evaluator: worker script '{}' not found (set KBRL_WORKER_SCRIPT)",
                                              config.worker_script.string()));
    {
      // The policy's severities with the overrides over them; an unknown policy or rule name fails
      // here, not at the first request.
      check::StaticCheckConfig probe;
      probe.severity = check::static_check_policy(config.static_check_policy);
      for (const auto& [rule, level] : config.static_check_severity) probe.severity[rule] = level;
      check::validate(probe);
      severity = std::move(probe.severity);
      static_check_label = config.static_checks ? config.static_check_policy : std::string("off");
      if (config.static_checks)
        for (const auto& [rule, level] : config.static_check_severity)
          static_check_label += fmt::format("; {}={}", rule, core::to_string(level));
    }
    if (config.compile_workers <= 0)
      config.compile_workers = static_cast<int>(cpus);
    if (config.cpu_run_lanes <= 0) throw core::InvalidArgument("evaluator: cpu_run_lanes must be at least 1");
    if (config.platform != core::DevicePlatform::cpu && config.devices.empty()) config.devices = {0};
    if (config.compile_cache_dir.empty()) config.compile_cache_dir = config.work_dir / "compile_cache";
    // Directories that cannot be written are refused now, not found out as a failure of every candidate.
    make_writable_dir(config.work_dir, "work directory", {"builds", "problems", "logs"});
    make_writable_dir(config.compile_cache_dir, "compile cache directory", {});
    config.compile_cache_dir = fs::canonical(config.compile_cache_dir);
    config.work_dir = fs::canonical(config.work_dir);
    if (config.platform == core::DevicePlatform::cuda && config.cuda_arch.empty()) config.cuda_arch = detect_cuda_arch();
    if (config.platform == core::DevicePlatform::cpu && config.limits.address_space_bytes == 0) {
      // Half the machine's memory: a candidate that asks for more gets a MemoryError instead of
      // waking the kernel's OOM killer on the host.
      const auto pages = static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES));
      const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
      config.limits.address_space_bytes = std::max<std::uint64_t>(pages * page / 2, 4ull << 30);
    }
  }

  void setup_sandbox() {
    if (config.sandbox == SandboxMode::off) return;
    const std::vector<std::string> probe = {"bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                                            "--unshare-net", "--unshare-pid", "--die-with-parent", "true"};
    const fs::path probe_log = config.work_dir / "logs" / "sandbox-probe.log";
    std::error_code made;
    fs::create_directories(probe_log.parent_path(), made);
    if (!command_works(probe, probe_log)) {
      std::string said;  // bubblewrap's own words, e.g. that user namespaces are not allowed
      try {
        said = core::read_file(probe_log);
      } catch (const core::Error&) {
      }
      while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
      throw core::InvalidArgument(fmt::format(
          "evaluator: candidates run in a bubblewrap sandbox, and bubblewrap (bwrap) {} here{}. Install it "
          "(Debian/Ubuntu: apt-get install bubblewrap; a machine without network: docs/building.md, \"Carrying "
          "bubblewrap\"), or run candidates unsandboxed, knowingly: --sandbox off (evaluator.sandbox: off)",
          said.empty() ? "is not installed or cannot run" : "cannot run",
          said.empty() ? "" : fmt::format(" ({})", said.substr(0, 300))));
    }
    sandbox_prefix = {"bwrap", "--die-with-parent", "--unshare-net", "--unshare-pid", "--unshare-ipc",
                      "--unshare-uts", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                      "--tmpfs", "/tmp"};
    // The private /tmp hides whatever lives under the host's /tmp: show the interpreter's
    // environment and the worker again (read-only), then the work directory (writable).
    std::vector<fs::path> visible{config.worker_script.parent_path()};
    const fs::path python(config.python);
    if (python.is_absolute() && python.parent_path().filename() == "bin")
      visible.push_back(python.parent_path().parent_path());  // a virtual environment's root
    for (const auto& p : visible) {
      std::error_code ec;
      // Canonical: bubblewrap cannot mount onto a symbolic link (a virtual environment linked
      // into the checkout from elsewhere); the link itself still resolves inside the sandbox.
      const fs::path abs = fs::canonical(p, ec);
      if (!ec && fs::exists(abs)) sandbox_prefix.insert(sandbox_prefix.end(), {"--ro-bind", abs.string(), abs.string()});
    }
    sandbox_prefix.insert(sandbox_prefix.end(), {"--bind", config.work_dir.string(), config.work_dir.string()});
    const auto cache = config.compile_cache_dir.lexically_relative(config.work_dir);
    if (cache.empty() || *cache.begin() == "..")  // outside the work directory: writable too
      sandbox_prefix.insert(sandbox_prefix.end(), {"--bind", config.compile_cache_dir.string(), config.compile_cache_dir.string()});
  }

  // A timing a run could have measured: positive, finite and ordered.
  static bool plausible(const core::TimingStats& t) {
    const auto finite = [](double v) { return std::isfinite(v); };
    return t.trials > 0 && finite(t.mean_ms) && finite(t.median_ms) && finite(t.std_ms) && finite(t.min_ms) &&
           finite(t.max_ms) && t.mean_ms > 0 && t.min_ms >= 0 && t.min_ms <= t.median_ms && t.median_ms <= t.max_ms &&
           t.min_ms <= t.mean_ms && t.mean_ms <= t.max_ms && t.std_ms >= 0 && t.std_ms <= t.mean_ms;
  }

  // A torn last line (a kill mid-write) is skipped by read_jsonl and cut by the writer; a line
  // without a key or with a timing that no run could have measured (a corrupted cache) is
  // skipped too: that baseline is simply measured again.
  void load_baselines() {
    for (const auto& line : log::read_jsonl(config.work_dir / "baselines.jsonl")) {
      const json::value* key = line.if_contains("key");
      const json::value* timing = line.if_contains("ref_runtime");
      if (key == nullptr || !key->is_string() || timing == nullptr) continue;
      try {
        const auto timing_stats = json::value_to<core::TimingStats>(*timing);
        if (plausible(timing_stats)) baselines[std::string(key->get_string())] = timing_stats;
      } catch (const std::exception&) {
      }
    }
  }

  // Called with `mu` held. A baselines file that cannot be written costs only the cache's
  // persistence: the timing stays cached in memory and the result is unaffected.
  void append_baseline_locked(const std::string& key, const std::string& problem, const std::string& device,
                              const core::TimingStats& timing) {
    try {
      if (!baseline_log) baseline_log = std::make_unique<log::JsonlWriter>(config.work_dir / "baselines.jsonl");
      baseline_log->write(json::object{
          {"key", key}, {"problem", problem}, {"device", device}, {"ref_runtime", json::value_from(timing)}});
      baseline_log->flush();
    } catch (const std::exception&) {
    }
  }

  void start_lanes() {
    const bool gpu = config.platform != core::DevicePlatform::cpu;
    const std::string visible = config.platform == core::DevicePlatform::hip ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
    for (int i = 0; i < config.compile_workers; ++i) {
      auto lane = std::make_unique<Lane>();
      lane->name = fmt::format("compile-{}", i);
      lane->compile = true;
      lane->device = "cpu";
      if (gpu) lane->env[visible] = "";  // compiling never touches a GPU
      // A load_inline build compiles two files, the binding file and the .cu: side by side, the
      // build takes about as long as the .cu alone. The CPU work is the same.
      lane->env["MAX_JOBS"] = "2";
      lanes.push_back(std::move(lane));
    }
    const int run_lanes = gpu ? static_cast<int>(config.devices.size()) : config.cpu_run_lanes;
    for (int i = 0; i < run_lanes; ++i) {
      auto lane = std::make_unique<Lane>();
      lane->compile = false;
      if (gpu) {
        const int dev = config.devices[static_cast<std::size_t>(i)];
        lane->name = fmt::format("run-{}{}", core::to_string(config.platform), dev);
        lane->env[visible] = std::to_string(dev);
        lane->device = "cuda:0";  // ROCm's torch names its GPUs "cuda" too
        if (config.platform == core::DevicePlatform::cuda) {
          lane->env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";  // --gpus counts as nvidia-smi does
          lane->sandbox_devices = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", nvidia_device_node(dev)};
          // The sandbox shows the driver this GPU's node alone, so CUDA finds one GPU and numbers
          // it 0: asked for any other number, it would find none.
          if (!sandbox_prefix.empty()) lane->env[visible] = "0";
        } else {
          lane->sandbox_devices = {"/dev/kfd", "/dev/dri"};
        }
      } else {
        lane->name = fmt::format("run-cpu{}", i);
        lane->device = "cpu";
        lane->env["OMP_NUM_THREADS"] = std::to_string(std::max(1u, cpus / run_lanes));
      }
      lanes.push_back(std::move(lane));
    }
    for (auto& lane : lanes) {
      if (!config.cuda_arch.empty()) lane->env["TORCH_CUDA_ARCH_LIST"] = config.cuda_arch;
      if (config.platform == core::DevicePlatform::hip && !config.gpu_arch.empty())
        lane->env["PYTORCH_ROCM_ARCH"] = config.gpu_arch;
      Lane* l = lane.get();
      l->thread = std::thread([this, l] { lane_loop(*l); });
    }
  }

  // ---- workers ------------------------------------------------------------------------------

  bool ensure_worker(Lane& lane, std::string& why) {
    if (lane.proc && lane.proc->running()) return true;
    if (lane.proc) {
      lane.pid = -1;
      lane.proc.reset();
      std::lock_guard lock(mu);
      ++stats.workers_lost;
    }
    Subprocess::Options o;
    o.argv = sandbox_prefix;
    if (!sandbox_prefix.empty())
      for (const auto& node : lane.sandbox_devices)
        if (fs::exists(node)) o.argv.insert(o.argv.end(), {"--dev-bind", node, node});
    o.argv.insert(o.argv.end(), {config.python, "-u", config.worker_script.string(), "--platform",
                                 std::string(core::to_string(config.platform))});
    o.env_set = lane.env;
    o.env_set["PYTHONUNBUFFERED"] = "1";
    o.env_set["PYTHONDONTWRITEBYTECODE"] = "1";
    o.stderr_path = config.work_dir / "logs" / (lane.name + ".stderr.log");
    try {
      lane.proc = std::make_unique<Subprocess>(o);
    } catch (const core::Error& e) {
      why = e.what();
      return false;
    }
    lane.starting_pid = lane.proc->pid();
    struct Started {
      std::atomic<pid_t>& pid;
      ~Started() { pid = -1; }
    } started{lane.starting_pid};
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(config.worker_start_timeout_s));
    const auto line = lane.proc->read_line(deadline);
    try {
      if (!line) throw core::Error(lane.proc->timed_out() ? "timed out" : "exited");
      const WorkerReady ready = read_ready(*line);
      lane.torch_version = ready.torch;
      lane.timing_method = ready.timing;
      lane.isolation = ready.isolation;
      lane.pid = lane.proc->pid();
      lane.started_once = true;
    } catch (const std::exception& e) {
      why = fmt::format("worker {} did not start ({}); see {}", lane.name, e.what(), o.stderr_path.string());
      lane.proc->kill();
      lane.proc.reset();
      return false;
    }
    std::lock_guard lock(mu);
    ++stats.workers_started;
    return true;
  }

  // Sends one job line and waits for its reply line (the job's own timeout plus our grace). A
  // reply that is not a JSON object means the worker's output channel is broken: the worker is
  // lost. One that is an object is read against the protocol by the caller.
  CallResult call(Lane& lane, const std::string& job_line, double timeout_s) {
    CallResult out;
    if (!ensure_worker(lane, out.detail)) {
      out.status = CallStatus::start_failed;
      return out;
    }
    if (!lane.proc->write_line(job_line)) {
      out.status = CallStatus::lost;
      out.detail = "worker stopped reading";
      lane.proc->kill();
      return out;
    }
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s + config.grace_s));
    // Read in slices, so that an evaluator being destroyed (Ctrl-C in kbrl-eval) does not wait
    // for a build or a run that may take minutes.
    std::optional<std::string> line;
    while (true) {
      line = lane.proc->read_line(std::min(deadline, Clock::now() + std::chrono::milliseconds(250)));
      if (line || !lane.proc->timed_out() || Clock::now() >= deadline) break;
      if (stopping_now()) {
        lane.proc->kill();
        out.status = CallStatus::lost;
        out.detail = "the evaluator shut down during the job";
        return out;
      }
    }
    if (!line) {
      out.status = lane.proc->timed_out() ? CallStatus::timeout : CallStatus::lost;
      lane.proc->kill();
      out.detail = lane.proc->exit_description();
      return out;
    }
    try {
      out.reply = core::parse_json(*line).as_object();
      out.status = CallStatus::ok;
    } catch (const std::exception&) {
      out.status = CallStatus::lost;
      out.detail = "unreadable reply from the worker";
      lane.proc->kill();
    }
    return out;
  }

  // ---- the pipeline -------------------------------------------------------------------------

  void finish(const JobPtr& job) {
    EvalResult& r = job->result;
    if (r.runtime && r.ref_runtime && r.runtime->mean_ms > 0) r.speedup = r.ref_runtime->mean_ms / r.runtime->mean_ms;
    if (r.correct && r.speedup && config.excessive_speedup > 0 && *r.speedup > config.excessive_speedup)
      r.metadata["excessive_speedup"] = "true";
    r.stage_seconds["total"] = std::chrono::duration<double>(Clock::now() - job->submitted).count();
    if (r.error_category == ErrorCategory::none && !r.correct) r.error_category = ErrorCategory::internal;
    {
      std::lock_guard lock(mu);  // counted before the caller can see the result
      ++stats.finished;
    }
    job->promise.set_value(r);
  }

  void fail(const JobPtr& job, ErrorCategory category, std::string message) {
    job->result.error_category = category;
    job->result.error_message = std::move(message);
    finish(job);
  }

  // A worker died under this job without the candidate being at fault (killed from outside):
  // run it again on a fresh worker, once.
  bool retry(const JobPtr& job, bool compile_stage) {
    std::lock_guard lock(mu);
    if (job->lost_workers >= 2 || stopping) return false;
    ++stats.jobs_retried;
    (compile_stage ? compile_queue : run_queue).push_front(job);
    cv.notify_all();
    return true;
  }

  void lane_loop(Lane& lane) {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, nullptr);
    while (true) {
      JobPtr job;
      {
        std::unique_lock lock(mu);
        auto& queue = lane.compile ? compile_queue : run_queue;
        cv.wait(lock, [&] { return stopping || !queue.empty() || (warm_requested && !lane.warm_tried); });
        if (stopping) break;
        if (queue.empty()) {  // start_workers(): start this lane's worker before any job needs it
          lane.warm_tried = true;
          lock.unlock();
          std::string why;
          if (!ensure_worker(lane, why) && !stopping_now()) std::fprintf(stderr, "evaluator: %s\n", why.c_str());
          continue;
        }
        job = queue.front();
        queue.pop_front();
      }
      try {
        if (lane.compile)
          compile_stage(lane, job);
        else
          run_stage(lane, job);
      } catch (const std::exception& e) {
        fail(job, ErrorCategory::internal, fmt::format("evaluator: {}", e.what()));
      }
    }
    if (lane.proc) {
      lane.proc->write_line(write_shutdown_job());
      lane.proc->kill();
    }
  }

  std::string build_key(const Lane& lane, const core::EvalRequest& req) const {
    json::object k;
    k["source"] = req.candidate_source;
    k["language"] = core::to_string(req.language);
    k["platform"] = core::to_string(config.platform);
    k["torch"] = lane.torch_version;
    k["arch"] = config.platform == core::DevicePlatform::hip ? config.gpu_arch : config.cuda_arch;
    k["protocol"] = kWorkerProtocolVersion;
    // Accelerated and plain builds compile to the same thing but not through the same files
    // (ninja records the shadow headers and the PCH's forwarding header as dependencies), so
    // each setting has build directories of its own; that also keeps A/B comparisons honest.
    k["pch"] = config.compile_pch;
    k["light_headers"] = config.compile_light_headers;
    k["parallel_passes"] = config.compile_light_headers && config.compile_parallel_passes;
    return core::sha256_hex(json::serialize(k));
  }

  void compile_stage(Lane& lane, const JobPtr& job) {
    std::string why;
    if (!ensure_worker(lane, why)) return fail(job, ErrorCategory::internal, why);
    job->build_key = build_key(lane, job->req);
    job->build_dir = config.work_dir / "builds" / job->build_key.substr(0, 32);
    const fs::path record = job->build_dir / "compile.json";
    for (;;) {
      // Reading a record hashes the build's libraries, so it is read outside the lock, and what
      // it says is acted on under the lock only if no build of this source is in flight and the
      // record is still the one that was read.
      const auto stamp = record_stamp(record);
      bool intact = true;
      auto cached = read_compile_record(record, job->build_dir, intact);
      std::unique_lock lock(mu);
      if (auto it = compiling.find(job->build_key); it != compiling.end()) {
        it->second.push_back(job);  // the same source is being built right now: wait for that build
        ++stats.compile_cache_hits;
        return;
      }
      if (record_stamp(record) != stamp) continue;  // a build of it finished meanwhile: read that
      if (cached) {
        ++stats.compile_cache_hits;
        const bool failed = route_after_compile_locked(job, *cached);
        lock.unlock();
        if (failed) finish(job);
        return;
      }
      compiling.try_emplace(job->build_key);
      ++stats.compiles;
      if (!intact) {
        // A corrupted record, or libraries changed since they were built (a disk fault, a copy
        // cut short): ninja would find them up to date and load them as they are.
        ++stats.builds_discarded;
        std::error_code ec;
        fs::remove_all(job->build_dir, ec);
      }
      break;
    }
    try {
      fs::create_directories(job->build_dir);
      core::write_file_atomically(job->build_dir / "candidate.py", job->req.candidate_source);
    } catch (const std::exception& e) {  // a full disk, a read-only work dir: nothing to build from
      return abandon_build(job, fmt::format("evaluator: {}", e.what()));
    }
    CompileJob request = compile_job_for(job->req);
    request.job_id = job->job_id;
    request.candidate_path = job->build_dir / "candidate.py";
    request.build_dir = job->build_dir;
    request.log_path = job->build_dir / "compile.log";
    request.limits = limits_for(true, request.timeout_s);
    // A build with its binding file beside nvcc's two front ends keeps about three cores busy.
    const int in_flight = ++compiles_in_flight;
    request.fast_build = {.pch = config.compile_pch,
                          .light_headers = config.compile_light_headers,
                          .parallel_passes = config.compile_parallel_passes,
                          .binding_early = 3 * in_flight <= static_cast<int>(cpus),
                          .dir = config.compile_cache_dir};
    if (exclusive_cpu()) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] {
        return stopping || (runs_active == 0 && (run_barriers.empty() || (active_compiles > 0 &&
                                                                          job->compile_order <= *run_barriers.begin())));
      });
      ++active_compiles;
    }
    const auto started = Clock::now();
    const CallResult c = call(lane, write_job(request), request.timeout_s);
    --compiles_in_flight;
    if (exclusive_cpu()) {
      std::lock_guard lock(mu);
      --active_compiles;
      cv.notify_all();
    }
    CompileReply reply;
    reply.job_id = job->job_id;
    reply.compile_s = reply.wall_s = std::chrono::duration<double>(Clock::now() - started).count();
    bool cacheable = false;
    if (c.status == CallStatus::ok) {
      try {
        reply = read_compile_reply(c.reply, job->job_id);
        // Verdicts about the source are kept; others (a timeout on a busy machine, a crash) may
        // not happen again.
        cacheable = reply.ok() || reply.error_category == ErrorCategory::compile ||
                    reply.error_category == ErrorCategory::format;
      } catch (const WorkerProtocolError& e) {
        reply.error_category = ErrorCategory::internal;
        reply.error_message = e.what();
      }
    } else if (c.status == CallStatus::timeout) {
      reply.error_category = ErrorCategory::timeout;
      reply.error_message = fmt::format("compile stage ran past its {:.0f} s limit", request.timeout_s);
    } else if (c.status == CallStatus::lost) {
      std::vector<JobPtr> waiters;
      {
        std::lock_guard lock(mu);
        waiters = take_waiters_locked(job->build_key);
        ++job->lost_workers;
      }
      for (auto& w : waiters)
        if (!retry(w, true)) fail(w, ErrorCategory::internal, "the compile worker was lost");
      if (!retry(job, true)) fail(job, ErrorCategory::internal, "the compile worker died twice under this job");
      return;
    } else {
      reply.error_category = ErrorCategory::internal;
      reply.error_message = c.detail;
    }
    if (cacheable) {
      try {
        core::write_file_atomically(record, write_compile_record(reply, job->build_dir));
      } catch (const std::exception&) {  // the outcome stands; it is only not kept for next time
      }
    }
    std::vector<JobPtr> failed;
    {
      std::lock_guard lock(mu);
      std::vector<JobPtr> waiters = take_waiters_locked(job->build_key);
      waiters.insert(waiters.begin(), job);
      for (auto& w : waiters) {
        w->build_dir = job->build_dir;
        if (route_after_compile_locked(w, reply)) failed.push_back(w);
      }
    }
    for (auto& w : failed) finish(w);
  }

  // The extension libraries a build left (every .so under its directory), with their sizes and
  // digests, in path order.
  static json::array library_digests(const fs::path& build_dir) {
    std::vector<fs::path> paths;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(build_dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".so" && it->is_regular_file(ec)) paths.push_back(it->path());
    std::sort(paths.begin(), paths.end());
    json::array out;
    for (const auto& path : paths) {
      const std::string bytes = core::read_file(path);
      out.push_back(json::object{{"path", fs::relative(path, build_dir).generic_string()},
                                 {"bytes", bytes.size()},
                                 {"sha256", core::sha256_hex(bytes)}});
    }
    return out;
  }

  // When a build's record was last written (none: there is none).
  static std::optional<fs::file_time_type> record_stamp(const fs::path& record) {
    std::error_code ec;
    const auto t = fs::last_write_time(record, ec);
    if (ec) return std::nullopt;
    return t;
  }

  // compile.json: the compile reply, and the libraries the build left (library_digests).
  static std::string write_compile_record(const CompileReply& reply, const fs::path& build_dir) {
    return json::serialize(json::object{{"reply", to_json(reply)}, {"libraries", library_digests(build_dir)}});
  }

  // The outcome a build directory keeps; none when there is no record yet. A record that cannot
  // be used (not one this version reads, or naming libraries that are no longer those it names:
  // missing, cut short, changed) is none either, and `intact` is then false: the directory must
  // be cleared, since ninja would find whatever libraries are there up to date.
  static std::optional<CompileReply> read_compile_record(const fs::path& record, const fs::path& build_dir,
                                                         bool& intact) {
    std::optional<std::string> text;
    try {
      text = core::read_file_if_exists(record);
      if (!text) return std::nullopt;
      const auto doc = core::parse_json(*text);
      const json::object* o = doc.if_object();
      const json::value* reply = o != nullptr ? o->if_contains("reply") : nullptr;
      const json::value* libraries = o != nullptr ? o->if_contains("libraries") : nullptr;
      if (reply != nullptr && reply->is_object() && libraries != nullptr &&
          json::value(library_digests(build_dir)) == *libraries)
        return read_compile_reply(reply->get_object(), "");
    } catch (const std::exception&) {  // not JSON, not a reply, a library gone mid-read
    }
    intact = false;
    return std::nullopt;
  }

  // The build of `job` could not start: it fails, and so does every job that waited on it.
  void abandon_build(const JobPtr& job, const std::string& message) {
    std::vector<JobPtr> waiters;
    {
      std::lock_guard lock(mu);
      waiters = take_waiters_locked(job->build_key);
    }
    for (auto& w : waiters) fail(w, ErrorCategory::internal, message);
    fail(job, ErrorCategory::internal, message);
  }

  // Called with `mu` held: the jobs that waited on the build of `key`; the build is no longer in flight.
  std::vector<JobPtr> take_waiters_locked(const std::string& key) {
    auto node = compiling.extract(key);
    return node.empty() ? std::vector<JobPtr>{} : std::move(node.mapped());
  }

  // Called with `mu` held: queues the run and returns false, or records the compile failure and
  // returns true (the caller finishes the job once the lock is released).
  bool route_after_compile_locked(const JobPtr& job, const CompileReply& reply) {
    if (apply_compile_reply(reply, job->result)) {
      run_queue.push_back(job);
      cv.notify_all();
      return false;
    }
    return true;
  }

  WorkerLimits limits_for(bool compile, double timeout_s) const {
    WorkerLimits l;
    l.file_size_bytes = config.limits.file_size_bytes;
    // GPU runtimes reserve huge address ranges: GPU runs get no address-space limit.
    if (config.platform == core::DevicePlatform::cpu || compile) l.address_space_bytes = config.limits.address_space_bytes;
    l.processes = config.limits.processes;
    l.open_files = config.limits.open_files;
    // A backstop behind the wall-clock timeout: a child cannot use more CPU time than its timeout
    // on every core, unless it escapes the timeout's kill.
    l.cpu_seconds = config.limits.cpu_seconds != 0
                        ? config.limits.cpu_seconds
                        : static_cast<std::uint64_t>(std::ceil(std::max(timeout_s, 1.0) *
                                                               cpus));
    if (compile) l.nice = config.compile_nice;
    return l;
  }

  std::string baseline_key(const Lane& lane, const Job& job) const {
    const auto& o = job.req.options;
    return core::sha256_hex(fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", job.req.problem.content_hash, lane.device_name,
                                        lane.torch_version, core::to_string(job.req.precision), o.warmup_runs,
                                        o.timing_trials, kWorkerProtocolVersion, lane.timing_method));
  }

  void run_stage(Lane& lane, const JobPtr& job) {
    std::string why;
    if (!ensure_worker(lane, why)) return fail(job, ErrorCategory::internal, why);
    job->result.metadata["build_isolation"] = lane.isolation;
    const auto& opt = job->req.options;
    std::optional<core::TimingStats> cached_baseline;
    std::string bkey;
    if (config.baseline_cache && opt.measure_performance && !lane.device_name.empty()) {
      bkey = baseline_key(lane, *job);
      std::lock_guard lock(mu);
      if (auto it = baselines.find(bkey); it != baselines.end()) {
        cached_baseline = it->second;
        ++stats.baseline_cache_hits;
      }
    }
    const fs::path log = config.work_dir / "logs" / (job->job_id + ".run.log");
    RunJob request = run_job_for(job->req);
    request.job_id = job->job_id;
    request.problem_path = job->problem_path;
    request.candidate_path = job->build_dir / "candidate.py";
    request.build_dir = job->build_dir;
    request.log_path = log;
    request.device = lane.device;
    request.seed = job->seed;
    request.time_reference = request.measure_performance && !cached_baseline;
    request.limits = limits_for(false, request.timeout_s);
    if (exclusive_cpu()) {
      std::unique_lock lock(mu);
      const auto barrier = run_barriers.insert(compile_orders);
      cv.wait(lock, [&] { return stopping || active_compiles == 0; });
      run_barriers.erase(barrier);
      ++runs_active;
    }
    const auto run_started = Clock::now();
    const CallResult c = call(lane, write_job(request), request.timeout_s);
    if (exclusive_cpu()) {
      std::lock_guard lock(mu);
      --runs_active;
      cv.notify_all();
    }
    EvalResult& r = job->result;
    r.stage_seconds["run"] = std::chrono::duration<double>(Clock::now() - run_started).count();
    if (c.status == CallStatus::lost) {
      {
        std::lock_guard lock(mu);
        ++job->lost_workers;
      }
      if (!retry(job, false)) fail(job, ErrorCategory::internal, "the run worker died twice under this job");
      return;
    }
    if (c.status == CallStatus::timeout)
      return fail(job, ErrorCategory::timeout, fmt::format("run stage ran past its {:.0f} s limit", request.timeout_s));
    if (c.status == CallStatus::start_failed) return fail(job, ErrorCategory::internal, c.detail);
    RunReply reply;
    try {
      reply = read_run_reply(c.reply, job->job_id);
    } catch (const WorkerProtocolError& e) {
      r.metadata["log"] = log.string();
      return fail(job, ErrorCategory::internal, e.what());
    }
    r.device = lane.device;  // unless the child reports the device's name
    apply_run_reply(reply, r);
    if (cached_baseline) r.ref_runtime = cached_baseline;
    if (lane.device_name.empty() && !r.device.empty()) lane.device_name = r.device;
    // A reference timing noisier than its own mean (a busy machine) is used once, not cached.
    if (!cached_baseline && r.ref_runtime && config.baseline_cache && plausible(*r.ref_runtime)) {
      bkey = baseline_key(lane, *job);
      std::lock_guard lock(mu);
      if (baselines.emplace(bkey, *r.ref_runtime).second)
        append_baseline_locked(bkey, job->req.problem.id, lane.device_name, *r.ref_runtime);
    }
    if (r.error_category == ErrorCategory::none) {
      if (!config.keep_logs) fs::remove(log);
    } else {
      r.metadata["log"] = log.string();
    }
    finish(job);
  }
};

LocalEvaluator::LocalEvaluator(LocalEvaluatorConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  impl_->validate_and_fill();
  impl_->setup_sandbox();
  impl_->load_baselines();
  impl_->start_lanes();
}

LocalEvaluator::~LocalEvaluator() {
  std::vector<JobPtr> pending;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    pending.assign(impl_->compile_queue.begin(), impl_->compile_queue.end());
    pending.insert(pending.end(), impl_->run_queue.begin(), impl_->run_queue.end());
    for (auto& [key, waiters] : impl_->compiling) pending.insert(pending.end(), waiters.begin(), waiters.end());
    impl_->compile_queue.clear();
    impl_->run_queue.clear();
    impl_->compiling.clear();
    impl_->cv.notify_all();
  }
  for (auto& lane : impl_->lanes) {  // unblocks lanes waiting on long jobs or a starting worker
    if (const pid_t pid = lane->pid.load(); pid > 0) ::kill(-pid, SIGKILL);
    if (const pid_t pid = lane->starting_pid.load(); pid > 0) ::kill(-pid, SIGKILL);
  }
  for (auto& lane : impl_->lanes)
    if (lane->thread.joinable()) lane->thread.join();
  {
    // A lane that was compiling when `stopping` was set queues the job's run afterwards (or adds
    // waiters to a build); no lane is left to take them, so they are answered here.
    std::lock_guard lock(impl_->mu);
    pending.insert(pending.end(), impl_->compile_queue.begin(), impl_->compile_queue.end());
    pending.insert(pending.end(), impl_->run_queue.begin(), impl_->run_queue.end());
    for (auto& [key, waiters] : impl_->compiling) pending.insert(pending.end(), waiters.begin(), waiters.end());
    impl_->compile_queue.clear();
    impl_->run_queue.clear();
    impl_->compiling.clear();
  }
  for (auto& job : pending) impl_->fail(job, ErrorCategory::internal, "the evaluator shut down before this request ran");
}

std::future<EvalResult> LocalEvaluator::submit(core::EvalRequest request) {
  auto job = std::make_shared<Job>();
  job->req = std::move(request);
  auto future = job->promise.get_future();
  EvalResult& r = job->result;
  {
    std::lock_guard lock(impl_->mu);
    ++impl_->stats.submitted;
    job->job_id = job->req.request_id.empty() ? fmt::format("job{}", impl_->next_job) : job->req.request_id;
    job->job_id = fmt::format("{}-{}", impl_->next_job++, core::sha256_hex(job->job_id).substr(0, 8));
  }
  r.request_id = job->req.request_id;
  r.problem_id = job->req.problem.id;
  r.device = std::string(core::to_string(impl_->config.platform));
  job->seed = job->req.options.seed ? *job->req.options.seed : random_seed();
  r.metadata["seed"] = std::to_string(job->seed);
  r.metadata["sandbox"] = impl_->sandbox_prefix.empty() ? "off" : "bubblewrap";
  r.metadata["static_check_policy"] = impl_->static_check_label;

  // Cheap checks first, in this thread: a candidate that fails them never reaches a worker.
  const auto languages = core::languages_for(impl_->config.platform);
  if (std::find(languages.begin(), languages.end(), job->req.language) == languages.end()) {
    impl_->fail(job, ErrorCategory::internal,
                fmt::format("kernel language {} cannot run on the {} backend", core::to_string(job->req.language),
                            core::to_string(impl_->config.platform)));
    return future;
  }
  const check::CandidateCheck precheck =
      check::check_candidate(job->req, impl_->severity, impl_->config.static_checks);
  r.format_ok = precheck.format_ok;
  r.static_findings = precheck.findings;
  r.static_ok = precheck.static_ok;
  if (!precheck.format_ok) {
    impl_->fail(job, ErrorCategory::format, precheck.message);
    return future;
  }
  if (!precheck.static_ok) {
    impl_->fail(job, ErrorCategory::static_check, precheck.message);
    return future;
  }
  const std::string problem_file = core::sha256_hex(job->req.problem.source).substr(0, 32) + ".py";
  job->problem_path = impl_->config.work_dir / "problems" / problem_file;
  if (!fs::exists(job->problem_path)) {
    try {
      core::write_file_atomically(job->problem_path, job->req.problem.source);
    } catch (const core::Error& e) {
      impl_->fail(job, ErrorCategory::internal, fmt::format("evaluator: {}", e.what()));
      return future;
    }
  }
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping) {
      job->result.error_category = ErrorCategory::internal;
    } else {
      job->compile_order = ++impl_->compile_orders;
      impl_->compile_queue.push_back(job);
      impl_->cv.notify_all();
      return future;
    }
  }
  impl_->fail(job, ErrorCategory::internal, "the evaluator is shutting down");
  return future;
}

LocalEvaluator::Stats LocalEvaluator::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

std::vector<pid_t> LocalEvaluator::worker_pids() const {
  std::vector<pid_t> out;
  for (const auto& lane : impl_->lanes)
    if (const pid_t pid = lane->pid.load(); pid > 0) out.push_back(pid);
  return out;
}

const LocalEvaluatorConfig& LocalEvaluator::config() const { return impl_->config; }

void LocalEvaluator::start_workers() {
  std::lock_guard lock(impl_->mu);
  impl_->warm_requested = true;
  impl_->cv.notify_all();
}

bool LocalEvaluator::workers_ready() const {
  return std::all_of(impl_->lanes.begin(), impl_->lanes.end(), [](const auto& lane) { return lane->started_once.load(); });
}

}  // namespace kbrl::eval
