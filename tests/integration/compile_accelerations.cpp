// The compile accelerations (docs/evaluator.md, "Compile speed") change how long a build takes
// and nothing else: bundled solutions (one of each verdict kind) get the same result, field for
// field (timings and metadata aside), with and without them; accelerated and plain builds never
// share a build directory; what the compile stage built is up to date for the run stage (also
// where nvcc's passes ran side by side); and a CUDA source that needs more than the light headers
// is built again, in the end with torch's full headers.
//
// Registered as CTest tests of their own with a long timeout (tests/integration/CMakeLists.txt):
// every candidate is built for real, twice. The CUDA case needs nvcc, not a GPU (without one
// the run stage fails the same way for both builds).
#include <kbrl/core/json.hpp>
#include <kbrl/core/types.hpp>
#include <kbrl/dataset/load.hpp>
#include <kbrl/eval/local_evaluator.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"

namespace fs = std::filesystem;
using namespace kbrl;

namespace {

const fs::path kSolutions = fs::path(KBRL_SOURCE_DIR) / "examples" / "solutions";
const fs::path kProblems = fs::path(KBRL_SOURCE_DIR) / "examples" / "problems";
const std::regex kCandidateName(R"(level_1_problem_(\d+)_sample_(\d+)_kernel\.py)");

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The result without what may differ between two evaluations of the same build: timings and
// metadata (the log's path, what the accelerations did).
core::EvalResult comparable(core::EvalResult r) {
  r.stage_seconds.clear();
  r.metadata.clear();
  r.runtime.reset();
  r.ref_runtime.reset();
  r.speedup.reset();
  return r;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

// Runs a shell command and returns its exit status and output.
std::pair<int, std::string> shell(const std::string& command, const fs::path& output) {
  const int status = std::system((command + " > '" + output.string() + "' 2>&1").c_str());
  return {status, read_text(output)};
}

// Every extension built under `work_dir`: ninja must have nothing left to do there (the run
// stage's load_inline runs the same ninja), and no object may be newer than the compile record
// (nothing was rebuilt by a run stage that already happened).
void check_builds_up_to_date(const fs::path& work_dir, const fs::path& scratch) {
  int extensions = 0;
  for (const auto& build : fs::directory_iterator(work_dir / "builds")) {
    const fs::path record = build.path() / "compile.json";
    if (!fs::exists(record) || read_text(record).find(R"("status":"ok")") == std::string::npos) continue;
    for (const auto& entry : fs::recursive_directory_iterator(build.path())) {
      if (entry.path().filename() == "build.ninja") {
        ++extensions;
        const auto [status, out] =
            shell(fmt::format("ninja -C '{}' -n", entry.path().parent_path().string()), scratch / "ninja-n.log");
        INFO(entry.path().string() << "\n" << out);
        CHECK(status == 0);
        CHECK(out.find("no work to do") != std::string::npos);
      }
      const std::string name = entry.path().filename().string();
      if (name.size() > 2 && (name.ends_with(".o") || name.ends_with(".so"))) {
        INFO(entry.path().string() << " is newer than " << record.string());
        CHECK(fs::last_write_time(entry.path()) <= fs::last_write_time(record));
      }
    }
  }
  CHECK(extensions > 0);
}

eval::LocalEvaluatorConfig config_for(const fs::path& scratch, core::DevicePlatform platform, bool pch, bool light) {
  eval::LocalEvaluatorConfig c;
  c.platform = platform;
  c.work_dir = scratch / "work";              // shared: the build key alone keeps the builds apart
  c.compile_cache_dir = scratch / "cache";    // fresh: the PCH is built here, then used
  c.compile_workers = 2;
  c.limits.address_space_bytes = 16ull << 30;
  c.compile_pch = pch;
  c.compile_light_headers = light;
  return c;
}

void show(const std::string& label, const std::vector<core::EvalResult>& results) {
  std::cout << label << "\n";
  for (const auto& r : results) {
    std::string notes;
    for (const auto& [k, v] : r.metadata)
      if (k.starts_with("compile_")) notes += fmt::format(" {}={}", k, v);
    std::cout << fmt::format("  {:36} {:14} compile {:6.1f} s{}\n", r.request_id, core::to_string(r.error_category),
                             r.stage_seconds.count("compile") ? r.stage_seconds.at("compile") : 0.0, notes);
  }
}

bool has_nvcc() {
  const char* home = std::getenv("CUDA_HOME");
  for (const fs::path& p : {home != nullptr ? fs::path(home) / "bin" / "nvcc" : fs::path(), fs::path("/usr/local/cuda/bin/nvcc")})
    if (!p.empty() && fs::exists(p)) return true;
  return std::system("command -v nvcc > /dev/null 2>&1") == 0;
}

}  // namespace

TEST_CASE("the bundled solutions get the same results with and without the precompiled header") {
  const fs::path scratch = fs::path(KBRL_TEST_TMP) / "compile_accelerations_cpu";
  fs::remove_all(scratch);
  fs::create_directories(scratch);

  std::map<int, core::Problem> problems;
  for (auto& p : dataset::load_problems(kProblems)) problems[p.number] = p;
  std::vector<core::EvalRequest> requests;
  for (const auto& entry : fs::directory_iterator(kSolutions)) {
    const std::string name = entry.path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, kCandidateName)) continue;
    core::EvalRequest r;
    r.request_id = entry.path().stem().string();
    r.problem = problems.at(std::stoi(m[1]));
    r.candidate_source = read_text(entry.path());
    r.language = core::KernelLanguage::cpp;
    r.options.seed = 20240611;           // the same inputs for both evaluations
    r.options.measure_performance = false;  // timings are not compared
    r.options.compile_timeout_s = 900;
    requests.push_back(std::move(r));
  }
  std::sort(requests.begin(), requests.end(), [](const auto& a, const auto& b) { return a.request_id < b.request_id; });
  // One solution of each verdict kind (a plain build parses torch's headers from scratch, 20 to
  // 80 s a candidate on two cores): correct; wrong values, a wrong second output and NaN; a
  // runtime error; a reward hack; a compile error; two the static checker stops before any
  // build. The accelerated results of every bundled solution are pinned by
  // integration:kbrl_eval_solutions.
  const std::set<std::string> chosen = {
      "level_1_problem_3_sample_0_kernel",  "level_1_problem_8_sample_1_kernel",
      "level_1_problem_10_sample_1_kernel", "level_1_problem_4_sample_1_kernel",
      "level_1_problem_12_sample_1_kernel", "level_1_problem_1_sample_1_kernel",
      "level_1_problem_6_sample_1_kernel",  "level_1_problem_14_sample_1_kernel",
      "level_1_problem_15_sample_1_kernel"};
  std::erase_if(requests, [&](const core::EvalRequest& r) { return !chosen.contains(r.request_id); });
  REQUIRE(requests.size() == chosen.size());

  std::vector<core::EvalResult> plain, fast;
  eval::LocalEvaluator::Stats plain_stats, fast_stats;
  {
    eval::LocalEvaluator ev(config_for(scratch, core::DevicePlatform::cpu, false, false));
    plain = ev.evaluate(requests);
    plain_stats = ev.stats();
  }
  {
    // In two rounds, the last two solutions (6_1 and 8_1, whose leading headers and flags 10_1,
    // 3_0 and 4_1 have too) once the first round is over: the first of those three marks the
    // PCH seen and the next builds it, so the second round uses it whichever lane took what.
    // In one burst a lane keeps building while the other builds the PCH, and whether a later
    // build starts before or after it is done depends on timing.
    eval::LocalEvaluator ev(config_for(scratch, core::DevicePlatform::cpu, true, true));
    const std::vector<core::EvalRequest> first(requests.begin(), requests.end() - 2);
    const std::vector<core::EvalRequest> second(requests.end() - 2, requests.end());
    REQUIRE(second.front().request_id == "level_1_problem_6_sample_1_kernel");
    REQUIRE(second.back().request_id == "level_1_problem_8_sample_1_kernel");
    fast = ev.evaluate(first);
    for (auto& r : ev.evaluate(second)) fast.push_back(std::move(r));
    fast_stats = ev.stats();
  }
  show("without accelerations:", plain);
  show("with them:", fast);
  REQUIRE(plain.size() == fast.size());

  // Same work directory, same sources: had the build key ignored the settings, the second
  // evaluator would have found every build of the first.
  CHECK(plain_stats.compiles >= 7);
  CHECK(fast_stats.compiles == plain_stats.compiles);
  CHECK(fast_stats.compile_cache_hits == plain_stats.compile_cache_hits);

  int built = 0, used = 0, compiled = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    INFO(plain[i].request_id << "\nplain: " << core::to_json(plain[i]) << "\nfast:  " << core::to_json(fast[i]));
    CHECK(comparable(plain[i]) == comparable(fast[i]));
    CHECK(plain[i].metadata.count("compile_pch") == 0);
    CHECK(fast[i].metadata.count("compile_light_headers") == 0);  // C++ sources only
    if (!fast[i].compiled && fast[i].error_category != core::ErrorCategory::compile) continue;
    ++compiled;
    REQUIRE(fast[i].metadata.count("compile_pch") == 1);
    for (const auto& event : split(fast[i].metadata.at("compile_pch"), ',')) {
      INFO(event);
      CHECK((event == "built" || event == "used" || event == "busy" || event == "deferred"));
      built += event == "built";
      used += event == "used";
    }
  }
  CHECK(compiled >= 7);
  CHECK(built >= 1);  // one per flag set, checked by g++ itself before it is used
  CHECK(used >= 1);
  check_builds_up_to_date(scratch / "work", scratch);
  fs::remove_all(scratch / "cache");  // its precompiled headers: several hundred MB; the work logs stay
}

TEST_CASE("a CUDA source that needs more than the light headers is built again with the full ones") {
  if (!has_nvcc()) KBRL_SKIP("no nvcc");
  const fs::path scratch = fs::path(KBRL_TEST_TMP) / "compile_accelerations_cuda";
  fs::remove_all(scratch);
  fs::create_directories(scratch);

  core::Problem problem;
  problem.id = "test/ReLU";
  problem.name = "ReLU";
  problem.content_hash = "relu-light-headers";
  problem.source = R"(import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(64, 1024)]

def get_init_inputs():
    return []
)";
  // One kernel; the host code around it varies in what it needs from torch.
  const auto candidate = [](const std::string& name, const std::string& helpers, const std::string& host_extra) {
    return fmt::format(R"(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {{
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}}
{}
torch::Tensor relu_forward(torch::Tensor x) {{
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA tensor expected");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  {}
  if (n > 0)
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}}
"""

ext = load_inline(name="{}", cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)
)",
                       helpers, host_extra, name);
  };
  struct Case {
    std::string id;
    std::string helpers;
    std::string host_extra;
    std::string light_headers;    // what the accelerated build must report
    std::string parallel_passes;  // one event per light tier tried
    std::string cuda_pch;         // the host pass's PCH, where the passes built the object
    // The binding file's light headers, minimal tier only (a regular expression: a tier whose
    // passes fail stops its binding file when it is still compiling).
    std::string light_binding;
  };
  const std::vector<Case> cases = {
      // The first source with these includes compiles its host pass plainly and marks them seen.
      {"light", "", "", "minimal", "used", "deferred", "minimal"},
      // A free function of an operator that is not a factory: not in the minimal set.
      {"operator", "", "TORCH_CHECK(at::flatten(xc).numel() == n, \"flatten\");", "types", "failed,used",
       "deferred", "minimal|stopped"},
      // pybind11 comes only with torch/extension.h (torch/python.h).
      {"pybind11", "", "py::gil_scoped_release no_gil;", "fallback", "failed,failed", "",
       "minimal|stopped"},
      // A real compile error: the verdict and the message are the plain build's. No header beyond
      // the minimal tier mentions the name that is not found: straight to the full headers.
      {"broken", "", "undefined_function_of_the_candidate(xc);", "fallback", "failed", "", "minimal|stopped"},
      // An error no declaration can mend (too many arguments): likewise.
      {"mismatch", "", "(void)xc.numel(1);", "fallback", "failed", "", "minimal|stopped"},
      // The candidate's own relu(const Tensor&) next to at::relu: with the full headers the call
      // is ambiguous (a compile error); the minimal headers, which lack at::relu, would accept
      // it. Such a source skips the minimal tier, and the result is the plain build's.
      {"clash", "torch::Tensor relu(const torch::Tensor& t) { return t; }", "(void)relu(xc);", "fallback", "failed",
       "", ""},
      // Another source with the first one's includes, built long after it: the PCH of their
      // expanded headers is built, then this host pass reads it.
      {"light_again", "", "TORCH_CHECK(n >= 0, \"size\");", "minimal", "used", "built,used", "minimal"},
  };
  std::vector<core::EvalRequest> requests;
  for (const auto& c : cases) {
    core::EvalRequest r;
    r.request_id = c.id;
    r.problem = problem;
    r.candidate_source = candidate("relu_" + c.id, c.helpers, c.host_extra);
    r.language = core::KernelLanguage::cuda;
    r.options.seed = 7;
    r.options.measure_performance = false;
    r.options.compile_timeout_s = 1200;
    requests.push_back(std::move(r));
  }
  const auto cuda_config = [&](bool light) {
    auto c = config_for(scratch, core::DevicePlatform::cuda, true, light);
    c.cuda_arch = "9.0";                        // no GPU needed to build
    c.sandbox = eval::SandboxMode::off;         // GPU device nodes may not exist here
    c.static_checks = false;                    // the host-side extras are not what is tested
    return c;
  };
  std::vector<core::EvalResult> plain, fast;
  {
    eval::LocalEvaluator ev(cuda_config(false));
    plain = ev.evaluate(requests);
  }
  {
    eval::LocalEvaluator ev(cuda_config(true));
    fast = ev.evaluate(requests);
  }
  show("full headers:", plain);
  show("light headers first:", fast);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].id << "\nplain: " << core::to_json(plain[i]) << "\nfast:  " << core::to_json(fast[i]));
    CHECK(comparable(plain[i]) == comparable(fast[i]));
    CHECK(plain[i].metadata.count("compile_light_headers") == 0);
    REQUIRE(fast[i].metadata.count("compile_light_headers") == 1);
    CHECK(fast[i].metadata.at("compile_light_headers") == cases[i].light_headers);
    CHECK(plain[i].metadata.count("compile_parallel_passes") == 0);
    CHECK(fast[i].metadata["compile_parallel_passes"] == cases[i].parallel_passes);
    CHECK(fast[i].metadata["compile_cuda_pch"] == cases[i].cuda_pch);
    CHECK(plain[i].metadata.count("compile_light_binding") == 0);
    CHECK(std::regex_match(fast[i].metadata["compile_light_binding"], std::regex(cases[i].light_binding)));
    CHECK(fast[i].metadata["compile_light_skipped"] == (cases[i].id == "broken" || cases[i].id == "mismatch" ? "types" : ""));
    if (cases[i].id == "broken" || cases[i].id == "mismatch" || cases[i].id == "clash") {
      CHECK_FALSE(fast[i].compiled);
      CHECK(fast[i].error_category == core::ErrorCategory::compile);
      const char* named = cases[i].id == "broken" ? "undefined_function_of_the_candidate"
                          : cases[i].id == "mismatch" ? "too many arguments"
                                                      : "relu";
      CHECK(fast[i].error_message.find(named) != std::string::npos);
      // The light attempts' own errors are not part of it.
      CHECK(fast[i].error_message.find("/light/") == std::string::npos);
    } else {
      CHECK(fast[i].compiled);
    }
  }
  check_builds_up_to_date(scratch / "work", scratch);
  fs::remove_all(scratch / "cache");  // its precompiled headers: several hundred MB; the work logs stay
}
