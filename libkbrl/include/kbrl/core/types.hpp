// The value types every module speaks: problems, requests and results of evaluation, chat
// messages, completions and trajectories. Plain aggregates; JSON mapping lives in json.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kbrl::core {

// The language a candidate kernel is written in. The device platform (CUDA, HIP, CPU) belongs to
// the evaluator backend, not to the request.
enum class KernelLanguage { cuda, triton, hip, cpp };
// Numeric precision the problem is evaluated in (KernelBench: fp32 default, fp16, bf16).
enum class Precision { fp32, fp16, bf16 };
// Where kernels run.
enum class DevicePlatform { cpu, cuda, hip };

std::string_view to_string(KernelLanguage v) noexcept;
std::string_view to_string(Precision v) noexcept;
std::string_view to_string(DevicePlatform v) noexcept;
// Parse a name (case-insensitive; also accepts aliases such as "c++", "float32", "rocm").
// Throws InvalidArgument listing the accepted names.
KernelLanguage parse_kernel_language(std::string_view name);
Precision parse_precision(std::string_view name);
DevicePlatform parse_device_platform(std::string_view name);
// How close a candidate's outputs must be to the reference's, elementwise:
// |out - ref| <= atol + rtol * |ref|. Prompts state it and the checker applies it, so both read
// it from here; EvalOptions::atol/rtol override it per request.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  friend bool operator==(const Tolerance&, const Tolerance&) = default;
};
// fp32: atol = rtol = 1e-4; fp16 and bf16: atol = rtol = 1e-2.
Tolerance default_tolerance(Precision precision) noexcept;
// The kernel languages a device platform can run (cpp only on cpu; cuda/triton on cuda; hip/triton on hip).
std::vector<KernelLanguage> languages_for(DevicePlatform platform);

// One KernelBench-format problem: a PyTorch reference `Model` with `get_inputs()` and
// `get_init_inputs()`.
struct Problem {
  std::string id;            // unique within a dataset: "level1/19_ReLU", "bundled/03_softmax"
  int level = 0;             // KernelBench level 1-4; 0 for problems outside KernelBench's levels
  int number = 0;            // the number in the file name ("19" of 19_ReLU.py)
  std::string name;          // "ReLU"
  std::string source;        // the reference program
  std::string content_hash;  // sha256 of the source with comments and whitespace removed
  std::string origin;        // where it was loaded from (path, or path:line for JSONL)
  bool needs_weights = false;  // level 4: builds a pretrained model and needs its weights
  friend bool operator==(const Problem&, const Problem&) = default;
};

struct Message {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
  friend bool operator==(const Message&, const Message&) = default;
};

// What a policy produced for one prompt, with the parts the parser found in it.
struct Completion {
  std::string text;                 // the raw sampled text (without the prompt)
  std::vector<std::int32_t> tokens;  // sampled token ids, where the policy reports them
  int num_tokens = 0;               // length in tokens (tokens.size() when tokens are known)
  bool truncated = false;           // stopped by the token limit, not by a stop sequence
  std::string thinking;             // contents of <think>...</think>
  bool has_thinking = false;        // a closed <think> block was present
  std::string kernel;               // the extracted candidate program
  bool has_kernel_block = false;    // the answer used <KERNEL> ... </KERNEL>
  bool format_ok = false;           // a candidate was found and defines class ModelNew
  friend bool operator==(const Completion&, const Completion&) = default;
};

struct EvalOptions {
  int correctness_trials = 5;
  int timing_trials = 100;
  int warmup_runs = 5;
  bool measure_performance = true;
  std::optional<std::uint64_t> seed;  // fixed seed for reproducibility; fresh seeds when empty
  std::optional<double> atol;         // override the precision's default tolerance
  std::optional<double> rtol;
  double compile_timeout_s = 600.0;
  double run_timeout_s = 300.0;
  // Extra trials on transformed inputs (sign-symmetric, scaled up and down, special values).
  bool input_families = true;
  // Generate inputs and weights on the host and copy them, exactly as KernelBench does (slow for
  // large problems); by default they are created directly on the evaluation device.
  bool kernelbench_inputs = false;
  friend bool operator==(const EvalOptions&, const EvalOptions&) = default;
};

struct EvalRequest {
  std::string request_id;
  Problem problem;
  std::string candidate_source;
  KernelLanguage language = KernelLanguage::cuda;
  Precision precision = Precision::fp32;
  EvalOptions options;
  friend bool operator==(const EvalRequest&, const EvalRequest&) = default;
};

enum class Severity { off, warning, error };
std::string_view to_string(Severity v) noexcept;
Severity parse_severity(std::string_view name);

// One finding of the static checker.
struct StaticFinding {
  std::string rule;      // stable rule name, e.g. "try_except_fallback"
  std::string category;  // group of rules, e.g. "fallback", "timing", "escape"
  Severity severity = Severity::error;
  int line = 0;          // 1-based line in the candidate source, 0 when not tied to a line
  std::string message;
  friend bool operator==(const StaticFinding&, const StaticFinding&) = default;
};

// Why an evaluation did not end with a correct kernel (`none` when it did).
enum class ErrorCategory {
  none,
  format,           // no candidate program / no ModelNew
  static_check,     // a static-check rule of severity error fired
  compile,          // the candidate did not build or import
  runtime,          // it raised while running
  correctness,      // it ran, but outputs were wrong
  timeout,          // a stage ran past its limit
  crash,            // the process died (signal, os._exit, abort, device fault)
  out_of_memory,    // host or device memory exhausted
  reward_hack,      // a runtime defense caught it (patched timers, side streams, ...)
  internal,         // the evaluator itself failed; not the candidate's fault
};
std::string_view to_string(ErrorCategory v) noexcept;
ErrorCategory parse_error_category(std::string_view name);

// Timing statistics in milliseconds over `trials` timed runs.
struct TimingStats {
  double mean_ms = 0, median_ms = 0, std_ms = 0, min_ms = 0, max_ms = 0;
  int trials = 0;
  friend bool operator==(const TimingStats&, const TimingStats&) = default;
};

// The transformed-input correctness trials of one evaluation (see docs/evaluator.md).
struct InputFamilies {
  std::vector<std::string> tried;    // run on the candidate
  std::vector<std::string> failed;   // the candidate's outputs were wrong
  std::vector<std::string> skipped;  // the reference raised or gave non-finite outputs
  friend bool operator==(const InputFamilies&, const InputFamilies&) = default;
};

// Every stage of one evaluation. Its JSON form keeps KernelBench's names (compiled,
// correctness, runtime, ref_runtime, metadata) next to ours.
struct EvalResult {
  std::string request_id;
  std::string problem_id;
  bool format_ok = false;
  std::vector<StaticFinding> static_findings;
  bool static_ok = true;  // no finding of severity error
  bool compiled = false;
  bool correct = false;                    // every trial and every input family passed
  bool correct_on_problem_inputs = false;  // every trial on the problem's own inputs passed
  InputFamilies input_families;
  int trials_passed = 0;
  int trials_total = 0;
  std::optional<double> max_abs_error;
  std::optional<double> max_rel_error;
  std::optional<TimingStats> runtime;      // the candidate
  std::optional<TimingStats> ref_runtime;  // the reference, same device and settings
  std::optional<double> speedup;           // ref_runtime.mean / runtime.mean
  ErrorCategory error_category = ErrorCategory::none;
  std::string error_message;  // short and cleaned: fit for logs and for multi-turn feedback
  std::string device;         // e.g. "cpu", "NVIDIA H100 80GB HBM3"
  std::map<std::string, double> stage_seconds;  // "compile", "correctness", "timing", "total"
  std::map<std::string, std::string> metadata;  // free-form details (compiler log tail, ...)
  friend bool operator==(const EvalResult&, const EvalResult&) = default;
};

// What one reward is made of (reward::compute_reward writes it; docs/rewards.md).
struct RewardBreakdown {
  double total = 0.0;      // what training sees: clipped sum, or the static-check value
  double unclipped = 0.0;  // sum of `terms` before clipping
  std::map<std::string, double> terms;   // weight * value, per term with a nonzero weight
  std::map<std::string, double> values;  // the unweighted value of the same terms
  bool zeroed_by_static_check = false;   // the static-check override replaced every term
  bool clipped = false;                  // clip bounds changed the total

  // Flat metrics for logging: <prefix>total, <prefix>unclipped, <prefix>clipped (0/1),
  // <prefix>static_zeroed (0/1) and <prefix><term> for each weighted term.
  std::map<std::string, double> metrics(std::string_view prefix = "reward/") const;

  friend bool operator==(const RewardBreakdown&, const RewardBreakdown&) = default;
};

// One step of an episode: what the policy saw and did, and what came back. Rollouts
// (train/rollouts.hpp) write these, the run log's traces read them.
struct Transition {
  std::vector<Message> observation;         // the conversation the policy answered
  std::vector<std::int32_t> prompt_tokens;  // the rendered observation, where tokenized
  Completion completion;                    // as the env parsed it, with the sampled tokens
  std::vector<float> logprobs;              // sampling log-probabilities of completion.tokens
  std::optional<EvalResult> eval;
  double reward = 0.0;
  bool done = false;
  std::map<std::string, double> metrics;
  std::string prompt_text;    // the observation as the policy read it (chat template applied), where known
  RewardBreakdown breakdown;  // how `reward` was made, where the env reports it
  friend bool operator==(const Transition&, const Transition&) = default;
};

struct Trajectory {
  std::string problem_id;
  std::vector<Transition> transitions;
  double total_reward() const noexcept;
  friend bool operator==(const Trajectory&, const Trajectory&) = default;
};

// The G trajectories of one GRPO group (one problem, G samples).
struct TrajectoryGroup {
  std::string problem_id;
  std::vector<Trajectory> trajectories;
  int level = 0;  // the problem's KernelBench level (0: outside the levels), for per-level metrics
  friend bool operator==(const TrajectoryGroup&, const TrajectoryGroup&) = default;
};

}  // namespace kbrl::core
