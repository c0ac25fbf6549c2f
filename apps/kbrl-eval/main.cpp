// kbrl-eval: evaluates kernel candidates against KernelBench-format problems.
//   kbrl-eval generations --problems <root|dir|jsonl> --level L --run <dir> [options]
//   kbrl-eval kernel --problem <file> --kernel <file> [options]
//   kbrl-eval model --model <checkpoint> [--adapter <dir>] --problems ... --level L --samples K --run <dir>
#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/dataset/load.hpp"
#include "kbrl/eval/local_evaluator.hpp"
#include "kbrl/check/static_check.hpp"
#include "kbrl/eval/summary.hpp"
#include "kbrl/log/progress.hpp"
#include "kbrl/log/tensorboard.hpp"
#include "kbrl/prompt/answer_parser.hpp"
#ifdef KBRL_EVAL_HAS_MODEL
#include "sample_model.hpp"
#endif

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace kbrl;

namespace {

constexpr const char* kUsage = R"(usage:
  kbrl-eval generations --problems PATH --level L --run DIR [options]
      Evaluates every DIR/level_L_problem_P_sample_S_kernel.py against problem P of level L
      (PATH: a KernelBench checkout, a folder of problems, or a JSONL file; a plain folder's
      problems count as level L). Writes DIR/eval_results.json (KernelBench's layout),
      DIR/eval_results.jsonl (every field, one line per candidate, written as results arrive)
      and DIR/eval_summary.json. Already evaluated candidates are skipped; Ctrl-C keeps what
      is done.
  kbrl-eval kernel --problem FILE --kernel FILE [options]
      Evaluates one candidate and prints the whole result.
  kbrl-eval model --model DIR [--adapter DIR] --problems PATH --level L --samples K --run DIR [options]
      Samples K answers per problem from a checkpoint (plus a PEFT adapter), writes them to DIR
      as generations (DIR/generations.jsonl holds the raw answers), then evaluates them exactly
      as `generations` does: same files, same summary (pass@k, fast_p, speedups). Resumes both
      halves. --tensorboard RUN --step N also writes the summary into RUN/tb at step N.

model options:
  --max-tokens N             tokens per answer (default 2048)
  --temperature T            (default 1.0; 0 is greedy)
  --top-p P, --top-k K       (default off)
  --sample-seed N            seeds the draws (default 0)
  --chat-template NAME       auto (from the tokenizer), chatml, qwen2.5, qwen3, llama3, ...
  --model-device D           auto, cpu, cuda, cuda:N (default auto)
  --model-dtype D            auto, bf16, fp32 (default auto: bf16 on cuda)
  --no-one-shot              leave the worked example out of the prompt

options:
  --device cpu|cuda|hip      where kernels run (default cpu)
  --language L               cuda, triton, hip or cpp (default: cpp on cpu, cuda on cuda, hip on hip)
  --precision P              fp32, fp16 or bf16 (default fp32)
  --trials N                 correctness trials (default 5)
  --timing-trials N          timed runs (default 100)
  --warmup N                 warm-up runs before timing (default 5)
  --no-timing                check correctness only
  --no-input-families        skip the extra trials on transformed inputs (docs/evaluator.md)
  --kernelbench-inputs       make inputs on the host and copy them, exactly as KernelBench does
  --seed N                   fixed seed for inputs and weights (default: fresh per evaluation)
  --gpus 0,1                 GPU indices, one run lane each (default 0)
  --compile-workers N        parallel builds (default: one per core)
  --compile-nice N           niceness of the compilers (default 10; 0: the evaluator's own)
  --compile-timeout S        seconds (default 600)
  --run-timeout S            seconds (default 300)
  --sandbox auto|on|off      bubblewrap around the workers (default auto: where installed)
  --static-config FILE       static-check severities, JSON {"severity": {"rule": "off|warning|error"}}
  --no-static-check          skip the static checker (runtime defenses still apply)
  --work-dir DIR             build cache, logs, baseline timings (default ~/.cache/kbrl)
  --no-baseline-cache        time every reference again instead of reusing the work dir's timings
  --no-compile-pch           compile the binding file without a precompiled torch/extension.h
  --no-light-headers         compile CUDA sources against torch's full headers at once
  --no-parallel-passes       run nvcc's host and device passes one after the other (as nvcc does)
  --python PATH              interpreter with torch for the workers
  --summary-json FILE        also write the summary here
)";

const std::set<std::string> kOptions = {"problems", "level", "run", "problem", "kernel", "device", "language",
                                        "precision", "trials", "timing-trials", "warmup", "seed", "gpus",
                                        "compile-workers", "compile-nice", "compile-timeout", "run-timeout", "sandbox",
                                        "work-dir", "python", "summary-json", "static-config", "model",
                                        "adapter", "samples", "max-tokens", "temperature", "top-p", "top-k",
                                        "sample-seed", "chat-template", "model-device", "model-dtype",
                                        "tensorboard", "step"};
const std::set<std::string> kFlags = {"no-timing",          "no-static-check",    "no-input-families",
                                      "kernelbench-inputs", "no-baseline-cache",  "no-compile-pch",
                                      "no-light-headers",   "no-parallel-passes", "no-one-shot",
                                      "help"};

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw core::InvalidArgument(fmt::format("cannot read {}", p.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

eval::LocalEvaluatorConfig evaluator_config(const apps::Args& args) {
  eval::LocalEvaluatorConfig c;
  c.platform = core::parse_device_platform(args.get("device", "cpu"));
  if (auto p = args.optional("python")) c.python = *p;
  if (auto w = args.optional("work-dir")) c.work_dir = *w;
  c.compile_workers = static_cast<int>(args.get_int("compile-workers", 0));
  c.compile_nice = static_cast<int>(args.get_int("compile-nice", 10));
  if (c.compile_nice < 0 || c.compile_nice > 19) throw apps::UsageError("--compile-nice must be 0 to 19");
  c.devices = args.get_int_list("gpus");
  c.static_checks = !args.flag("no-static-check");
  c.baseline_cache = !args.flag("no-baseline-cache");
  c.compile_pch = !args.flag("no-compile-pch");
  c.compile_light_headers = !args.flag("no-light-headers");
  c.compile_parallel_passes = !args.flag("no-parallel-passes");
  if (auto f = args.optional("static-config")) c.static_check_severity = check::load_static_check_config(*f).severity;
  const std::string sandbox = args.get("sandbox", "auto");
  if (sandbox == "auto") c.sandbox = eval::SandboxMode::automatic;
  else if (sandbox == "on") c.sandbox = eval::SandboxMode::on;
  else if (sandbox == "off") c.sandbox = eval::SandboxMode::off;
  else throw apps::UsageError("--sandbox must be auto, on or off");
  return c;
}

core::EvalRequest base_request(const apps::Args& args, core::DevicePlatform platform) {
  core::EvalRequest r;
  const std::string default_language = platform == core::DevicePlatform::cpu    ? "cpp"
                                       : platform == core::DevicePlatform::cuda ? "cuda"
                                                                                : "hip";
  r.language = core::parse_kernel_language(args.get("language", default_language));
  r.precision = core::parse_precision(args.get("precision", "fp32"));
  r.options.correctness_trials = static_cast<int>(args.get_int("trials", 5));
  r.options.timing_trials = static_cast<int>(args.get_int("timing-trials", 100));
  r.options.warmup_runs = static_cast<int>(args.get_int("warmup", 5));
  r.options.measure_performance = !args.flag("no-timing");
  r.options.input_families = !args.flag("no-input-families");
  r.options.kernelbench_inputs = args.flag("kernelbench-inputs");
  if (args.has("seed")) r.options.seed = static_cast<std::uint64_t>(args.get_int("seed", 0));
  r.options.compile_timeout_s = args.get_double("compile-timeout", 600);
  r.options.run_timeout_s = args.get_double("run-timeout", 300);
  if (r.options.correctness_trials < 1) throw apps::UsageError("--trials must be at least 1");
  if (r.options.timing_trials < 1) throw apps::UsageError("--timing-trials must be at least 1");
  return r;
}

// A generation file is usually the program itself; a raw model answer (<think>, <KERNEL>,
// fenced code) is reduced to its program with the same parser the RL loop uses.
std::string candidate_program(const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (text.find("```") == std::string::npos && lower.find("<kernel>") == std::string::npos) return text;
  const core::Completion c = prompt::parse_completion(text);
  return c.kernel.empty() ? text : c.kernel;
}

std::string verdict(const core::EvalResult& r) {
  if (r.correct)
    return r.speedup ? fmt::format("correct, {:.3f}x the reference", *r.speedup) : std::string("correct");
  return fmt::format("{}: {}", core::to_string(r.error_category), r.error_message.substr(0, r.error_message.find('\n')));
}

void write_summary(const eval::EvalSummary& s, const apps::Args& args, const fs::path& default_path) {
  const std::string text = json::serialize(eval::to_json_value(s));
  std::vector<fs::path> paths;
  if (!default_path.empty()) paths.push_back(default_path);
  if (auto p = args.optional("summary-json")) paths.emplace_back(*p);
  for (const auto& p : paths) {
    std::ofstream out(p, std::ios::trunc);
    out << text << "\n";
    if (!out) throw core::Error(fmt::format("cannot write {}", p.string()));
  }
}

int cmd_kernel(const apps::Args& args) {
  const fs::path problem_path = args.required("problem");
  const fs::path kernel_path = args.required("kernel");
  const core::Problem p = dataset::load_problem_file(problem_path);
  auto config = evaluator_config(args);
  core::EvalRequest r = base_request(args, config.platform);
  r.request_id = kernel_path.filename().string();
  r.problem = p;
  r.candidate_source = candidate_program(read_text(kernel_path));
  eval::LocalEvaluator evaluator(config);
  const core::EvalResult result = evaluator.evaluate({r})[0];
  json::value v = json::value_from(result);
  std::cout << json::serialize(v) << "\n";
  std::cerr << verdict(result) << "\n";
  return 0;
}

struct Candidate {
  int problem = 0;
  int sample = 0;
  fs::path path;
};

int cmd_generations(const apps::Args& args) {
  const fs::path problems_path = args.required("problems");
  const int level = static_cast<int>(args.get_int("level", -1));
  if (level < 0) throw apps::UsageError("--level is required");
  const fs::path run_dir = args.required("run");
  if (!fs::is_directory(run_dir)) throw core::InvalidArgument(fmt::format("--run: {} is not a directory", run_dir.string()));

  std::map<int, core::Problem> by_number;
  for (auto& p : dataset::load_problems(problems_path))
    if (p.level == level || p.level == 0) by_number.emplace(p.number, std::move(p));

  const std::regex name(fmt::format(R"(level_{}_problem_(\d+)_sample_(\d+)_kernel\.py)", level));
  std::vector<Candidate> candidates;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(file, m, name))
      candidates.push_back({std::stoi(m[1]), std::stoi(m[2]), entry.path()});
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return std::tie(a.problem, a.sample) < std::tie(b.problem, b.sample); });
  if (candidates.empty())
    throw core::InvalidArgument(fmt::format("no level_{}_problem_P_sample_S_kernel.py files in {}", level, run_dir.string()));

  // Resume: what eval_results.jsonl already holds is not evaluated again.
  const fs::path jsonl_path = run_dir / "eval_results.jsonl";
  std::map<std::pair<int, int>, core::EvalResult> done;
  if (fs::exists(jsonl_path)) {
    std::istringstream lines(read_text(jsonl_path));
    std::string line;
    while (std::getline(lines, line)) {
      try {
        const auto o = core::parse_json(line).as_object();
        done[{static_cast<int>(o.at("problem").to_number<int>()), static_cast<int>(o.at("sample").to_number<int>())}] =
            json::value_to<core::EvalResult>(o.at("result"));
      } catch (const std::exception&) {
        // a line torn by a kill: that candidate is evaluated again
      }
    }
  }

  auto config = evaluator_config(args);
  const core::EvalRequest base = base_request(args, config.platform);
  std::vector<Candidate> todo;
  std::set<int> missing;
  for (const auto& c : candidates) {
    if (done.count({c.problem, c.sample}) != 0) continue;
    if (by_number.count(c.problem) == 0) {
      missing.insert(c.problem);
      continue;
    }
    todo.push_back(c);
  }
  for (int m : missing)
    std::cerr << fmt::format("warning: no problem {} at level {} in {}; its samples are skipped\n", m, level,
                             problems_path.string());
  std::cerr << fmt::format("{} candidates, {} already evaluated, {} to go\n", candidates.size(), done.size(), todo.size());

  std::ofstream jsonl(jsonl_path, std::ios::app);
  if (!jsonl) throw core::Error(fmt::format("cannot write {}", jsonl_path.string()));
  std::signal(SIGINT, on_sigint);
  std::signal(SIGTERM, on_sigint);
  {
    eval::LocalEvaluator evaluator(config);
    std::vector<std::pair<Candidate, std::future<core::EvalResult>>> pending;
    for (const auto& c : todo) {
      core::EvalRequest r = base;
      r.request_id = fmt::format("level_{}_problem_{}_sample_{}", level, c.problem, c.sample);
      r.problem = by_number.at(c.problem);
      r.candidate_source = candidate_program(read_text(c.path));
      pending.emplace_back(c, evaluator.submit(std::move(r)));
    }
    log::Progress progress("evaluating", static_cast<long>(pending.size()));
    int correct = 0;
    while (!pending.empty() && !g_interrupted) {
      bool any = false;
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
          ++it;
          continue;
        }
        const core::EvalResult r = it->second.get();
        correct += r.correct;
        const std::string line = json::serialize(json::object{{"problem", it->first.problem},
                                                              {"sample", it->first.sample},
                                                              {"file", it->first.path.filename().string()},
                                                              {"result", json::value_from(r)}});
        jsonl << line << std::endl;
        // Kept as a resumed run will read it back (Boost.JSON may parse a double an ulp off), so
        // that the summary and eval_results.json do not depend on whether the run was resumed.
        done[{it->first.problem, it->first.sample}] =
            json::value_to<core::EvalResult>(core::parse_json(line).as_object().at("result"));
        it = pending.erase(it);
        any = true;
        progress.advance(1, fmt::format("{} correct", correct));
      }
      if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    progress.finish();
    if (g_interrupted) std::cerr << fmt::format("interrupted: {} evaluations not finished; run again to resume\n", pending.size());
  }

  // KernelBench's eval_results.json: problem id -> sample id -> result.
  json::object kb;
  std::vector<core::EvalResult> all;
  for (const auto& [key, r] : done) {
    json::value v = json::value_from(r);
    v.as_object()["sample_id"] = key.second;
    json::value& samples = kb[std::to_string(key.first)];  // null when this problem is new
    if (!samples.is_object()) samples.emplace_object();
    samples.as_object()[std::to_string(key.second)] = std::move(v);
    all.push_back(r);
  }
  {
    std::ofstream out(run_dir / "eval_results.json", std::ios::trunc);
    out << json::serialize(kb) << "\n";
  }
  const auto summary = eval::summarize(all);
  write_summary(summary, args, run_dir / "eval_summary.json");
  std::cout << eval::format_summary(summary);
  return g_interrupted ? 130 : 0;
}

int cmd_model(const apps::Args& args) {
#ifdef KBRL_EVAL_HAS_MODEL
  const fs::path problems_path = args.required("problems");
  const int level = static_cast<int>(args.get_int("level", -1));
  if (level < 0) throw apps::UsageError("--level is required");
  const fs::path run_dir = args.required("run");
  fs::create_directories(run_dir);
  std::vector<core::Problem> problems;
  for (auto& p : dataset::load_problems(problems_path))
    if (p.level == level || p.level == 0) problems.push_back(std::move(p));
  if (problems.empty())
    throw core::InvalidArgument(fmt::format("no problems of level {} in {}", level, problems_path.string()));
  apps::ModelSamplingOptions o;
  o.model = args.required("model");
  if (auto a = args.optional("adapter")) o.adapter = *a;
  o.samples = static_cast<int>(args.get_int("samples", 1));
  o.max_tokens = args.get_int("max-tokens", 2048);
  o.temperature = args.get_double("temperature", 1.0);
  o.top_p = args.get_double("top-p", 1.0);
  o.top_k = args.get_int("top-k", 0);
  o.seed = static_cast<std::uint64_t>(args.get_int("sample-seed", 0));
  o.chat_template = args.get("chat-template", "auto");
  o.device = args.get("model-device", "auto");
  o.dtype = args.get("model-dtype", "auto");
  const auto platform = core::parse_device_platform(args.get("device", "cpu"));
  const core::EvalRequest base = base_request(args, platform);
  o.prompt.language = base.language;
  o.prompt.precision = base.precision;
  o.prompt.one_shot = !args.flag("no-one-shot");
  const int written = apps::sample_generations(problems, level, run_dir, o);
  std::cerr << fmt::format("{} answers sampled into {}\n", written, run_dir.string());
  const int rc = cmd_generations(args);
  if (auto tb_run = args.optional("tensorboard")) {
    const long step = args.get_int("step", -1);
    if (step < 0) throw apps::UsageError("--tensorboard needs --step");
    const auto summary = core::parse_json(read_text(run_dir / "eval_summary.json")).as_object();
    log::TensorBoardWriter tb(fs::path(*tb_run) / "tb");
    for (const auto& [key, value] : summary) {
      if (value.is_number()) tb.add_scalar(fmt::format("eval/{}", std::string(key)), value.to_number<double>(), step);
      if (value.is_object())
        for (const auto& [sub, v] : value.as_object())
          if (v.is_number())
            tb.add_scalar(fmt::format("eval/{}/{}", std::string(key), std::string(sub)), v.to_number<double>(), step);
    }
    tb.flush();
    std::cerr << fmt::format("summary written to {} at step {}\n", (fs::path(*tb_run) / "tb").string(), step);
  }
  return rc;
#else
  (void)args;
  throw core::Error("kbrl-eval model needs libtorch: this kbrl-eval was built without it (KBRL_WITH_TORCH=OFF)");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> rest(argv + 1, argv + argc);
  if (rest.empty() || rest[0] == "--help" || rest[0] == "-h" || rest[0] == "help") {
    std::cout << kUsage;
    return rest.empty() ? 2 : 0;
  }
  const std::string command = rest[0];
  rest.erase(rest.begin());
  try {
    const apps::Args args(rest, kOptions, kFlags);
    if (args.flag("help")) {
      std::cout << kUsage;
      return 0;
    }
    if (!args.positional().empty()) throw apps::UsageError("unexpected argument '" + args.positional()[0] + "'");
    if (command == "generations") return cmd_generations(args);
    if (command == "kernel") return cmd_kernel(args);
    if (command == "model") return cmd_model(args);
    throw apps::UsageError("unknown command '" + command + "' (generations, kernel, model)");
  } catch (const apps::UsageError& e) {
    std::cerr << "kbrl-eval: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kbrl-eval: " << e.what() << "\n";
    return 1;
  }
}
