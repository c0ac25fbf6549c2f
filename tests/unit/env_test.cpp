// The environments with a scripted evaluator (results chosen by the test, requests recorded):
// single and multi-turn episodes, the feedback prompt and the dataset's batches (advantages:
// train_data_processing_test.cpp). tests/integration/env_local_evaluator.cpp runs real evaluations.
#include <fstream>
#include <future>
#include <set>
#include <sstream>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/env/dataset.hpp"
#include "kbrl/env/kernelbench_env.hpp"

using namespace kbrl;

namespace {

class ScriptedEvaluator : public eval::Evaluator {
 public:
  std::vector<core::EvalResult> script;
  std::vector<core::EvalRequest> seen;
  std::future<core::EvalResult> submit(core::EvalRequest r) override {
    core::EvalResult e = script.at(seen.size());
    e.request_id = r.request_id;
    e.problem_id = r.problem.id;
    seen.push_back(std::move(r));
    std::promise<core::EvalResult> p;
    p.set_value(std::move(e));
    return p.get_future();
  }
};

core::Problem problem(const std::string& id = "bundled/1_Add") {
  core::Problem p;
  p.id = id;
  p.name = "Add";
  p.source = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
             "def get_inputs():\n    return [torch.randn(4), torch.randn(4)]\ndef get_init_inputs():\n    return []\n";
  return p;
}

core::Completion answer(const std::string& body, const std::string& thinking = "I will add them.") {
  core::Completion c;
  c.text = "<think>" + thinking + "</think>\n<KERNEL>\nimport torch\nclass ModelNew(torch.nn.Module):\n" + body +
           "\n</KERNEL>";
  c.num_tokens = 40;
  return c;
}

core::EvalResult wrong() {
  core::EvalResult e;
  e.format_ok = true;
  e.compiled = true;
  e.trials_passed = 2;
  e.trials_total = 5;
  e.max_abs_error = 0.5;
  e.error_category = core::ErrorCategory::correctness;
  e.error_message = "output 0: 7 of 16 elements differ (max abs error 0.5)";
  return e;
}

core::EvalResult correct(double speedup) {
  core::EvalResult e;
  e.format_ok = e.compiled = e.correct = e.correct_on_problem_inputs = true;
  e.trials_passed = e.trials_total = 5;
  e.runtime = core::TimingStats{1.0 / speedup, 1.0 / speedup, 0, 0, 0, 10};
  e.ref_runtime = core::TimingStats{1.0, 1.0, 0, 0, 0, 10};
  e.speedup = speedup;
  return e;
}

env::EnvOptions options() {
  env::EnvOptions o;
  o.prompt.language = core::KernelLanguage::cpp;
  o.max_turns = 3;
  o.reward = reward::RewardConfig::preset("kbrl_stage1");  // 0 without a program (the default pays -0.1 format)
  return o;
}

}  // namespace

TEST_CASE("a single-turn env evaluates a program and scores it") {
  ScriptedEvaluator ev;
  ev.script = {correct(2.0)};
  env::KernelBenchEnv e(problem(), options(), ev, "b0/p/s1");
  const auto obs = e.initial_observation();
  REQUIRE(obs.messages.size() == 2);
  CHECK(obs.messages[1].content.find("class Model") != std::string::npos);
  auto f = e.step(answer("    def forward(self, a, b):\n        return a + b"));
  REQUIRE(ev.seen.size() == 1);  // submitted before the future is read
  CHECK(ev.seen[0].request_id == "b0/p/s1/t0");
  CHECK(ev.seen[0].language == core::KernelLanguage::cpp);
  CHECK(ev.seen[0].candidate_source.find("class ModelNew") != std::string::npos);
  const auto r = f.get();
  CHECK(r.done);
  CHECK_FALSE(r.next.has_value());
  CHECK(r.reward == reward::compute_reward(r.eval, r.completion, options().reward).total);
  CHECK(r.reward == Catch::Approx(1.0));  // kbrl_stage1: format, compile and every trial
  CHECK(r.metrics.at("kernel/correct") == 1);
  CHECK(r.metrics.at("kernel/speedup") == 2.0);
  CHECK(r.completion.thinking == "I will add them.");
  CHECK_THROWS_AS(e.step(answer("x")), core::InvalidArgument);
}

TEST_CASE("an answer without a program is scored without an evaluation") {
  ScriptedEvaluator ev;
  env::KernelBenchEnv e(problem(), options(), ev, "s0");
  core::Completion c;
  c.text = "<think>hmm</think> I cannot do this.";
  const auto r = e.step(c).get();
  CHECK(ev.seen.empty());
  CHECK(r.eval.error_category == core::ErrorCategory::format);
  CHECK(r.eval.request_id == "s0/t0");
  CHECK(r.metrics.at("kernel/format_ok") == 0);
  CHECK(r.reward == 0.0);
  CHECK(r.done);
}

TEST_CASE("a multi-turn episode carries feedback and stops at the first correct kernel") {
  ScriptedEvaluator ev;
  ev.script = {wrong(), correct(1.5)};
  env::MultiTurnKernelBenchEnv e(problem(), options(), ev, "s0");
  const std::string secret = "SECRET_REASONING_TOKEN";
  const auto first = e.step(answer("    def forward(self, a, b):\n        return a - b", secret)).get();
  CHECK_FALSE(first.done);
  REQUIRE(first.next.has_value());
  const auto& m = first.next->messages;
  REQUIRE(m.size() == 4);  // system, task, earlier answer, feedback
  CHECK(m[2].role == "assistant");
  CHECK(m[2].content.find("return a - b") != std::string::npos);
  CHECK(m[2].content.find(secret) == std::string::npos);  // earlier thinking is removed
  CHECK(m[3].role == "user");
  CHECK(m[3].content.find("Attempt 1 of 3: wrong outputs") != std::string::npos);
  CHECK(m[3].content.find("Correctness trials passed: 2/5") != std::string::npos);
  CHECK(m[3].content.find("7 of 16 elements differ") != std::string::npos);
  CHECK(m[3].content.find("indexing") != std::string::npos);  // advice for wrong outputs
  const auto second = e.step(answer("    def forward(self, a, b):\n        return a + b")).get();
  CHECK(second.done);
  CHECK(ev.seen.size() == 2);
  CHECK(ev.seen[1].request_id == "s0/t1");
  CHECK(second.metrics.at("turn") == 2);
  CHECK_THROWS_AS(e.step(answer("x")), core::InvalidArgument);
}

TEST_CASE("with keep_thinking, earlier answers keep their thinking, cut to its budget") {
  ScriptedEvaluator ev;
  ev.script = {wrong(), wrong(), wrong()};
  auto o = options();
  o.keep_thinking = true;
  o.thinking_excerpt_chars = 300;
  env::MultiTurnKernelBenchEnv e(problem(), o, ev, "s0");
  std::string long_thinking = "FIRST_IDEA ";
  for (int i = 0; i < 200; ++i) long_thinking += "step " + std::to_string(i) + "\n";
  long_thinking += "LAST_IDEA";
  const auto first = e.step(answer("    def forward(self, a, b):\n        return a - b", long_thinking)).get();
  REQUIRE(first.next.has_value());
  const std::string& kept = first.next->messages[2].content;
  CHECK(kept.rfind("<think>\nFIRST_IDEA", 0) == 0);  // the thinking comes first, as it was written
  CHECK(kept.find("LAST_IDEA\n</think>\n<KERNEL>") != std::string::npos);
  CHECK(kept.find("characters left out") != std::string::npos);
  const auto think_end = kept.find("</think>");
  CHECK(think_end < 300 + 200);  // the budget, plus the tags and the marker line
  CHECK(kept.find("return a - b") != std::string::npos);
  // An answer without a program keeps its thinking too, and what it said after it.
  core::Completion said;
  said.text = "<think>NO_PROGRAM_REASONING</think> I cannot do this.";
  const auto second = e.step(said).get();
  REQUIRE(second.next.has_value());
  const std::string& words = second.next->messages[4].content;
  CHECK(words.find("NO_PROGRAM_REASONING") != std::string::npos);
  CHECK(words.find("I cannot do this.") != std::string::npos);
  // Off (the default), the same thinking is removed.
  CHECK(env::earlier_answer(first.completion, 4000).find("FIRST_IDEA") == std::string::npos);
  CHECK(env::earlier_answer(first.completion, 4000, 300) == kept);
}

TEST_CASE("a multi-turn episode ends after max_turns and can require a speedup") {
  ScriptedEvaluator ev;
  ev.script = {correct(0.5), correct(0.8), correct(0.9)};
  auto o = options();
  o.early_stop_min_speedup = 1.0;  // correct but slow is not enough
  env::MultiTurnKernelBenchEnv e(problem(), o, ev, "s0");
  const auto a = e.step(answer("    pass")).get();
  CHECK_FALSE(a.done);
  CHECK(a.next->messages.back().content.find("speedup 0.500x") != std::string::npos);
  CHECK_FALSE(e.step(answer("    pass")).get().done);
  CHECK(e.step(answer("    pass")).get().done);  // the third of three turns
}

TEST_CASE("excerpts keep the head and tail within the limit") {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "line " + std::to_string(i) + "\n";
  const auto e = env::excerpt(text, 500);
  CHECK(e.size() < 560);
  CHECK(e.rfind("line 0\n", 0) == 0);
  CHECK(e.find("line 399") != std::string::npos);
  CHECK(e.find("characters left out") != std::string::npos);
  CHECK(env::excerpt("short", 500) == "short");
}

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) ++n;
  return n;
}

// What torch's cpp_extension and gcc print for a CPU extension that does not build, colours on,
// as the worker hands it over: the build log's tail, then the exception's text, which repeats it.
std::string gcc_build_failure() {
  const std::string dir = "/tmp/kbrl_eval/eval_work/builds/5d41402abc4b2a76b9719d911017c592";
  const std::string log =
      "[1/2] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=kbrl_5d41402abc4b2a76b9719d911017c592 -isystem "
      "/root/.venv/lib/python3.11/site-packages/torch/include -fPIC -std=c++17 -O3 -c " + dir + "/main.cpp -o main.o\n"
      "FAILED: main.o\n"
      "c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=kbrl_5d41402abc4b2a76b9719d911017c592 -fPIC -std=c++17 -O3 -c " + dir +
      "/main.cpp -o main.o\n"
      "In file included from /root/.venv/lib/python3.11/site-packages/torch/include/torch/extension.h:5,\n"
      "                 from " + dir + "/main.cpp:1:\n"
      "\x1b[01m\x1b[K" + dir + "/main.cpp:\x1b[m\x1b[K In function '\x1b[01m\x1b[Kat::Tensor relu_forward(at::Tensor)\x1b[m\x1b[K':\n"
      "\x1b[01m\x1b[K" + dir + "/main.cpp:9:10:\x1b[m\x1b[K \x1b[01;35m\x1b[Kwarning: \x1b[m\x1b[Kunused variable 'n' [-Wunused-variable]\n"
      "    9 |     auto n = x.numel();\n"
      "      |          ^\n"
      "\x1b[01m\x1b[K" + dir + "/main.cpp:12:5:\x1b[m\x1b[K \x1b[01;31m\x1b[Kerror: \x1b[m\x1b[K'out_ptr' was not declared in this scope; did you mean 'x_ptr'?\n"
      "   12 |     out_ptr[i] = x_ptr[i] > 0.f ? x_ptr[i] : 0.f;\n"
      "      |     \x1b[01;31m\x1b[K^~~~~~~\x1b[m\x1b[K\n"
      "      |     x_ptr\n"
      "\x1b[01m\x1b[K" + dir + "/main.cpp:15:1:\x1b[m\x1b[K \x1b[01;31m\x1b[Kerror: \x1b[m\x1b[Kexpected ';' before '}' token\n"
      "   15 | }\n"
      "      | ^\n"
      "ninja: build stopped: subcommand failed.\n";
  return log + "\nError building extension 'kbrl_5d41402abc4b2a76b9719d911017c592': " + log;
}

// nvcc's errors as the worker cleans them today (its "<build>/" placeholder).
const std::string kNvccFailure =
    "Error building extension 'kbrl_l1_21_sigmoid_s3'\n"
    "<build>/cuda.cu(15): error: too many arguments in function call\n"
    "      sigmoid_kernel<<<blocks, threads>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, 1.0f);\n"
    "                                                                                          ^\n"
    "\n"
    "<build>/cuda.cu(42): error: identifier \"kBlockK\" is undefined\n"
    "<build>/cuda.cu(15): error: too many arguments in function call\n"
    "      sigmoid_kernel<<<blocks, threads>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, 1.0f);\n"
    "                                                                                          ^\n"
    "2 errors detected in the compilation of \"<build>/cuda.cu\".\n";

// A CUDA fault raised in the candidate's forward, as a Python traceback through the worker and
// torch, with torch's C++ stack and CUDA's advice.
const std::string kCudaFault =
    "trial 1: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    "\n"
    "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 (most recent call first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x00007f3a2b1c4d5e in "
    "/root/.venv/lib/python3.11/site-packages/torch/lib/libc10.so)\n"
    "frame #1: c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool) + 0x118 "
    "(0x00007f3a2b1c9a10 in /root/.venv/lib/python3.11/site-packages/torch/lib/libc10_cuda.so)\n"
    "\n"
    "Traceback (most recent call last):\n"
    "  File \"/work/main/libkbrl/worker/kbrl_worker.py\", line 990, in run_correctness\n"
    "    out = model(*inputs)\n"
    "          ^^^^^^^^^^^^^^\n"
    "  File \"/root/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1751, in _wrapped_call_impl\n"
    "    return self._call_impl(*args, **kwargs)\n"
    "  File \"/tmp/kbrl_eval/eval_work/builds/9f86d081884c7d659a2feaa0c55ad015/candidate.py\", line 41, in forward\n"
    "    return self.ext.relu_forward(x)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^\n"
    "  File \"/root/.venv/lib/python3.11/site-packages/torch/_ops.py\", line 1158, in __call__\n"
    "    return self._op(*args, **(kwargs or {}))\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n";

}  // namespace

TEST_CASE("compiler errors reach the policy clean: first error first, each once, no paths or colours") {
  const std::string raw = gcc_build_failure();
  const std::string c = env::clean_error_text(raw, core::ErrorCategory::compile, 1500);
  INFO(c);
  CHECK(c.rfind("main.cpp:12:5: error: 'out_ptr' was not declared in this scope; did you mean 'x_ptr'?\n"
                "   12 |     out_ptr[i] = x_ptr[i] > 0.f ? x_ptr[i] : 0.f;\n"
                "      |     ^~~~~~~\n",
                0) == 0);
  CHECK(count(c, "error: 'out_ptr'") == 1);  // the log and the exception both had it
  CHECK(count(c, "main.cpp:15:1: error: expected ';' before '}' token") == 1);
  CHECK(c.find("main.cpp:12:5") < c.find("main.cpp:15:1"));
  for (const std::string noise : {"/tmp", "/root", "5d41402a", "\x1b", "[K", "ninja", "FAILED", "-MMD", "c++ ", "warning",
                                  "unused variable", "In file included", "In function", "Error building extension"})
    CHECK_FALSE(has(c, noise));

  const std::string n = env::clean_error_text(kNvccFailure, core::ErrorCategory::compile, 1500);
  INFO(n);
  CHECK(n.rfind("cuda.cu(15): error: too many arguments in function call\n", 0) == 0);
  CHECK(has(n, "\n      sigmoid_kernel<<<blocks, threads>>>"));
  CHECK(has(n, "cuda.cu(42): error: identifier \"kBlockK\" is undefined"));
  CHECK(count(n, "too many arguments") == 1);
  CHECK_FALSE(has(n, "<build>"));
  CHECK_FALSE(has(n, "detected in the compilation"));
  CHECK_FALSE(has(n, "kbrl_l1_21"));

  // The linker's errors, without collect2's summary.
  const std::string ld = env::clean_error_text(
      "/usr/bin/ld: main.o: in function `relu_forward(at::Tensor)':\n"
      "main.cpp:(.text+0x1a4): undefined reference to `launch_relu(float const*, float*, int)'\n"
      "collect2: error: ld returned 1 exit status\n",
      core::ErrorCategory::compile, 1500);
  CHECK(ld == "main.cpp:(.text+0x1a4): undefined reference to `launch_relu(float const*, float*, int)'");
}

TEST_CASE("a cascade of compiler errors is cut to the first ones and a count") {
  std::string raw;
  for (int i = 1; i <= 40; ++i)
    raw += "/tmp/b/0123456789abcdef0123/main.cpp:" + std::to_string(10 + i) + ":3: error: 'T" + std::to_string(i) +
           "' was not declared in this scope\n   " + std::to_string(10 + i) + " |   T" + std::to_string(i) +
           " x;\n      |   ^~\n";
  const std::string c = env::clean_error_text(raw, core::ErrorCategory::compile, 600);
  INFO(c);
  CHECK(c.size() <= 600);
  CHECK(c.rfind("main.cpp:11:3: error: 'T1' was not declared", 0) == 0);
  CHECK(has(c, "more errors]"));
  CHECK_FALSE(has(c, "'T40'"));
  // The count is what was left out.
  const auto shown = count(c, ": error: ");
  CHECK(has(c, "[... " + std::to_string(40 - shown) + " more errors]"));
}

TEST_CASE("tracebacks keep the candidate's frames and the exception, not the evaluator's or torch's") {
  const std::string c = env::clean_error_text(kCudaFault, core::ErrorCategory::crash, 1500);
  INFO(c);
  CHECK(c.rfind("trial 1: RuntimeError: CUDA error: an illegal memory access was encountered\n", 0) == 0);
  CHECK(has(c, "Traceback (most recent call last):\n"
               "  File \"candidate.py\", line 41, in forward\n"
               "    return self.ext.relu_forward(x)\n"
               "           ^^^^^^^^^^^^^^^^^^^^^^^^\n"
               "RuntimeError: CUDA error: an illegal memory access was encountered"));
  for (const std::string noise : {"kbrl_worker.py", "module.py", "_ops.py", "_call_impl", "frame #", "0x", "libc10",
                                  "CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA", "asynchronously", "Exception raised from",
                                  "9f86d081", "/tmp", "/root", "/pytorch"})
    CHECK_FALSE(has(c, noise));

  // No frame of the candidate's: the header goes too, the exception stays.
  const std::string none = env::clean_error_text(
      "Traceback (most recent call last):\n"
      "  File \"/root/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1751, in _wrapped_call_impl\n"
      "    return self._call_impl(*args, **kwargs)\n"
      "TypeError: forward() takes 2 positional arguments but 3 were given\n",
      core::ErrorCategory::runtime, 1500);
  CHECK(none == "TypeError: forward() takes 2 positional arguments but 3 were given");
  // A progress line redrawn with carriage returns shows its last state; a long text keeps head and tail.
  CHECK(env::clean_error_text("step 1%\rstep 50%\rstep 100%\nValueError: bad", core::ErrorCategory::runtime, 0) ==
        "step 100%\nValueError: bad");
  std::string lines;
  for (int i = 0; i < 500; ++i) lines += "trial " + std::to_string(i) + ": values differ at index " + std::to_string(i) + "\n";
  const std::string cut = env::clean_error_text(lines, core::ErrorCategory::correctness, 400);
  CHECK(cut.size() <= 460);
  CHECK(cut.rfind("trial 0:", 0) == 0);
  CHECK(has(cut, "trial 499:"));
}

TEST_CASE("feedback wording is fixed per outcome and holds nothing else") {
  auto o = options();
  o.error_excerpt_chars = 800;
  core::EvalResult compile;
  compile.format_ok = true;
  compile.error_category = core::ErrorCategory::compile;
  compile.error_message = gcc_build_failure();
  const std::string m = env::feedback_message(compile, 1, 3, o);
  INFO(m);
  CHECK(m.rfind("Attempt 1 of 3: did not compile.\n\nCompiler errors:\n```\nmain.cpp:12:5: error:", 0) == 0);
  CHECK(has(m, "read the first compiler error"));
  CHECK(has(m, "Write the complete improved program defining ModelNew"));
  CHECK_FALSE(has(m, "/tmp"));
  CHECK_FALSE(has(m, "\x1b"));

  // A huge error text still gives a bounded message.
  compile.error_message = std::string(1 << 20, 'x');
  CHECK(env::feedback_message(compile, 1, 3, o).size() < 800 + 600);

  core::EvalResult crash;
  crash.format_ok = crash.compiled = true;
  crash.error_category = core::ErrorCategory::crash;
  crash.error_message = kCudaFault;
  const std::string cm = env::feedback_message(crash, 2, 3, o);
  CHECK(cm.rfind("Attempt 2 of 3: crashed.\n\nError:\n```\ntrial 1: RuntimeError: CUDA error", 0) == 0);

  // The evaluator's own failures are not the policy's business: no error text at all.
  core::EvalResult internal;
  internal.error_category = core::ErrorCategory::internal;
  internal.error_message = "worker child: BrokenPipeError: [Errno 32] Broken pipe\n  File \"/work/main/libkbrl/worker/kbrl_worker.py\"";
  const std::string im = env::feedback_message(internal, 1, 3, o);
  CHECK(im.rfind("Attempt 1 of 3: evaluator error.\n\nThe evaluator failed", 0) == 0);
  CHECK_FALSE(has(im, "Broken pipe"));

  // The checker's findings are its error text: listed once, the first five.
  core::EvalResult checked;
  checked.error_category = core::ErrorCategory::static_check;
  for (int i = 1; i <= 7; ++i) {
    checked.static_findings.push_back({"torch_fallback", "fallback", core::Severity::error, 10 + i, "calls torch.relu"});
    checked.error_message += "torch_fallback (line " + std::to_string(10 + i) + "): calls torch.relu\n";
  }
  checked.static_findings.push_back({"unused_import", "style", core::Severity::warning, 1, "imports os"});
  const std::string sm = env::feedback_message(checked, 1, 3, o);
  INFO(sm);
  CHECK(sm.rfind("Attempt 1 of 3: rejected by the static checker.\nStatic check 'torch_fallback' (line 11): calls torch.relu\n", 0) == 0);
  CHECK(count(sm, "calls torch.relu") == 5);
  CHECK(has(sm, "[... 2 more static check findings]"));
  CHECK_FALSE(has(sm, "imports os"));

  // Every category has its outcome line and its advice.
  for (const auto category : {core::ErrorCategory::format, core::ErrorCategory::static_check, core::ErrorCategory::compile,
                              core::ErrorCategory::runtime, core::ErrorCategory::correctness, core::ErrorCategory::timeout,
                              core::ErrorCategory::crash, core::ErrorCategory::out_of_memory,
                              core::ErrorCategory::reward_hack, core::ErrorCategory::internal}) {
    core::EvalResult e;
    e.error_category = category;
    e.error_message = "detail";
    const std::string text = env::feedback_message(e, 1, 2, o);
    INFO(core::to_string(category) << ":\n" << text);
    const auto first_line = text.substr(0, text.find('\n'));
    CHECK(first_line.rfind("Attempt 1 of 2: ", 0) == 0);
    CHECK(first_line.back() == '.');
    CHECK(has(text, "\n\nWrite the complete improved program defining ModelNew, in the same answer format."));
    CHECK(has(text, "```\ndetail\n```") == (category != core::ErrorCategory::internal));
  }
}

TEST_CASE("the feedback examples in docs/environments.md are what feedback_message writes") {
  std::ifstream in(std::string(KBRL_SOURCE_DIR) + "/docs/environments.md");
  std::stringstream docs;
  docs << in.rdbuf();
  core::EvalResult nvcc;
  nvcc.format_ok = true;
  nvcc.error_category = core::ErrorCategory::compile;
  nvcc.error_message = kNvccFailure;
  for (const auto& e : {nvcc, wrong()}) {
    const std::string m = env::feedback_message(e, 1, 3, options());
    INFO(m);
    CHECK(has(docs.str(), "~~~\n" + m + "\n~~~\n"));
  }
}

TEST_CASE("dataset batches depend only on the seed and the index") {
  ScriptedEvaluator ev;
  env::DatasetOptions o;
  for (int i = 0; i < 10; ++i) o.problems.push_back(problem("p" + std::to_string(i)));
  o.eval_fraction = 0.2;
  o.batch_size = 3;
  o.group_size = 2;
  o.seed = 7;
  env::KernelBenchDataset a(o), b(o);
  CHECK(a.eval_problems().size() == 2);
  CHECK(a.train_problems().size() == 8);
  CHECK(a.batches_per_epoch() == 2);
  std::set<std::string> eval_ids;
  for (const auto& p : a.eval_problems()) eval_ids.insert(p.id);
  std::set<std::string> epoch;
  for (std::int64_t i = 0; i < 2; ++i) {
    CHECK(a.batch_problem_ids(i) == b.batch_problem_ids(i));
    for (const auto& id : a.batch_problem_ids(i)) {
      CHECK(eval_ids.count(id) == 0);
      CHECK(epoch.insert(id).second);  // no problem twice in an epoch
    }
  }
  bool differs = false;
  for (std::int64_t i = 0; i < 2; ++i) differs |= a.batch_problem_ids(i) != a.batch_problem_ids(i + 2);
  CHECK(differs);  // the next epoch is shuffled again
  const auto builders = a.batch(5, ev);
  REQUIRE(builders.size() == 3);
  auto envs = builders[0]->make_envs();
  CHECK(envs.size() == 2);
  // The envs evaluate through the evaluator the batch was made with.
  ev.script = {correct(1.5)};
  auto f = envs[0]->step(answer("    def forward(self, a, b):\n        return a + b"));
  REQUIRE(ev.seen.size() == 1);
  CHECK(ev.seen[0].request_id.rfind("b5/", 0) == 0);
  CHECK(f.get().eval.speedup == 1.5);
  o.seed = 8;
  env::KernelBenchDataset c(o);
  CHECK(c.batch_problem_ids(0) != a.batch_problem_ids(0));
  o.batch_size = 0;
  CHECK_THROWS_AS(env::KernelBenchDataset(o), core::InvalidArgument);
}

TEST_CASE("dataset eval_problems names the held-out problems whatever the seed") {
  env::DatasetOptions o;
  for (const char* n : {"1_relu", "2_square", "3_abs", "4_cube", "5_softsign"}) o.problems.push_back(problem(n));
  o.eval_problems = {"*cube", "5_SOFT*"};
  for (const std::uint64_t seed : {0, 1, 2}) {
    o.seed = seed;
    env::KernelBenchDataset d(o);
    std::vector<std::string> held, trained;
    for (const auto& p : d.eval_problems()) held.push_back(p.id);
    for (const auto& p : d.train_problems()) trained.push_back(p.id);
    CHECK(held == std::vector<std::string>{"4_cube", "5_softsign"});
    CHECK(trained == std::vector<std::string>{"1_relu", "2_square", "3_abs"});
  }
  o.eval_problems = {"*cube", "*gelu*"};
  CHECK_THROWS_WITH(env::KernelBenchDataset(o), Catch::Contains("eval_problems '*gelu*' matches no problem"));
  o.eval_problems = {"*"};
  CHECK_THROWS_WITH(env::KernelBenchDataset(o), Catch::Contains("leaving none to train on"));
}
