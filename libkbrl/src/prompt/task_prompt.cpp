#include "kbrl/prompt/task_prompt.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kbrl/core/error.hpp"
#include "text_util.hpp"

namespace kbrl::prompt {
namespace {

struct LanguageText {
  std::string_view kernels;    // "custom CUDA kernels"
  std::string_view expertise;  // the system prompt's description of the expert
  std::string_view section;    // heading of the toolchain section
  std::string_view guidance;   // bullet list: how to build and launch kernels in this language
};

const LanguageText& language_text(core::KernelLanguage language) {
  static const LanguageText kCuda{
      "custom CUDA kernels",
      "an expert GPU kernel engineer who writes CUDA C++ and knows PyTorch's internals",
      "CUDA",
      "- Write the kernels in CUDA C++ and compile them from the Python file with "
      "`torch.utils.cpp_extension.load_inline`: the kernels and their host wrappers go in "
      "`cuda_sources`, declarations of the wrappers you call from Python in `cpp_sources`, and "
      "their names in `functions`.\n"
      "- Launch on PyTorch's current stream (`at::cuda::getCurrentCUDAStream()`) and check every "
      "launch (`C10_CUDA_KERNEL_LAUNCH_CHECK()`).\n"
      "- Make tensors contiguous before indexing their data pointers, and allocate outputs with "
      "`torch::empty` on the inputs' device.\n"
      "- Shared memory, warp shuffles, vectorized loads, tensor cores (WMMA / MMA) and inline PTX "
      "are all allowed.\n"};
  static const LanguageText kTriton{
      "custom Triton kernels",
      "an expert GPU kernel engineer who writes Triton kernels and knows PyTorch's internals",
      "Triton",
      "- Write the kernels in Triton: functions decorated with `@triton.jit`, launched from "
      "`ModelNew.forward` (or helpers it calls) as `kernel[grid](...)`.\n"
      "- Allocate outputs with PyTorch and pass tensors, sizes and strides to the kernels; make "
      "block sizes `tl.constexpr` and mask the ragged tail of every load and store.\n"
      "- Accumulate in float32 and cast when storing. `tl.dot` accumulates in float32, but on "
      "float32 inputs it multiplies in TF32 unless given `input_precision=\"ieee\"`.\n"
      "- `@triton.autotune` is allowed; keep its list of configurations short, since every "
      "configuration is compiled and timed.\n"};
  static const LanguageText kHip{
      "custom HIP kernels",
      "an expert GPU kernel engineer who writes HIP C++ for AMD GPUs and knows PyTorch's internals",
      "HIP (AMD ROCm)",
      "- The GPU is an AMD GPU running ROCm. Write the kernels in HIP C++ and compile them with "
      "`torch.utils.cpp_extension.load_inline`: ROCm builds of PyTorch compile `cuda_sources` with "
      "hipcc, so the HIP kernels and their host wrappers go there, declarations of the wrappers in "
      "`cpp_sources`, and their names in `functions`.\n"
      "- Use the HIP runtime API (`#include <hip/hip_runtime.h>`, `hipLaunchKernelGGL`, "
      "`hipGetLastError`) and launch on PyTorch's current stream "
      "(`at::hip::getCurrentHIPStreamMasqueradingAsCUDA()` from "
      "`<ATen/hip/impl/HIPStreamMasqueradingAsCUDA.h>`).\n"
      "- A wavefront has 64 threads on AMD Instinct (CDNA) GPUs and 32 on Radeon (RDNA) GPUs: use "
      "`warpSize` instead of assuming 32.\n"
      "- PyTorch on ROCm reports GPU tensors with device type `cuda` (`tensor.is_cuda()` is true). "
      "Make tensors contiguous before indexing their data pointers.\n"};
  static const LanguageText kCpp{
      "custom C++ CPU kernels",
      "an expert performance engineer who writes multi-threaded, vectorized C++ for CPUs and knows "
      "PyTorch's internals",
      "C++ (CPU)",
      "- The target is the CPU. Write the kernels in C++ and compile them with "
      "`torch.utils.cpp_extension.load_inline` using `cpp_sources` only (no `cuda_sources`), with "
      "the functions to bind listed in `functions`.\n"
      "- Spread work over cores with `at::parallel_for` and write inner loops the compiler can "
      "vectorize; pass `extra_cflags=[\"-O3\"]`.\n"
      "- Make tensors contiguous before indexing their data pointers.\n"};
  switch (language) {
    case core::KernelLanguage::cuda: return kCuda;
    case core::KernelLanguage::triton: return kTriton;
    case core::KernelLanguage::hip: return kHip;
    case core::KernelLanguage::cpp: return kCpp;
  }
  return kCuda;
}

std::string_view dtype_name(core::Precision p) {
  switch (p) {
    case core::Precision::fp32: return "float32";
    case core::Precision::fp16: return "float16";
    case core::Precision::bf16: return "bfloat16";
  }
  return "float32";
}

std::string fenced_python(std::string_view code) { return detail::fenced(code, "python"); }

void check_tolerance(std::optional<double> v, std::string_view field) {
  if (v && (!std::isfinite(*v) || *v < 0.0))
    throw core::InvalidArgument(
        fmt::format("prompt option '{}': tolerance must be a finite number >= 0, got {}", field, *v));
}

}  // namespace

core::Tolerance stated_tolerance(const PromptOptions& options) {
  core::Tolerance t = core::default_tolerance(options.precision);
  if (options.atol) t.atol = *options.atol;
  if (options.rtol) t.rtol = *options.rtol;
  return t;
}

std::string system_prompt(const PromptOptions& options) {
  if (options.system_prompt) return *options.system_prompt;
  const auto& lang = language_text(options.language);
  return fmt::format(
      "You are {}. Given a PyTorch program, you write an equivalent program whose `ModelNew` runs "
      "faster because its costly operators are {}. You reply with {}one complete Python program "
      "inside <KERNEL> and </KERNEL>.",
      lang.expertise, lang.kernels, options.thinking_instruction ? "your reasoning, then " : "");
}

std::string user_prompt(const core::Problem& problem, const PromptOptions& options) {
  if (detail::python_strip(problem.source).empty())
    throw core::InvalidArgument(fmt::format("problem '{}' has no reference source", problem.id));
  check_tolerance(options.atol, "atol");
  check_tolerance(options.rtol, "rtol");
  const auto& lang = language_text(options.language);
  const core::Tolerance tol = stated_tolerance(options);

  std::string out;
  if (options.examples) out += retrieved_examples_section(options.examples->examples_for(problem)->examples);
  out += fmt::format(
      "# Task\n\n"
      "Below is a PyTorch program: a module `Model`, and the functions `get_inputs()` (the "
      "arguments of `Model.forward`) and `get_init_inputs()` (the arguments of `Model.__init__`). "
      "Write `ModelNew`, a drop-in replacement for `Model` that computes the same function faster "
      "by replacing PyTorch operators with {}.\n\n"
      "- `ModelNew` takes the same constructor and `forward` arguments as `Model` and returns "
      "outputs of the same shapes and dtypes.\n"
      "- Choose which operators to replace. You may fuse several operators into one kernel (for "
      "example a matmul with the bias and activation that follow it), change the algorithm (for "
      "example an online softmax), and keep operators that are not worth replacing as PyTorch "
      "calls.\n"
      "- Keep the semantics: for any inputs that `get_inputs()` can produce, the outputs must "
      "match `Model`'s within the tolerance stated below.\n"
      "- Create parameters and buffers as `Model` does (same names, shapes and order), so that "
      "the same random seed gives both models the same weights.\n"
      "- Compute the result on every call: no outputs cached between calls, no special cases for "
      "particular input values, no work left running on other streams or threads, and no "
      "tampering with timing, synchronization or the checker.\n"
      "- The program must stand alone: imports, kernel sources, their compilation and `ModelNew` "
      "in one file. `Model`, `get_inputs` and `get_init_inputs` need not be repeated.\n\n",
      lang.kernels);

  out += fmt::format("# {}\n\n{}\n", lang.section, lang.guidance);

  const std::string_view hardware = detail::python_strip(options.hardware);
  if (!hardware.empty()) out += fmt::format("# Hardware\n\n{}\n\n", hardware);

  if (options.one_shot) {
    const OneShotExample& ex = one_shot_example(options.language);
    out += "# Example\n\nA reference program:\n\n";
    out += fenced_python(ex.reference);
    out += "\nAn answer to it:\n\n";
    if (options.thinking_instruction) out += fmt::format("<think>\n{}\n</think>\n", ex.reasoning);
    out += "<KERNEL>\n";
    out += fenced_python(ex.solution);
    out += "</KERNEL>\n\n";
  }

  out += "# Program to optimize\n\n";
  out += fenced_python(problem.source);
  out += '\n';

  out += fmt::format(
      "# Precision\n\n"
      "Floating-point inputs, weights and outputs are torch.{}. An output element passes when "
      "|out - ref| <= atol + rtol * |ref|, with atol = {:g} and rtol = {:g}.",
      dtype_name(options.precision), tol.atol, tol.rtol);
  if (options.precision == core::Precision::fp32) {
    out += " TF32 and half-precision arithmetic are usually too coarse for this.";
  } else {
    out += " Accumulate sums and dot products in float32.";
  }
  out += "\n\n";

  const std::string_view extra = detail::python_strip(options.extra_instructions);
  if (!extra.empty()) out += fmt::format("# Additional instructions\n\n{}\n\n", extra);

  out += "# Answer format\n\n";
  if (options.thinking_instruction) {
    out +=
        "First reason step by step inside <think> and </think>: what the reference computes, where "
        "its time goes, which operators to replace or fuse, how to parallelize and access memory, "
        "and what could break correctness. Then give the final program inside <KERNEL> and "
        "</KERNEL>, as exactly one fenced ```python code block holding the complete file. Only "
        "that block is evaluated; code inside <think> never is. If you write several <KERNEL> "
        "blocks, the last one counts.\n";
  } else {
    out +=
        "Give the final program inside <KERNEL> and </KERNEL>, as exactly one fenced ```python "
        "code block holding the complete file. Keep any explanation before the block short. If "
        "you write several <KERNEL> blocks, the last one counts.\n";
  }
  return out;
}

std::vector<core::Message> build_messages(const core::Problem& problem, const PromptOptions& options) {
  return {{"system", system_prompt(options)}, {"user", user_prompt(problem, options)}};
}

}  // namespace kbrl::prompt
