// LocalEvaluator: evaluates candidates on this machine with a pool of long-lived Python workers
// (libkbrl/worker/kbrl_worker.py). Compiling is CPU work and runs on many workers at once, into
// content-addressed build directories; running and timing happen on one lane per device, so
// each GPU's timing runs are exclusive. Every request gets exactly one result, whatever the
// candidate or the workers do.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/eval/evaluator.hpp"

namespace kbrl::eval {

// Limits applied to every child process that runs candidate code (setrlimit).
struct ResourceLimits {
  std::uint64_t file_size_bytes = 4ull << 30;  // largest file a child may write; 0: no limit
  // Virtual memory of a child on the CPU backend (GPU runtimes reserve huge address ranges, so
  // GPU runs are not limited this way). 0: half the machine's memory; UINT64_MAX: no limit.
  std::uint64_t address_space_bytes = 0;
  std::uint64_t processes = 0;  // RLIMIT_NPROC; 0: no limit (root is never limited by it)
  std::uint64_t open_files = 4096;  // RLIMIT_NOFILE of a child; 0: no limit
  // RLIMIT_CPU of a child, in seconds of CPU time (all its threads). 0: its stage's timeout times
  // the machine's cores, the most it could use within its wall-clock limit; UINT64_MAX: no limit.
  std::uint64_t cpu_seconds = 0;
};

enum class SandboxMode { on, off };

struct LocalEvaluatorConfig {
  core::DevicePlatform platform = core::DevicePlatform::cpu;
  std::string python;                   // empty: default_python()
  std::filesystem::path worker_script;  // empty: default_worker_script()
  std::filesystem::path work_dir;       // builds, logs, baseline timings; empty: default_work_dir()
  int compile_workers = 0;              // 0: one per CPU the process may use (core::available_cpus)
  // Niceness of the compilers (0: the evaluator's own). Builds fill every idle core; on a GPU the
  // run lanes' CPU side (kernel launches between timing events, input checks) goes first.
  int compile_nice = 10;
  std::vector<int> devices;             // GPU indices (cuda/hip); empty: GPU 0. Ignored on cpu.
  int cpu_run_lanes = 1;                // cpu: parallel run lanes (1 keeps timings exclusive)
  // bubblewrap around the workers; on: evaluation refuses to start where bubblewrap cannot run.
  SandboxMode sandbox = SandboxMode::on;
  ResourceLimits limits;
  std::string cuda_arch;                // TORCH_CUDA_ARCH_LIST for builds, e.g. "9.0"; empty: detect
  // hip: the offload architectures builds target (PYTORCH_ROCM_ARCH, which ROCm's torch turns into
  // hipcc's --offload-arch), e.g. "gfx950" or "gfx90a;gfx942"; empty: torch's choice (the GPUs it
  // sees). Ignored on the other platforms.
  std::string gpu_arch;
  // A correct candidate faster than this many times the reference gets metadata
  // "excessive_speedup": "true", KernelBench's flag for a speedup worth a second look (its
  // check_for_excessive_speedup, threshold 10); the verdict and the speedup are unchanged. 0: off.
  double excessive_speedup = 10.0;
  double worker_start_timeout_s = 300;  // importing torch on a cold machine is slow
  double grace_s = 30;                  // our deadline past the worker's own stage timeout
  bool static_checks = true;            // run the static checker before compiling
  // The named policy the severities start from (check::static_check_policies(): strict,
  // kernelbench, fusion); static_check_severity is applied over it. Every result's metadata
  // names both (static_check_policy).
  std::string static_check_policy = "strict";
  std::map<std::string, core::Severity> static_check_severity;  // overrides by rule name (docs/static-checks.md)
  bool baseline_cache = true;           // time each reference once per device and settings
  bool keep_logs = false;               // keep every child's log, not only failures'
  // Compile accelerations (docs/evaluator.md, "Compile speed"); none changes what a candidate
  // compiles to, and result.metadata says what each did (compile_pch, compile_light_headers,
  // compile_parallel_passes, compile_cuda_pch).
  bool compile_pch = true;             // precompiled headers for g++: the binding file's torch/extension.h,
                                       // and with parallel passes the headers part of a .cu's host pass
  bool compile_light_headers = true;   // CUDA sources built against fewer torch headers first
  bool compile_parallel_passes = true; // light-header builds of a .cu run nvcc's host and device passes
                                       // side by side (needs compile_light_headers)
  // Where both keep their shared files (a PCH per compiler and flag set, about 0.75 GB each, and
  // the shadow headers); builds depend on them, so remove it only together with builds/.
  // Empty: <work_dir>/compile_cache. Evaluators with different work dirs may share one.
  std::filesystem::path compile_cache_dir;
};

// The interpreter from KBRL_PYTHON, else the one the build was configured with, else python3.
std::string default_python();
// KBRL_WORKER_SCRIPT, else the worker installed beside the running program or shared libkbrl
// (<prefix>/share/kbrl/), else the one installed at the configured prefix, else the one in the
// source tree.
std::filesystem::path default_worker_script();
// KBRL_WORK_DIR, else $XDG_CACHE_HOME/kbrl, else ~/.cache/kbrl.
std::filesystem::path default_work_dir();
// The device node of the NVIDIA GPU that CUDA numbers `index` in PCI bus order
// (CUDA_DEVICE_ORDER=PCI_BUS_ID, nvidia-smi's numbering): "/dev/nvidia<its minor number>", read
// from the driver's `driver_gpus` folder (one <bus id>/information file per GPU);
// "/dev/nvidia<index>" where that folder does not say.
std::string nvidia_device_node(int index, const std::filesystem::path& driver_gpus = "/proc/driver/nvidia/gpus");

class LocalEvaluator : public Evaluator {
 public:
  // Throws core::InvalidArgument for a bad configuration (missing worker script, ...).
  explicit LocalEvaluator(LocalEvaluatorConfig config);
  // Pending requests are answered with an `internal` result; running workers are stopped.
  ~LocalEvaluator() override;
  LocalEvaluator(const LocalEvaluator&) = delete;
  LocalEvaluator& operator=(const LocalEvaluator&) = delete;

  std::future<core::EvalResult> submit(core::EvalRequest request) override;

  struct Stats {
    int submitted = 0;
    int finished = 0;
    int compiles = 0;             // builds actually run (not served from the build cache)
    int compile_cache_hits = 0;
    int builds_discarded = 0;     // cached builds whose libraries no longer matched their record
    int baseline_cache_hits = 0;
    int workers_started = 0;
    int workers_lost = 0;         // workers that died or were killed under a job
    int jobs_retried = 0;
  };
  Stats stats() const;
  // Process ids of the workers now running (for tests that kill them at random).
  std::vector<pid_t> worker_pids() const;
  const LocalEvaluatorConfig& config() const;
  // Starts every lane's worker now rather than at its first job, and returns at once: a service
  // is ready (kbrl-evald's /readyz) once workers_ready() says each has started, torch imported.
  void start_workers();
  bool workers_ready() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kbrl::eval
