// Task prompts: what the policy reads for one KernelBench-style problem. A system prompt sets the
// role and answer format; the user prompt gives the task, the kernel language's toolchain, the
// precision and tolerance the checker applies, optional hardware notes, an optional worked
// example, the reference program and the answer format. docs/prompts.md shows the anatomy.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/prompt/retrieved_examples.hpp"

namespace kbrl::prompt {

struct PromptOptions {
  core::KernelLanguage language = core::KernelLanguage::cuda;
  core::Precision precision = core::Precision::fp32;
  bool one_shot = true;              // include the worked example for the language
  std::string hardware;              // free text about the target device; empty: no hardware section
  bool thinking_instruction = true;  // ask for reasoning inside <think> ... </think> first
  std::string extra_instructions;    // appended as a section of its own; empty: none
  // The checker's tolerance when a run overrides the precision's default (EvalOptions::atol /
  // rtol), so that the prompt states what is applied.
  std::optional<double> atol;
  std::optional<double> rtol;
  std::optional<std::string> system_prompt;  // replaces the built-in system prompt
  // Retrieved examples (retrieved_examples.hpp): when set, the user prompt opens with the
  // problem's examples, before the task, as the seeds' RA-ICL prompts do. Null: none.
  std::shared_ptr<const ExampleProvider> examples;
};

// A small reference program and a correct answer for it in one kernel language: the answer
// fuses torch.relu(a + b) into one kernel, for fp32, fp16 and bf16 inputs.
struct OneShotExample {
  std::string_view reference;  // KernelBench format: Model, get_inputs, get_init_inputs
  std::string_view reasoning;  // a short plan, shown inside <think> when thinking is asked for
  std::string_view solution;   // the complete program defining ModelNew
};
const OneShotExample& one_shot_example(core::KernelLanguage language);

// The tolerance the prompt states: the options' overrides, else core::default_tolerance.
core::Tolerance stated_tolerance(const PromptOptions& options);

std::string system_prompt(const PromptOptions& options);
// Throws core::InvalidArgument when the problem has no source or a tolerance override is
// negative or not finite.
std::string user_prompt(const core::Problem& problem, const PromptOptions& options);
// {system, user}: the conversation a policy answers for one problem.
std::vector<core::Message> build_messages(const core::Problem& problem, const PromptOptions& options);

}  // namespace kbrl::prompt
