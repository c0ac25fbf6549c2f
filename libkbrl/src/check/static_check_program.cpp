#include "static_check_program.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <deque>
#include <tuple>

namespace kbrl::check::detail {
namespace {

using core::PyTokenKind;

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// Functions called on tensors or from ATen that compute something (allocation, shape, view,
// dtype and copy functions are deliberately absent).
const std::set<std::string_view>& compute_names() {
  static const std::set<std::string_view> names{
      "abs", "absolute", "add", "addbmm", "addcdiv", "addcmul", "addmm", "addmv", "baddbmm", "bmm", "matmul",
      "mm", "mv", "dot", "vdot", "einsum", "tensordot", "inner", "outer", "linear", "bilinear", "chain_matmul",
      "clamp", "clamp_min", "clamp_max", "clip", "cos", "sin", "tan", "acos", "asin", "atan", "atan2", "cosh",
      "sinh", "tanh", "sigmoid", "logit", "relu", "relu6", "gelu", "silu", "mish", "softplus", "softsign", "elu",
      "selu", "celu", "leaky_relu", "hardtanh", "hardsigmoid", "hardswish", "hardshrink", "softshrink",
      "tanhshrink", "threshold", "prelu", "rrelu", "glu", "softmax", "log_softmax", "softmin", "logsumexp", "exp",
      "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "square", "pow", "float_power",
      "reciprocal", "neg", "negative", "div", "divide", "true_divide", "floor_divide", "mul", "multiply", "sub",
      "subtract", "fmod", "remainder", "sum", "nansum", "mean", "nanmean", "prod", "std", "var", "std_mean",
      "var_mean", "norm", "max", "min", "amax", "amin", "aminmax", "argmax", "argmin", "maximum", "minimum",
      "fmax", "fmin", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "kthvalue", "median",
      "nanmedian", "topk", "where", "masked_fill", "gather", "scatter", "scatter_add", "scatter_reduce",
      "index_select", "index_add", "lerp", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "erf",
      "erfc", "erfinv", "dropout", "alpha_dropout", "feature_alpha_dropout", "embedding", "embedding_bag",
      "interpolate", "grid_sample", "affine_grid", "pixel_shuffle", "pixel_unshuffle", "cross_entropy",
      "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "binary_cross_entropy",
      "binary_cross_entropy_with_logits", "cosine_similarity", "pairwise_distance", "cdist",
      "triplet_margin_loss", "margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss",
      "multilabel_margin_loss", "poisson_nll_loss", "gaussian_nll_loss", "ctc_loss", "normalize",
      "local_response_norm", "rms_norm", "scaled_dot_product_attention", "cross", "cholesky", "inverse", "det",
      "svd", "qr", "solve", "triu", "tril", "diag", "trace", "gemm", "gemv",
      // convolution, pooling, normalization and resampling, by their exact ATen names (extension
      // functions such as `conv_gelu_cuda` must not match)
      "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "conv_tbc",
      "convolution", "_convolution", "cudnn_convolution", "max_pool1d", "max_pool2d", "max_pool3d",
      "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d",
      "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
      "adaptive_max_pool2d", "adaptive_max_pool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d", "fractional_max_pool2d",
      "fractional_max_pool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d", "batch_norm", "layer_norm",
      "group_norm", "instance_norm", "native_batch_norm", "native_layer_norm", "native_group_norm",
      "cudnn_batch_norm", "upsample", "upsample_nearest", "upsample_bilinear", "upsample_nearest1d",
      "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d", "upsample_bilinear2d", "upsample_bicubic2d",
      "upsample_trilinear3d"};
  return names;
}

// torch.<name> functions that allocate, reshape, view, copy or query (not compute).
const std::set<std::string_view>& torch_non_compute() {
  static const std::set<std::string_view> names{
      "empty", "empty_like", "empty_strided", "empty_permuted", "zeros", "zeros_like", "ones", "ones_like",
      "full", "full_like", "arange", "tensor", "as_tensor", "as_strided", "from_numpy", "scalar_tensor", "cat",
      "concat", "concatenate", "stack", "hstack", "vstack", "split", "chunk", "narrow", "flatten", "unflatten",
      "reshape", "view_as_real", "view_as_complex", "transpose", "permute", "movedim", "swapaxes", "squeeze",
      "unsqueeze", "broadcast_to", "broadcast_tensors", "t", "numel", "clone", "result_type", "promote_types",
      "can_cast", "finfo", "iinfo", "manual_seed", "seed", "initial_seed", "no_grad", "enable_grad",
      "inference_mode", "device", "dtype", "Size", "Generator", "rand", "randn", "randint", "rand_like",
      "randn_like", "randint_like", "randperm", "Tensor", "autocast", "compile", "Stream", "Event", "eye",
      "linspace", "logspace", "tril_indices", "triu_indices", "meshgrid", "from_file", "frombuffer"};
  return names;
}

constexpr std::array<std::string_view, 18> kTorchNonComputeNamespaces{
    "cuda.", "backends.", "utils.", "autograd.", "library.", "nn.init.", "nn.parameter.", "version.", "types.",
    "testing.", "amp.", "cpu.", "jit.", "_dynamo.", "_inductor.", "export.", "distributed.", "classes."};

// torch.nn members that hold parameters or arrange modules without computing.
constexpr std::array<std::string_view, 11> kNnNonCompute{
    "Module", "ModuleList", "ModuleDict", "Parameter", "ParameterList", "ParameterDict", "Identity", "Flatten",
    "Unflatten", "Buffer", "init"};

// ATen namespaces of torch.ops whose ops are PyTorch's own (anything else was registered by the candidate).
constexpr std::array<std::string_view, 6> kAtenOpNamespaces{"aten", "prims", "quantized", "_quantized", "mkldnn",
                                                           "quantized_decomposed"};

template <std::size_t N>
bool in(const std::array<std::string_view, N>& a, std::string_view s) {
  return std::find(a.begin(), a.end(), s) != a.end();
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// Whether a call of qualified name `qual` (starting with "torch.") computes; fills the op key.
bool torch_call_computes(const std::string& qual, std::string& key) {
  const std::string_view rest = std::string_view(qual).substr(6);
  const auto parts = split(rest, '.');
  const std::string& last = parts.back();
  key = op_key(last);
  if (parts.size() == 1) {
    if (torch_non_compute().count(last) != 0) return false;
    if (starts_with(last, "is_") || starts_with(last, "get_") || starts_with(last, "set_") ||
        starts_with(last, "_assert"))
      return false;
    return !last.empty() && std::islower(static_cast<unsigned char>(last[0])) != 0;
  }
  for (std::string_view ns : kTorchNonComputeNamespaces) {
    if (starts_with(rest, ns)) return false;
  }
  if (parts[0] == "ops") {
    return parts.size() >= 3 && in(kAtenOpNamespaces, parts[1]);
  }
  if (parts[0] == "nn") {
    if (parts[1] == "functional") return parts.size() >= 3 && last != "pad";
    if (in(kNnNonCompute, parts[1])) return false;
    key = op_key(parts[1]);
    return std::isupper(static_cast<unsigned char>(parts[1][0])) != 0;
  }
  if (parts[0] == "Tensor") return is_compute_name(last);
  if (parts[0] == "float16" || parts[0] == "bfloat16") return false;
  return true;  // torch.linalg, torch.fft, torch.special, torch._C, ...
}

// cuBLAS/hipBLAS/rocBLAS products and cuDNN/MIOpen forward or backward passes (handle and
// descriptor management is not compute).
bool is_library_compute(std::string_view n) {
  const bool blas = starts_with(n, "cublas") || starts_with(n, "hipblas") || starts_with(n, "rocblas");
  const bool dnn = starts_with(n, "cudnn") || starts_with(n, "miopen");
  auto has = [&](std::string_view part) { return n.find(part) != std::string_view::npos; };
  if (blas) return has("gemm") || has("Gemm") || has("gemv") || has("Gemv") || has("Matmul");
  if (dnn) return has("Forward") || has("Backward");
  return false;
}

bool is_binary_operand_end(const core::PyToken& t) {
  return t.kind == PyTokenKind::name || t.kind == PyTokenKind::number || t.kind == PyTokenKind::string ||
         t.is_op(")") || t.is_op("]");
}

bool mentions_compile_call(const ProgramAnalysis& a, Range r) {
  return std::any_of(a.compile_calls.begin(), a.compile_calls.end(),
                     [&](const CompileCall& c) { return c.tok >= r.first && c.tok < r.second; });
}

}  // namespace

std::string op_key(std::string_view name) {
  if (const auto p = name.rfind("::"); p != std::string_view::npos) name = name.substr(p + 2);
  if (const auto p = name.rfind('.'); p != std::string_view::npos) name = name.substr(p + 1);
  if (name.size() > 4 && starts_with(name, "__") && ends_with(name, "__")) {
    name = name.substr(2, name.size() - 4);
    if (compute_names().count(name) == 0 && name.size() > 1 && (name[0] == 'r' || name[0] == 'i'))
      name.remove_prefix(1);
  }
  if (name.size() > 1 && name.back() == '_') name.remove_suffix(1);
  std::string k;
  for (char c : name) {
    if (c != '_') k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (k.size() > 2 && k.back() == 'd' && std::isdigit(static_cast<unsigned char>(k[k.size() - 2]))) {
    k.pop_back();
    while (!k.empty() && std::isdigit(static_cast<unsigned char>(k.back()))) k.pop_back();
  }
  if (k.size() > 4 && ends_with(k, "loss")) k.resize(k.size() - 4);
  if ((starts_with(k, "cublas") || starts_with(k, "hipblas") || starts_with(k, "rocblas")) &&
      (k.find("gemm") != std::string::npos || k.find("gemv") != std::string::npos ||
       k.find("matmul") != std::string::npos))
    return "matmul";
  if (starts_with(k, "miopen")) k = "cudnn" + k.substr(6);
  if (starts_with(k, "cudnn")) {
    k = k.substr(5);
    if (ends_with(k, "forward")) k.resize(k.size() - 7);
    if (starts_with(k, "convolution")) return "conv";
  }
  static const std::map<std::string_view, std::string_view> families{
      {"mm", "matmul"},        {"bmm", "matmul"},       {"addmm", "matmul"},      {"baddbmm", "matmul"},
      {"addbmm", "matmul"},    {"addmv", "matmul"},     {"mv", "matmul"},         {"dot", "matmul"},
      {"vdot", "matmul"},      {"linear", "matmul"},    {"einsum", "matmul"},     {"tensordot", "matmul"},
      {"inner", "matmul"},     {"chainmatmul", "matmul"}, {"gemm", "matmul"},     {"gemv", "matmul"},
      {"bilinear", "matmul"},  {"clip", "clamp"},       {"clampmin", "clamp"},    {"clampmax", "clamp"},
      {"divide", "div"},       {"truedivide", "div"},   {"multiply", "mul"},      {"subtract", "sub"},
      {"absolute", "abs"},     {"negative", "neg"},     {"amax", "max"},          {"amin", "min"},
      {"swish", "silu"},       {"upsample", "interpolate"}, {"upsamplenearest", "interpolate"},
      {"upsamplebilinear", "interpolate"}, {"batchnormalization", "batchnorm"}};
  if (auto it = families.find(k); it != families.end()) return std::string(it->second);
  return k;
}

bool is_compute_name(std::string_view name) {
  if (name.size() > 4 && starts_with(name, "__") && ends_with(name, "__")) {  // a.__matmul__(b), a.__radd__(b)
    name = name.substr(2, name.size() - 4);
    if (compute_names().count(name) == 0 && name.size() > 1 && (name[0] == 'r' || name[0] == 'i'))
      name.remove_prefix(1);
    return compute_names().count(name) != 0;
  }
  if (name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_') name.remove_suffix(1);
  return compute_names().count(name) != 0;
}

int enclosing_class(const PythonModule& py, int scope) {
  for (int s = scope >= 0 ? py.scopes[static_cast<std::size_t>(scope)].parent : -1; s >= 0;
       s = py.scopes[static_cast<std::size_t>(s)].parent) {
    if (py.scopes[static_cast<std::size_t>(s)].is_class) return s;
  }
  return -1;
}

std::vector<std::size_t> strings_of(const PythonModule& py, const ProgramAnalysis& a, Range arg) {
  std::vector<std::size_t> out;
  for (std::size_t k = arg.first; k < arg.second && k < py.toks.size(); ++k) {
    const auto& t = py.toks[k];
    if (t.kind == PyTokenKind::string) {
      out.push_back(k);
    } else if (t.kind == PyTokenKind::name && (k == 0 || !py.is_op(k - 1, "."))) {
      auto it = a.module_values.find(std::string(t.text));
      if (it == a.module_values.end()) continue;
      for (const auto& [b, e] : it->second) {
        for (std::size_t j = b; j < e; ++j) {
          if (py.toks[j].kind == PyTokenKind::string) out.push_back(j);
        }
      }
    }
  }
  return out;
}

ProgramAnalysis analyze_program(const PythonModule& py, std::string_view class_name) {
  ProgramAnalysis a;
  a.cls = py.top_scope(class_name);
  if (a.cls >= 0 && !py.scopes[static_cast<std::size_t>(a.cls)].is_class) a.cls = -1;
  if (a.cls >= 0) {
    a.forward = py.method(a.cls, "forward");
  }

  // Values bound at module level and to self attributes.
  for (const Stmt& s : py.stmts) {
    if (s.owner != -1) continue;
    const auto names = py.assigned_names(s);
    const Range v = py.assigned_value(s);
    if (names.size() == 1 && v.first < v.second) a.module_values[names[0]].push_back(v);
  }
  for (std::size_t si = 0; si < py.scopes.size(); ++si) {
    const Scope& fn = py.scopes[si];
    if (fn.is_class) continue;
    const int cls = enclosing_class(py, static_cast<int>(si));
    if (cls < 0) continue;
    for (std::size_t st = fn.stmt + 1; st < fn.stmt_end; ++st) {
      const Stmt& s = py.stmts[st];
      if (!py.is_name(s.begin, "self") || !py.is_op(s.begin + 1, ".") || s.begin + 2 >= s.end) continue;
      if (!(py.is_op(s.begin + 3, "=") || py.is_op(s.begin + 3, ":"))) continue;
      const Range v = py.assigned_value(s);
      if (v.first < v.second) a.attr_values[cls][std::string(py.toks[s.begin + 2].text)].push_back(v);
    }
  }

  // Triton kernels: functions decorated with triton.jit / autotune / heuristics.
  for (std::size_t si = 0; si < py.scopes.size(); ++si) {
    for (std::size_t d : py.scopes[si].decorators) {
      auto it = py.ref_at.find(py.stmts[d].begin + 1);
      if (it == py.ref_at.end()) continue;
      const std::string& q = py.refs[it->second].qual;
      if (q == "triton.jit" || starts_with(q, "triton.autotune") || starts_with(q, "triton.heuristics") ||
          q == "triton.runtime.jit" || q == "triton.runtime.jit.jit")
        a.triton_kernels.insert(static_cast<int>(si));
    }
  }

  // Compile calls.
  for (const Ref& r : py.refs) {
    if (!r.call || r.is_import) continue;
    const bool is_inline = ends_with(r.qual, "cpp_extension.load_inline") || r.qual == "load_inline";
    const bool is_load = ends_with(r.qual, "cpp_extension.load");
    if (!is_inline && !is_load) continue;
    CompileCall c;
    c.tok = r.tok_begin;
    c.line = r.line;
    c.inline_sources = is_inline;
    const auto args = py.call_args(r.tok_end);
    auto arg = [&](std::string_view kw, std::size_t pos) -> Range {
      if (auto it = args.keyword.find(kw); it != args.keyword.end()) return it->second;
      if (pos < args.positional.size()) return args.positional[pos];
      return {0, 0};
    };
    if (is_inline) {
      const Range cpp = arg("cpp_sources", 1);
      const Range cuda = arg("cuda_sources", 2);
      c.has_cpp_sources = cpp.first < cpp.second && !py.is_name(cpp.first, "None");
      c.has_cuda_sources = cuda.first < cuda.second && !py.is_name(cuda.first, "None");
      c.cpp_strings = strings_of(py, a, cpp);
      c.cuda_strings = strings_of(py, a, cuda);
    } else {
      const Range srcs = arg("sources", 1);
      c.has_cpp_sources = c.has_cuda_sources = srcs.first < srcs.second;
    }
    a.compile_calls.push_back(std::move(c));
  }

  // Names bound to kernels, to a fixpoint. A value binds a handle when it *is* one (`ext`,
  // `ext.scale`, `self.ext`, a Triton kernel) or builds one (`load_inline(...)`, a builder such as
  // `_get_ext()`), not when it is the result of calling one (`y = ext.scale(x)` is a tensor).
  // Names are program-wide: a local alias (`k = self.ext` in forward) counts like a global one.
  std::map<std::string, std::vector<std::pair<Range, int>>> all_values;
  for (const Stmt& s : py.stmts) {
    const auto names = py.assigned_names(s);
    const Range v = py.assigned_value(s);
    if (names.size() == 1 && v.first < v.second) all_values[names[0]].push_back({v, enclosing_class(py, s.owner)});
  }
  std::set<std::string> kernel_names, builders, launchers;
  for (int k : a.triton_kernels) {
    if (py.scopes[static_cast<std::size_t>(k)].parent == -1) kernel_names.insert(py.scopes[static_cast<std::size_t>(k)].name);
  }
  auto is_handle_value = [&](Range r, int cls) {
    if (mentions_compile_call(a, r)) return true;
    std::size_t k = r.first;
    if (k >= r.second || py.toks[k].kind != PyTokenKind::name) return false;
    std::vector<std::string> parts{std::string(py.toks[k].text)};
    for (++k; py.is_op(k, ".") && k + 1 < r.second && py.toks[k + 1].kind == PyTokenKind::name; k += 2)
      parts.emplace_back(py.toks[k + 1].text);
    if (k < r.second && py.is_op(k, "(")) return parts.size() == 1 && builders.count(parts[0]) != 0;
    if (k != r.second && !py.is_name(k, "if")) return false;  // an expression, not a plain reference
    if (kernel_names.count(parts[0]) || a.handle_names.count(parts[0])) return true;
    if (parts[0] == "self" && parts.size() >= 2 && cls >= 0) return a.handle_attrs[cls].count(parts[1]) != 0;
    return false;
  };
  auto mentions_handle = [&](Range r) {
    for (std::size_t k = r.first; k < r.second && k < py.toks.size(); ++k) {
      const auto& t = py.toks[k];
      if (t.kind != PyTokenKind::name || (k > 0 && py.is_op(k - 1, "."))) continue;
      const std::string n(t.text);
      if (kernel_names.count(n) || a.handle_names.count(n) || builders.count(n) || launchers.count(n)) return true;
    }
    return false;
  };
  auto count = [&] {
    std::size_t n = a.handle_names.size() + builders.size() + launchers.size();
    for (const auto& [c, attrs] : a.handle_attrs) n += attrs.size();
    return n;
  };
  for (int iter = 0; iter < 8; ++iter) {
    const std::size_t before = count();
    for (const auto& [name, values] : all_values) {
      for (const auto& [v, cls] : values) {
        if (is_handle_value(v, cls)) a.handle_names.insert(name);
      }
    }
    for (auto& [cls, attrs] : a.attr_values) {
      for (const auto& [attr, values] : attrs) {
        for (const Range& v : values) {
          if (is_handle_value(v, cls)) a.handle_attrs[cls].insert(attr);
        }
      }
    }
    for (std::size_t si = 0; si < py.scopes.size(); ++si) {
      const Scope& sc = py.scopes[si];
      if (sc.is_class || sc.parent != -1 || a.triton_kernels.count(static_cast<int>(si))) continue;
      bool builds = mentions_compile_call(a, {sc.tok_begin, sc.tok_end});
      for (std::size_t st = sc.stmt + 1; st < sc.stmt_end && !builds; ++st) {
        const Stmt& s = py.stmts[st];
        if (py.is_name(s.begin, "return")) builds = is_handle_value({s.begin + 1, s.end}, -1);
      }
      if (builds) builders.insert(sc.name);
      else if (mentions_handle({sc.tok_begin, sc.tok_end})) launchers.insert(sc.name);
    }
    if (count() == before) break;
  }
  a.handle_names.insert(kernel_names.begin(), kernel_names.end());
  a.producer_defs.insert(builders.begin(), builders.end());
  a.producer_defs.insert(launchers.begin(), launchers.end());

  // Functions reachable from forward.
  if (a.cls < 0) return a;
  std::set<int> seen;
  std::deque<int> work;
  auto push = [&](int s) {
    if (s < 0 || seen.count(s)) return;
    seen.insert(s);
    if (a.triton_kernels.count(s)) return;
    a.reachable.push_back(s);
    work.push_back(s);
  };
  static constexpr std::array<std::string_view, 6> kNotForward{"__init__", "backward", "setup_context", "jvp", "vjp",
                                                               "__new__"};
  auto push_class = [&](int c) {
    for (std::size_t i = 0; i < py.scopes.size(); ++i) {
      const Scope& m = py.scopes[i];
      if (m.parent == c && !m.is_class && !in(kNotForward, m.name)) push(static_cast<int>(i));
    }
  };
  auto push_name = [&](std::string_view n) {
    const int s = py.top_scope(n);
    if (s < 0) return false;
    if (py.scopes[static_cast<std::size_t>(s)].is_class) push_class(s);
    else push(s);
    return true;
  };
  auto push_names_in = [&](Range r) {
    for (std::size_t k = r.first; k < r.second; ++k) {
      if (py.toks[k].kind == PyTokenKind::name && (k == 0 || !py.is_op(k - 1, "."))) push_name(py.toks[k].text);
    }
  };
  push(a.forward);
  push(py.method(a.cls, "__call__"));  // nn.Module.__call__ overridden: it runs instead of forward
  while (!work.empty()) {
    const int s = work.front();
    work.pop_front();
    const Scope& sc = py.scopes[static_cast<std::size_t>(s)];
    const int cls = enclosing_class(py, s);
    for (std::size_t k = sc.tok_begin; k < sc.tok_end; ++k) {
      const auto& t = py.toks[k];
      if (t.kind != PyTokenKind::name || (k > 0 && py.is_op(k - 1, "."))) continue;
      if (t.text == "self" && cls >= 0 && py.is_op(k + 1, ".") && k + 2 < sc.tok_end) {
        const std::string attr(py.toks[k + 2].text);
        push(py.method(cls, attr));
        auto cit = a.attr_values.find(cls);
        if (cit != a.attr_values.end()) {
          if (auto it = cit->second.find(attr); it != cit->second.end()) {
            for (const Range& v : it->second) push_names_in(v);
          }
        }
        continue;
      }
      if (push_name(t.text)) continue;
      if (auto it = a.module_values.find(std::string(t.text)); it != a.module_values.end()) {
        for (const Range& v : it->second) push_names_in(v);
      }
    }
  }

  // Kernel launches and extension calls on the forward path.
  for (int s : a.reachable) {
    const Scope& sc = py.scopes[static_cast<std::size_t>(s)];
    const int cls = enclosing_class(py, s);
    for (const Ref& r : py.refs) {
      if (r.tok_begin < sc.tok_begin || r.tok_begin >= sc.tok_end || r.is_import) continue;
      if (!(r.call || r.subscript_call)) continue;
      const std::string& head = r.parts[0];
      bool kernel = a.handle_names.count(head) || a.producer_defs.count(head);
      if (!kernel && head == "self" && r.parts.size() >= 2 && cls >= 0) {
        auto it = a.handle_attrs.find(cls);
        kernel = it != a.handle_attrs.end() && it->second.count(r.parts[1]);
      }
      if (!kernel && r.head_is_module && starts_with(r.qual, "torch.ops.")) {
        const auto parts = split(r.qual, '.');
        kernel = parts.size() >= 4 && !in(kAtenOpNamespaces, parts[2]);
      }
      if (kernel) a.kernel_call_lines.push_back(r.line);
    }
  }
  return a;
}

std::map<std::string, std::vector<std::pair<std::string, std::string>>> nn_module_attrs(
    const PythonModule& py, const ProgramAnalysis& a, int cls) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> out;
  auto cit = a.attr_values.find(cls);
  if (cit == a.attr_values.end()) return out;
  for (const auto& [attr, values] : cit->second) {
    for (const Range& v : values) {
      for (const Ref& r : py.refs) {
        if (r.tok_begin < v.first || r.tok_begin >= v.second || !r.call || !r.head_is_module) continue;
        if (!starts_with(r.qual, "torch.nn.")) continue;
        const auto parts = split(r.qual, '.');
        if (parts.size() != 3 || in(kNnNonCompute, parts[2]) || parts[2] == "Sequential" ||
            !std::isupper(static_cast<unsigned char>(parts[2][0])))
          continue;
        out[attr].emplace_back("nn." + parts[2], op_key(parts[2]));
      }
    }
  }
  return out;
}

std::vector<ComputeUse> compute_uses(const PythonModule& py, const ProgramAnalysis& a) {
  std::vector<ComputeUse> out;
  std::vector<Range> triton_ranges;
  for (int k : a.triton_kernels) {
    const Scope& sc = py.scopes[static_cast<std::size_t>(k)];
    triton_ranges.emplace_back(sc.tok_begin, sc.tok_end);
  }
  auto in_triton = [&](std::size_t k) {
    return std::any_of(triton_ranges.begin(), triton_ranges.end(),
                       [&](const Range& r) { return k >= r.first && k < r.second; });
  };
  std::map<int, std::map<std::string, std::vector<std::pair<std::string, std::string>>>> nn_attrs;
  for (int s : a.reachable) {
    const Scope& sc = py.scopes[static_cast<std::size_t>(s)];
    const int cls = enclosing_class(py, s);
    if (cls >= 0 && !nn_attrs.count(cls)) nn_attrs[cls] = nn_module_attrs(py, a, cls);
    for (const Ref& r : py.refs) {
      if (r.tok_begin < sc.tok_begin || r.tok_begin >= sc.tok_end || r.is_import || !r.call) continue;
      if (in_triton(r.tok_begin)) continue;
      const std::string& head = r.parts[0];
      if (a.handle_names.count(head) || a.producer_defs.count(head)) continue;
      if (head == "self" && r.parts.size() >= 2 && cls >= 0) {
        auto hit = a.handle_attrs.find(cls);
        if (hit != a.handle_attrs.end() && hit->second.count(r.parts[1])) continue;
        if (r.parts.size() == 2) {
          auto nit = nn_attrs[cls].find(r.parts[1]);
          if (nit != nn_attrs[cls].end()) {
            for (const auto& [module, key] : nit->second)
              out.push_back({r.line, "self." + r.parts[1] + " (" + module + ")", key});
          }
          continue;
        }
      }
      if (r.head_is_module) {
        std::string key;
        if (starts_with(r.qual, "torch.") && torch_call_computes(r.qual, key)) out.push_back({r.line, r.text(), key});
        continue;
      }
      if (r.parts.size() >= 2 && is_compute_name(r.parts.back())) {
        out.push_back({r.line, "." + r.parts.back() + "()", op_key(r.parts.back())});
      }
    }
    for (std::size_t k = sc.tok_begin + 1; k < sc.tok_end; ++k) {
      if ((py.toks[k].is_op("@") || py.toks[k].is_op("@=")) && is_binary_operand_end(py.toks[k - 1]) &&
          !in_triton(k))
        out.push_back({py.toks[k].line, "@", "matmul"});
    }
  }
  std::sort(out.begin(), out.end(), [](const ComputeUse& x, const ComputeUse& y) {
    return std::tie(x.line, x.what) < std::tie(y.line, y.what);
  });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const ComputeUse& x, const ComputeUse& y) { return x.line == y.line && x.what == y.what; }),
            out.end());
  return out;
}

std::vector<ComputeUse> c_compute_uses(const std::vector<CSource>& sources) {
  std::vector<ComputeUse> out;
  for (const CSource& src : sources) {
    for (const CName& n : c_names(src.toks)) {
      if (!n.called) continue;
      const bool aten = starts_with(n.qual, "at::") || starts_with(n.qual, "torch::");
      const bool util = starts_with(n.qual, "at::cuda::") || starts_with(n.qual, "at::hip::") ||
                        starts_with(n.qual, "torch::cuda::");
      if (!n.member && aten && !util && is_compute_name(n.last)) {
        out.push_back({n.line, n.qual, op_key(n.last)});
      } else if (n.member && is_compute_name(n.last)) {
        out.push_back({n.line, "." + n.last + "()", op_key(n.last)});
      } else if (!n.member && n.called && is_library_compute(n.last)) {
        out.push_back({n.line, n.last, op_key(n.last)});
      }
    }
  }
  return out;
}

}  // namespace kbrl::check::detail
