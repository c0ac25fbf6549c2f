// Internal to the static checker: the rule table (the one place a rule is named, categorized and
// given its default severity) and the entry point that runs every rule over a candidate.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/check/static_check.hpp"

namespace kbrl::check::detail {

enum class Rule : std::size_t {
  no_model_new,
  try_except_fallback,
  inherits_reference,
  calls_reference,
  reference_op_in_forward,
  reference_all_in_library,
  torch_compute_in_forward,
  auto_compiler,
  missing_kernel,
  kernel_not_called,
  side_stream,
  threads_or_processes,
  lazy_tensor,
  timing_patch,
  library_patch,
  reference_global_rebind,
  reference_global_shadow,
  namespace_introspection,
  precision_downgrade,
  process_spawn,
  network_access,
  native_code_load,
  filesystem_access,
  dynamic_code,
  process_exit,
  count_,
};
inline constexpr std::size_t kRuleCount = static_cast<std::size_t>(Rule::count_);

struct RuleDef {
  Rule rule;
  std::string_view name;
  std::string_view category;
  core::Severity severity;
  std::string_view description;
};

using core::Severity;
inline constexpr std::array<RuleDef, kRuleCount> kRuleDefs{{
    {Rule::no_model_new, "no_model_new", "format", Severity::error,
     "The program defines no class ModelNew."},
    {Rule::try_except_fallback, "try_except_fallback", "fallback", Severity::error,
     "A try/except (or contextlib.suppress) whose handler does not re-raise, so a failing kernel can "
     "silently fall back to other code."},
    {Rule::inherits_reference, "inherits_reference", "bypass", Severity::error,
     "ModelNew subclasses the reference Model without overriding forward, so the reference runs."},
    {Rule::calls_reference, "calls_reference", "bypass", Severity::error,
     "The candidate instantiates or calls the reference Model (Model(...), super().forward, "
     "Model.forward) or the reference's helper functions."},
    {Rule::reference_op_in_forward, "reference_op_in_forward", "bypass", Severity::error,
     "The forward path computes one of the reference's own ops with PyTorch (or ATen/cuBLAS/cuDNN in "
     "the extension) instead of a custom kernel."},
    {Rule::reference_all_in_library, "reference_all_in_library", "bypass", Severity::error,
     "Every compute op of the reference is computed with a library call on the forward path, so the custom "
     "kernel does none of the problem's own work (what the fusion policy still refuses)."},
    {Rule::torch_compute_in_forward, "torch_compute_in_forward", "bypass", Severity::warning,
     "The forward path runs a PyTorch compute op the reference does not use (partial use of PyTorch)."},
    {Rule::auto_compiler, "auto_compiler", "bypass", Severity::error,
     "torch.compile, TorchScript, dynamo/inductor or torch.export generate the kernels instead of the "
     "candidate."},
    {Rule::missing_kernel, "missing_kernel", "implementation", Severity::error,
     "No kernel in the requested language: no __global__ function compiled by load_inline/load (cuda, "
     "hip), no @triton.jit function (triton), no C++ function compiled from cpp_sources (cpp)."},
    {Rule::kernel_not_called, "kernel_not_called", "implementation", Severity::error,
     "A kernel is defined but ModelNew.forward never calls it, or no __global__ kernel is launched by the "
     "host code."},
    {Rule::side_stream, "side_stream", "concurrency", Severity::error,
     "Work is put on a CUDA/HIP stream other than the current one, which the timer does not wait for."},
    {Rule::threads_or_processes, "threads_or_processes", "concurrency", Severity::error,
     "Threads, processes or executors (Python or C++) that can run work outside the timed call."},
    {Rule::lazy_tensor, "lazy_tensor", "lazy_eval", Severity::error,
     "torch.Tensor subclasses, __torch_function__/__torch_dispatch__ hooks or lazy return values that "
     "can defer or fake the computation."},
    {Rule::timing_patch, "timing_patch", "timing", Severity::error,
     "Timing or synchronization functions are replaced (torch.cuda.synchronize, torch.cuda.Event, time.*, "
     "cudaEventElapsedTime defined in C++, ...)."},
    {Rule::library_patch, "library_patch", "monkeypatch", Severity::error,
     "Attributes of torch, numpy, builtins or other imported modules are assigned, deleted or setattr'd, "
     "or global torch state is changed."},
    {Rule::reference_global_rebind, "reference_global_rebind", "tamper", Severity::error,
     "Names the reference defines at module level (get_inputs, shapes, Model) are rebound through `global`, "
     "attribute assignment or another module's namespace."},
    {Rule::reference_global_shadow, "reference_global_shadow", "tamper", Severity::warning,
     "The candidate defines a reference module-level name (get_inputs, batch_size, ...) differently in its "
     "own module; harmless while the evaluator keeps the two namespaces apart, suspicious otherwise."},
    {Rule::namespace_introspection, "namespace_introspection", "tamper", Severity::error,
     "Reaching outside the candidate's namespace: sys.modules, __main__, globals(), frame objects, "
     "gc.get_objects, trace hooks."},
    {Rule::precision_downgrade, "precision_downgrade", "precision", Severity::error,
     "Lower precision than the fp32 the problem asks for: half/bfloat16 types and casts, TF32, autocast, "
     "tensor-core fp16 paths (only checked when precision is fp32)."},
    {Rule::process_spawn, "process_spawn", "escape", Severity::error,
     "Spawning processes: os.system, subprocess, os.exec*, pty, system()/popen()/exec*() in C++."},
    {Rule::network_access, "network_access", "escape", Severity::error,
     "Network access: socket, urllib, requests, http.client and friends, sockets in C++."},
    {Rule::native_code_load, "native_code_load", "escape", Severity::error,
     "Loading native code outside the compiled extension: ctypes, cffi, torch.ops.load_library, dlopen, "
     "LD_PRELOAD."},
    {Rule::filesystem_access, "filesystem_access", "escape", Severity::error,
     "File access outside the build directory: open() of absolute or '..' paths, writes to computed paths, "
     "deleting or moving files, torch.save/load, file I/O in C++."},
    {Rule::dynamic_code, "dynamic_code", "escape", Severity::error,
     "Code assembled at run time: exec, eval, compile, __import__, importlib, getattr on a module with a "
     "computed name, pickle/marshal loads."},
    {Rule::process_exit, "process_exit", "escape", Severity::error,
     "Ending or signalling the process: sys.exit, os._exit, os.kill, signal handlers, atexit, exit()/abort() "
     "in C++."},
}};

// Runs every rule whose severity in `severity` is not off.
std::vector<core::StaticFinding> run_rules(std::string_view candidate, const StaticCheckConfig& config,
                                           const std::array<core::Severity, kRuleCount>& severity);

}  // namespace kbrl::check::detail
