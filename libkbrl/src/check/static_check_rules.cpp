#include "static_check_rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "static_check_csource.hpp"
#include "static_check_program.hpp"
#include "static_check_python.hpp"

namespace kbrl::check::detail {
namespace {

using core::PyTokenKind;
using core::StaticFinding;

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// ---- pattern tables --------------------------------------------------------------------------
// Python names are matched after alias resolution: "a.b" exact, "a.b.*" the name and anything
// under it, "a.b*" any name with that prefix.

enum class Use { any, call, assign };

struct PyPattern {
  std::string_view pattern;
  Rule rule;
  Use use;
};

constexpr PyPattern kPyPatterns[] = {
    // side streams
    {"torch.cuda.Stream.*", Rule::side_stream, Use::any},
    {"torch.cuda.stream", Rule::side_stream, Use::any},
    {"torch.cuda.ExternalStream", Rule::side_stream, Use::any},
    {"torch.cuda.set_stream", Rule::side_stream, Use::any},
    {"torch.cuda.StreamContext", Rule::side_stream, Use::any},
    {"torch.cuda.streams.*", Rule::side_stream, Use::any},
    {"torch.Stream.*", Rule::side_stream, Use::any},
    {"cupy.cuda.Stream.*", Rule::side_stream, Use::any},
    // threads and processes
    {"threading.*", Rule::threads_or_processes, Use::any},
    {"_thread.*", Rule::threads_or_processes, Use::any},
    {"multiprocessing.*", Rule::threads_or_processes, Use::any},
    {"concurrent.*", Rule::threads_or_processes, Use::any},
    {"asyncio.*", Rule::threads_or_processes, Use::any},
    {"torch.multiprocessing.*", Rule::threads_or_processes, Use::any},
    {"joblib.*", Rule::threads_or_processes, Use::any},
    {"os.fork", Rule::threads_or_processes, Use::any},
    {"os.forkpty", Rule::threads_or_processes, Use::any},
    {"os.register_at_fork", Rule::threads_or_processes, Use::any},
    // lazy evaluation
    {"torch.Tensor._make_subclass", Rule::lazy_tensor, Use::any},
    {"torch.Tensor._make_wrapper_subclass", Rule::lazy_tensor, Use::any},
    {"torch._C._disabled_torch_function_impl", Rule::lazy_tensor, Use::any},
    {"torch.utils._python_dispatch.*", Rule::lazy_tensor, Use::any},
    {"torch.overrides.*", Rule::lazy_tensor, Use::any},
    {"torch._subclasses.*", Rule::lazy_tensor, Use::any},
    // timing and synchronization (assignment = replacement)
    {"torch.cuda.synchronize", Rule::timing_patch, Use::assign},
    {"torch.cuda.Event.*", Rule::timing_patch, Use::assign},
    {"torch.cuda.Stream.*", Rule::timing_patch, Use::assign},
    {"torch.cuda.current_stream", Rule::timing_patch, Use::assign},
    {"torch.cuda.default_stream", Rule::timing_patch, Use::assign},
    {"torch.cuda.streams.*", Rule::timing_patch, Use::assign},
    {"torch.cuda.elapsed_time", Rule::timing_patch, Use::assign},
    {"torch.Event.*", Rule::timing_patch, Use::assign},
    {"time.*", Rule::timing_patch, Use::assign},
    {"timeit.*", Rule::timing_patch, Use::assign},
    {"torch.utils.benchmark.*", Rule::timing_patch, Use::assign},
    {"triton.testing.*", Rule::timing_patch, Use::assign},
    // global library state
    {"unittest.mock.*", Rule::library_patch, Use::any},
    {"mock.*", Rule::library_patch, Use::any},
    {"torch.set_default_dtype", Rule::library_patch, Use::call},
    {"torch.set_default_tensor_type", Rule::library_patch, Use::call},
    {"torch.set_default_device", Rule::library_patch, Use::call},
    {"torch.set_num_threads", Rule::library_patch, Use::call},
    {"torch.set_num_interop_threads", Rule::library_patch, Use::call},
    {"torch.set_flush_denormal", Rule::library_patch, Use::call},
    {"torch.use_deterministic_algorithms", Rule::library_patch, Use::call},
    {"torch.set_deterministic_debug_mode", Rule::library_patch, Use::call},
    // namespace introspection
    {"sys.modules.*", Rule::namespace_introspection, Use::any},
    {"__main__.*", Rule::namespace_introspection, Use::any},
    {"sys._getframe", Rule::namespace_introspection, Use::any},
    {"sys._current_frames", Rule::namespace_introspection, Use::any},
    {"inspect.currentframe", Rule::namespace_introspection, Use::any},
    {"inspect.stack", Rule::namespace_introspection, Use::any},
    {"inspect.getouterframes", Rule::namespace_introspection, Use::any},
    {"inspect.getinnerframes", Rule::namespace_introspection, Use::any},
    {"inspect.trace", Rule::namespace_introspection, Use::any},
    {"inspect.getframeinfo", Rule::namespace_introspection, Use::any},
    {"traceback.walk_stack", Rule::namespace_introspection, Use::any},
    {"gc.get_objects", Rule::namespace_introspection, Use::any},
    {"gc.get_referrers", Rule::namespace_introspection, Use::any},
    {"gc.get_referents", Rule::namespace_introspection, Use::any},
    {"sys.settrace", Rule::namespace_introspection, Use::any},
    {"sys.setprofile", Rule::namespace_introspection, Use::any},
    {"sys.addaudithook", Rule::namespace_introspection, Use::any},
    {"sys.meta_path", Rule::namespace_introspection, Use::any},
    {"sys.path_hooks", Rule::namespace_introspection, Use::any},
    {"builtins.globals", Rule::namespace_introspection, Use::call},
    // precision (fp32 problems only)
    {"torch.float16", Rule::precision_downgrade, Use::any},
    {"torch.half", Rule::precision_downgrade, Use::any},
    {"torch.bfloat16", Rule::precision_downgrade, Use::any},
    {"torch.float8*", Rule::precision_downgrade, Use::any},
    {"torch.HalfTensor", Rule::precision_downgrade, Use::any},
    {"torch.BFloat16Tensor", Rule::precision_downgrade, Use::any},
    {"torch.cuda.HalfTensor", Rule::precision_downgrade, Use::any},
    {"torch.cuda.BFloat16Tensor", Rule::precision_downgrade, Use::any},
    {"torch.autocast", Rule::precision_downgrade, Use::any},
    {"torch.amp.*", Rule::precision_downgrade, Use::any},
    {"torch.cuda.amp.*", Rule::precision_downgrade, Use::any},
    {"torch.cpu.amp.*", Rule::precision_downgrade, Use::any},
    {"triton.language.float16", Rule::precision_downgrade, Use::any},
    {"triton.language.bfloat16", Rule::precision_downgrade, Use::any},
    {"triton.language.float8*", Rule::precision_downgrade, Use::any},
    {"numpy.float16", Rule::precision_downgrade, Use::any},
    {"numpy.half", Rule::precision_downgrade, Use::any},
    // processes
    {"os.system", Rule::process_spawn, Use::any},
    {"os.popen", Rule::process_spawn, Use::any},
    {"os.exec*", Rule::process_spawn, Use::any},
    {"os.spawn*", Rule::process_spawn, Use::any},
    {"os.posix_spawn*", Rule::process_spawn, Use::any},
    {"os.startfile", Rule::process_spawn, Use::any},
    {"subprocess.*", Rule::process_spawn, Use::any},
    {"pty.*", Rule::process_spawn, Use::any},
    {"platform.popen", Rule::process_spawn, Use::any},
    // network
    {"socket.*", Rule::network_access, Use::any},
    {"socketserver.*", Rule::network_access, Use::any},
    {"ssl.*", Rule::network_access, Use::any},
    {"urllib.*", Rule::network_access, Use::any},
    {"urllib3.*", Rule::network_access, Use::any},
    {"requests.*", Rule::network_access, Use::any},
    {"http.*", Rule::network_access, Use::any},
    {"httpx.*", Rule::network_access, Use::any},
    {"aiohttp.*", Rule::network_access, Use::any},
    {"ftplib.*", Rule::network_access, Use::any},
    {"smtplib.*", Rule::network_access, Use::any},
    {"telnetlib.*", Rule::network_access, Use::any},
    {"xmlrpc.*", Rule::network_access, Use::any},
    {"webbrowser.*", Rule::network_access, Use::any},
    {"paramiko.*", Rule::network_access, Use::any},
    {"websocket.*", Rule::network_access, Use::any},
    {"websockets.*", Rule::network_access, Use::any},
    // native code
    {"ctypes.*", Rule::native_code_load, Use::any},
    {"_ctypes.*", Rule::native_code_load, Use::any},
    {"cffi.*", Rule::native_code_load, Use::any},
    {"torch.ops.load_library", Rule::native_code_load, Use::any},
    {"torch.classes.load_library", Rule::native_code_load, Use::any},
    {"numpy.ctypeslib.*", Rule::native_code_load, Use::any},
    // files
    {"shutil.rmtree", Rule::filesystem_access, Use::any},
    {"shutil.move", Rule::filesystem_access, Use::any},
    {"shutil.copy*", Rule::filesystem_access, Use::any},
    {"shutil.chown", Rule::filesystem_access, Use::any},
    {"os.remove", Rule::filesystem_access, Use::any},
    {"os.unlink", Rule::filesystem_access, Use::any},
    {"os.rmdir", Rule::filesystem_access, Use::any},
    {"os.removedirs", Rule::filesystem_access, Use::any},
    {"os.rename", Rule::filesystem_access, Use::any},
    {"os.renames", Rule::filesystem_access, Use::any},
    {"os.replace", Rule::filesystem_access, Use::any},
    {"os.symlink", Rule::filesystem_access, Use::any},
    {"os.link", Rule::filesystem_access, Use::any},
    {"os.chmod", Rule::filesystem_access, Use::any},
    {"os.chown", Rule::filesystem_access, Use::any},
    {"os.truncate", Rule::filesystem_access, Use::any},
    {"os.mkfifo", Rule::filesystem_access, Use::any},
    {"os.open", Rule::filesystem_access, Use::call},
    {"os.chdir", Rule::filesystem_access, Use::call},
    {"torch.save", Rule::filesystem_access, Use::call},
    {"torch.load", Rule::filesystem_access, Use::call},
    {"numpy.save", Rule::filesystem_access, Use::call},
    {"numpy.savez*", Rule::filesystem_access, Use::call},
    {"numpy.load", Rule::filesystem_access, Use::call},
    {"numpy.fromfile", Rule::filesystem_access, Use::call},
    {"numpy.memmap", Rule::filesystem_access, Use::call},
    {"pickle.dump", Rule::filesystem_access, Use::call},
    {"pickle.load", Rule::filesystem_access, Use::call},
    {"shelve.*", Rule::filesystem_access, Use::any},
    {"sqlite3.*", Rule::filesystem_access, Use::any},
    // dynamic code
    {"builtins.exec", Rule::dynamic_code, Use::any},
    {"builtins.eval", Rule::dynamic_code, Use::any},
    {"builtins.compile", Rule::dynamic_code, Use::call},
    {"builtins.__import__", Rule::dynamic_code, Use::any},
    {"builtins.breakpoint", Rule::dynamic_code, Use::call},
    {"importlib.*", Rule::dynamic_code, Use::any},
    {"runpy.*", Rule::dynamic_code, Use::any},
    {"types.CodeType", Rule::dynamic_code, Use::any},
    {"types.FunctionType", Rule::dynamic_code, Use::any},
    {"marshal.*", Rule::dynamic_code, Use::any},
    {"pickle.loads", Rule::dynamic_code, Use::any},
    {"dill.*", Rule::dynamic_code, Use::any},
    // process exit
    {"sys.exit", Rule::process_exit, Use::any},
    {"os._exit", Rule::process_exit, Use::any},
    {"os.kill", Rule::process_exit, Use::any},
    {"os.killpg", Rule::process_exit, Use::any},
    {"os.abort", Rule::process_exit, Use::any},
    {"builtins.exit", Rule::process_exit, Use::call},
    {"builtins.quit", Rule::process_exit, Use::call},
    {"signal.*", Rule::process_exit, Use::any},
    {"atexit.*", Rule::process_exit, Use::any},
    // compilers that write the kernels
    {"torch.compile", Rule::auto_compiler, Use::any},
    {"torch.jit.*", Rule::auto_compiler, Use::any},
    {"torch._dynamo.*", Rule::auto_compiler, Use::any},
    {"torch._inductor.*", Rule::auto_compiler, Use::any},
    {"torch.export.*", Rule::auto_compiler, Use::any},
    {"torch_tensorrt.*", Rule::auto_compiler, Use::any},
    {"tvm.*", Rule::auto_compiler, Use::any},
    // try/except in disguise
    {"contextlib.suppress", Rule::try_except_fallback, Use::any},
};

// Methods called on any object (the receiver's type is unknown statically).
struct MethodPattern {
  std::string_view name;
  Rule rule;
};
constexpr MethodPattern kMethodPatterns[] = {
    {"wait_stream", Rule::side_stream},         {"record_stream", Rule::side_stream},
    {"half", Rule::precision_downgrade},        {"bfloat16", Rule::precision_downgrade},
    {"write_text", Rule::filesystem_access},    {"write_bytes", Rule::filesystem_access},
    {"unlink", Rule::filesystem_access},        {"rmdir", Rule::filesystem_access},
    {"symlink_to", Rule::filesystem_access},    {"hardlink_to", Rule::filesystem_access},
    {"tofile", Rule::filesystem_access},
};

// Attribute names that betray a technique wherever they appear in a dotted name.
constexpr MethodPattern kPartPatterns[] = {
    {"f_back", Rule::namespace_introspection},      {"f_globals", Rule::namespace_introspection},
    {"f_locals", Rule::namespace_introspection},    {"f_builtins", Rule::namespace_introspection},
    {"tb_frame", Rule::namespace_introspection},    {"gi_frame", Rule::namespace_introspection},
    {"cr_frame", Rule::namespace_introspection},    {"__globals__", Rule::namespace_introspection},
    {"__code__", Rule::dynamic_code},               {"__subclasses__", Rule::dynamic_code},
    {"_make_subclass", Rule::lazy_tensor},          {"_make_wrapper_subclass", Rule::lazy_tensor},
    {"__torch_function__", Rule::lazy_tensor},      {"__torch_dispatch__", Rule::lazy_tensor},
};

// C/C++ names in embedded sources. A name with "::" matches that qualified name; a bare name
// matches the last component of any qualification.
enum class CUse { mention, free_call, member_call, definition };
struct CPattern {
  std::string_view name;
  Rule rule;
  CUse use;
};
constexpr CPattern kCPatterns[] = {
    {"cudaStreamCreate", Rule::side_stream, CUse::mention},
    {"cudaStreamCreateWithFlags", Rule::side_stream, CUse::mention},
    {"cudaStreamCreateWithPriority", Rule::side_stream, CUse::mention},
    {"hipStreamCreate", Rule::side_stream, CUse::mention},
    {"hipStreamCreateWithFlags", Rule::side_stream, CUse::mention},
    {"hipStreamCreateWithPriority", Rule::side_stream, CUse::mention},
    {"getStreamFromPool", Rule::side_stream, CUse::mention},
    {"getStreamFromExternal", Rule::side_stream, CUse::mention},
    {"cudaStreamPerThread", Rule::side_stream, CUse::mention},
    {"hipStreamPerThread", Rule::side_stream, CUse::mention},
    {"std::thread", Rule::threads_or_processes, CUse::mention},
    {"std::jthread", Rule::threads_or_processes, CUse::mention},
    {"std::async", Rule::threads_or_processes, CUse::mention},
    {"boost::thread", Rule::threads_or_processes, CUse::mention},
    {"pthread_create", Rule::threads_or_processes, CUse::mention},
    {"fork", Rule::threads_or_processes, CUse::free_call},
    {"vfork", Rule::threads_or_processes, CUse::free_call},
    {"system", Rule::process_spawn, CUse::free_call},
    {"popen", Rule::process_spawn, CUse::free_call},
    {"_popen", Rule::process_spawn, CUse::free_call},
    {"execl", Rule::process_spawn, CUse::free_call},
    {"execlp", Rule::process_spawn, CUse::free_call},
    {"execle", Rule::process_spawn, CUse::free_call},
    {"execv", Rule::process_spawn, CUse::free_call},
    {"execvp", Rule::process_spawn, CUse::free_call},
    {"execvpe", Rule::process_spawn, CUse::free_call},
    {"execve", Rule::process_spawn, CUse::free_call},
    {"posix_spawn", Rule::process_spawn, CUse::free_call},
    {"posix_spawnp", Rule::process_spawn, CUse::free_call},
    {"socket", Rule::network_access, CUse::free_call},
    {"connect", Rule::network_access, CUse::free_call},
    {"gethostbyname", Rule::network_access, CUse::free_call},
    {"getaddrinfo", Rule::network_access, CUse::free_call},
    {"curl_easy_init", Rule::network_access, CUse::mention},
    {"dlopen", Rule::native_code_load, CUse::mention},
    {"dlmopen", Rule::native_code_load, CUse::mention},
    {"dlsym", Rule::native_code_load, CUse::mention},
    {"RTLD_NEXT", Rule::native_code_load, CUse::mention},
    {"LoadLibraryA", Rule::native_code_load, CUse::mention},
    {"LoadLibraryW", Rule::native_code_load, CUse::mention},
    {"fopen", Rule::filesystem_access, CUse::free_call},
    {"fopen64", Rule::filesystem_access, CUse::free_call},
    {"freopen", Rule::filesystem_access, CUse::free_call},
    {"open", Rule::filesystem_access, CUse::free_call},
    {"creat", Rule::filesystem_access, CUse::free_call},
    {"remove", Rule::filesystem_access, CUse::free_call},
    {"remove_all", Rule::filesystem_access, CUse::free_call},
    {"unlink", Rule::filesystem_access, CUse::free_call},
    {"rmdir", Rule::filesystem_access, CUse::free_call},
    {"rename", Rule::filesystem_access, CUse::free_call},
    {"truncate", Rule::filesystem_access, CUse::free_call},
    {"symlink", Rule::filesystem_access, CUse::free_call},
    {"chmod", Rule::filesystem_access, CUse::free_call},
    {"ofstream", Rule::filesystem_access, CUse::mention},
    {"ifstream", Rule::filesystem_access, CUse::mention},
    {"fstream", Rule::filesystem_access, CUse::mention},
    {"exit", Rule::process_exit, CUse::free_call},
    {"_exit", Rule::process_exit, CUse::free_call},
    {"_Exit", Rule::process_exit, CUse::free_call},
    {"quick_exit", Rule::process_exit, CUse::free_call},
    {"kill", Rule::process_exit, CUse::free_call},
    {"raise", Rule::process_exit, CUse::free_call},
    {"signal", Rule::process_exit, CUse::free_call},
    {"cudaDeviceSynchronize", Rule::timing_patch, CUse::definition},
    {"cudaStreamSynchronize", Rule::timing_patch, CUse::definition},
    {"cudaStreamWaitEvent", Rule::timing_patch, CUse::definition},
    {"cudaEventCreate", Rule::timing_patch, CUse::definition},
    {"cudaEventCreateWithFlags", Rule::timing_patch, CUse::definition},
    {"cudaEventRecord", Rule::timing_patch, CUse::definition},
    {"cudaEventSynchronize", Rule::timing_patch, CUse::definition},
    {"cudaEventQuery", Rule::timing_patch, CUse::definition},
    {"cudaEventElapsedTime", Rule::timing_patch, CUse::definition},
    {"cudaLaunchKernel", Rule::timing_patch, CUse::definition},
    {"cuCtxSynchronize", Rule::timing_patch, CUse::definition},
    {"cuStreamSynchronize", Rule::timing_patch, CUse::definition},
    {"cuEventRecord", Rule::timing_patch, CUse::definition},
    {"cuEventSynchronize", Rule::timing_patch, CUse::definition},
    {"cuEventElapsedTime", Rule::timing_patch, CUse::definition},
    {"cuLaunchKernel", Rule::timing_patch, CUse::definition},
    {"hipDeviceSynchronize", Rule::timing_patch, CUse::definition},
    {"hipStreamSynchronize", Rule::timing_patch, CUse::definition},
    {"hipEventRecord", Rule::timing_patch, CUse::definition},
    {"hipEventSynchronize", Rule::timing_patch, CUse::definition},
    {"hipEventElapsedTime", Rule::timing_patch, CUse::definition},
    {"clock_gettime", Rule::timing_patch, CUse::definition},
    {"gettimeofday", Rule::timing_patch, CUse::definition},
    {"__half", Rule::precision_downgrade, CUse::mention},
    {"__half2", Rule::precision_downgrade, CUse::mention},
    {"half2", Rule::precision_downgrade, CUse::mention},
    {"__nv_half", Rule::precision_downgrade, CUse::mention},
    {"__nv_bfloat16", Rule::precision_downgrade, CUse::mention},
    {"__nv_bfloat162", Rule::precision_downgrade, CUse::mention},
    {"nv_bfloat16", Rule::precision_downgrade, CUse::mention},
    {"nv_bfloat162", Rule::precision_downgrade, CUse::mention},
    {"__hip_bfloat16", Rule::precision_downgrade, CUse::mention},
    {"hip_bfloat16", Rule::precision_downgrade, CUse::mention},
    {"_Float16", Rule::precision_downgrade, CUse::mention},
    {"__float2half", Rule::precision_downgrade, CUse::mention},
    {"__float2half_rn", Rule::precision_downgrade, CUse::mention},
    {"__float22half2_rn", Rule::precision_downgrade, CUse::mention},
    {"__half2float", Rule::precision_downgrade, CUse::mention},
    {"__float2bfloat16", Rule::precision_downgrade, CUse::mention},
    {"__float2bfloat16_rn", Rule::precision_downgrade, CUse::mention},
    {"__bfloat162float", Rule::precision_downgrade, CUse::mention},
    {"__hadd", Rule::precision_downgrade, CUse::mention},
    {"__hmul", Rule::precision_downgrade, CUse::mention},
    {"__hfma", Rule::precision_downgrade, CUse::mention},
    {"__hadd2", Rule::precision_downgrade, CUse::mention},
    {"__hmul2", Rule::precision_downgrade, CUse::mention},
    {"__hfma2", Rule::precision_downgrade, CUse::mention},
    {"wmma", Rule::precision_downgrade, CUse::mention},
    {"tf32", Rule::precision_downgrade, CUse::mention},
    {"__float_to_tf32", Rule::precision_downgrade, CUse::mention},
    {"kHalf", Rule::precision_downgrade, CUse::mention},
    {"kFloat16", Rule::precision_downgrade, CUse::mention},
    {"kBFloat16", Rule::precision_downgrade, CUse::mention},
    {"at::Half", Rule::precision_downgrade, CUse::mention},
    {"c10::Half", Rule::precision_downgrade, CUse::mention},
    {"at::BFloat16", Rule::precision_downgrade, CUse::mention},
    {"c10::BFloat16", Rule::precision_downgrade, CUse::mention},
    {"CUBLAS_TF32_TENSOR_OP_MATH", Rule::precision_downgrade, CUse::mention},
    {"CUBLAS_COMPUTE_32F_FAST_TF32", Rule::precision_downgrade, CUse::mention},
    {"CUBLAS_COMPUTE_32F_FAST_16F", Rule::precision_downgrade, CUse::mention},
    {"CUBLAS_COMPUTE_32F_FAST_16BF", Rule::precision_downgrade, CUse::mention},
    {"CUBLAS_COMPUTE_16F", Rule::precision_downgrade, CUse::mention},
    {"CUDA_R_16F", Rule::precision_downgrade, CUse::mention},
    {"CUDA_R_16BF", Rule::precision_downgrade, CUse::mention},
    {"half", Rule::precision_downgrade, CUse::member_call},
    {"bfloat16", Rule::precision_downgrade, CUse::member_call},
};

// Dispatch type tags that honest fp32 code may list among the types a kernel is instantiated for.
constexpr std::string_view kDispatchTags[] = {"kHalf", "kFloat16", "kBFloat16", "Half", "BFloat16"};

std::string_view why(Rule r) {
  switch (r) {
    case Rule::side_stream: return "puts work on a side stream the timer does not wait for; launch on the current stream";
    case Rule::threads_or_processes: return "starts threads or processes that can run outside the timed call";
    case Rule::lazy_tensor: return "can defer or fake the computation through a tensor subclass or dispatch hook";
    case Rule::timing_patch: return "replaces a timing or synchronization function the evaluator relies on";
    case Rule::library_patch: return "changes library state shared with the evaluator and the reference";
    case Rule::namespace_introspection: return "reaches outside the candidate's own namespace";
    case Rule::precision_downgrade: return "computes below the fp32 precision the problem asks for";
    case Rule::process_spawn: return "spawns a process; candidates may not run programs";
    case Rule::network_access: return "uses the network; candidates may not";
    case Rule::native_code_load: return "loads native code outside the compiled extension";
    case Rule::filesystem_access: return "touches files outside the build directory";
    case Rule::dynamic_code: return "runs code assembled at run time, hiding what executes";
    case Rule::process_exit: return "ends or signals the process";
    case Rule::auto_compiler: return "lets a PyTorch compiler generate the kernels instead of writing one";
    case Rule::try_except_fallback: return "swallows exceptions, so a failing kernel can fall back silently";
    default: return "is not allowed";
  }
}

bool pattern_matches(std::string_view pattern, std::string_view qual) {
  if (ends_with(pattern, ".*")) {
    const std::string_view base = pattern.substr(0, pattern.size() - 2);
    return qual == base || (starts_with(qual, base) && qual.size() > base.size() && qual[base.size()] == '.');
  }
  if (ends_with(pattern, "*")) return starts_with(qual, pattern.substr(0, pattern.size() - 1));
  return qual == pattern;
}

// What the reference program defines and computes.
struct ReferenceInfo {
  bool known = false;
  std::set<std::string> classes{"Model"};
  std::set<std::string> functions;  // module-level defs other than get_inputs / get_init_inputs
  std::set<std::string> names{"Model", "get_inputs", "get_init_inputs"};
  std::map<std::string, std::vector<std::string>> definitions;  // name -> normalized statements
  std::set<std::string> compute_keys;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> model_nn_attrs;
};

// Normalized text of a def/class with its decorators.
std::string scope_text(const PythonModule& py, const Scope& sc) {
  std::size_t b = sc.tok_begin;
  for (std::size_t d : sc.decorators) b = std::min(b, py.stmts[d].begin);
  return py.normalized(b, sc.tok_end);
}

class Checker {
 public:
  Checker(std::string_view candidate, const StaticCheckConfig& config,
          const std::array<core::Severity, kRuleCount>& severity)
      : config_(config), severity_(severity), py_(candidate) {
    c_ = embedded_sources(py_, reads_own_text());
    prog_ = analyze_program(py_, "ModelNew");
    read_reference();
  }

  std::vector<StaticFinding> run() {
    check_model_new();
    check_try_except();
    check_reference_reuse();
    check_compute();
    check_implementation();
    check_python_patterns();
    check_c_patterns();
    check_library_patch();
    check_lazy();
    check_reference_globals();
    check_precision();
    check_files_and_env();
    std::stable_sort(out_.begin(), out_.end(), [](const StaticFinding& a, const StaticFinding& b) {
      return a.line < b.line;
    });
    return std::move(out_);
  }

 private:
  const StaticCheckConfig& config_;
  std::array<core::Severity, kRuleCount> severity_;
  PythonModule py_;
  std::vector<CSource> c_;
  ProgramAnalysis prog_;
  std::optional<PythonModule> ref_py_;
  ReferenceInfo ref_;
  std::vector<StaticFinding> out_;
  std::set<std::tuple<std::size_t, int, std::string>> reported_;

  // Whether the program can read its own text, where code could hide in comments or docstrings.
  bool reads_own_text() const {
    for (const Ref& r : py_.refs) {
      for (const auto& part : r.parts) {
        if (part == "__file__" || part == "__doc__" || part == "__loader__" || part == "__spec__") return true;
      }
      if (starts_with(r.qual, "inspect.getsource") || r.qual == "inspect.getcomments" || r.qual == "inspect.getdoc" ||
          starts_with(r.qual, "linecache."))
        return true;
    }
    return false;
  }

  bool on(Rule r) const { return severity_[static_cast<std::size_t>(r)] != core::Severity::off; }
  bool fp32() const { return config_.precision == core::Precision::fp32; }

  void report(Rule r, int line, std::string message) {
    const auto i = static_cast<std::size_t>(r);
    if (severity_[i] == core::Severity::off) return;
    if (!reported_.insert({i, line, message}).second) return;  // overlapping patterns report once
    const RuleDef& d = kRuleDefs[i];
    out_.push_back({std::string(d.name), std::string(d.category), severity_[i], line, std::move(message)});
  }

  std::string scope_label(int s) const {
    if (s < 0) return "module level";
    const Scope& sc = py_.scopes[static_cast<std::size_t>(s)];
    const int cls = enclosing_class(py_, s);
    if (sc.parent >= 0 && sc.parent == cls) return py_.scopes[static_cast<std::size_t>(cls)].name + "." + sc.name;
    return sc.name;
  }

  static std::string describe(const Ref& r) {
    if (r.is_import) return fmt::format("import of `{}`", r.qual);
    const std::string text = r.text();
    if (r.via == Ref::Via::getattr_call || r.via == Ref::Via::setattr_call)
      return fmt::format("`{}` (through {}attr)", text, r.via == Ref::Via::getattr_call ? "get" : "set");
    if (r.parts.size() == 1 && r.qual == "builtins." + text) return fmt::format("`{}()`", text);
    if (r.head_is_module && r.qual != text) return fmt::format("`{}` ({})", text, r.qual);
    return fmt::format("`{}`", text);
  }

  bool inherits_reference(std::string* base = nullptr) const {
    if (prog_.cls < 0) return false;
    for (const auto& b : py_.scopes[static_cast<std::size_t>(prog_.cls)].bases) {
      if (ref_.classes.count(b.back()) && !(b.size() == 1 && py_.top_scope(b[0]) >= 0)) {
        if (base != nullptr) {
          *base = b[0];
          for (std::size_t i = 1; i < b.size(); ++i) *base += "." + b[i];
        }
        return true;
      }
    }
    return false;
  }

  // ---- reference ---------------------------------------------------------------------------

  void read_reference() {
    if (config_.reference_source.empty()) return;
    ref_py_.emplace(config_.reference_source);
    const PythonModule& r = *ref_py_;
    ref_.known = true;
    ref_.classes.clear();
    ref_.names.clear();
    for (const Scope& sc : r.scopes) {
      if (sc.parent != -1) continue;
      if (sc.is_class) ref_.classes.insert(sc.name);
      else if (sc.name != "get_inputs" && sc.name != "get_init_inputs") ref_.functions.insert(sc.name);
      ref_.names.insert(sc.name);
      ref_.definitions[sc.name].push_back(scope_text(r, sc));
    }
    for (const Stmt& s : r.stmts) {
      if (s.owner != -1) continue;
      const std::string_view w = r.first_word(s);
      if (w == "import" || w == "from" || w == "def" || w == "class" || w == "@" || w == "async") continue;
      for (const auto& n : r.assigned_names(s)) {
        ref_.names.insert(n);
        ref_.definitions[n].push_back(r.normalized(s.begin, s.end));
      }
    }
    if (ref_.classes.empty()) ref_.classes.insert("Model");
    std::string model = "Model";
    if (r.top_scope("Model") < 0) {
      for (const Scope& sc : r.scopes) {
        if (sc.parent == -1 && sc.is_class && r.method(r.top_scope(sc.name), "forward") >= 0) {
          model = sc.name;
          break;
        }
      }
    }
    const ProgramAnalysis a = analyze_program(r, model);
    for (const ComputeUse& u : compute_uses(r, a)) ref_.compute_keys.insert(u.key);
    if (a.cls >= 0) ref_.model_nn_attrs = nn_module_attrs(r, a, a.cls);
  }

  // ---- rules -------------------------------------------------------------------------------

  void check_model_new() {
    if (prog_.cls >= 0 || prog_.module_values.count("ModelNew")) return;
    report(Rule::no_model_new, 0,
           "no `class ModelNew` is defined; the answer must define ModelNew whose forward calls the custom kernel");
  }

  void check_try_except() {
    for (std::size_t i = 0; i < py_.stmts.size(); ++i) {
      const Stmt& s = py_.stmts[i];
      if (py_.first_word(s) != "try") continue;
      std::vector<std::size_t> handlers;
      for (std::size_t j = s.body_end; j < py_.stmts.size();) {
        const Stmt& h = py_.stmts[j];
        if (h.indent != s.indent || h.owner != s.owner) break;
        const std::string_view w = py_.first_word(h);
        if (w == "except") handlers.push_back(j);
        else if (w != "else" && w != "finally") break;
        j = h.body_end;
      }
      if (handlers.empty()) continue;
      if (s.owner == -1) {  // an optional-import probe at module level is fine
        const auto body = py_.body_stmts(i);
        const bool imports_only = !body.empty() && std::all_of(body.begin(), body.end(), [&](std::size_t b) {
          const auto w = py_.first_word(py_.stmts[b]);
          return w == "import" || w == "from";
        });
        if (imports_only) continue;
      }
      for (std::size_t h : handlers) {
        if (reraises(h)) continue;
        report(Rule::try_except_fallback, s.line,
               fmt::format("`try` at line {} ({}): the `except` at line {} does not re-raise, so a failing kernel "
                           "can fall back silently; remove the try/except or re-raise",
                           s.line, scope_label(s.owner), py_.stmts[h].line));
        break;
      }
    }
  }

  bool reraises(std::size_t handler) const {
    const auto body = py_.body_stmts(handler);
    if (body.empty()) {
      const auto [b, e] = py_.inline_body(handler);
      return b < e && py_.is_name(b, "raise");
    }
    return py_.first_word(py_.stmts[body.back()]) == "raise";
  }

  void check_reference_reuse() {
    std::string base;
    std::size_t header_b = 0, header_e = 0;
    if (prog_.cls >= 0) {
      const Scope& cls = py_.scopes[static_cast<std::size_t>(prog_.cls)];
      header_b = py_.stmts[cls.stmt].begin;
      header_e = py_.stmts[cls.stmt].colon == kNone ? py_.stmts[cls.stmt].end : py_.stmts[cls.stmt].colon;
      if (inherits_reference(&base)) {
        bool has_forward = py_.method(prog_.cls, "forward") >= 0 || py_.method(prog_.cls, "__call__") >= 0;
        for (const Stmt& s : py_.stmts) {
          if (s.owner != prog_.cls) continue;
          for (const auto& n : py_.assigned_names(s)) has_forward = has_forward || n == "forward" || n == "__call__";
        }
        if (!has_forward)
          report(Rule::inherits_reference, py_.stmts[cls.stmt].line,
                 fmt::format("`class ModelNew({})` at line {} inherits the reference without overriding forward, "
                             "so the reference implementation runs instead of a kernel",
                             base, py_.stmts[cls.stmt].line));
        for (std::size_t k = cls.tok_begin; k < cls.tok_end; ++k) {
          if (!py_.is_name(k, "super") || !py_.is_op(k + 1, "(")) continue;
          const std::size_t close = py_.match_close(k + 1);
          if (py_.is_op(close + 1, ".") && (py_.is_name(close + 2, "forward") || py_.is_name(close + 2, "__call__")))
            report(Rule::calls_reference, py_.toks[k].line,
                   fmt::format("`super().{}` at line {} runs the reference implementation", py_.toks[close + 2].text,
                               py_.toks[k].line));
        }
      }
    }
    for (const Ref& r : py_.refs) {
      if (r.parts.empty() || r.parts[0].empty()) continue;
      if (r.tok_begin >= header_b && r.tok_begin < header_e) continue;
      const std::string& head = r.parts[0];
      if (r.is_import) {
        if (r.parts.size() >= 2 && ref_.classes.count(r.parts.back()))
          report(Rule::calls_reference, r.line,
                 fmt::format("import of the reference class `{}` at line {}; implement the computation yourself",
                             r.qual, r.line));
        continue;
      }
      if (py_.top_scope(head) >= 0) continue;  // the candidate's own class or function of that name
      if (ref_.classes.count(head) && !r.head_is_module) {
        if (r.call && r.parts.size() == 1) {
          report(Rule::calls_reference, r.line,
                 fmt::format("`{}(...)` at line {} instantiates the reference model; implement the computation in a "
                             "kernel",
                             head, r.line));
        } else if (r.parts.size() >= 2 && (r.parts[1] == "forward" || r.parts[1] == "__call__")) {
          report(Rule::calls_reference, r.line,
                 fmt::format("`{}` at line {} runs the reference implementation", r.text(), r.line));
        }
      }
      if (ref_.functions.count(head) && r.call && r.parts.size() == 1)
        report(Rule::calls_reference, r.line,
               fmt::format("`{}(...)` at line {} calls the reference's own function", head, r.line));
    }
    if (auto it = prog_.module_values.find("ModelNew"); it != prog_.module_values.end()) {
      for (const Range& v : it->second) {
        for (std::size_t k = v.first; k < v.second; ++k) {
          if (py_.toks[k].kind == PyTokenKind::name && ref_.classes.count(std::string(py_.toks[k].text)))
            report(Rule::calls_reference, py_.toks[k].line,
                   fmt::format("`ModelNew` is bound to the reference `{}` at line {}", py_.toks[k].text,
                               py_.toks[k].line));
        }
      }
    }
  }

  void check_compute() {
    if (!on(Rule::torch_compute_in_forward) && !on(Rule::reference_op_in_forward) &&
        !on(Rule::reference_all_in_library))
      return;
    std::vector<ComputeUse> uses = compute_uses(py_, prog_);
    if (inherits_reference() && !ref_.model_nn_attrs.empty()) {
      // `self.conv(x)` where the reference's __init__ built self.conv.
      const auto own = prog_.attr_values.find(prog_.cls);
      for (int s : prog_.reachable) {
        if (enclosing_class(py_, s) != prog_.cls) continue;
        const Scope& sc = py_.scopes[static_cast<std::size_t>(s)];
        for (const Ref& r : py_.refs) {
          if (r.tok_begin < sc.tok_begin || r.tok_begin >= sc.tok_end || !r.call || r.parts.size() != 2 ||
              r.parts[0] != "self")
            continue;
          if (own != prog_.attr_values.end() && own->second.count(r.parts[1])) continue;
          if (py_.method(prog_.cls, r.parts[1]) >= 0) continue;
          auto it = ref_.model_nn_attrs.find(r.parts[1]);
          if (it == ref_.model_nn_attrs.end()) continue;
          for (const auto& [module, key] : it->second)
            uses.push_back({r.line, "self." + r.parts[1] + " (" + module + ", built by the reference)", key});
        }
      }
    }
    std::set<std::string> in_library;  // the reference's ops the forward path computes with a library call
    int first_line = 0;
    auto emit = [&](const ComputeUse& u, std::string_view where) {
      if (ref_.compute_keys.count(u.key)) {
        in_library.insert(u.key);
        if (first_line == 0 || u.line < first_line) first_line = u.line;
        report(Rule::reference_op_in_forward, u.line,
               fmt::format("`{}` at line {}{} computes `{}`, the reference's own op, with a library call; implement "
                           "it in the custom kernel",
                           u.what, u.line, where, u.key));
      } else {
        report(Rule::torch_compute_in_forward, u.line,
               fmt::format("`{}` at line {}{} runs a PyTorch compute op instead of a custom kernel", u.what, u.line,
                           where));
      }
    };
    for (const ComputeUse& u : uses) emit(u, "");
    for (const ComputeUse& u : c_compute_uses(c_)) emit(u, " (in the kernel source)");
    if (!ref_.compute_keys.empty() && in_library.size() == ref_.compute_keys.size()) {
      std::string ops;
      for (const auto& k : in_library) ops += (ops.empty() ? "`" : ", `") + k + "`";
      report(Rule::reference_all_in_library, first_line,
             fmt::format("every op the reference computes ({}) is computed with a library call, the first at line "
                         "{}: the custom kernel does none of the problem's own work",
                         ops, first_line));
    }
  }

  void check_implementation() {
    std::vector<std::pair<std::string, int>> kernels;
    for (const CSource& src : c_) {
      for (auto& k : c_global_kernels(src.toks)) kernels.push_back(std::move(k));
    }
    const auto lang = config_.language;
    const std::string_view lang_name = core::to_string(lang);
    if (lang == core::KernelLanguage::cuda || lang == core::KernelLanguage::hip) {
      // CUDA kernels must reach nvcc through cuda_sources (or load() of source files). HIP kernels may
      // also sit in cpp_sources: KernelBench's HIP setup compiles those with CXX=hipcc.
      const bool hip = lang == core::KernelLanguage::hip;
      auto has_kernel = [&](const std::vector<std::size_t>& strings) {
        return std::any_of(c_.begin(), c_.end(), [&](const CSource& src) {
          return src.from(strings) && !c_global_kernels(src.toks).empty();
        });
      };
      bool compiled = false, kernel_compiled = false;
      for (const CompileCall& c : prog_.compile_calls) {
        const bool device = c.has_cuda_sources || (hip && c.has_cpp_sources);
        compiled = compiled || device;
        kernel_compiled = kernel_compiled || !c.inline_sources ||
                          (c.has_cuda_sources && (c.cuda_strings.empty() || has_kernel(c.cuda_strings))) ||
                          (hip && c.has_cpp_sources && (c.cpp_strings.empty() || has_kernel(c.cpp_strings)));
      }
      const std::string_view arg = hip ? "cuda_sources or cpp_sources" : "cuda_sources";
      if (kernels.empty() && !compiled)
        report(Rule::missing_kernel, 0,
               fmt::format("no {} kernel: the answer must define a `__global__` kernel and compile it with "
                           "load_inline({}=...)",
                           lang_name, hip ? "cpp_sources" : "cuda_sources"));
      else if (kernels.empty())
        report(Rule::missing_kernel, 0,
               fmt::format("no `__global__` kernel in any source string; the problem asks for a {} kernel",
                           lang_name));
      else if (prog_.compile_calls.empty())
        report(Rule::missing_kernel, 0,
               fmt::format("no load_inline or load call compiles the {} source", lang_name));
      else if (!compiled || !kernel_compiled)
        report(Rule::missing_kernel, prog_.compile_calls.front().line,
               fmt::format("the load_inline call at line {} does not pass the `__global__ {}` kernel in its {}, so "
                           "it is never compiled for the device",
                           prog_.compile_calls.front().line, kernels.front().first, arg));
    } else if (lang == core::KernelLanguage::triton) {
      if (prog_.triton_kernels.empty())
        report(Rule::missing_kernel, 0, "no @triton.jit kernel; the problem asks for a Triton kernel");
    } else if (lang == core::KernelLanguage::cpp) {
      bool compiled = false, has_body = false;
      int line = 0;
      for (const CompileCall& c : prog_.compile_calls) {
        if (!c.has_cpp_sources) continue;
        compiled = true;
        line = c.line;
        for (const CSource& src : c_) {
          if (!src.from(c.cpp_strings)) continue;
          for (const CName& n : c_names(src.toks)) has_body = has_body || c_is_definition(src.toks, n.first, n.index);
        }
      }
      if (!compiled)
        report(Rule::missing_kernel, 0,
               "no load_inline(..., cpp_sources=...) call compiles a C++ kernel; the problem asks for a cpp kernel");
      else if (!has_body)
        report(Rule::missing_kernel, line,
               fmt::format("the cpp_sources compiled at line {} define no C++ function body", line));
    }

    // __global__ kernels that the host code never launches.
    if (!kernels.empty()) {
      // A kernel is used when its name appears other than right before '(' (a declaration or
      // definition): `k<<<`, `k<float><<<`, `hipLaunchKernelGGL(k, ...)`, `(void*)k`.
      std::set<std::string> used;
      for (const CSource& src : c_) {
        for (std::size_t i = 0; i < src.toks.size(); ++i) {
          if (src.toks[i].kind == CToken::Kind::ident && !(i + 1 < src.toks.size() && src.toks[i + 1].is("(")))
            used.insert(src.toks[i].text);
        }
      }
      const bool any_launched = std::any_of(kernels.begin(), kernels.end(),
                                            [&](const auto& k) { return used.count(k.first) != 0; });
      if (!any_launched)
        report(Rule::kernel_not_called, kernels.front().second,
               fmt::format("`__global__ {}` at line {} is never launched by the host code", kernels.front().first,
                           kernels.front().second));
    }

    const bool defines = !prog_.compile_calls.empty() || !prog_.triton_kernels.empty();
    if (prog_.cls < 0 || !defines || !prog_.kernel_call_lines.empty()) return;
    std::string what;
    for (const auto& n : prog_.handle_names) {
      if (!what.empty()) what += ", ";
      what += "`" + n + "`";
    }
    if (what.empty()) what = fmt::format("the extension compiled at line {}", prog_.compile_calls.empty() ? 0 : prog_.compile_calls.front().line);
    if (prog_.forward < 0) {
      const int line = py_.stmts[py_.scopes[static_cast<std::size_t>(prog_.cls)].stmt].line;
      report(Rule::kernel_not_called, line,
             fmt::format("ModelNew (line {}) has no forward that calls {}; the custom kernel never runs", line, what));
    } else {
      const int line = py_.stmts[py_.scopes[static_cast<std::size_t>(prog_.forward)].stmt].line;
      report(Rule::kernel_not_called, line,
             fmt::format("ModelNew.forward (line {}) never calls {}; the custom kernel never runs", line, what));
    }
  }

  bool comparison_context(const Ref& r) const {
    const auto& t = py_.toks;
    if (r.tok_begin > 0) {
      const auto& p = t[r.tok_begin - 1];
      if (p.is_op("==") || p.is_op("!=") || p.is_name("is") || p.is_name("not") || p.is_name("in")) return true;
    }
    if (r.tok_end < t.size() && (t[r.tok_end].is_op("==") || t[r.tok_end].is_op("!="))) return true;
    // x.dtype in (torch.float16, torch.bfloat16)
    const int d = py_.depth[r.tok_begin];
    for (std::size_t k = r.tok_begin; k-- > 0;) {
      if (py_.depth[k] < d) return py_.toks[k].kind == PyTokenKind::op && k > 0 && t[k - 1].is_name("in");
      if (t[k].kind == PyTokenKind::newline) break;
    }
    return false;
  }

  void check_python_patterns() {
    for (const Ref& r : py_.refs) {
      if (r.parts.empty()) continue;
      if (r.head_is_module || !r.alt_quals.empty()) {
        for (const PyPattern& p : kPyPatterns) {
          if (!on(p.rule)) continue;
          if (p.use == Use::call && !(r.call || r.subscript_call)) continue;
          if (p.use == Use::assign && (!r.assign || (r.parts.size() < 2 && r.via == Ref::Via::plain))) continue;
          bool hit = r.head_is_module && pattern_matches(p.pattern, r.qual);
          for (const auto& q : r.alt_quals) hit = hit || pattern_matches(p.pattern, q);
          if (!hit) continue;
          if (p.rule == Rule::precision_downgrade && (!fp32() || comparison_context(r))) continue;
          if (p.use == Use::assign)
            report(p.rule, r.line,
                   fmt::format("{} is replaced at line {}; the evaluator relies on it for timing and synchronization",
                               describe(r), r.line));
          else
            report(p.rule, r.line, fmt::format("{} at line {} {}", describe(r), r.line, why(p.rule)));
        }
      }
      if (!r.head_is_module && r.parts.size() >= 2 && r.call) {
        for (const MethodPattern& m : kMethodPatterns) {
          if (r.parts.back() != m.name) continue;
          if (m.rule == Rule::precision_downgrade && !fp32()) continue;
          report(m.rule, r.line, fmt::format("`.{}()` at line {} {}", m.name, r.line, why(m.rule)));
        }
      }
      for (std::size_t i = 1; i < r.parts.size(); ++i) {
        for (const MethodPattern& m : kPartPatterns) {
          if (r.parts[i] == m.name)
            report(m.rule, r.line, fmt::format("`{}` at line {} {}", r.text(), r.line, why(m.rule)));
        }
      }
      if (r.parts.size() == 1 && r.parts[0] == "SystemExit")
        report(Rule::process_exit, r.line, fmt::format("`SystemExit` at line {} {}", r.line, why(Rule::process_exit)));
      if (r.qual == "builtins.vars" && r.call && py_.is_op(r.tok_end + 1, ")"))
        report(Rule::namespace_introspection, r.line,
               fmt::format("`vars()` at line {} {}", r.line, why(Rule::namespace_introspection)));
    }
    for (const Ref& r : py_.refs) {  // torch.cuda.__setattr__("synchronize", f)
      if (r.head_is_module && r.call && r.parts.size() >= 2 &&
          (r.parts.back() == "__setattr__" || r.parts.back() == "__delattr__"))
        report(Rule::library_patch, r.line,
               fmt::format("`{}` at line {} patches a module the evaluator and the reference share", r.text(),
                           r.line));
    }
    for (const DynamicAttr& d : py_.dynamic_attrs) {
      if (!d.on_module) continue;
      if (d.is_set)
        report(Rule::library_patch, d.line,
               fmt::format("setattr on module `{}` with a computed name at line {} {}", d.qual, d.line,
                           why(Rule::library_patch)));
      else
        report(Rule::dynamic_code, d.line,
               fmt::format("getattr on module `{}` with a computed name at line {} hides which function runs", d.qual,
                           d.line));
    }
  }

  void check_c_patterns() {
    for (const CSource& src : c_) {
      // Type tags listed in AT_DISPATCH_* macro arguments instantiate kernels; they do not downcast.
      std::vector<bool> in_dispatch(src.toks.size(), false);
      for (std::size_t i = 0; i + 1 < src.toks.size(); ++i) {
        if (src.toks[i].kind == CToken::Kind::ident && starts_with(src.toks[i].text, "AT_DISPATCH") &&
            src.toks[i + 1].is("(")) {
          const std::size_t close = c_match(src.toks, i + 1);
          for (std::size_t j = i + 1; j < close && j < src.toks.size(); ++j) in_dispatch[j] = true;
        }
      }
      for (const CName& n : c_names(src.toks)) {
        for (const CPattern& p : kCPatterns) {
          if (!on(p.rule)) continue;
          if (p.name.find("::") != std::string_view::npos) {
            const bool std_alias = src.using_namespace_std && starts_with(p.name, "std::") && n.qualifier.empty() &&
                                   n.qual == p.name.substr(5);
            if (n.qual != p.name && !std_alias) continue;
          } else if (n.last != p.name) {
            continue;
          }
          bool ok = false;
          switch (p.use) {
            case CUse::mention: ok = true; break;
            case CUse::free_call:
              ok = !n.member && n.called &&
                   (n.qualifier.empty() || n.qualifier == "::" || n.qualifier == "std" ||
                    ends_with(n.qualifier, "filesystem"));
              if (n.last == "remove" && n.qualifier == "std") ok = false;  // the <algorithm> one
              break;
            case CUse::member_call: ok = n.member && n.called; break;
            case CUse::definition: ok = c_is_definition(src.toks, n.first, n.index); break;
          }
          if (!ok) continue;
          if (p.rule == Rule::process_exit && ends_with(n.last, "exit") && !exits_with_success(src.toks, n.index))
            continue;
          if (p.rule == Rule::precision_downgrade) {
            if (!fp32()) continue;
            const bool tag = std::find(std::begin(kDispatchTags), std::end(kDispatchTags), n.last) !=
                             std::end(kDispatchTags);
            if (tag && in_dispatch[n.index]) continue;
          }
          const std::string shown = (n.member ? "." : "") + n.qual + (n.called ? "()" : "");
          std::string_view reason = why(p.rule);
          if (p.use == CUse::definition) reason = "is redefined in the kernel source, replacing the runtime's own";
          report(p.rule, n.line, fmt::format("`{}` at line {} (in the kernel source) {}", shown, n.line, reason));
        }
      }
      if (fp32() && on(Rule::precision_downgrade)) {
        for (const CToken& t : src.toks) {
          if (t.kind != CToken::Kind::string) continue;
          if (t.text.find("tf32") != std::string::npos || t.text.find(".f16") != std::string::npos ||
              t.text.find(".bf16") != std::string::npos)
            report(Rule::precision_downgrade, t.line,
                   fmt::format("inline PTX at line {} uses f16/bf16/tf32 instructions; {}", t.line,
                               why(Rule::precision_downgrade)));
        }
      }
    }
  }

  // `exit(0)` / `exit(EXIT_SUCCESS)`: ending the process as if all went well. `exit(1)` in an
  // error-checking macro is common in honest CUDA code and ends in a failed evaluation anyway.
  static bool exits_with_success(const std::vector<CToken>& toks, std::size_t name) {
    if (name + 3 >= toks.size() || !toks[name + 1].is("(") || !toks[name + 3].is(")")) return true;
    const CToken& a = toks[name + 2];
    return a.text == "0" || a.text == "EXIT_SUCCESS";
  }

  static bool is_precision_flag(std::string_view q) {
    return q == "torch.backends.cuda.matmul.allow_tf32" || q == "torch.backends.cudnn.allow_tf32" ||
           q == "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction" ||
           q == "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction" || ends_with(q, "fp32_precision");
  }

  void check_library_patch() {
    for (const Ref& r : py_.refs) {
      if (!r.assign || r.is_import || !r.head_is_module) continue;
      if (r.parts.size() < 2 && r.via == Ref::Via::plain) continue;  // rebinding a local name only
      bool timing = false;
      for (const PyPattern& p : kPyPatterns) {
        timing = timing || (p.rule == Rule::timing_patch && pattern_matches(p.pattern, r.qual));
      }
      if (timing || is_precision_flag(r.qual)) continue;
      report(Rule::library_patch, r.line,
             fmt::format("{} is replaced at line {}; patching `{}` changes it for the evaluator and the reference too",
                         describe(r), r.line, r.qual));
    }
    for (const Ref& r : py_.refs) {
      if (!r.call || !(r.qual == "torch.library.Library" || r.qual == "torch.library.impl")) continue;
      const auto args = py_.call_args(r.tok_end);
      if (args.positional.empty()) continue;
      const auto [b, e] = args.positional[0];
      if (e != b + 1 || py_.toks[b].kind != PyTokenKind::string) continue;
      const std::string_view lib = py_.toks[b].string_body;
      if (lib == "aten" || starts_with(lib, "aten::") || lib == "prims")
        report(Rule::library_patch, r.line,
               fmt::format("`{}(\"{}\", ...)` at line {} overrides PyTorch's own operators", r.text(), lib, r.line));
    }
  }

  void check_lazy() {
    static constexpr std::string_view kTensorBases[] = {"torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase",
                                                        "torch.nn.Parameter", "torch.nn.parameter.Parameter"};
    for (std::size_t i = 0; i < py_.scopes.size(); ++i) {
      const Scope& sc = py_.scopes[i];
      const int line = py_.stmts[sc.stmt].line;
      if (sc.is_class) {
        for (const auto& b : sc.bases) {
          const std::string q = py_.resolve(b);
          if (std::find(std::begin(kTensorBases), std::end(kTensorBases), q) != std::end(kTensorBases))
            report(Rule::lazy_tensor, line,
                   fmt::format("`class {}` at line {} subclasses {}; a tensor subclass can defer or fake the "
                               "computation",
                               sc.name, line, q));
        }
      } else if (sc.name == "__torch_function__" || sc.name == "__torch_dispatch__") {
        report(Rule::lazy_tensor, line,
               fmt::format("`def {}` at line {} {}", sc.name, line, why(Rule::lazy_tensor)));
      }
    }
    for (const Ref& r : py_.refs) {
      if (r.assign && r.parts.size() >= 2 && r.parts.back() == "__class__")
        report(Rule::lazy_tensor, r.line,
               fmt::format("`{}` is reassigned at line {}; swapping an object's class {}", r.text(), r.line,
                           why(Rule::lazy_tensor)));
    }
    if (prog_.forward < 0) return;
    const Scope& fwd = py_.scopes[static_cast<std::size_t>(prog_.forward)];
    for (std::size_t st = fwd.stmt + 1; st < fwd.stmt_end; ++st) {
      const Stmt& s = py_.stmts[st];
      if (s.owner != prog_.forward) continue;
      for (std::size_t k = s.begin; k < s.end; ++k) {
        if (py_.is_name(k, "yield"))
          report(Rule::lazy_tensor, s.line,
                 fmt::format("`yield` at line {} makes forward a generator that computes lazily", s.line));
      }
      if (py_.is_name(s.begin, "return") && py_.is_name(s.begin + 1, "lambda"))
        report(Rule::lazy_tensor, s.line,
               fmt::format("forward returns a lambda at line {} instead of a computed tensor", s.line));
    }
  }

  void check_reference_globals() {
    if (ref_.known && on(Rule::reference_global_shadow)) {
      auto differs = [&](const std::string& name, const std::string& text) {
        auto it = ref_.definitions.find(name);
        if (it == ref_.definitions.end()) return false;
        return std::find(it->second.begin(), it->second.end(), text) == it->second.end();
      };
      for (const Scope& sc : py_.scopes) {
        // Rewriting the reference's helper classes and functions with kernels is the job; only
        // the input builders must stay the reference's.
        if (sc.parent != -1 || (sc.name != "get_inputs" && sc.name != "get_init_inputs")) continue;
        if (differs(sc.name, scope_text(py_, sc))) {
          const int line = py_.stmts[sc.stmt].line;
          report(Rule::reference_global_shadow, line,
                 fmt::format("`{}` at line {} defines the reference's `{}` differently; the evaluator uses the "
                             "reference's definitions, so drop it",
                             sc.name, line, sc.name));
        }
      }
      for (const Stmt& s : py_.stmts) {
        if (s.owner != -1) continue;
        const std::string_view w = py_.first_word(s);
        if (w == "import" || w == "from" || w == "def" || w == "class" || w == "@") continue;
        for (const auto& n : py_.assigned_names(s)) {
          if (ref_.names.count(n) && differs(n, py_.normalized(s.begin, s.end)))
            report(Rule::reference_global_shadow, s.line,
                   fmt::format("`{}` at line {} gives the reference global `{}` a different value; the evaluator "
                               "uses the reference's inputs and shapes",
                               py_.normalized(s.begin, s.end), s.line, n));
        }
      }
    }
    for (const Stmt& s : py_.stmts) {
      const std::string_view w = py_.first_word(s);
      if (w != "global" && w != "nonlocal") continue;
      for (std::size_t k = s.begin + 1; k < s.end; ++k) {
        const std::string n(py_.toks[k].text);
        if (py_.toks[k].kind == PyTokenKind::name && ref_.names.count(n))
          report(Rule::reference_global_rebind, s.line,
                 fmt::format("`global {}` at line {} rebinds a name the reference defines", n, s.line));
      }
    }
    for (const Ref& r : py_.refs) {
      if (!r.assign || r.is_import || r.parts.size() < 2 || r.head_is_module) continue;
      if (ref_.names.count(r.parts[0]) && py_.top_scope(r.parts[0]) < 0)
        report(Rule::reference_global_rebind, r.line,
               fmt::format("`{}` is assigned at line {}, modifying the reference's `{}`", r.text(), r.line,
                           r.parts[0]));
    }
  }

  void check_precision() {
    if (!fp32() || !on(Rule::precision_downgrade)) return;
    for (const Ref& r : py_.refs) {
      if (r.assign && r.head_is_module && is_precision_flag(r.qual)) {
        const std::size_t v = r.tok_end + 1;
        const bool lowers = ends_with(r.qual, "fp32_precision")
                                ? (v < py_.toks.size() && py_.toks[v].kind == PyTokenKind::string &&
                                   py_.toks[v].string_body != "ieee")
                                : py_.is_name(v, "True");
        if (lowers)
          report(Rule::precision_downgrade, r.line,
                 fmt::format("`{}` is enabled at line {}; it {}", r.text(), r.line, why(Rule::precision_downgrade)));
      }
      if (r.call && r.qual == "torch.set_float32_matmul_precision") {
        const auto args = py_.call_args(r.tok_end);
        if (!args.positional.empty()) {
          const auto [b, e] = args.positional[0];
          if (e == b + 1 && py_.toks[b].kind == PyTokenKind::string && py_.toks[b].string_body != "highest")
            report(Rule::precision_downgrade, r.line,
                   fmt::format("`set_float32_matmul_precision(\"{}\")` at line {} allows TF32/bf16 matmuls; it {}",
                               py_.toks[b].string_body, r.line, why(Rule::precision_downgrade)));
        }
      }
    }
    for (std::size_t k = 0; k + 2 < py_.toks.size(); ++k) {
      if (py_.depth[k] == 0 || !py_.is_op(k + 1, "=")) continue;
      const auto& v = py_.toks[k + 2];
      if ((py_.is_name(k, "allow_tf32") && v.is_name("True")) ||
          (py_.is_name(k, "input_precision") && v.kind == PyTokenKind::string && v.string_body == "tf32"))
        report(Rule::precision_downgrade, py_.toks[k].line,
               fmt::format("`{}={}` at line {} requests TF32 dot products; it {}", py_.toks[k].text, v.text,
                           py_.toks[k].line, why(Rule::precision_downgrade)));
    }
  }

  void check_files_and_env() {
    for (const Ref& r : py_.refs) {
      if (!r.call || !(r.qual == "builtins.open" || r.qual == "io.open" || r.qual == "codecs.open")) continue;
      const auto args = py_.call_args(r.tok_end);
      auto arg = [&](std::string_view kw, std::size_t pos) -> Range {
        if (auto it = args.keyword.find(kw); it != args.keyword.end()) return it->second;
        if (pos < args.positional.size()) return args.positional[pos];
        return {0, 0};
      };
      const Range path = arg("file", 0);
      const Range mode = arg("mode", 1);
      const bool path_lit = path.second == path.first + 1 && py_.toks[path.first].kind == PyTokenKind::string &&
                            py_.toks[path.first].string_prefix.find_first_of("fF") == std::string_view::npos;
      const bool mode_lit = mode.second == mode.first + 1 && py_.toks[mode.first].kind == PyTokenKind::string;
      const bool writes = mode.first < mode.second &&
                          (!mode_lit || py_.toks[mode.first].string_body.find_first_of("wax+") != std::string_view::npos);
      if (path_lit) {
        const std::string_view p = py_.toks[path.first].string_body;
        if (starts_with(p, "/") || starts_with(p, "~") || p.find("..") != std::string_view::npos)
          report(Rule::filesystem_access, r.line,
                 fmt::format("`open(\"{}\")` at line {} reaches outside the build directory", p, r.line));
      } else if (writes) {
        report(Rule::filesystem_access, r.line,
               fmt::format("`open(...)` at line {} writes to a computed path; write only to relative paths in the "
                           "build directory",
                           r.line));
      }
    }
    static constexpr std::string_view kLoaderVars[] = {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH",
                                                       "PYTHONHOME", "PYTHONSTARTUP"};
    static constexpr std::string_view kDeviceVars[] = {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                                       "ROCR_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"};
    for (const Ref& r : py_.refs) {
      if (!r.head_is_module || (!starts_with(r.qual, "os.environ") && r.qual != "os.putenv")) continue;
      const Stmt& s = py_.stmts[py_.stmt_of[r.tok_begin]];
      bool writes = r.qual == "os.putenv" || ends_with(r.qual, ".update") || ends_with(r.qual, ".setdefault");
      for (std::size_t k = s.begin; k < s.end && !writes; ++k) {
        writes = py_.depth[k] == py_.depth[s.begin] && (py_.is_op(k, "=") || py_.is_name(k, "del"));
      }
      if (!writes) continue;
      for (std::size_t k = s.begin; k < s.end; ++k) {
        if (py_.toks[k].kind != PyTokenKind::string) continue;
        const std::string_view key = py_.toks[k].string_body;
        if (std::find(std::begin(kLoaderVars), std::end(kLoaderVars), key) != std::end(kLoaderVars))
          report(Rule::native_code_load, s.line,
                 fmt::format("setting `{}` at line {} changes which native code or modules get loaded", key, s.line));
        if (std::find(std::begin(kDeviceVars), std::end(kDeviceVars), key) != std::end(kDeviceVars))
          report(Rule::library_patch, s.line,
                 fmt::format("setting `{}` at line {} changes the devices the evaluator sees", key, s.line));
      }
    }
  }
};

}  // namespace

std::vector<core::StaticFinding> run_rules(std::string_view candidate, const StaticCheckConfig& config,
                                           const std::array<core::Severity, kRuleCount>& severity) {
  Checker checker(candidate, config, severity);
  return checker.run();
}

}  // namespace kbrl::check::detail
