// The protocol between LocalEvaluator and its Python worker (libkbrl/worker/kbrl_worker.py):
// the one place that writes jobs for the worker and reads its replies, strictly. One JSON object
// per line; docs/evaluator.md ("Worker protocol") lists every field, and the golden jobs and
// replies in tests/data/worker_protocol/ are checked by this module's test and by the worker's.
#pragma once

#include <boost/json/object.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "kbrl/core/error.hpp"
#include "kbrl/core/types.hpp"

namespace kbrl::eval {

// The wire version. The worker's greeting, every job and every reply carry it, and each side
// refuses another. Bumped with any change of a field, and whenever the worker's behaviour
// changes what a build or a result means: it is part of the build and reference-timing cache keys.
inline constexpr int kWorkerProtocolVersion = 5;

// Limits the worker applies to a job's child (setrlimit, nice). 0 means no limit (no change of
// niceness).
struct WorkerLimits {
  std::uint64_t file_size_bytes = 0;
  std::uint64_t address_space_bytes = 0;
  std::uint64_t processes = 0;
  std::uint64_t open_files = 0;
  std::uint64_t cpu_seconds = 0;
  int nice = 0;
  friend bool operator==(const WorkerLimits&, const WorkerLimits&) = default;
};

// The compile accelerations of libkbrl/worker/kbrl_fast_build.py (docs/evaluator.md, "Compile
// speed"); with pch and light_headers both off the build is plain.
struct FastBuildSettings {
  bool pch = false;
  bool light_headers = false;
  bool parallel_passes = false;
  bool binding_early = false;  // the binding file's compile beside nvcc's front ends, not after them
  std::filesystem::path dir;   // the shared PCHs and shadow headers (compile_cache_dir)
  friend bool operator==(const FastBuildSettings&, const FastBuildSettings&) = default;
};

// Build (import) a candidate in its build directory. The struct has no settings of its own:
// compile_job_for fills what comes from the request, the evaluator the rest.
struct CompileJob {
  std::string job_id;
  std::filesystem::path candidate_path;
  std::filesystem::path build_dir;
  std::filesystem::path log_path;  // the child's output (compiler messages included)
  core::KernelLanguage language = core::KernelLanguage::cuda;
  double timeout_s = 0;
  WorkerLimits limits;
  FastBuildSettings fast_build;
  friend bool operator==(const CompileJob&, const CompileJob&) = default;
};

// Run a built candidate against its reference: correctness trials, input families, timing.
struct RunJob {
  std::string job_id;
  std::filesystem::path problem_path;
  std::filesystem::path candidate_path;
  std::filesystem::path build_dir;
  std::filesystem::path log_path;
  std::string device;  // the torch device the child runs on: "cpu", "cuda:0"
  core::Precision precision = core::Precision::fp32;
  std::uint64_t seed = 0;
  int correctness_trials = 0;
  int timing_trials = 0;
  int warmup_runs = 0;
  bool measure_performance = false;
  bool time_reference = false;  // false: the evaluator has the reference's timing cached
  bool input_families = false;
  bool kernelbench_inputs = false;
  double atol = 0;
  double rtol = 0;
  double timeout_s = 0;
  WorkerLimits limits;
  friend bool operator==(const RunJob&, const RunJob&) = default;
};

// The fields that come from the request: the language and the compile timeout.
CompileJob compile_job_for(const core::EvalRequest& request);
// The fields that come from the request: precision, trials, timing, input settings, the run
// timeout and the tolerances (the request's, else core::default_tolerance of its precision);
// time_reference is measure_performance. Ids, paths, device, seed and limits are the caller's.
RunJob run_job_for(const core::EvalRequest& request);

// Job lines: one JSON object each, every field written (the worker has no defaults), no newline.
boost::json::object to_json(const CompileJob& job);
boost::json::object to_json(const RunJob& job);
std::string write_job(const CompileJob& job);
std::string write_job(const RunJob& job);
std::string write_shutdown_job();

// A line from the worker that does not follow the protocol: a field missing, of the wrong type
// or unknown, another protocol version, another job's id. The message names the field.
class WorkerProtocolError : public core::Error {
 public:
  using core::Error::Error;
};

// The worker's first line, once torch is imported.
struct WorkerReady {
  int protocol = 0;
  std::int64_t pid = 0;
  std::string platform;                // "cpu", "cuda", "hip"
  std::string torch;                   // torch.__version__
  std::string timing;                  // how runs are timed: part of the reference-timing cache key
  std::optional<std::string> cuda;     // torch.version.cuda
  std::optional<std::string> hip;      // torch.version.hip
  std::string python;
  double import_s = 0;
  std::string isolation;               // how a job's child is kept to its build directory ("landlock ABI 7", "unavailable: ...")
};

struct CompileReply {
  std::string job_id;
  core::ErrorCategory error_category = core::ErrorCategory::none;  // none: built, and defines ModelNew
  std::string error_message;
  double compile_s = 0;  // the build in the child (from the fork when the child never reported)
  double wall_s = 0;     // the whole job in the worker
  std::map<std::string, std::string> metadata;  // what the compile accelerations did
  bool ok() const { return error_category == core::ErrorCategory::none; }
  friend bool operator==(const CompileReply&, const CompileReply&) = default;
};

struct RunReply {
  std::string job_id;
  core::ErrorCategory error_category = core::ErrorCategory::none;  // none: correct on everything
  std::string error_message;
  std::optional<bool> compiled;  // empty when the child never reported (crash, timeout)
  bool correct = false;
  bool correct_on_problem_inputs = false;
  std::optional<core::InputFamilies> input_families;  // empty until the families ran
  int trials_passed = 0;
  int trials_total = 0;
  std::optional<double> max_abs_error;
  std::optional<double> max_rel_error;
  std::optional<std::string> device;  // the device's name; empty when the child never reported
  std::optional<core::TimingStats> runtime;
  std::optional<core::TimingStats> ref_runtime;  // empty when not asked for (time_reference)
  std::map<std::string, double> stage_seconds;   // start, setup, reference, load, ..., exit
  std::map<std::string, std::string> metadata;   // what the timing noticed
  double wall_s = 0;
  bool ok() const { return error_category == core::ErrorCategory::none; }
  friend bool operator==(const RunReply&, const RunReply&) = default;
};

// Readers: throw WorkerProtocolError. `job_id`: the id of the job the reply answers; empty
// accepts any (a compile reply kept as a build directory's record).
WorkerReady read_ready(std::string_view line);
CompileReply read_compile_reply(const boost::json::object& reply, std::string_view job_id);
CompileReply read_compile_reply(std::string_view line, std::string_view job_id);
RunReply read_run_reply(const boost::json::object& reply, std::string_view job_id);
RunReply read_run_reply(std::string_view line, std::string_view job_id);

// A compile reply as the worker writes it: the build directory keeps its outcome this way
// (compile.json) and reads it back with read_compile_reply.
boost::json::object to_json(const CompileReply& reply);
std::string write_compile_reply(const CompileReply& reply);

// What a reply means for the result: the compile stage's verdict, time and metadata
// (compile_<key>); returns reply.ok().
bool apply_compile_reply(const CompileReply& reply, core::EvalResult& result);
// The run stage's verdict, numbers, timings (stage_seconds merged) and metadata (timing_<key>);
// fields the child never reported (compiled, device) keep the result's values.
void apply_run_reply(const RunReply& reply, core::EvalResult& result);

}  // namespace kbrl::eval
