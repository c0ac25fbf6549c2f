#include "kbrl/env/kernelbench_env.hpp"

#include <fmt/format.h>

#include <utility>

#include "kbrl/core/error.hpp"
#include "kbrl/prompt/answer_parser.hpp"
#include "kbrl/reward/terms.hpp"

namespace kbrl::env {

namespace {

const reward::RewardRegistry& registry_of(const EnvOptions& o) {
  return o.registry != nullptr ? *o.registry : reward::default_registry();
}

StepResult score(core::Completion completion, core::EvalResult eval, int turn, const EnvOptions& options) {
  StepResult r;
  r.breakdown = reward::compute_reward(eval, completion, options.reward, registry_of(options));
  r.reward = r.breakdown.total;
  r.metrics["kernel/format_ok"] = eval.format_ok ? 1 : 0;
  r.metrics["kernel/compiled"] = eval.compiled ? 1 : 0;
  r.metrics["kernel/correct"] = eval.correct ? 1 : 0;
  r.metrics["kernel/cheat"] = reward::is_static_check_failure(eval) ? 1 : 0;
  if (eval.correct && eval.speedup) r.metrics["kernel/speedup"] = *eval.speedup;
  r.metrics["turn"] = turn + 1;
  r.completion = std::move(completion);
  r.eval = std::move(eval);
  return r;
}

// Advice for the next attempt, by what went wrong.
std::string guidance(const core::EvalResult& e, const EnvOptions& o) {
  using core::ErrorCategory;
  switch (e.error_category) {
    case ErrorCategory::none:
      return o.early_stop_min_speedup > 0
                 ? fmt::format("It is correct but not yet {:.2f}x faster than the reference. Find the bottleneck "
                               "(memory traffic, launches, occupancy) and fuse or restructure the work.",
                               o.early_stop_min_speedup)
                 : "It is correct. Make it faster: fuse operations, cut memory traffic and kernel launches.";
    case ErrorCategory::format:
      return "Answer with one complete Python program that defines class ModelNew, inside <KERNEL> and </KERNEL> "
             "after your reasoning.";
    case ErrorCategory::static_check:
    case ErrorCategory::reward_hack:
      return "The checker rejected the program. Compute the result in your own kernel: no fallback to the "
             "reference's PyTorch operators, no exception handlers that hide failures, no tampering with timing, "
             "streams or inputs.";
    case ErrorCategory::compile:
      return "Fix the build first: read the compiler error, check the kernel's signatures, types and includes, "
             "and that the extension's functions match how forward calls them.";
    case ErrorCategory::runtime:
      return "It built but raised while running: check launch configurations, tensor shapes, dtypes, devices "
             "and contiguity of what you pass to the kernel.";
    case ErrorCategory::correctness:
      return "It ran but the outputs are wrong: check indexing and bounds, reductions across blocks, the "
             "handling of the last partial tile, and the dtype of accumulators.";
    case ErrorCategory::timeout:
      return "It ran past the time limit: look for loops that do not terminate, missing synchronization or "
             "far too little parallelism.";
    case ErrorCategory::crash:
      return "The process crashed (an illegal memory access or abort): check every index against the tensor "
             "sizes and the grid against the data.";
    case ErrorCategory::out_of_memory:
      return "It ran out of memory: avoid large temporary buffers and allocate outputs once.";
    case ErrorCategory::internal:
      return "The evaluator failed for reasons not tied to your program; submit the program again.";
  }
  return {};
}

std::string category_line(const core::EvalResult& e) {
  using core::ErrorCategory;
  switch (e.error_category) {
    case ErrorCategory::none: return "correct";
    case ErrorCategory::format: return "no program found (format)";
    case ErrorCategory::static_check: return "rejected by the static checker";
    case ErrorCategory::compile: return "did not compile";
    case ErrorCategory::runtime: return "raised an error while running";
    case ErrorCategory::correctness: return "wrong outputs";
    case ErrorCategory::timeout: return "timed out";
    case ErrorCategory::crash: return "crashed";
    case ErrorCategory::out_of_memory: return "out of memory";
    case ErrorCategory::reward_hack: return "caught manipulating the evaluation";
    case ErrorCategory::internal: return "evaluator error";
  }
  return std::string(core::to_string(e.error_category));
}

}  // namespace

std::string excerpt(const std::string& text, int max_chars) {
  if (max_chars <= 0 || text.size() <= static_cast<std::size_t>(max_chars)) return text;
  const std::size_t keep = static_cast<std::size_t>(max_chars);
  std::size_t head = keep * 2 / 3, tail = keep - head;
  // Whole lines where possible.
  if (const auto nl = text.rfind('\n', head); nl != std::string::npos && nl > head / 2) head = nl + 1;
  std::size_t tail_start = text.size() - tail;
  if (const auto nl = text.find('\n', tail_start); nl != std::string::npos && nl < text.size() - tail / 2)
    tail_start = nl + 1;
  return text.substr(0, head) + fmt::format("[... {} characters left out ...]\n", tail_start - head) +
         text.substr(tail_start);
}

std::string earlier_answer(const core::Completion& c, int max_chars) {
  if (c.format_ok) return "<KERNEL>\n" + excerpt(c.kernel, max_chars) + "\n</KERNEL>";
  // No program: what was said, without the thinking.
  std::string text = c.text;
  const auto open = text.find("<think>");
  const auto close = text.find("</think>");
  if (close != std::string::npos) text = text.substr(close + 8);
  else if (open != std::string::npos) text = text.substr(0, open);
  return excerpt(text, max_chars);
}

std::string feedback_message(const core::EvalResult& e, int attempt, int max_turns, const EnvOptions& o) {
  std::string m = fmt::format("Attempt {} of {}: {}.\n", attempt, max_turns, category_line(e));
  if (e.trials_total > 0) m += fmt::format("Correctness trials passed: {}/{}.\n", e.trials_passed, e.trials_total);
  if (!e.input_families.failed.empty()) {
    std::string families;
    for (const auto& f : e.input_families.failed) families += (families.empty() ? "" : ", ") + f;
    m += "Wrong on transformed inputs: " + families + ".\n";
  }
  if (e.max_abs_error && !e.correct) m += fmt::format("Largest absolute error: {:.3g}.\n", *e.max_abs_error);
  if (e.correct && e.runtime && e.ref_runtime)
    m += fmt::format("Runtime {:.4g} ms against the reference's {:.4g} ms: speedup {:.3f}x.\n", e.runtime->mean_ms,
                     e.ref_runtime->mean_ms, e.speedup.value_or(0.0));
  for (const auto& f : e.static_findings)
    if (f.severity == core::Severity::error)
      m += fmt::format("Static check '{}' (line {}): {}\n", f.rule, f.line, f.message);
  if (!e.error_message.empty() && !e.correct)
    m += "\nError:\n```\n" + excerpt(e.error_message, o.error_excerpt_chars) + "\n```\n";
  m += "\n" + guidance(e, o) + "\n\nWrite the complete improved program defining ModelNew, in the same answer format.";
  return m;
}

KernelBenchEnv::KernelBenchEnv(core::Problem problem, EnvOptions options, eval::Evaluator& evaluator,
                               std::string request_prefix)
    : problem_(std::move(problem)), options_(std::move(options)), evaluator_(evaluator), prefix_(std::move(request_prefix)) {}

Observation KernelBenchEnv::initial_observation() { return {prompt::build_messages(problem_, options_.prompt)}; }

std::future<StepResult> KernelBenchEnv::evaluate(core::Completion sampled, int turn) {
  core::Completion c = prompt::parse_completion(sampled.text);
  c.tokens = std::move(sampled.tokens);
  c.num_tokens = sampled.num_tokens;
  c.truncated = sampled.truncated;
  const std::string id = fmt::format("{}/t{}", prefix_, turn);
  if (!c.format_ok) {
    core::EvalResult e;
    e.request_id = id;
    e.problem_id = problem_.id;
    e.error_category = core::ErrorCategory::format;
    e.error_message = c.kernel.empty() ? "no program found in the answer (expected it inside <KERNEL> ... </KERNEL>)"
                                       : "the program does not define class ModelNew";
    std::promise<StepResult> p;
    p.set_value(score(std::move(c), std::move(e), turn, options_));
    return p.get_future();
  }
  core::EvalRequest r;
  r.request_id = id;
  r.problem = problem_;
  r.candidate_source = c.kernel;
  r.language = options_.prompt.language;
  r.precision = options_.prompt.precision;
  r.options = options_.eval;
  auto result = evaluator_.submit(std::move(r));
  return std::async(std::launch::deferred, [this, c = std::move(c), result = std::move(result), turn]() mutable {
    return score(std::move(c), result.get(), turn, options_);
  });
}

std::future<StepResult> KernelBenchEnv::step(core::Completion sampled) {
  if (done_) throw core::InvalidArgument(fmt::format("{}: step after the episode ended", prefix_));
  done_ = true;
  auto inner = evaluate(std::move(sampled), turn_++);
  return std::async(std::launch::deferred, [inner = std::move(inner)]() mutable {
    StepResult r = inner.get();
    r.done = true;
    return r;
  });
}

MultiTurnKernelBenchEnv::MultiTurnKernelBenchEnv(core::Problem problem, EnvOptions options, eval::Evaluator& evaluator,
                                                 std::string request_prefix)
    : KernelBenchEnv(std::move(problem), std::move(options), evaluator, std::move(request_prefix)) {
  if (options_.max_turns < 1) throw core::InvalidArgument("MultiTurnKernelBenchEnv: max_turns must be at least 1");
  history_ = prompt::build_messages(problem_, options_.prompt);
}

std::future<StepResult> MultiTurnKernelBenchEnv::step(core::Completion sampled) {
  if (done_) throw core::InvalidArgument(fmt::format("{}: step after the episode ended", prefix_));
  const int turn = turn_++;
  auto inner = evaluate(std::move(sampled), turn);
  // The state moves on only when the result is read: the next prompt depends on it.
  done_ = true;  // until the future is read
  return std::async(std::launch::deferred, [this, inner = std::move(inner), turn]() mutable {
    StepResult r = inner.get();
    const auto& e = r.eval;
    const bool fast_enough = options_.early_stop_min_speedup <= 0 || e.speedup.value_or(0.0) >= options_.early_stop_min_speedup;
    r.done = turn + 1 >= options_.max_turns || (options_.early_stop && e.correct && fast_enough);
    if (!r.done) {
      history_.push_back({"assistant", earlier_answer(r.completion, options_.kernel_excerpt_chars)});
      history_.push_back({"user", feedback_message(e, turn + 1, options_.max_turns, options_)});
      r.next = Observation{history_};
      done_ = false;
    }
    return r;
  });
}

KernelBenchGroupBuilder::KernelBenchGroupBuilder(core::Problem problem, EnvOptions options, eval::Evaluator& evaluator,
                                                 int group_size, bool multi_turn, std::string request_prefix)
    : problem_(std::move(problem)),
      options_(std::move(options)),
      evaluator_(evaluator),
      group_size_(group_size),
      multi_turn_(multi_turn),
      prefix_(std::move(request_prefix)) {
  if (group_size_ < 1) throw core::InvalidArgument("KernelBenchGroupBuilder: group_size must be at least 1");
}

std::vector<std::unique_ptr<Env>> KernelBenchGroupBuilder::make_envs() {
  std::vector<std::unique_ptr<Env>> out;
  for (int s = 0; s < group_size_; ++s) {
    const std::string id = fmt::format("{}/{}/s{}", prefix_, problem_.id, s);
    if (multi_turn_) out.push_back(std::make_unique<MultiTurnKernelBenchEnv>(problem_, options_, evaluator_, id));
    else out.push_back(std::make_unique<KernelBenchEnv>(problem_, options_, evaluator_, id));
  }
  return out;
}

std::vector<std::string> KernelBenchGroupBuilder::logging_tags() const {
  return {problem_.level > 0 ? fmt::format("level{}", problem_.level) : std::string("bundled")};
}

}  // namespace kbrl::env
