// kbrl-eval: evaluates kernel candidates against KernelBench-format problems.
//   kbrl-eval generations --problems <root|dir|jsonl> --level L --run <dir> [options]
//   kbrl-eval kernel --problem <file> --kernel <file> [options]
//   kbrl-eval model --model <checkpoint> [--adapter <dir>] --problems ... --level L --samples K --run <dir>
// `kbrl-eval <command> --help` lists every option; the evaluator's come from kbrl/eval/settings.hpp.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/dataset/load.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/eval/local_evaluator.hpp"
#include "kbrl/eval/settings.hpp"
#include "kbrl/eval/summary.hpp"
#include "kbrl/log/jsonl.hpp"
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

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted = true; }

// What every command asks of each request besides the evaluator settings.
struct RequestOptions {
  std::string language;  // empty: the device's usual one
  std::string precision = "fp32";
  std::string summary_json;  // also write the summary here
};

void add_request_options(CLI::App& cmd, RequestOptions& o) {
  cmd.add_option("--language", o.language, "cuda, triton, hip or cpp [default: cpp on cpu, cuda on cuda, hip on hip]")
      ->check(CLI::IsMember({"cuda", "triton", "hip", "cpp"}));
  cmd.add_option("--precision", o.precision, "fp32, fp16 or bf16 [default: fp32]")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
}

// A server keeps the result of every request_id it finished, and refuses the same id for another
// request: on a fleet, a candidate's id carries a hash of the request, so that another run's
// file of the same name is not taken for this one (and the same request is answered again).
void name_request(core::EvalRequest& r, const eval::EvaluatorSettings& settings, const std::string& name) {
  r.request_id = name;
  if (!settings.endpoints.empty()) r.request_id += "-" + core::sha256_hex(core::to_json(r)).substr(0, 16);
}

core::EvalRequest base_request(const RequestOptions& o, const eval::EvaluatorSettings& settings) {
  core::EvalRequest r;
  const auto platform = settings.local.platform;
  const std::string default_language = platform == core::DevicePlatform::cpu    ? "cpp"
                                       : platform == core::DevicePlatform::cuda ? "cuda"
                                                                                : "hip";
  r.language = core::parse_kernel_language(o.language.empty() ? default_language : o.language);
  r.precision = core::parse_precision(o.precision);
  r.options = settings.options;
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

void write_summary(const eval::EvalSummary& s, const std::string& extra_path, const fs::path& default_path) {
  const std::string text = json::serialize(eval::to_json_value(s));
  std::vector<fs::path> paths;
  if (!default_path.empty()) paths.push_back(default_path);
  if (!extra_path.empty()) paths.emplace_back(extra_path);
  for (const auto& p : paths) {
    std::ofstream out(p, std::ios::trunc);
    out << text << "\n";
    if (!out) throw core::Error(fmt::format("cannot write {}", p.string()));
  }
}

struct KernelCommand {
  std::string problem, kernel;
  RequestOptions request;
};

int cmd_kernel(const KernelCommand& k, const eval::EvaluatorSettings& settings) {
  const core::Problem p = dataset::load_problem_file(k.problem);
  core::EvalRequest r = base_request(k.request, settings);
  r.problem = p;
  r.candidate_source = candidate_program(core::read_file(k.kernel));
  name_request(r, settings, fs::path(k.kernel).filename().string());
  const auto evaluator = eval::make_evaluator(settings);
  const core::EvalResult result = evaluator->evaluate({r})[0];
  json::value v = json::value_from(result);
  std::cout << json::serialize(v) << "\n";
  std::cerr << verdict(result) << "\n";
  return apps::kExitOk;
}

struct GenerationsCommand {
  std::string problems;
  int level = 0;
  std::string run;
  std::string layout = "current";  // of eval_results.json
  RequestOptions request;
};

struct Candidate {
  int problem = 0;
  int sample = 0;
  fs::path path;
};

// --problems, or where KernelBench is found without it (dataset::find_kernelbench: $KERNELBENCH_ROOT,
// else a checkout in the working directory or beside the run folder), said on stderr.
std::string problems_of(const GenerationsCommand& g) {
  if (!g.problems.empty()) return g.problems;
  try {
    const fs::path found =
        dataset::find_kernelbench({fs::current_path(), fs::absolute(g.run).lexically_normal().parent_path()});
    std::cerr << "kbrl-eval: problems from " << found.string() << "\n";
    return found.string();
  } catch (const core::InvalidArgument& e) {
    throw apps::UsageError(fmt::format("--problems: {}", e.what()));
  }
}

int cmd_generations(const GenerationsCommand& g, const eval::EvaluatorSettings& settings) {
  // First, so that an interrupt at any point ends in the files of what is done and exit code 130.
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  const fs::path problems_path = problems_of(g);
  const int level = g.level;
  const fs::path run_dir = g.run;
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

  // Resume: what eval_results.jsonl already holds is not evaluated again. A line torn by a kill
  // is not read (and is cut off when the writer below opens the file): that candidate is
  // evaluated again.
  const fs::path jsonl_path = run_dir / "eval_results.jsonl";
  std::map<std::pair<int, int>, core::EvalResult> done;
  for (const auto& o : log::read_jsonl(jsonl_path)) {
    try {
      done[{static_cast<int>(o.at("problem").to_number<int>()), static_cast<int>(o.at("sample").to_number<int>())}] =
          json::value_to<core::EvalResult>(o.at("result"));
    } catch (const std::exception&) {
      // an object that is not a result line of ours: its candidate, if any, is evaluated again
    }
  }

  const core::EvalRequest base = base_request(g.request, settings);
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

  log::JsonlWriter jsonl(jsonl_path);
  {
    const auto evaluator = eval::make_evaluator(settings);
    std::vector<std::pair<Candidate, std::future<core::EvalResult>>> pending;
    for (const auto& c : todo) {
      core::EvalRequest r = base;
      r.problem = by_number.at(c.problem);
      r.candidate_source = candidate_program(core::read_file(c.path));
      name_request(r, settings, fmt::format("level_{}_problem_{}_sample_{}", level, c.problem, c.sample));
      pending.emplace_back(c, evaluator->submit(std::move(r)));
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
        const json::object line{{"problem", it->first.problem},
                                {"sample", it->first.sample},
                                {"file", it->first.path.filename().string()},
                                {"result", json::value_from(r)}};
        jsonl.write(line);
        jsonl.flush();
        // Kept as a resumed run will read it back (Boost.JSON may parse a double an ulp off), so
        // that the summary and eval_results.json do not depend on whether the run was resumed.
        done[{it->first.problem, it->first.sample}] =
            json::value_to<core::EvalResult>(core::parse_json(json::serialize(line.at("result"))));
        it = pending.erase(it);
        any = true;
        progress.advance(1, fmt::format("{} correct", correct));
      }
      if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    progress.finish();
    if (g_interrupted) std::cerr << fmt::format("interrupted: {} evaluations not finished; run again to resume\n", pending.size());
  }

  // KernelBench's eval_results.json (eval::kernelbench_results: the current layout or, with
  // --results-layout legacy, the older one).
  std::vector<core::EvalResult> all;
  for (const auto& [key, r] : done) all.push_back(r);
  {
    std::ofstream out(run_dir / "eval_results.json", std::ios::trunc);
    out << json::serialize(eval::kernelbench_results(done, eval::parse_kernelbench_layout(g.layout))) << "\n";
  }
  const auto summary = eval::summarize(all);
  write_summary(summary, g.request.summary_json, run_dir / "eval_summary.json");
  std::cout << eval::format_summary(summary);
  return g_interrupted ? apps::kExitInterrupted : apps::kExitOk;
}

struct ModelCommand {
  GenerationsCommand generations;
  std::string model, adapter;
  int samples = 1;
  std::int64_t max_tokens = 2048;
  double temperature = 1.0;
  double top_p = 1.0;
  std::int64_t top_k = 0;
  std::uint64_t sample_seed = 0;
  std::string chat_template = "auto", model_device = "auto", model_dtype = "auto";
  bool no_one_shot = false;
  std::string tensorboard;
  std::int64_t step = -1;
};

int cmd_model(const ModelCommand& m, const eval::EvaluatorSettings& settings) {
#ifdef KBRL_EVAL_HAS_MODEL
  const GenerationsCommand& g = m.generations;
  const fs::path run_dir = g.run;
  fs::create_directories(run_dir);
  const std::string problems_path = problems_of(g);
  std::vector<core::Problem> problems;
  for (auto& p : dataset::load_problems(problems_path))
    if (p.level == g.level || p.level == 0) problems.push_back(std::move(p));
  if (problems.empty())
    throw core::InvalidArgument(fmt::format("no problems of level {} in {}", g.level, problems_path));
  apps::ModelSamplingOptions o;
  o.model = m.model;
  o.adapter = m.adapter;
  o.samples = m.samples;
  o.max_tokens = m.max_tokens;
  o.temperature = m.temperature;
  o.top_p = m.top_p;
  o.top_k = m.top_k;
  o.seed = m.sample_seed;
  o.chat_template = m.chat_template;
  o.device = m.model_device;
  o.dtype = m.model_dtype;
  const core::EvalRequest base = base_request(g.request, settings);
  o.prompt.language = base.language;
  o.prompt.precision = base.precision;
  o.prompt.one_shot = !m.no_one_shot;
  const int written = apps::sample_generations(problems, g.level, run_dir, o);
  std::cerr << fmt::format("{} answers sampled into {}\n", written, run_dir.string());
  const int rc = cmd_generations(g, settings);
  if (!m.tensorboard.empty()) {
    const auto summary = core::parse_json(core::read_file(run_dir / "eval_summary.json")).as_object();
    log::TensorBoardWriter tb(fs::path(m.tensorboard) / "tb");
    for (const auto& [key, value] : summary) {
      if (value.is_number()) tb.add_scalar(fmt::format("eval/{}", std::string(key)), value.to_number<double>(), m.step);
      if (value.is_object())
        for (const auto& [sub, v] : value.as_object())
          if (v.is_number())
            tb.add_scalar(fmt::format("eval/{}/{}", std::string(key), std::string(sub)), v.to_number<double>(), m.step);
    }
    tb.flush();
    std::cerr << fmt::format("summary written to {} at step {}\n", (fs::path(m.tensorboard) / "tb").string(), m.step);
  }
  return rc;
#else
  (void)m;
  (void)settings;
  throw core::Error("kbrl-eval model needs libtorch: this kbrl-eval was built without it (KBRL_WITH_TORCH=OFF)");
#endif
}

void add_problem_options(CLI::App& cmd, GenerationsCommand& g) {
  cmd.add_option("--problems", g.problems,
                 "a KernelBench checkout, a folder of problems or a JSONL file (default: $KERNELBENCH_ROOT, else a "
                 "KernelBench/ or kernelbench/ checkout in the working directory or beside --run)")
      ->type_name("PATH");
  cmd.add_option("--level", g.level, "KernelBench level (a plain folder's problems count as this level)")
      ->required()
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--run", g.run, "the folder of generations and results")->required()->type_name("DIR");
  cmd.add_option("--results-layout", g.layout,
                 "eval_results.json as KernelBench writes it now (current: problem -> [results with sample_id]) or "
                 "as it did before (legacy: problem -> sample -> result)")
      ->check(CLI::IsMember({"current", "legacy"}))
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Evaluates kernel candidates against KernelBench-format problems (docs/evaluator.md).", "kbrl-eval");
  app.set_version_flag("--version", apps::version_text("kbrl-eval"));
  app.require_subcommand(1);
  app.footer("Exit codes: 0 done, 1 error (a missing or malformed file, a failed evaluator), 2 usage, "
             "130 interrupted (what finished is kept; run again to resume).");

  GenerationsCommand generations;
  auto* gen = app.add_subcommand(
      "generations",
      "Evaluates every RUN/level_L_problem_P_sample_S_kernel.py against problem P of level L. Writes "
      "RUN/eval_results.json (KernelBench's layout), RUN/eval_results.jsonl (every field, one line per candidate, "
      "written as results arrive) and RUN/eval_summary.json. Already evaluated candidates are skipped; Ctrl-C "
      "keeps what is done (exit code 130).");
  add_problem_options(*gen, generations);
  add_request_options(*gen, generations.request);
  gen->add_option("--summary-json", generations.request.summary_json, "also write the summary here")->type_name("FILE");
  apps::EvaluatorFlags gen_flags(*gen, eval::SettingsProfile::evaluation);

  KernelCommand kernel;
  auto* ker = app.add_subcommand("kernel", "Evaluates one candidate and prints the whole result as JSON.");
  ker->add_option("--problem", kernel.problem, "the reference program (KernelBench format)")->required()->type_name("FILE");
  ker->add_option("--kernel", kernel.kernel, "the candidate (a program defining ModelNew, or a model's answer)")
      ->required()
      ->type_name("FILE");
  add_request_options(*ker, kernel.request);
  apps::EvaluatorFlags ker_flags(*ker, eval::SettingsProfile::evaluation);

  ModelCommand model;
  auto* mod = app.add_subcommand(
      "model",
      "Samples --samples answers per problem from a checkpoint (plus a PEFT adapter), writes them to RUN as "
      "generations (RUN/generations.jsonl holds the raw answers), then evaluates them exactly as `generations` "
      "does. Resumes both halves.");
  mod->add_option("--model", model.model, "Hugging Face checkpoint folder")->required()->type_name("DIR");
  mod->add_option("--adapter", model.adapter, "PEFT adapter folder")->type_name("DIR");
  add_problem_options(*mod, model.generations);
  add_request_options(*mod, model.generations.request);
  mod->add_option("--summary-json", model.generations.request.summary_json, "also write the summary here")
      ->type_name("FILE");
  mod->add_option("--samples", model.samples, "answers per problem [default: 1]")->check(CLI::PositiveNumber);
  mod->add_option("--max-tokens", model.max_tokens, "tokens per answer [default: 2048]")->check(CLI::PositiveNumber);
  mod->add_option("--temperature", model.temperature, "0 is greedy [default: 1.0]")->check(CLI::NonNegativeNumber);
  mod->add_option("--top-p", model.top_p, "nucleus sampling [default: 1.0, off]")->check(CLI::Range(0.0, 1.0));
  mod->add_option("--top-k", model.top_k, "top-k sampling [default: 0, off]")->check(CLI::NonNegativeNumber);
  mod->add_option("--sample-seed", model.sample_seed, "seeds the draws [default: 0]");
  mod->add_option("--chat-template", model.chat_template,
                  "auto (from the tokenizer), chatml, qwen2.5, qwen3, llama3, ... [default: auto]");
  mod->add_option("--model-device", model.model_device, "auto, cpu, cuda, cuda:N [default: auto]");
  mod->add_option("--model-dtype", model.model_dtype, "auto (bf16 on cuda), bf16, fp32 [default: auto]")
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}));
  mod->add_flag("--no-one-shot", model.no_one_shot, "leave the worked example out of the prompt");
  auto* step = mod->add_option("--step", model.step, "the TensorBoard step of --tensorboard")->check(CLI::NonNegativeNumber);
  mod->add_option("--tensorboard", model.tensorboard, "also write the summary into RUN/tb of this run directory")
      ->type_name("RUN")
      ->needs(step);
  apps::EvaluatorFlags mod_flags(*mod, eval::SettingsProfile::evaluation);

  if (argc < 2) {
    std::cerr << app.help();
    return apps::kExitUsage;
  }
  return apps::run_program(app, argc, argv, [&] {
    if (gen->parsed()) return cmd_generations(generations, gen_flags.settings());
    if (ker->parsed()) return cmd_kernel(kernel, ker_flags.settings());
    return cmd_model(model, mod_flags.settings());
  });
}
