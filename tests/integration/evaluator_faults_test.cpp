// Faults driven into the CPU evaluator's own machinery, one at a time, each in a batch beside
// honest candidates: a worker killed at each stage, a candidate's process killed at each stage, a
// candidate flooding its output or reaching for the worker's channels, corrupted build-cache
// entries and reference-timing caches, a full and a read-only work directory. Each must give the
// affected candidate a result with a clear category and message, and leave every other result
// as it would have been.
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <kbrl/core/error.hpp>
#include <kbrl/core/file.hpp>
#include <kbrl/eval/local_evaluator.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "cpu_evaluator_fixtures.hpp"

using namespace kbrl;
using namespace kbrl::testing;
using core::ErrorCategory;
namespace fs = std::filesystem;

namespace {

// Module-level code that learns which stage of the worker imports it (the job child's frames),
// so that a candidate can misbehave at one stage only.
const std::string kStageOf =
    "import os, signal, sys, time\n"
    "def stage():\n"
    "    f = sys._getframe()\n"
    "    while f is not None:\n"
    "        if f.f_code.co_name in ('child_compile', 'child_run'):\n"
    "            return f.f_code.co_name[len('child_'):]\n"
    "        f = f.f_back\n"
    "    return None\n";

// A correct C++ ReLU built with only the ATen headers it uses (a third of torch/extension.h's
// build time; see examples/solutions/level_1_problem_13_sample_0_kernel.py).
const std::string kLeanReluCpp = R"(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>
at::Tensor relu_forward(at::Tensor x) {
  auto xc = x.contiguous();
  auto y = at::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < xc.numel(); ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
  return y;
}
"""
ext = load_inline(name="lean_relu", cpp_sources=source, functions=["relu_forward"], no_implicit_headers=True)

class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)
)";

void check_honest(const std::vector<core::EvalResult>& results, std::size_t from) {
  for (std::size_t i = from; i < results.size(); ++i) {
    INFO(results[i].request_id << ": " << core::to_string(results[i].error_category) << ": "
                               << results[i].error_message);
    CHECK(results[i].correct);
    CHECK(results[i].error_category == ErrorCategory::none);
  }
}

std::vector<core::EvalRequest> with_honest(std::vector<core::EvalRequest> requests, int honest = 2) {
  for (int i = 0; i < honest; ++i)
    requests.push_back(request(fmt::format("honest-{}", i),
                               python_candidate("", fmt::format("        return x.clamp_min(0.0) + 0.0 * {}", i))));
  return requests;
}

// The process whose working directory is `dir` (a job child sits in its build directory).
std::optional<pid_t> process_in(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    if (fs::read_symlink(entry.path() / "cwd", ec) == dir) return static_cast<pid_t>(std::stoi(name));
  }
  return std::nullopt;
}

pid_t parent_of(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string state;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

// Waits for a file named `name` in any build directory of `work_dir`.
std::optional<fs::path> wait_for_marker(const fs::path& work_dir, const std::string& name) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (fs::directory_iterator it(work_dir / "builds", ec), end; !ec && it != end; it.increment(ec))
      if (fs::exists(it->path() / name)) return it->path();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("a worker killed while a job compiles or runs is replaced, the job runs again, and no other result changes") {
  // Each candidate waits at its stage the first time (it leaves a marker in its build directory);
  // the test then kills the worker holding it, from outside, as an OOM killer or an operator would.
  auto waiter = [](const std::string& stage, int tag) {
    return python_candidate(kStageOf + "if stage() == '" + stage + "' and not os.path.exists('released'):\n"
                                       "    open('waiting-" + stage + "', 'w').close()\n    time.sleep(120)\n",
                            fmt::format("        return x.clamp_min(0.0) + 0.0 * {}", tag));
  };
  eval::LocalEvaluator ev(config("faults-worker-kill"));
  const auto before = ev.stats().jobs_retried;
  std::vector<std::future<core::EvalResult>> futures;
  for (auto& r : with_honest({request("killed-compiling", waiter("compile", 10)), request("killed-running", waiter("run", 11))}, 3))
    futures.push_back(ev.submit(std::move(r)));
  for (const std::string stage : {"compile", "run"}) {
    const auto dir = wait_for_marker(ev.config().work_dir, "waiting-" + stage);
    REQUIRE(dir);
    std::ofstream(*dir / "released").put('\n');
    const auto child = process_in(*dir);
    REQUIRE(child);
    const pid_t worker = parent_of(*child);  // the worker forks each job's child
    REQUIRE(worker > 1);
    REQUIRE(::kill(worker, SIGKILL) == 0);
  }
  std::vector<core::EvalResult> results;
  for (auto& f : futures) results.push_back(f.get());
  CHECK(ev.stats().jobs_retried - before >= 2);
  check_honest(results, 0);  // the two killed under, too: their second try was not disturbed
}

TEST_CASE("a candidate's process killed at each stage gets a crash result naming the signal, and no other result changes") {
  const std::string self_kill = "    os.kill(os.getpid(), signal.SIGKILL)\n";
  eval::LocalEvaluator ev(config("faults-child-kill"));
  const auto results = ev.evaluate(with_honest({
      request("compile", python_candidate(kStageOf + "if stage() == 'compile':\n" + self_kill, "        return x.clamp_min(0.0)")),
      request("import", python_candidate(kStageOf + "if stage() == 'run':\n" + self_kill, "        return x.clamp_min(0.0)")),
      request("forward", python_candidate("import os, signal", self_kill.substr(0, 4) + self_kill)),
  }));
  for (int i = 0; i < 3; ++i) {
    INFO(results[i].request_id << ": " << results[i].error_message);
    CHECK(results[i].error_category == ErrorCategory::crash);
    CHECK(results[i].error_message.find("SIGKILL") != std::string::npos);
    CHECK_FALSE(results[i].correct);
  }
  check_honest(results, 3);
}

TEST_CASE("a candidate can signal only itself and what it started: killing or tracing its worker fails") {
  // Killed twice, a worker's job would come back as an evaluator error (not counted against the
  // candidate). kill(-1) is contained by the sandbox's PID namespace even without the filter.
  eval::LocalEvaluator ev(config("faults-signals"));
  const auto results = ev.evaluate(with_honest({
      request("kill-worker", python_candidate("import os, signal", "        os.kill(os.getppid(), signal.SIGKILL)\n"
                                                                   "        return x.clamp_min(0.0)")),
      request("kill-everything", python_candidate("import os, signal", "        os.kill(-1, signal.SIGKILL)\n"
                                                                       "        return x.clamp_min(0.0)")),
      request("trace-worker", python_candidate("import ctypes, os",
                                               "        libc = ctypes.CDLL(None, use_errno=True)\n"
                                               "        if libc.ptrace(16, os.getppid(), 0, 0) != 0:\n"
                                               "            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))\n"
                                               "        return x.clamp_min(0.0)")),
      request("own-child", python_candidate("import subprocess", "        p = subprocess.Popen(['sleep', '30'])\n"
                                                                 "        p.kill()\n        p.wait()\n"
                                                                 "        return x.clamp_min(0.0)")),
  }));
  for (int i = 0; i < 3; ++i) {
    INFO(results[i].request_id << ": " << core::to_string(results[i].error_category) << ": " << results[i].error_message);
    CHECK(results[i].error_category == ErrorCategory::runtime);
    CHECK(results[i].error_message.find("Operation not permitted") != std::string::npos);
  }
  check_honest(results, 3);  // the one that killed its own child too
  CHECK(ev.stats().workers_lost == 0);
  CHECK(ev.stats().jobs_retried == 0);
}

TEST_CASE("a candidate that floods its output is stopped at the file-size limit, and holds none of the worker's channels") {
  auto c = config("faults-output");
  c.limits.file_size_bytes = 8ull << 20;
  eval::LocalEvaluator ev(c);
  // Every descriptor the candidate's process has that is a pipe or a socket, and what fd 0 is.
  const std::string channels =
      "import os, stat\n"
      "def channels():\n"
      "    found = []\n"
      "    for fd in sorted(int(n) for n in os.listdir('/proc/self/fd')):\n"
      "        try:\n"
      "            mode = os.fstat(fd).st_mode\n"
      "        except OSError:\n"
      "            continue\n"
      "        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):\n"
      "            found.append(fd)\n"
      "    return 'pipes and sockets: %d; stdin: %s; %s' % (len(found), os.readlink('/proc/self/fd/0'), [(f, os.readlink('/proc/self/fd/%d' % f)) for f in found])\n";
  const auto results = ev.evaluate(with_honest({
      request("flood", python_candidate("import sys", "        while True:\n            sys.stdout.write('x' * 65536)")),
      request("channels", python_candidate(channels, "        raise RuntimeError(channels())")),
  }));
  INFO(results[0].error_message);
  CHECK(results[0].error_category == ErrorCategory::crash);
  CHECK(results[0].error_message.find("file size limit") != std::string::npos);
  // Its job's result pipe is the one channel a candidate's process has: not the worker's job
  // stream (it could take other jobs) nor its reply stream (it could answer for them).
  INFO(results[1].error_message);
  CHECK(results[1].error_category == ErrorCategory::runtime);
  CHECK(results[1].error_message.find("pipes and sockets: 1; stdin: /dev/null") != std::string::npos);
  check_honest(results, 2);
}

TEST_CASE("a corrupted build in the cache is built again, and so is one whose compile record is corrupted") {
  auto c = config("faults-build-cache");
  c.compile_pch = false;  // a header set of its own: a precompiled header would cost more than it saves
  // Two sources (a comment apart), so two builds, one of each fault.
  const std::string changed = kLeanReluCpp + "# the same kernel\n";
  {
    eval::LocalEvaluator ev(c);
    const auto first = ev.evaluate({request("library", kLeanReluCpp), request("record", changed)});
    for (const auto& r : first) {
      INFO(r.request_id << ": " << r.error_message);
      REQUIRE(r.correct);
    }
  }
  std::vector<fs::path> libraries;
  for (const auto& entry : fs::recursive_directory_iterator(c.work_dir / "builds"))
    if (entry.path().extension() == ".so") libraries.push_back(entry.path());
  REQUIRE(libraries.size() == 2);
  const auto build_of = [&](const std::string& source) {
    for (const auto& library : libraries) {
      const auto dir = library.parent_path().parent_path();
      if (core::read_file(dir / "candidate.py") == source) return std::pair{dir, library};
    }
    FAIL("no build of the source");
    return std::pair<fs::path, fs::path>{};
  };
  // Other bytes of the same size in one library (no size check would see it), and a torn
  // compile record beside the other build's library, which is cut short.
  const auto [first_dir, first_library] = build_of(kLeanReluCpp);
  const auto size = fs::file_size(first_library);
  std::ofstream(first_library, std::ios::binary | std::ios::trunc) << std::string(size, '\x5a');
  const auto [second_dir, second_library] = build_of(changed);
  fs::resize_file(second_library, fs::file_size(second_library) / 2);
  std::ofstream(second_dir / "compile.json", std::ios::trunc) << "{\"reply\": {\"status\": \"ok\", \"compi";

  eval::LocalEvaluator ev(c);
  const auto results = ev.evaluate(with_honest({request("library", kLeanReluCpp), request("record", changed)}));
  for (int i = 0; i < 2; ++i) {
    INFO(results[i].request_id << ": " << results[i].error_message);
    CHECK(results[i].correct);
    CHECK(results[i].error_category == ErrorCategory::none);
  }
  CHECK(ev.stats().builds_discarded == 2);
  CHECK(ev.stats().compiles == 2 + 2);  // the two rebuilt, and the honest Python candidates
  check_honest(results, 2);
}

TEST_CASE("a reference-timing cache with corrupted lines is read past them, and they are never used") {
  auto c = config("faults-baselines");
  eval::LocalEvaluator first(c);
  const auto a = first.evaluate({request("a", kCorrectPython)})[0];
  REQUIRE(a.correct);
  REQUIRE(a.ref_runtime.has_value());
  const auto file = c.work_dir / "baselines.jsonl";
  const auto good = core::read_file(file);
  // A line that is not JSON, binary noise, JSON of the wrong shape, and the good line's key with
  // timings no run could have measured: negative, not a number, fields missing (read as zeros).
  std::string key = good.substr(good.find("\"key\""));
  key = key.substr(0, key.find(','));
  const auto record = [&](const std::string& timing) {
    return "{" + key + ", \"problem\": \"test/1_ReLU\", \"device\": \"cpu\", \"ref_runtime\": " + timing + "}\n";
  };
  std::ofstream(file, std::ios::trunc | std::ios::binary)
      << "not json at all\n"
      << std::string("\x00\xff\x13\n", 4) << "[1, 2, 3]\n"
      << "{\"key\": 7, \"ref_runtime\": \"fast\"}\n"
      << record(R"({"mean": -1, "median": -1, "std": 0, "min": -1, "max": -1, "num_trials": 5})")
      << record(R"({"mean": 1e999, "median": 1, "std": 0, "min": 1, "max": 1, "num_trials": 5})")
      << record(R"({"mean_ms": 1, "median_ms": 1, "std_ms": 0, "min_ms": 1, "max_ms": 1, "trials": 5})");
  eval::LocalEvaluator ev(c);
  ev.evaluate({request("warm", kCorrectPython)});  // the lane learns its device's name
  const auto results = ev.evaluate(with_honest({request("b", kCorrectPython)}));
  INFO(results[0].error_message);
  CHECK(results[0].correct);
  REQUIRE(results[0].ref_runtime.has_value());
  CHECK(results[0].ref_runtime->mean_ms > 0.0);
  check_honest(results, 1);
}

namespace {

// Mounts a tmpfs of `bytes` at `dir`, seen by this test process only (a mount namespace of its
// own); returns why it could not, or an empty string. Needs root or unprivileged user namespaces.
std::string private_tmpfs(const fs::path& dir, std::uint64_t bytes) {
  fs::create_directories(dir);
  if (::unshare(CLONE_NEWNS) != 0) {
    const uid_t uid = ::getuid();
    const gid_t gid = ::getgid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return fmt::format("unshare: {}", std::strerror(errno));
    std::ofstream("/proc/self/setgroups") << "deny";
    std::ofstream(fmt::format("/proc/self/uid_map")) << fmt::format("{} {} 1", uid, uid);
    std::ofstream(fmt::format("/proc/self/gid_map")) << fmt::format("{} {} 1", gid, gid);
  }
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return fmt::format("making mounts private: {}", std::strerror(errno));
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, fmt::format("size={}", bytes).c_str()) != 0)
    return fmt::format("mounting a tmpfs: {}", std::strerror(errno));
  return "";
}

// Writes zeros into `path` until the file system is full.
void fill(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  const std::string block(1 << 16, '\0');
  while (std::fwrite(block.data(), 1, block.size(), f) == block.size()) {
  }
  std::fclose(f);
  std::FILE* g = std::fopen((path.string() + "-tail").c_str(), "wb");  // the last partial blocks
  if (g != nullptr) {
    while (std::fputc(0, g) != EOF && std::fflush(g) == 0) {
    }
    std::fclose(g);
  }
}

}  // namespace

TEST_CASE("a full work directory gives internal results that say so, and evaluation goes on once there is room") {
  auto c = config("faults-full-disk");
  if (const auto why = private_tmpfs(c.work_dir, 32ull << 20); !why.empty()) KBRL_SKIP("no private tmpfs: " + why);
  eval::LocalEvaluator ev(c);
  {
    const auto warm = ev.evaluate({request("warm", kCorrectPython)})[0];  // the worker is up
    INFO(warm.error_message);
    REQUIRE(warm.correct);
  }
  fill(c.work_dir / "filler");
  const auto full = ev.evaluate(with_honest({}, 3));
  for (const auto& r : full) {
    INFO(r.request_id << ": " << core::to_string(r.error_category) << ": " << r.error_message);
    CHECK(r.error_category == ErrorCategory::internal);
    CHECK(r.error_message.find("No space left on device") != std::string::npos);
  }
  fs::remove(c.work_dir / "filler");
  fs::remove(c.work_dir / "filler-tail");
  check_honest(ev.evaluate(with_honest({}, 3)), 0);
}

TEST_CASE("a work directory that cannot be written is refused at the start with a message naming it") {
  auto c = config("faults-read-only");
  if (const auto why = private_tmpfs(c.work_dir, 1ull << 20); !why.empty()) KBRL_SKIP("no private tmpfs: " + why);
  fs::create_directories(c.work_dir / "builds");  // a work directory that exists: nothing to create
  fs::create_directories(c.work_dir / "problems");
  fs::create_directories(c.work_dir / "logs");
  REQUIRE(::mount(nullptr, c.work_dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) == 0);
  try {
    eval::LocalEvaluator ev(c);
    FAIL("an evaluator started on a read-only work directory");
  } catch (const core::Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("work directory " + c.work_dir.string() + " cannot be written") != std::string::npos);
    CHECK(what.find("Read-only file system") != std::string::npos);
  }
}

TEST_CASE("with the work directory in /tmp, candidates build and keep their temporary files in their own build") {
  // The build isolation lets a job create files only in its build directory and outside the
  // work directory's parents; with the work directory in /tmp (as in the sandbox, whose /tmp
  // holds nothing else) the compilers' temporary files must go to the build directory too.
  std::string pattern = "/tmp/kbrl-faults-XXXXXX";
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  const fs::path root = pattern;
  auto c = config("faults-tmp");
  c.work_dir = root / "work";
  c.compile_pch = false;
  const std::string uses_tempfile = python_candidate(
      "import os, tempfile\n",
      "        fd, path = tempfile.mkstemp()\n"
      "        os.close(fd)\n"
      "        assert path.startswith(os.getcwd() + '/'), path\n"
      "        return x.clamp_min(0.0)");
  // A candidate that points the compiler's temporary files at the work directory (which the
  // isolation forbids): the compiler prints no diagnostic, and the message must still say why.
  std::string no_tmp = kLeanReluCpp;
  no_tmp.replace(no_tmp.find("import torch\n"), 13,
                 "import os\nwork = os.path.dirname(os.path.dirname(os.getcwd()))\n"
                 "os.environ['TMPDIR'] = os.environ['TMP'] = os.environ['TEMP'] = work\nimport torch\n");
  no_tmp.replace(no_tmp.find("lean_relu"), 9, "lean_relu_no_tmp");
  std::vector<core::EvalResult> results;
  {
    eval::LocalEvaluator ev(c);
    results = ev.evaluate({request("cpp", kLeanReluCpp), request("tempfile", uses_tempfile), request("no-tmp", no_tmp)});
  }
  fs::remove_all(root);
  for (int i = 0; i < 2; ++i) {
    INFO(results[i].request_id << ": " << core::to_string(results[i].error_category) << ": " << results[i].error_message);
    CHECK(results[i].correct);
  }
  INFO(results[2].error_message);
  CHECK(results[2].error_category == ErrorCategory::compile);
  CHECK(results[2].error_message.find("Cannot create temporary file in " + c.work_dir.string()) != std::string::npos);
  CHECK(results[2].error_message.find("Permission denied") != std::string::npos);
}
