// Internal to the static checker: what a KernelBench-format program does on its forward path —
// the model class, the functions reachable from its forward, the compiled extensions and Triton
// kernels it builds, which calls launch them, and which PyTorch compute ops it runs instead.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "static_check_csource.hpp"
#include "static_check_python.hpp"

namespace kbrl::check::detail {

using Range = std::pair<std::size_t, std::size_t>;

// A torch.utils.cpp_extension.load_inline / load call.
struct CompileCall {
  std::size_t tok = 0;
  int line = 0;
  bool inline_sources = false;  // load_inline (else load with source files)
  bool has_cuda_sources = false;
  bool has_cpp_sources = false;
  std::vector<std::size_t> cpp_strings;   // string tokens feeding cpp_sources
  std::vector<std::size_t> cuda_strings;  // string tokens feeding cuda_sources
};

// A PyTorch (or ATen, cuBLAS, cuDNN) compute op used where a custom kernel was asked for.
struct ComputeUse {
  int line = 0;
  std::string what;  // as written: "torch.matmul", "F.conv2d", ".relu()", "@", "self.linear (nn.Linear)"
  std::string key;   // op family for comparison with the reference: "matmul", "conv", "relu"
};

struct ProgramAnalysis {
  int cls = -1;                 // the model class scope (ModelNew in a candidate, Model in a reference)
  int forward = -1;             // its forward method
  std::vector<int> reachable;   // functions run by forward (forward first), Triton kernels excluded
  std::set<int> triton_kernels;  // @triton.jit functions
  std::vector<CompileCall> compile_calls;
  std::set<std::string> handle_names;  // module-level names bound to an extension or a kernel
  std::set<std::string> producer_defs;  // module-level functions that build or launch kernels
  std::map<int, std::set<std::string>> handle_attrs;  // class scope -> `self.<attr>` bound to one
  std::map<int, std::map<std::string, std::vector<Range>>> attr_values;  // class -> self.attr -> values
  std::map<std::string, std::vector<Range>> module_values;  // module-level name -> assigned values
  std::vector<int> kernel_call_lines;  // launches and extension calls on the forward path
};

ProgramAnalysis analyze_program(const PythonModule& py, std::string_view class_name);
// The class a function belongs to (its nearest enclosing class), or -1.
int enclosing_class(const PythonModule& py, int scope);
// String tokens an argument expression evaluates to: literals in it, and literals assigned at
// module level to the names it mentions.
std::vector<std::size_t> strings_of(const PythonModule& py, const ProgramAnalysis& a, Range arg);
// PyTorch compute ops on the forward path of `a`.
std::vector<ComputeUse> compute_uses(const PythonModule& py, const ProgramAnalysis& a);
// `self.<attr>` of class `cls` built from torch.nn compute modules: attr -> (module name, key).
std::map<std::string, std::vector<std::pair<std::string, std::string>>> nn_module_attrs(
    const PythonModule& py, const ProgramAnalysis& a, int cls);
// ATen / cuBLAS / cuDNN compute calls inside embedded C++ sources.
std::vector<ComputeUse> c_compute_uses(const std::vector<CSource>& sources);
// Op family of a function or module name: "conv2d", "Conv2d", "conv_transpose2d" -> "conv"/...
std::string op_key(std::string_view name);
// A tensor method or ATen function that computes (not allocation, shape or view).
bool is_compute_name(std::string_view name);

}  // namespace kbrl::check::detail
