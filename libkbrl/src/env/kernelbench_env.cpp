#include "kbrl/env/kernelbench_env.hpp"

#include <fmt/format.h>

#include <map>
#include <string>
#include <utility>

#include "kbrl/core/error.hpp"
#include "kbrl/prompt/answer_parser.hpp"
#include "kbrl/reward/terms.hpp"

namespace kbrl::env {

namespace {

const reward::RewardRegistry& registry_of(const EnvOptions& o) {
  return o.registry != nullptr ? *o.registry : reward::default_registry();
}

// The first turn's prompt is the one with retrieved examples (later prompts repeat it): what it
// showed and left out, for the step's retrieval/* metrics (train/metrics.hpp).
void add_retrieval_metrics(std::map<std::string, double>& metrics, const core::Problem& problem, int turn,
                           const EnvOptions& options) {
  if (turn != 0 || !options.prompt.examples) return;
  const auto r = options.prompt.examples->examples_for(problem);
  metrics["retrieval/examples"] = static_cast<double>(r->examples.size());
  metrics["retrieval/excluded_exact"] = static_cast<double>(r->excluded_exact);
  metrics["retrieval/excluded_near"] = static_cast<double>(r->excluded_near);
  metrics["retrieval/dropped"] = static_cast<double>(r->dropped);
  metrics["retrieval/tokens"] = static_cast<double>(r->tokens);
}

StepResult score(const core::Problem& problem, core::Completion completion, core::EvalResult eval, int turn,
                 const EnvOptions& options) {
  StepResult r;
  add_retrieval_metrics(r.metrics, problem, turn, options);
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

}  // namespace

bool episode_ends(const core::EvalResult& e, int turn, const EnvOptions& options) {
  const bool fast_enough = options.early_stop_min_speedup <= 0 || e.speedup.value_or(0.0) >= options.early_stop_min_speedup;
  return turn + 1 >= options.max_turns || (options.early_stop && e.correct && fast_enough);
}

void add_attempt(std::vector<core::Message>& history, const core::Completion& completion, const core::EvalResult& e,
                 int turn, const EnvOptions& options) {
  history.push_back({"assistant", earlier_answer(completion, options.kernel_excerpt_chars,
                                                 options.keep_thinking ? options.thinking_excerpt_chars : -1)});
  history.push_back({"user", feedback_message(e, turn + 1, options.max_turns, options)});
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
    p.set_value(score(problem_, std::move(c), std::move(e), turn, options_));
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
    return score(problem_, std::move(c), result.get(), turn, options_);
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
    r.done = episode_ends(r.eval, turn, options_);
    if (!r.done) {
      add_attempt(history_, r.completion, r.eval, turn, options_);
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
