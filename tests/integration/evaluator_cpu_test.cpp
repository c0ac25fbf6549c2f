// LocalEvaluator on the CPU backend with real workers: verdicts, containment of crashes, hangs,
// exits and memory blow-ups, runtime defenses, and exactly one result per request.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <kbrl/core/error.hpp>
#include <kbrl/core/file.hpp>
#include <kbrl/core/json.hpp>
#include <kbrl/eval/local_evaluator.hpp>
#include <kbrl/log/jsonl.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "cpu_evaluator_fixtures.hpp"

using namespace kbrl;
using namespace kbrl::testing;
using core::ErrorCategory;

TEST_CASE("a compiled C++ kernel is correct and timed and a second evaluation reuses the build") {
  eval::LocalEvaluator ev(config("compiled"));
  auto results = ev.evaluate({request("good", kReluCpp), request("good-again", kReluCpp)});
  for (const auto& r : results) {
    INFO(r.error_message);
    CHECK(r.format_ok);
    CHECK(r.compiled);
    CHECK(r.correct);
    CHECK(r.error_category == ErrorCategory::none);
    CHECK(r.trials_passed == 3);
    REQUIRE(r.runtime.has_value());
    REQUIRE(r.ref_runtime.has_value());
    REQUIRE(r.speedup.has_value());
    CHECK(*r.speedup > 0.0);
    CHECK(r.device == "cpu");
    CHECK(r.metadata.at("sandbox") == "bubblewrap");
  }
  const auto s = ev.stats();
  CHECK(s.compiles == 1);  // the same source is built once
  CHECK(s.compile_cache_hits == 1);
}

TEST_CASE("a correct candidate faster than excessive_speedup times the reference is flagged, its verdict kept") {
  // KernelBench's check_for_excessive_speedup: a flag in the metadata, nothing else. Thresholds
  // far below and far above any speedup a ReLU can have make the test independent of timing.
  for (const double threshold : {1e-6, 1e9, 0.0}) {
    INFO("excessive_speedup " << threshold);
    auto c = config("excessive-speedup");
    c.excessive_speedup = threshold;
    eval::LocalEvaluator ev(c);
    const auto r = ev.evaluate({request("fast", kCorrectPython)}).at(0);
    INFO(r.error_message);
    CHECK(r.correct);
    REQUIRE(r.speedup.has_value());
    CHECK(r.metadata.count("excessive_speedup") == (threshold == 1e-6 ? 1u : 0u));
    if (threshold == 1e-6) CHECK(r.metadata.at("excessive_speedup") == "true");
  }
}

TEST_CASE("wrong and broken candidates get the right verdicts") {
  eval::LocalEvaluator ev(config("verdicts"));
  std::string broken_cpp = kReluCpp;
  broken_cpp.replace(broken_cpp.find("return y;"), 9, "return y  // missing semicolon");
  auto results = ev.evaluate({
      request("wrong", python_candidate("", "        return x.clamp(0.0, 1.0)")),
      request("no-compile", broken_cpp),
      request("no-model", "import torch\nclass Model2:\n    pass\n"),
      request("raises", python_candidate("", "        raise ValueError('boom')")),
      request("bad-shape", python_candidate("", "        return x[:1]")),
  });
  CHECK(results[0].error_category == ErrorCategory::correctness);
  CHECK(results[0].compiled);
  CHECK_FALSE(results[0].correct);
  CHECK(results[0].max_abs_error.has_value());
  CHECK(results[1].error_category == ErrorCategory::compile);
  CHECK_FALSE(results[1].compiled);
  CHECK(results[1].error_message.find("error") != std::string::npos);
  CHECK(results[2].error_category == ErrorCategory::format);
  CHECK_FALSE(results[2].format_ok);
  CHECK(results[3].error_category == ErrorCategory::runtime);
  CHECK(results[3].error_message.find("boom") != std::string::npos);
  CHECK(results[4].error_category == ErrorCategory::correctness);
  CHECK(results[4].error_message.find("shape") != std::string::npos);
}

TEST_CASE("crashes hangs exits and memory blow-ups are contained and the next job runs") {
  auto c = config("containment");
  eval::LocalEvaluator ev(c);
  auto hang = request("hang", python_candidate("", "        while True:\n            pass"));
  hang.options.run_timeout_s = 5;
  auto results = ev.evaluate({
      request("abort", python_candidate("import os", "        os.abort()")),
      request("exit", python_candidate("import os", "        os._exit(0)")),
      request("sys-exit", python_candidate("import sys", "        sys.exit(3)")),
      request("segv", python_candidate("import ctypes", "        ctypes.string_at(0)")),
      hang,
      request("oom", python_candidate("", "        big = torch.empty(1 << 40, dtype=torch.uint8)\n"
                                          "        big.fill_(1)\n        return x")),
      request("after", kCorrectPython),
  });
  CHECK(results[0].error_category == ErrorCategory::crash);
  CHECK(results[1].error_category == ErrorCategory::crash);
  CHECK(results[2].error_category == ErrorCategory::runtime);  // SystemExit is caught as an exception
  CHECK(results[3].error_category == ErrorCategory::crash);
  CHECK(results[3].error_message.find("SIGSEGV") != std::string::npos);
  CHECK(results[4].error_category == ErrorCategory::timeout);
  CHECK(results[5].error_category == ErrorCategory::out_of_memory);
  INFO(results[6].error_message);
  CHECK(results[6].correct);
}

TEST_CASE("runtime defenses catch tampering that a static checker might miss") {
  eval::LocalEvaluator ev(config("defenses"));
  // Tries to shrink the problem through any module that looks like the reference.
  auto shrink = request("shrink-reference", python_candidate(
                                                "import sys\n"
                                                "for name, mod in list(sys.modules.items()):\n"
                                                "    if hasattr(mod, 'get_inputs') and hasattr(mod, 'rows'):\n"
                                                "        mod.rows = 1\n"
                                                "        mod.get_inputs = lambda: [torch.randn(1, 4)]",
                                                "        return x.clamp_min(0.0)"));
  shrink.options.correctness_trials = 5;  // more trials than kept input sets: inputs are regenerated
  auto results = ev.evaluate({
      request("patch-allclose", python_candidate("torch.allclose = lambda *a, **k: True",
                                                 "        return x.clamp_min(0.0)")),
      request("patch-timer", python_candidate("import time\ntime.perf_counter = lambda: 0.0",
                                              "        return x.clamp_min(0.0)")),
      request("mutate-input", python_candidate("", "        x.clamp_min_(0.0)\n        return x.clone()")),
      request("replay", python_candidate("cache = {}",
                                         "        if 'y' not in cache:\n            cache['y'] = x.clamp_min(0.0)\n"
                                         "        return cache['y']")),
      request("zeros", python_candidate("", "        return torch.zeros_like(x)")),
      request("lazy-subclass", python_candidate("class Lazy(torch.Tensor):\n    pass",
                                                "        return x.clamp_min(0.0).as_subclass(Lazy)")),
      shrink,
  });
  CHECK(results[0].error_category == ErrorCategory::reward_hack);
  CHECK(results[0].error_message.find("allclose") != std::string::npos);
  CHECK(results[1].error_category == ErrorCategory::reward_hack);
  CHECK(results[2].error_category == ErrorCategory::reward_hack);
  CHECK(results[3].error_category == ErrorCategory::correctness);
  CHECK(results[4].error_category == ErrorCategory::correctness);
  CHECK(results[5].error_category == ErrorCategory::correctness);
  // Reference outputs are computed before the candidate loads: rebinding its globals changes nothing.
  INFO(results[6].error_message);
  CHECK(results[6].correct);
}

TEST_CASE("timed calls are checked calls: candidates that change their behaviour after the first calls are caught") {
  // tests/data/timed_calls (its README): each candidate is honest for its first 7 calls, the 3
  // trials and 4 input families asked for here, then remembers, keeps state or stops working.
  // With 1 warm-up and 5 timed calls, every timed call is checked, and every one of these is
  // wrong from the first timed call on.
  eval::LocalEvaluator ev(config("timed-calls"));
  const auto dir = std::filesystem::path(KBRL_SOURCE_DIR) / "tests/data/timed_calls";
  const std::vector<std::string> caught = {"stops_after_k.py", "memo_data_ptr.py", "memo_identity.py",
                                           "running_state.py", "previous_output.py"};
  std::vector<core::EvalRequest> requests;
  for (const auto& name : caught) requests.push_back(request(name, core::read_file(dir / name)));
  requests.push_back(request("memo_content.py", core::read_file(dir / "memo_content.py")));
  requests.push_back(request("honest", kCorrectPython));
  for (const auto& r : requests) {
    REQUIRE(r.options.correctness_trials == 3);
    REQUIRE(r.options.input_families);
    REQUIRE(r.options.warmup_runs == 1);
    REQUIRE(r.options.timing_trials == 5);
  }
  const auto results = ev.evaluate(requests);
  for (std::size_t i = 0; i < caught.size(); ++i) {
    const auto& r = results[i];
    INFO(caught[i] << ": " << core::to_string(r.error_category) << ": " << r.error_message);
    CHECK(r.error_category == ErrorCategory::correctness);
    CHECK(r.trials_passed == 3);  // right on every correctness call...
    CHECK(r.input_families.failed.empty());
    CHECK_FALSE(r.correct);  // ...and still wrong on the problem's own inputs
    CHECK_FALSE(r.correct_on_problem_inputs);
    CHECK_FALSE(r.speedup.has_value());
    CHECK(r.error_message.find("timed call 1 of 5 (the candidate's call 9") != std::string::npos);
  }
  // A remembered output is right when its input comes again: the defence is that none does, so
  // every timed call pays for its work (20 ms in this candidate; a remembered output, a hash).
  const auto& memo = results[caught.size()];
  INFO("memo_content.py: " << memo.error_message);
  CHECK(memo.correct);
  REQUIRE(memo.runtime.has_value());
  CHECK(memo.runtime->min_ms >= 20.0);
  const auto& honest = results.back();
  INFO("honest: " << honest.error_message);
  CHECK(honest.correct);
  CHECK(honest.speedup.has_value());
  // The checks' own cost is reported apart from the reference's and the timing's.
  REQUIRE(honest.stage_seconds.count("timing_checks") == 1);
  CHECK(honest.stage_seconds.at("timing_checks") > 0.0);
}

TEST_CASE("workers killed at random still give exactly one result per request") {
  auto c = config("chaos");
  eval::LocalEvaluator ev(c);
  std::vector<std::future<core::EvalResult>> futures;
  for (int i = 0; i < 50; ++i) {
    auto r = request("req-" + std::to_string(i), python_candidate("", "        return x.clamp_min(0.0) + 0.0 * " +
                                                                        std::to_string(i)));
    r.options.measure_performance = false;
    futures.push_back(ev.submit(std::move(r)));
  }
  std::atomic<bool> done{false};
  int kills = 0;
  std::thread chaos([&] {
    std::mt19937 rng(7);
    for (int k = 0; k < 6 && !done; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      const auto pids = ev.worker_pids();
      if (pids.empty()) continue;
      ::kill(-pids[rng() % pids.size()], SIGKILL);
      ++kills;
    }
  });
  std::set<std::string> ids;
  int correct = 0;
  for (auto& f : futures) {
    REQUIRE(f.wait_for(std::chrono::minutes(10)) == std::future_status::ready);
    const auto r = f.get();
    ids.insert(r.request_id);
    correct += r.correct;
  }
  done = true;
  chaos.join();
  CHECK(ids.size() == 50);
  CHECK(kills > 0);
  CHECK(correct >= 48);  // a job whose worker is killed twice is reported as internal, never lost
  CHECK(ev.stats().finished == 50);
}

TEST_CASE("the evaluator rejects a language its backend cannot run and a missing worker script") {
  eval::LocalEvaluator ev(config("language"));
  auto r = request("cuda-on-cpu", kCorrectPython);
  r.language = core::KernelLanguage::cuda;
  const auto result = ev.evaluate({r})[0];
  CHECK(result.error_category == ErrorCategory::internal);
  CHECK(result.error_message.find("cannot run on the cpu backend") != std::string::npos);
  auto bad = config("missing-worker");
  bad.worker_script = "/nonexistent/kbrl_worker.py";
  CHECK_THROWS_AS(eval::LocalEvaluator(bad), core::InvalidArgument);
}

TEST_CASE("without a working bubblewrap, evaluation refuses to start unless the sandbox is off") {
  // PATH is this process's: the evaluator looks bwrap up there. A bwrap that cannot create
  // namespaces (as in a container without the privilege) and no bwrap at all.
  const std::string saved = std::getenv("PATH");
  const auto bin = std::filesystem::path(KBRL_TEST_TMP) / "fake-bwrap-bin";
  std::filesystem::remove_all(bin);
  std::filesystem::create_directories(bin);
  {
    std::ofstream f(bin / "bwrap");
    f << "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n";
  }
  std::filesystem::permissions(bin / "bwrap", std::filesystem::perms::owner_all);
  const auto refusal = [&](const std::string& path) {
    ::setenv("PATH", path.c_str(), 1);
    std::string message;
    try {
      eval::LocalEvaluator ev(config("no-sandbox"));
    } catch (const core::InvalidArgument& e) {
      message = e.what();
    }
    ::setenv("PATH", saved.c_str(), 1);
    return message;
  };
  const auto cannot = refusal((bin.string() + ":/usr/bin:/bin"));
  INFO(cannot);
  CHECK(cannot.find("bwrap) cannot run here (bwrap: No permissions to create new namespace)") != std::string::npos);
  CHECK(cannot.find("--sandbox off (evaluator.sandbox: off)") != std::string::npos);
  CHECK(cannot.find("apt-get install bubblewrap") != std::string::npos);
  std::filesystem::remove(bin / "bwrap");
  const auto missing = refusal(bin.string());
  INFO(missing);
  CHECK(missing.find("is not installed or cannot run here") != std::string::npos);

  auto off = config("sandbox-off");
  off.sandbox = eval::SandboxMode::off;
  eval::LocalEvaluator ev(off);
  const auto r = ev.evaluate({request("unsandboxed", kCorrectPython)})[0];
  CHECK(r.correct);
  CHECK(r.metadata.at("sandbox") == "off");
}

namespace {

// A TCP listener on the host's loopback; whether anyone connected within `wait_ms`.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd, 4);
    socklen_t n = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
  bool connected(int wait_ms) const {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, wait_ms) == 1;
  }
};

}  // namespace

TEST_CASE("the sandbox stops a candidate's network connections and writes outside the work directory") {
  const Listener host;
  // Beside the work directories, not above them: unsandboxed, a candidate may still create files
  // there (its build isolation covers the work directory and the folders it lies in).
  const auto marker = std::filesystem::path(KBRL_TEST_TMP) / "escape-target" / "escaped-write";
  std::filesystem::create_directories(marker.parent_path());
  std::filesystem::remove(marker);
  const auto connect = python_candidate(  // once: the listener accepts nothing
      "import socket\ncalls = []\n",
      fmt::format("        if not calls:\n            socket.create_connection(('127.0.0.1', {}), timeout=5).close()\n"
                  "            calls.append(1)\n        return x.clamp_min(0.0)",
                  host.port));
  const auto write = python_candidate(
      "", fmt::format("        open('{}', 'w').write('out')\n        return x.clamp_min(0.0)", marker.string()));
  for (const auto mode : {eval::SandboxMode::on, eval::SandboxMode::off}) {
    auto c = config(mode == eval::SandboxMode::on ? "escapes" : "escapes-unsandboxed");
    c.sandbox = mode;
    eval::LocalEvaluator ev(c);
    const auto results = ev.evaluate({request("connect", connect), request("write", write)});
    if (mode == eval::SandboxMode::off) {  // the candidates do what they say where nothing stops them
      CHECK(results[0].correct);
      CHECK(host.connected(1000));
      CHECK(std::filesystem::exists(marker));
      continue;
    }
    INFO(results[0].error_message);
    CHECK(results[0].error_category == ErrorCategory::runtime);
    // Its own network namespace: a loopback where nothing listens, or none at all.
    CHECK((results[0].error_message.find("Connection refused") != std::string::npos ||
           results[0].error_message.find("Network is unreachable") != std::string::npos));
    CHECK_FALSE(host.connected(200));
    INFO(results[1].error_message);
    CHECK(results[1].error_category == ErrorCategory::runtime);
    CHECK(results[1].error_message.find("Read-only file system") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(marker));
  }
}

namespace {

// Whether a process whose command line is `command` (arguments joined by spaces) is running.
bool process_running(const std::string& command) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(entry.path() / "cmdline", std::ios::binary);
    std::string line((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::replace(line.begin(), line.end(), '\0', ' ');
    if (line.find(command) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a candidate can neither read nor change another candidate's build, nor the work directory's caches") {
  // The reader waits for the honest candidate's build directory beside its own, then reads its
  // source; the writer appends to the reference-timing cache and writes into that build.
  const std::string find_other =
      "import glob, os, time\n"
      "def other_build():\n"
      "    for _ in range(200):\n"
      "        found = [d for d in glob.glob(os.path.join(os.path.dirname(os.getcwd()), '*'))\n"
      "                 if d != os.getcwd() and os.path.exists(os.path.join(d, 'candidate.py'))]\n"
      "        if found:\n"
      "            return found[0]\n"
      "        time.sleep(0.05)\n"
      "    raise RuntimeError('no other build')\n";
  const auto reader = python_candidate(
      find_other, "        open(os.path.join(other_build(), 'candidate.py')).read()\n        return x.clamp_min(0.0)");
  const auto cache_writer = python_candidate(
      find_other, "        open(os.path.join(os.getcwd(), '..', '..', 'baselines.jsonl'), 'a').write('{}\\n')\n"
                  "        return x.clamp_min(0.0)");
  const auto build_writer = python_candidate(
      find_other, "        open(os.path.join(other_build(), 'compile.json'), 'w').write('{}')\n        return x.clamp_min(0.0)");
  eval::LocalEvaluator ev(config("isolation"));
  const auto results = ev.evaluate({request("honest", kCorrectPython), request("reader", reader),
                                    request("cache-writer", cache_writer), request("build-writer", build_writer)});
  INFO(results[0].error_message);
  CHECK(results[0].correct);
  CHECK(results[0].metadata.at("build_isolation").starts_with("landlock ABI "));
  CHECK(results[0].metadata.at("build_isolation").ends_with("; seccomp"));
  for (int i = 1; i < 4; ++i) {
    INFO(results[i].request_id << ": " << results[i].error_message);
    CHECK(results[i].error_category == ErrorCategory::runtime);
    CHECK(results[i].error_message.find("PermissionError: [Errno 13] Permission denied") != std::string::npos);
  }
  CHECK(core::read_file(ev.config().work_dir / "baselines.jsonl").find("{}") == std::string::npos);
}

TEST_CASE("processes a candidate leaves running outside its process group are killed and fail it") {
  // A new session (out of reach of the process-group kill), and a classic daemon's double fork.
  // Both launchers wait until their process has become `sleep` (Popen does; the daemon's reads a
  // close-on-exec pipe to its end), so what is left when the stage ends is always the same.
  const auto session = python_candidate(
      "import subprocess\ncalls = []\n",
      "        if not calls:\n            subprocess.Popen(['sleep', '61.25'], start_new_session=True)\n"
      "            calls.append(1)\n        return x.clamp_min(0.0)");
  const auto daemon = python_candidate(
      "import os\ncalls = []\n",
      "        if not calls:\n            calls.append(1)\n            r, w = os.pipe()\n            pid = os.fork()\n"
      "            if pid == 0:\n                os.setsid()\n"
      "                if os.fork() == 0:\n                    os.execvp('sleep', ['sleep', '62.25'])\n"
      "                os._exit(0)\n            os.close(w)\n            os.read(r, 1)\n            os.close(r)\n"
      "            os.waitpid(pid, 0)\n        return x.clamp_min(0.0)");
  for (const auto mode : {eval::SandboxMode::on, eval::SandboxMode::off}) {
    auto c = config(mode == eval::SandboxMode::on ? "leftovers" : "leftovers-unsandboxed");
    c.sandbox = mode;
    eval::LocalEvaluator ev(c);
    const auto results =
        ev.evaluate({request("session", session), request("daemon", daemon), request("honest", kCorrectPython)});
    for (int i = 0; i < 2; ++i) {
      INFO(results[i].request_id << ": " << results[i].error_message);
      CHECK(results[i].error_category == ErrorCategory::reward_hack);
      CHECK(results[i].error_message.find("left 1 process(es) running after its run stage") != std::string::npos);
    }
    CHECK(results[0].error_message.find("sleep 61.25") != std::string::npos);
    CHECK(results[1].error_message.find("sleep 62.25") != std::string::npos);
    CHECK(results[2].correct);
    CHECK_FALSE(process_running("sleep 61.25"));
    CHECK_FALSE(process_running("sleep 62.25"));
  }
}

TEST_CASE("a candidate is held to its open-file and CPU-time limits, and an honest one is not") {
  auto c = config("limits");
  c.limits.open_files = 64;
  c.limits.cpu_seconds = 3;
  eval::LocalEvaluator ev(c);
  const auto hoard = python_candidate("", "        fs = [open('/dev/null') for _ in range(200)]\n        return x.clamp_min(0.0)");
  const auto spin = python_candidate("", "        while True:\n            pass");
  const auto results = ev.evaluate({request("hoard", hoard), request("spin", spin), request("honest", kCorrectPython)});
  INFO(results[0].error_message);
  CHECK(results[0].error_category == ErrorCategory::runtime);
  CHECK(results[0].error_message.find("Too many open files") != std::string::npos);
  INFO(results[1].error_message);
  CHECK(results[1].error_category == ErrorCategory::timeout);
  CHECK(results[1].error_message.find("CPU-time limit (SIGXCPU; evaluator setting max_cpu_seconds)") != std::string::npos);
  CHECK(results[2].correct);
}

namespace {

// Inputs only from [0, 1), as many KernelBench problems draw them.
std::string unit_interval_problem(const std::string& forward) {
  return "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
         "        super().__init__()\n\n    def forward(self, x):\n        return " +
         forward + "\n\ndef get_inputs():\n    return [torch.rand(32, 256)]\n\ndef get_init_inputs():\n    return []\n";
}

core::EvalRequest family_request(const std::string& id, const std::string& reference, const std::string& body) {
  auto r = request(id, python_candidate("", "        return " + body));
  r.problem.id = "test/" + id;
  r.problem.source = unit_interval_problem(reference);
  r.problem.content_hash = id;
  r.options.measure_performance = false;
  return r;
}

}  // namespace

TEST_CASE("kernels wrong only outside the unit interval are caught by the input families") {
  eval::LocalEvaluator ev(config("families"));
  auto results = ev.evaluate({
      family_request("relu-identity", "torch.relu(x)", "x"),
      family_request("clamp-upper-only", "torch.clamp(x, -0.5, 0.5)", "x.clamp(max=0.5)"),
      family_request("abs-identity", "torch.abs(x)", "x"),
      family_request("elu-no-negative-branch", "torch.nn.functional.elu(x)", "x"),
      family_request("sigmoid-taylor", "torch.sigmoid(x)", "0.5 + x / 4 - x ** 3 / 48 + x ** 5 / 480 - 17 * x ** 7 / 80640 + 31 * x ** 9 / 1451520"),
      family_request("relu-honest", "torch.relu(x)", "x.clamp_min(0.0)"),
      family_request("log-honest", "torch.log(x)", "x.log()"),
  });
  for (int i = 0; i < 5; ++i) {
    INFO(results[static_cast<std::size_t>(i)].request_id << ": " << results[static_cast<std::size_t>(i)].error_message);
    CHECK(results[static_cast<std::size_t>(i)].correct_on_problem_inputs);  // [0, 1) alone would let it through
    CHECK_FALSE(results[static_cast<std::size_t>(i)].correct);
    CHECK(results[static_cast<std::size_t>(i)].error_category == ErrorCategory::correctness);
    CHECK_FALSE(results[static_cast<std::size_t>(i)].input_families.failed.empty());
  }
  CHECK(results[0].error_message.find("input family") != std::string::npos);
  INFO(results[5].error_message);
  CHECK(results[5].correct);
  CHECK(results[5].input_families.tried.size() == 4);
  CHECK(results[5].input_families.failed.empty());
  // log is undefined for negative inputs: the reference gives NaN there, so those families are
  // skipped rather than held against an honest kernel.
  INFO(results[6].error_message);
  CHECK(results[6].correct);
  CHECK_FALSE(results[6].input_families.skipped.empty());
}

TEST_CASE("input families can be turned off per request") {
  eval::LocalEvaluator ev(config("families-off"));
  auto r = family_request("relu-identity-off", "torch.relu(x)", "x");
  r.options.input_families = false;
  const auto result = ev.evaluate({r})[0];
  CHECK(result.correct);
  CHECK(result.input_families.tried.empty());
}

TEST_CASE("fp32 references run without TF32") {
  // The reference reports the TF32 switches it ran under (cuDNN convolutions default to TF32 in
  // torch); an exact fp32 kernel is judged against IEEE fp32, so both must be off.
  eval::LocalEvaluator ev(config("tf32"));
  const auto result = ev.evaluate({family_request(
      "tf32-off", "x * 0 + float(torch.backends.cudnn.allow_tf32) + float(torch.backends.cuda.matmul.allow_tf32)",
      "x * 0")})[0];
  INFO(result.error_message);
  CHECK(result.correct);
}

namespace {

// A reference that returns its input, +-v alternating (v exactly representable in fp16 and bf16),
// and a candidate that moves every value away from zero by d: |out - ref| = d and the relative L2
// error d / v, exactly, since v + d is representable too (d is a few units in the last place).
core::EvalRequest offset_request(const std::string& id, core::Precision precision, double v, double d) {
  auto r = request(id, python_candidate("", fmt::format("        return x + x.sign() * {:.17g}", d)));
  r.problem.id = "test/" + id;
  r.problem.content_hash = id;
  r.problem.source = fmt::format(
      "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
      "        super().__init__()\n\n    def forward(self, x):\n        return x.clone()\n\n"
      "def get_inputs():\n    return [torch.tensor([{0:.17g}, -{0:.17g}] * 512, dtype=torch.float32)]\n\n"
      "def get_init_inputs():\n    return []\n",
      v);
  r.precision = precision;
  r.options.measure_performance = false;
  r.options.input_families = false;  // scaled inputs would scale the allowed error: this is about the bounds
  return r;
}

}  // namespace

TEST_CASE("fp16 and bf16 outputs are judged by their precision's tolerances") {
  // The defaults (core::default_tolerance): |out - ref| <= atol + rtol |ref| with atol = rtol =
  // 1e-2 for fp16 and bf16, and a relative L2 error within the worker's NORM_TOLERANCE (2e-2 for
  // fp16, 3e-2 for bf16). Each error below is one unit in the last place inside or outside its
  // bound, the nearest the output's own precision can come to it.
  REQUIRE(core::default_tolerance(core::Precision::fp16) == core::Tolerance{1e-2, 1e-2});
  REQUIRE(core::default_tolerance(core::Precision::bf16) == core::Tolerance{1e-2, 1e-2});
  using core::Precision;
  struct Case {
    const char* id;
    Precision precision;
    double v, d;
    const char* failure;  // nullptr: correct
  };
  const double fp16_ulp_2 = std::ldexp(1.0, -9), fp16_ulp_quarter = std::ldexp(1.0, -12);  // ulp at 2 and at 0.25
  const double bf16_ulp_2 = std::ldexp(1.0, -6), bf16_ulp_quarter = std::ldexp(1.0, -9);
  const std::vector<Case> cases = {
      // Elementwise, at |ref| = 2: the bound is 0.01 + 0.01 * 2 = 0.03 (relative L2 error below 2e-2).
      {"fp16-elementwise-inside", Precision::fp16, 2.0, 15 * fp16_ulp_2, nullptr},       // 0.0293
      {"fp16-elementwise-outside", Precision::fp16, 2.0, 16 * fp16_ulp_2, "values differ"},  // 0.03125
      {"bf16-elementwise-inside", Precision::bf16, 2.0, 1 * bf16_ulp_2, nullptr},        // 0.0156
      {"bf16-elementwise-outside", Precision::bf16, 2.0, 2 * bf16_ulp_2, "values differ"},   // 0.03125
      // Relative L2, at |ref| = 0.25: elementwise the bound is 0.0125, not reached; d / 0.25 is
      // the relative L2 error against 2e-2 (fp16) and 3e-2 (bf16).
      {"fp16-norm-inside", Precision::fp16, 0.25, 20 * fp16_ulp_quarter, nullptr},                 // 0.0195
      {"fp16-norm-outside", Precision::fp16, 0.25, 21 * fp16_ulp_quarter, "relative L2 norm"},     // 0.0205
      {"bf16-norm-inside", Precision::bf16, 0.25, 3 * bf16_ulp_quarter, nullptr},                  // 0.0234
      {"bf16-norm-outside", Precision::bf16, 0.25, 4 * bf16_ulp_quarter, "relative L2 norm"},      // 0.03125
      // bf16's looser L2 bound is its own: the error bf16 accepts is too much for fp16.
      {"fp16-norm-bf16-error", Precision::fp16, 0.25, 3 * bf16_ulp_quarter, "relative L2 norm"},  // 0.0234
      // The fp16 tolerance belongs to fp16: the same error at fp32 (atol = rtol = 1e-4) fails.
      {"fp32-fp16-error", Precision::fp32, 2.0, 15 * fp16_ulp_2, "values differ"},
  };
  std::vector<core::EvalRequest> requests;
  for (const auto& c : cases) requests.push_back(offset_request(c.id, c.precision, c.v, c.d));
  // A request's own atol overrides its precision's: 0.02 + 0.01 * 2 = 0.04 takes the error above.
  auto widened = offset_request("fp16-elementwise-outside-atol", Precision::fp16, 2.0, 16 * fp16_ulp_2);
  widened.options.atol = 2e-2;
  requests.push_back(widened);

  eval::LocalEvaluator ev(config("precision-tolerances"));
  const auto results = ev.evaluate(requests);
  REQUIRE(results.size() == cases.size() + 1);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auto& r = results[i];
    INFO(c.id << ": " << r.error_message);
    CHECK(r.request_id == c.id);
    CHECK(r.trials_total >= 1);
    if (c.failure == nullptr) {
      CHECK(r.correct);
      CHECK(r.error_category == ErrorCategory::none);
      REQUIRE(r.max_abs_error.has_value());
      CHECK(*r.max_abs_error == Catch::Approx(c.d).epsilon(1e-9));  // the error is the one intended
    } else {
      CHECK_FALSE(r.correct);
      CHECK(r.error_category == ErrorCategory::correctness);
      CHECK(r.error_message.find(c.failure) != std::string::npos);
      if (r.max_abs_error) CHECK(*r.max_abs_error == Catch::Approx(c.d).epsilon(1e-9));
    }
  }
  INFO(results.back().request_id << ": " << results.back().error_message);
  CHECK(results.back().correct);
}

TEST_CASE("static-check errors stop a candidate before it is compiled and severities are configurable") {
  auto c = config("static");
  c.static_checks = true;
  eval::LocalEvaluator ev(c);
  std::string fallback = kReluCpp;
  fallback.replace(fallback.find("        return ext.relu_forward(x)"), 34,
                   "        try:\n            return ext.relu_forward(x)\n        except Exception:\n"
                   "            return torch.relu(x)");
  const auto results = ev.evaluate({request("fallback", fallback), request("pure-torch", kCorrectPython)});
  for (const auto& r : results) {
    INFO(r.request_id << ": " << r.error_message);
    CHECK(r.error_category == ErrorCategory::static_check);
    CHECK_FALSE(r.static_ok);
    CHECK_FALSE(r.compiled);
    CHECK_FALSE(r.static_findings.empty());
  }
  CHECK(results[0].error_message.find("try_except_fallback") != std::string::npos);
  CHECK(ev.stats().compiles == 0);

  auto bad = config("static-bad");
  bad.static_check_severity["no_such_rule"] = core::Severity::off;
  CHECK_THROWS_AS(eval::LocalEvaluator(bad), core::InvalidArgument);
}

TEST_CASE("compilers run at the configured niceness and runs at the evaluator niceness") {
  // The candidate's module is imported in the compile stage (where load_inline builds) and again
  // in the run stage; it fails wherever it runs nicer than the worker that forked it.
  const std::string candidate = python_candidate(
      "import os\n"
      "_nicer = os.nice(0) - os.getpriority(os.PRIO_PROCESS, os.getppid())\n"
      "if _nicer > 0:\n"
      "    raise RuntimeError('imported {} nicer than its worker'.format(_nicer))\n",
      "        return x.clamp_min(0.0)");
  {
    eval::LocalEvaluator ev(config("nice"));
    const auto result = ev.evaluate({request("nice-default", candidate)})[0];
    INFO(result.error_message);
    CHECK(result.error_category == ErrorCategory::compile);
    CHECK(result.error_message.find("imported 10 nicer than its worker") != std::string::npos);
  }
  auto c = config("nice-off");
  c.compile_nice = 0;
  eval::LocalEvaluator ev(c);
  const auto result = ev.evaluate({request("nice-off", candidate)})[0];
  INFO(result.error_message);
  CHECK(result.correct);
}

namespace {

// A reference that takes 20 ms a call: its timing's deviation stays far below its mean even on a
// busy machine, so it is always cached (a noisier one is used once and not cached).
const char* kSleepyReluProblem = R"(import time
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        time.sleep(0.02)
        return torch.relu(x)

def get_inputs():
    return [torch.randn(64, 512)]

def get_init_inputs():
    return []
)";

core::EvalRequest sleepy_request(const std::string& id, const std::string& content_hash) {
  auto r = request(id, kCorrectPython);
  r.problem.source = kSleepyReluProblem;
  r.problem.content_hash = content_hash;
  r.options.correctness_trials = 1;
  r.options.input_families = false;
  return r;
}

std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("reference timings are cached in the work dir, read by the next evaluator, and a torn line is cut") {
  const auto c = config("baselines");
  const auto file = c.work_dir / "baselines.jsonl";
  core::TimingStats first;
  {
    eval::LocalEvaluator ev(c);
    const auto a = ev.evaluate({sleepy_request("a", "sleepy-relu")})[0];
    INFO(a.error_message);
    REQUIRE(a.correct);
    REQUIRE(a.ref_runtime.has_value());
    REQUIRE(a.ref_runtime->std_ms <= a.ref_runtime->mean_ms);
    first = *a.ref_runtime;
    CHECK(ev.stats().baseline_cache_hits == 0);
    const auto b = ev.evaluate({sleepy_request("b", "sleepy-relu")})[0];
    CHECK(ev.stats().baseline_cache_hits == 1);
    CHECK(b.ref_runtime == a.ref_runtime);
    CHECK(b.runtime.has_value());
  }
  auto lines = log::read_jsonl(file);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].at("problem").as_string() == "test/1_ReLU");
  CHECK(lines[0].at("device").as_string() == "cpu");
  CHECK(lines[0].at("key").is_string());
  CHECK(boost::json::value_to<core::TimingStats>(lines[0].at("ref_runtime")) == first);

  // A kill in the middle of a write leaves a torn last line: it is skipped when read, and cut
  // before the next line is appended.
  {
    std::ofstream out(file, std::ios::app | std::ios::binary);
    out << R"({"key": "torn", "ref_runt)";
  }
  {
    eval::LocalEvaluator ev(c);
    ev.evaluate({sleepy_request("c", "sleepy-relu")});  // the lane learns its device's name
    const auto d = ev.evaluate({sleepy_request("d", "sleepy-relu")})[0];
    CHECK(ev.stats().baseline_cache_hits == 1);
    CHECK(d.ref_runtime == first);
    const auto e = ev.evaluate({sleepy_request("e", "sleepy-relu-2")})[0];  // another reference: timed
    INFO(e.error_message);
    REQUIRE(e.ref_runtime.has_value());
    REQUIRE(e.ref_runtime->std_ms <= e.ref_runtime->mean_ms);
    CHECK(ev.stats().baseline_cache_hits == 1);
  }
  lines = log::read_jsonl(file);
  CHECK(lines.size() == 2);
  CHECK(file_text(file).find("torn") == std::string::npos);

  auto off = c;
  off.baseline_cache = false;
  eval::LocalEvaluator ev(off);
  ev.evaluate({sleepy_request("f", "sleepy-relu")});
  const auto g = ev.evaluate({sleepy_request("g", "sleepy-relu")})[0];
  CHECK(ev.stats().baseline_cache_hits == 0);
  REQUIRE(g.ref_runtime.has_value());
  CHECK_FALSE(g.ref_runtime == first);  // timed again
  CHECK(log::read_jsonl(file).size() == 2);
}

namespace {

// A stand-in for the worker that speaks the golden protocol (tests/data/worker_protocol/), with
// `change` applied to every reply (Python statements on `reply` and `job`).
std::filesystem::path fake_worker(const std::string& name, const std::string& greeting_change, const std::string& change) {
  const auto dir = std::filesystem::path(KBRL_TEST_TMP) / "fake-workers";
  std::filesystem::create_directories(dir);
  const auto path = dir / (name + ".py");
  std::ofstream out(path);
  out << "import json, os, sys\n"
      << "golden = '" << KBRL_SOURCE_DIR << "/tests/data/worker_protocol'\n"
      << "def load(name):\n    with open(os.path.join(golden, name)) as f:\n        return json.load(f)\n"
      << "reply = load('ready.json')\n" << greeting_change << "\n"
      << "print(json.dumps(reply), flush=True)\n"
      << "for line in sys.stdin:\n"
      << "    job = json.loads(line)\n"
      << "    if job['op'] == 'shutdown':\n        break\n"
      << "    reply = load(job['op'] + '_reply.json')\n"
      << "    reply['job_id'] = job['job_id']\n"
      << "    " << change << "\n"
      << "    print(json.dumps(reply), flush=True)\n";
  return path;
}

core::EvalResult evaluate_with(const std::string& name, const std::string& greeting_change, const std::string& change) {
  auto c = config(name);
  c.worker_script = fake_worker(name, greeting_change, change);
  eval::LocalEvaluator ev(c);
  return ev.evaluate({request(name, kCorrectPython)})[0];
}

}  // namespace

TEST_CASE("a worker that breaks the protocol gives internal results naming the field, never a crash") {
  // The golden replies as they are: a correct, timed result (the protocol itself is sound).
  const auto golden = evaluate_with("fake-golden", "", "pass");
  INFO(golden.error_message);
  CHECK(golden.correct);
  CHECK(golden.metadata.at("compile_pch") == "used");
  REQUIRE(golden.runtime.has_value());
  CHECK(golden.runtime->mean_ms == 0.0625);

  const auto missing = evaluate_with("fake-missing", "", "reply.pop('trials_total', None)");
  CHECK(missing.error_category == ErrorCategory::internal);
  CHECK(missing.error_message.find("field 'trials_total': missing") != std::string::npos);
  CHECK(missing.compiled);
  CHECK_FALSE(missing.correct);

  const auto extra = evaluate_with("fake-extra", "", "reply['retries'] = 1");
  CHECK(extra.error_category == ErrorCategory::internal);
  CHECK(extra.error_message.find("compile job: field 'retries': not part of the protocol") != std::string::npos);
  CHECK_FALSE(extra.compiled);

  const auto wrong_run = evaluate_with("fake-wrong-run", "", "if job['op'] == 'run': reply['correct'] = 'yes'");
  CHECK(wrong_run.error_category == ErrorCategory::internal);
  CHECK(wrong_run.error_message.find("field 'correct': expected true or false") != std::string::npos);

  const auto other_job = evaluate_with("fake-other-job", "", "reply['job_id'] = 'someone-else'");
  CHECK(other_job.error_category == ErrorCategory::internal);
  CHECK(other_job.error_message.find("field 'job_id': is 'someone-else'") != std::string::npos);

  const auto old = evaluate_with("fake-old", "reply['protocol'] = 2", "pass");
  CHECK(old.error_category == ErrorCategory::internal);
  CHECK(old.error_message.find("the worker speaks protocol 2") != std::string::npos);
}

TEST_CASE("workers get the lane's environment: the GPU it owns and the build's target architectures") {
  // Fake workers (nothing runs on a GPU) that write their environment down: a HIP evaluator's
  // workers get PYTORCH_ROCM_ARCH (ROCm's torch turns it into hipcc's --offload-arch; what hipcc
  // then builds is integration:hip_compile's part) and the run lane HIP_VISIBLE_DEVICES; a CUDA
  // evaluator's get TORCH_CUDA_ARCH_LIST and CUDA_VISIBLE_DEVICES, and no ROCm setting.
  for (const auto platform : {core::DevicePlatform::hip, core::DevicePlatform::cuda}) {
    const std::string name = std::string("fake-env-") + std::string(core::to_string(platform));
    INFO(name);
    const auto env_dir = std::filesystem::path(KBRL_TEST_TMP) / name;
    std::filesystem::remove_all(env_dir);
    std::filesystem::create_directories(env_dir);
    auto c = config(name);
    c.platform = platform;
    c.devices = {1};
    c.sandbox = eval::SandboxMode::off;  // the sandbox would bind /dev/kfd or /dev/nvidia1, which this machine lacks
    c.gpu_arch = "gfx90a;gfx942";
    c.cuda_arch = "9.0";
    c.worker_script = fake_worker(name,
                                  "open(os.path.join('" + env_dir.string() +
                                      "', str(os.getpid()) + '.json'), 'w').write(json.dumps(dict(os.environ)))",
                                  "pass");
    {
      eval::LocalEvaluator ev(c);
      auto r = request(name, kCorrectPython);
      r.language = platform == core::DevicePlatform::hip ? core::KernelLanguage::hip : core::KernelLanguage::cuda;
      const auto result = ev.evaluate({r})[0];
      INFO(result.error_message);
      CHECK(result.correct);  // the golden replies
    }
    int workers = 0, run_lanes = 0;
    for (const auto& entry : std::filesystem::directory_iterator(env_dir)) {
      const auto env = core::parse_json(core::read_file(entry.path())).as_object();
      ++workers;
      auto value = [&](const char* key) { return env.contains(key) ? std::string(env.at(key).as_string()) : std::string("-"); };
      if (platform == core::DevicePlatform::hip) {
        CHECK(value("PYTORCH_ROCM_ARCH") == "gfx90a;gfx942");
        run_lanes += value("HIP_VISIBLE_DEVICES") == "1";
      } else {
        CHECK(value("PYTORCH_ROCM_ARCH") == "-");
        CHECK(value("TORCH_CUDA_ARCH_LIST") == "9.0");
        run_lanes += value("CUDA_VISIBLE_DEVICES") == "1";
      }
    }
    CHECK(workers >= 2);  // a compile worker and the run lane's
    CHECK(run_lanes == 1);
  }
}

TEST_CASE("an evaluator destroyed while a job runs returns at once and answers the job") {
  // Ctrl-C in kbrl-eval destroys the evaluator: it must not wait for a build or a run that may
  // take minutes. The candidate prints a line into its job's log when its forward starts, then
  // sleeps.
  auto c = config("destroyed-mid-job");
  auto r = request("sleeper", python_candidate("import time\n",
                                              "        print('KBRL-SLEEPING-NOW', flush=True)\n"
                                              "        time.sleep(600)\n        return x"));
  r.options.run_timeout_s = 900;
  auto sleeping = [&] {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(c.work_dir, ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      if (it->is_regular_file(ec) && it->path().extension() == ".log" &&
          core::read_file(it->path()).find("KBRL-SLEEPING-NOW") != std::string::npos)
        return true;
    }
    return false;
  };
  std::future<core::EvalResult> result;
  std::chrono::steady_clock::time_point destroying;
  {
    eval::LocalEvaluator ev(c);
    result = ev.submit(r);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!sleeping() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    REQUIRE(sleeping());
    destroying = std::chrono::steady_clock::now();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - destroying).count();
  CHECK(took < 10);
  REQUIRE(result.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  const auto got = result.get();
  CHECK_FALSE(got.correct);
  CHECK(got.error_category == ErrorCategory::internal);
}
