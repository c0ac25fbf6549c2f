// What the policy reads after an attempt in a multi-turn episode: one feedback message per
// evaluation, holding what a kernel engineer would want to know (the outcome, trials, errors,
// the speedup, advice for that kind of failure) and nothing else: no temporary build paths,
// hashes, ANSI colours, build-tool chatter or Python frames outside the candidate's program.
#pragma once

#include <string>
#include <string_view>

#include "kbrl/core/types.hpp"

namespace kbrl::env {

struct EnvOptions;

// The evaluator writes the candidate's program to a file of this name (LocalEvaluator, and the
// evaluation service built on it): traceback frames in it are the candidate's own.
inline constexpr std::string_view kCandidateFileName = "candidate.py";

// An evaluation's error text cleaned for the policy, at most max_chars long (0: no limit):
// - ANSI escape sequences and carriage-return overdraws removed;
// - absolute paths cut to their file name, the worker's "<build>/" prefix and long hexadecimal
//   hashes removed;
// - lines of the build tool (ninja steps, compiler command lines, "Error building extension",
//   "N errors detected", include chains), C++ stack frames of torch errors and CUDA's advice about
//   environment variables dropped;
// - for a build failure with compiler diagnostics (gcc, clang, nvcc, the linker): the errors
//   alone, each once, in the order the compiler reported them so the first error comes first,
//   with the source line and caret the compiler printed and up to two notes, and a count of
//   those that did not fit;
// - otherwise Python tracebacks keep only the frames of the candidate's program (and the
//   exception), repeated lines are shown once, and a text too long keeps its head and tail.
std::string clean_error_text(std::string_view text, core::ErrorCategory category, int max_chars);

// The feedback message after one attempt: "Attempt i of n: <outcome>.", the facts of the
// result, the cleaned error under a heading fixed per category, advice for that category, and
// the request for an improved program.
std::string feedback_message(const core::EvalResult& eval, int attempt, int max_turns, const EnvOptions& options);
// The assistant message an earlier answer becomes: its program cut to `max_chars` (head and
// tail), its thinking removed, or with thinking_chars >= 0 kept as a <think> block cut to that
// many characters (the seeds' flow, which carries earlier reasoning into the next turn).
std::string earlier_answer(const core::Completion& completion, int max_chars, int thinking_chars = -1);
// Head and tail of `text` within `max_chars`, with a marker of how much was left out.
std::string excerpt(const std::string& text, int max_chars);

}  // namespace kbrl::env
