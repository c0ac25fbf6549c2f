// LocalEvaluator on the CUDA backend: our own CUDA kernels for KernelBench level-1 problems
// (KBRL_KERNELBENCH_ROOT must point at a KernelBench checkout), GPU-specific reward hacks, and
// recovery after an illegal memory access. KBRL_GPU_RESULTS (a directory) receives the results.
#include <kbrl/core/json.hpp>
#include <kbrl/dataset/load.hpp>
#include <kbrl/eval/local_evaluator.hpp>
#include <kbrl/reward/reward.hpp>

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <sstream>

#include "catch.hpp"

using namespace kbrl;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

core::Problem problem_from(const fs::path& path, const std::string& id) {
  core::Problem p = dataset::load_problem_file(path);
  p.id = id;
  return p;
}

eval::LocalEvaluatorConfig cuda_config(const std::string& name) {
  eval::LocalEvaluatorConfig c;
  c.platform = core::DevicePlatform::cuda;
  c.devices = {0};
  c.work_dir = fs::path(KBRL_TEST_TMP) / ("cuda-" + name);
  return c;
}

void save(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("KBRL_GPU_RESULTS");
  if (dir == nullptr) return;
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / name) << text;
}

}  // namespace

TEST_CASE("our CUDA kernels for KernelBench level-1 problems are correct with sensible speedups") {
  const char* root = std::getenv("KBRL_KERNELBENCH_ROOT");
  if (root == nullptr) KBRL_SKIP("KBRL_KERNELBENCH_ROOT is not set");
  const fs::path dir = fs::path(KBRL_SOURCE_DIR) / "tests/gpu/kernelbench_l1";
  const auto manifest = core::parse_json(read_text(dir / "manifest.json")).as_array();
  std::vector<core::EvalRequest> requests;
  // Entries with "expect": "correctness" are kernels that are right on the problem's own inputs
  // only; the input families must reject them.
  std::vector<std::string> expected;
  for (const auto& entry : manifest) {
    const auto& o = entry.as_object();
    const std::string problem = std::string(o.at("problem").as_string());
    expected.emplace_back(o.contains("expect") ? o.at("expect").as_string().c_str() : "correct");
    core::EvalRequest r;
    r.request_id = std::string(o.at("candidate").as_string());
    r.problem = problem_from(fs::path(root) / "KernelBench" / problem, problem);
    r.candidate_source = read_text(dir / std::string(o.at("candidate").as_string()));
    r.language = core::KernelLanguage::cuda;
    requests.push_back(std::move(r));
  }
  eval::LocalEvaluator ev(cuda_config("kernelbench"));
  std::vector<std::future<core::EvalResult>> futures;
  for (auto& r : requests) futures.push_back(ev.submit(r));
  // Rows are written as results arrive, so a run cut short still leaves what it measured.
  std::string table =
      "| problem | correct | families tried/failed | speedup | runtime ms | reference ms | compile s | "
      "reference s | correctness s | timing s |\n|---|---|---|---|---|---|---|---|---|---|\n";
  save("kernelbench_l1.md", table);
  auto stage = [](const core::EvalResult& r, const char* k) {
    return r.stage_seconds.count(k) ? fmt::format("{:.1f}", r.stage_seconds.at(k)) : std::string("-");
  };
  std::vector<core::EvalResult> results;
  std::vector<std::string> expectations;
  json::array all;
  std::vector<bool> taken(futures.size(), false);
  while (results.size() < futures.size()) {
    for (std::size_t i = 0; i < futures.size(); ++i) {
      if (taken[i] || futures[i].wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) continue;
      taken[i] = true;
      const auto r = futures[i].get();
      const std::string row = fmt::format(
          "| {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} |\n", r.request_id,
          r.correct ? "yes" : std::string(core::to_string(r.error_category)), r.input_families.tried.size(),
          r.input_families.failed.size(), r.speedup ? fmt::format("{:.2f}", *r.speedup) : "-",
          r.runtime ? fmt::format("{:.4f}", r.runtime->mean_ms) : "-",
          r.ref_runtime ? fmt::format("{:.4f}", r.ref_runtime->mean_ms) : "-", stage(r, "compile"),
          stage(r, "reference"), stage(r, "correctness"), stage(r, "timing"));
      table += row;
      std::cout << row << std::flush;
      save("kernelbench_l1.md", table);
      all.push_back(json::value_from(r));
      save("kernelbench_l1.json", json::serialize(all));
      results.push_back(r);
      expectations.push_back(expected[i]);
    }
  }
  int correct = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    INFO(r.request_id << ": " << core::to_string(r.error_category) << ": " << r.error_message);
    if (expectations[i] == "correctness") {
      CHECK_FALSE(r.correct);
      CHECK(r.correct_on_problem_inputs);
      CHECK_FALSE(r.input_families.failed.empty());
      continue;
    }
    CHECK(r.correct);
    correct += r.correct ? 1 : 0;
    if (r.speedup) {
      CHECK(*r.speedup > 0.02);  // not absurd either way: a timing bug shows up as 1e-3 or 1e3
      CHECK(*r.speedup < 50.0);
    }
  }
  CHECK(correct >= 10);
}

TEST_CASE("a kept cuDNN convolution with a fused CUDA epilogue is correct with a speed reward under kernelbench and "
          "fusion, zero under strict") {
  // KernelBench level2/1_Conv2D_ReLU_BiasAdd answered the way KernelBench counts as legitimate on
  // level 2: nn.Conv2d kept, ReLU and the bias add fused into one CUDA pass.
  const char* root = std::getenv("KBRL_KERNELBENCH_ROOT");
  if (root == nullptr) KBRL_SKIP("KBRL_KERNELBENCH_ROOT is not set");
  const std::string problem = "level2/1_Conv2D_ReLU_BiasAdd.py";
  const fs::path problem_path = fs::path(root) / "KernelBench" / problem;
  if (!fs::exists(problem_path)) KBRL_SKIP(problem_path.string() + " is missing (a checkout with level 2 is needed)");
  core::EvalRequest request;
  request.problem = problem_from(problem_path, problem);
  request.candidate_source = read_text(fs::path(KBRL_SOURCE_DIR) / "tests/gpu/kernelbench_l2/1_Conv2D_ReLU_BiasAdd.py");
  request.language = core::KernelLanguage::cuda;
  core::Completion completion;
  completion.text = "<KERNEL>\n" + request.candidate_source + "</KERNEL>";
  completion.kernel = request.candidate_source;
  completion.has_kernel_block = true;
  completion.format_ok = true;
  std::string table = "| policy | verdict | speedup | runtime ms | reference ms | kbrl_stage3 reward | stage3 (kernel_rl) reward |\n"
                      "|---|---|---|---|---|---|---|\n";
  json::array all;
  auto c = cuda_config("level2-fusion");
  c.static_checks = true;
  for (const std::string policy : {"strict", "kernelbench", "fusion"}) {
    INFO("policy " << policy);
    c.static_check_policy = policy;
    eval::LocalEvaluator ev(c);
    request.request_id = "l2_1_fused_epilogue_" + policy;
    const auto r = ev.evaluate({request}).at(0);
    INFO(r.error_message);
    const auto ours = reward::compute_reward(r, completion, reward::RewardConfig::preset("kbrl_stage3"));
    const auto seeds = reward::compute_reward(r, completion, reward::RewardConfig::preset("stage3"));
    table += fmt::format("| {} | {} | {} | {} | {} | {:.4f} | {:.4f} |\n", policy,
                         r.correct ? std::string("correct") : std::string(core::to_string(r.error_category)),
                         r.speedup ? fmt::format("{:.3f}", *r.speedup) : "-",
                         r.runtime ? fmt::format("{:.4f}", r.runtime->mean_ms) : "-",
                         r.ref_runtime ? fmt::format("{:.4f}", r.ref_runtime->mean_ms) : "-", ours.total, seeds.total);
    all.push_back(json::value_from(r));
    CHECK(r.metadata.at("static_check_policy") == policy);
    if (policy == "strict") {
      CHECK(r.error_category == core::ErrorCategory::static_check);
      CHECK(ours.total == 0.0);
      // kernel_rl's presets charge a rejected candidate its cheating penalty (-1 on the compile
      // term) and still pay its format and length terms: below zero, as there.
      CHECK(seeds.total < 0.0);
      continue;
    }
    CHECK(r.correct);
    REQUIRE(r.speedup.has_value());
    CHECK(*r.speedup > 0.5);  // the convolution dominates both programs
    CHECK(ours.values.count("speed") == 1);
    CHECK(ours.total > 0.0);
    CHECK(seeds.total > 0.0);
  }
  std::cout << table;
  save("level2_fusion.md", table);
  save("level2_fusion.json", json::serialize(all));
}

TEST_CASE("GPU reward hacks are caught and the GPU recovers after an illegal memory access") {
  const fs::path dir = fs::path(KBRL_SOURCE_DIR) / "tests/gpu/hacks";
  const auto manifest = core::parse_json(read_text(dir / "manifest.json")).as_array();
  eval::LocalEvaluator ev(cuda_config("hacks"));
  std::vector<core::EvalRequest> requests;
  std::vector<std::vector<std::string>> expected;
  for (const auto& entry : manifest) {
    const auto& o = entry.as_object();
    const std::string problem = std::string(o.at("problem").as_string());
    std::vector<std::string> expect;
    if (o.at("expect").is_string())
      expect.emplace_back(o.at("expect").as_string());
    else
      for (const auto& e : o.at("expect").as_array()) expect.emplace_back(e.as_string());
    expected.push_back(expect);
    core::EvalRequest r;
    r.request_id = std::string(o.at("candidate").as_string());
    r.problem = problem_from(fs::path(KBRL_SOURCE_DIR) / problem, problem);
    r.candidate_source = read_text(dir / r.request_id);
    r.language = core::KernelLanguage::cuda;
    r.options.timing_trials = 20;
    requests.push_back(std::move(r));
  }
  // All at once, so the builds run in parallel.
  const auto results = ev.evaluate(requests);
  std::string table = "| candidate | problem | expected | got | message |\n|---|---|---|---|---|\n";
  auto row = [&](const core::EvalRequest& r, const std::vector<std::string>& expect, const core::EvalResult& result) {
    const std::string got(core::to_string(result.error_category));
    table += fmt::format("| {} | {} | {} | {} | {} |\n", r.request_id, r.problem.id, fmt::join(expect, " or "), got,
                         result.error_message.substr(0, std::min<std::size_t>(100, result.error_message.find('\n'))));
    INFO(r.request_id << ": got " << got << ": " << result.error_message);
    CHECK(std::find(expect.begin(), expect.end(), got) != expect.end());
  };
  for (std::size_t i = 0; i < requests.size(); ++i) row(requests[i], expected[i], results[i]);
  // Then, one after the other on the same GPU (the builds are cached by now): the candidate that
  // faults, and right after it an honest one, which must find the device healthy.
  auto find = [&](const std::string& name) {
    const auto it = std::find_if(requests.begin(), requests.end(), [&](const auto& r) { return r.request_id == name; });
    REQUIRE(it != requests.end());
    return static_cast<std::size_t>(it - requests.begin());
  };
  for (const std::size_t i : {find("illegal_memory_access.py"), find("gelu_tanh_honest.py")})
    row(requests[i], expected[i], ev.evaluate({requests[i]})[0]);
  std::cout << table;
  save("hacks.md", table);
}

TEST_CASE("with the static checker off, work left on a side stream is still timed") {
  // The two side-stream hacks launch the honest candidate's kernel on a stream of their own and
  // return without the current stream waiting for it. The static checker rejects them; here it is
  // off, so the timing's device-wide guard has to charge what they leave behind. It resolves
  // tens of microseconds: on the example problem (a kernel of a few) the table only records what
  // happens; at 8192 x 4096 (about 0.14 ms) the hacks must be charged in nearly every run and
  // timed no faster than the honest kernel.
  const fs::path dir = fs::path(KBRL_SOURCE_DIR) / "tests/gpu/hacks";
  auto config = cuda_config("side-streams");
  config.static_checks = false;
  eval::LocalEvaluator ev(config);
  const std::vector<std::string> problems = {"examples/problems/1_ScaledResidualAdd.py",
                                             "tests/gpu/hacks/problem_large_scaled_residual_add.py"};
  const std::vector<std::string> candidates = {"scaled_residual_add_honest.py", "side_stream_torch.py",
                                               "side_stream_cuda.py"};
  std::vector<core::EvalRequest> requests;
  for (const auto& problem : problems)
    for (const auto& name : candidates) {
      core::EvalRequest r;
      r.request_id = name;
      r.problem = problem_from(fs::path(KBRL_SOURCE_DIR) / problem, problem);
      r.candidate_source = read_text(dir / name);
      r.language = core::KernelLanguage::cuda;
      requests.push_back(std::move(r));
    }
  const auto results = ev.evaluate(requests);
  std::string table =
      "| problem | candidate | verdict | runtime ms (mean) | reference ms | runs charged for other streams |\n"
      "|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& res = results[i];
    const auto it = res.metadata.find("timing_outside_stream_runs");
    table += fmt::format("| {} | {} | {} | {} | {} | {} |\n", requests[i].problem.id, requests[i].request_id,
                         core::to_string(res.error_category),
                         res.runtime ? fmt::format("{:.4f}", res.runtime->mean_ms) : "-",
                         res.ref_runtime ? fmt::format("{:.4f}", res.ref_runtime->mean_ms) : "-",
                         it == res.metadata.end() ? "none" : it->second);
  }
  std::cout << table;
  save("side_streams.md", table);
  for (const auto& res : results) {
    INFO(res.request_id << ": " << res.error_message);
    REQUIRE(res.correct);
    REQUIRE(res.runtime);
  }
  const std::size_t large = candidates.size();  // the honest candidate on the large problem
  for (std::size_t i = large + 1; i < results.size(); ++i) {
    const auto& hack = results[i];
    INFO(hack.request_id);
    REQUIRE(hack.metadata.count("timing_outside_stream_runs") == 1);
    const std::string charged = hack.metadata.at("timing_outside_stream_runs");  // "<n> of <trials>, <x> ms each"
    CHECK(std::stoi(charged) >= 90);
    CHECK(hack.runtime->mean_ms >= 0.8 * results[large].runtime->mean_ms);
  }
}

TEST_CASE("sandboxed on the GPU, escapes are stopped and faults stay with their candidate") {
  // The honest GELU kernel with Python put in front of its forward's return: each escape and
  // fault beside two honest copies, in one batch, with the static checker off so that the
  // sandbox and the build isolation are what stops them.
  const fs::path dir = fs::path(KBRL_SOURCE_DIR) / "tests/gpu/hacks";
  const std::string honest = read_text(dir / "gelu_tanh_honest.py");
  const std::string ret = "        return _ext.gelu_tanh_forward(x)";
  REQUIRE(honest.find(ret) != std::string::npos);
  auto with = [&](const std::string& name, const std::string& imports, const std::string& code) {
    std::string s = honest;
    s.replace(s.find(ret), ret.size(), code + "\n" + ret);
    s.replace(s.find("import torch\n"), 0, imports + "\n");
    // A unique extension name: the same kernel source would otherwise be one build for all.
    const std::string ext = "kbrl_gpu_gelu_tanh_honest";
    s.replace(s.find(ext), ext.size(), ext + "_" + name);
    return s;
  };
  const std::string find_other =
      "        others = [d for d in glob.glob(os.path.join(os.path.dirname(os.getcwd()), '*'))"
      " if d != os.getcwd() and os.path.exists(os.path.join(d, 'candidate.py'))]\n";
  struct Case {
    std::string name, source, problem;
    std::vector<std::string> expect;  // categories
    std::string says;                 // in the message
  };
  const std::string gelu = "examples/problems/2_GELUTanh.py";
  std::vector<Case> cases = {
      {"honest-a", with("a", "", "        pass"), gelu, {"none"}, ""},
      {"network", with("net", "import socket", "        socket.create_connection(('1.1.1.1', 53), timeout=5).close()"), gelu,
       {"runtime"}, "Network is unreachable"},
      {"write-outside", with("write", "import os", "        open(os.path.expanduser('~/kbrl-escaped'), 'w').write('x')"), gelu,
       {"runtime"}, "Read-only file system"},
      {"read-other-build",
       with("read", "import glob, os", find_other + "        open(os.path.join(others[0], 'candidate.py')).read()"), gelu,
       {"runtime"}, "Permission denied"},
      {"leftover", with("left", "import subprocess", "        subprocess.Popen(['sleep', '63.5'], start_new_session=True)"),
       gelu, {"reward_hack"}, "process(es) running after its run stage, outside its process group"},  // one per call
      {"illegal-memory-access", read_text(dir / "illegal_memory_access.py"), gelu, {"crash", "runtime"}, ""},
      {"out-of-memory", read_text(dir / "cuda_out_of_memory.py"), gelu, {"out_of_memory"}, ""},
      {"honest-b", with("b", "", "        pass"), gelu, {"none"}, ""},
  };
  auto c = cuda_config("isolation");
  c.static_checks = false;
  c.sandbox = eval::SandboxMode::on;
  eval::LocalEvaluator ev(c);
  std::vector<core::EvalRequest> requests;
  for (const auto& k : cases) {
    core::EvalRequest r;
    r.request_id = k.name;
    r.problem = problem_from(fs::path(KBRL_SOURCE_DIR) / k.problem, k.problem);
    r.candidate_source = k.source;
    r.language = core::KernelLanguage::cuda;
    r.options.timing_trials = 20;
    requests.push_back(std::move(r));
  }
  const auto results = ev.evaluate(requests);
  std::string table = "| candidate | expected | got | sandbox | build isolation | message |\n|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& r = results[i];
    const std::string got(core::to_string(r.error_category));
    const auto meta = [&](const char* key) { return r.metadata.count(key) ? r.metadata.at(key) : std::string("-"); };
    table += fmt::format("| {} | {} | {} | {} | {} | {} |\n", cases[i].name, fmt::join(cases[i].expect, " or "), got,
                         meta("sandbox"), meta("build_isolation"),
                         r.error_message.substr(0, std::min<std::size_t>(120, r.error_message.find('\n'))));
    INFO(cases[i].name << ": got " << got << ": " << r.error_message);
    CHECK(std::find(cases[i].expect.begin(), cases[i].expect.end(), got) != cases[i].expect.end());
    CHECK(r.error_message.find(cases[i].says) != std::string::npos);
    CHECK(meta("sandbox") == "bubblewrap");
  }
  std::cout << table;
  save("isolation.md", table);
}
