// kbrl-eval: evaluates kernel candidates against KernelBench-format problems.
//   kbrl-eval generations --problems <root|dir|jsonl> --level L[,L...] --run <dir> [--turns N] [options]
//   kbrl-eval kernel --problem <file> --kernel <file> [options]
//   kbrl-eval model --model <checkpoint> [--adapter <dir>] --problems ... --level L[,L...] --samples K --run <dir>
//                   [--turns N]
//   kbrl-eval model --endpoint <http://host:port/v1> --model-name <name> ... (an OpenAI-compatible server)
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
#include <tuple>
#include <vector>

#include <boost/json.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checkpoint_embedder.hpp"
#include "cli.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/dataset/load.hpp"
#include "kbrl/env/kernelbench_env.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/eval/local_evaluator.hpp"
#include "kbrl/eval/settings.hpp"
#include "kbrl/eval/summary.hpp"
#include "kbrl/log/jsonl.hpp"
#include "kbrl/log/progress.hpp"
#include "kbrl/log/tensorboard.hpp"
#include "kbrl/prompt/answer_parser.hpp"
#include "kbrl/prompt/task_prompt.hpp"
#include "kbrl/rag/retrieval_prompt.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"
#include "run_files.hpp"
#include "run_sampler.hpp"

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
  std::vector<int> levels;
  std::string run;
  std::string layout = "current";  // of eval_results.json
  RequestOptions request;
  // Multi-turn (--turns N): the training environment's episode rules and feedback (env::EnvOptions).
  int turns = 1;
  bool no_early_stop = false;
  double early_stop_speedup = 0.0;
  bool keep_thinking = false;
  bool no_one_shot = false;
  bool no_thinking = false;
  // Retrieved examples before the task (--retrieval-*): made by with_examples.
  rag::RetrievalPromptConfig retrieval;
  bool no_leakage_filter = false;
  std::string retrieval_tokenizer;
  std::shared_ptr<const prompt::ExampleProvider> examples;
};

// (level, problem, sample, turn): one answer of a run.
using Key = std::tuple<int, int, int, int>;
using ProblemKey = std::pair<int, int>;  // (level, number)

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

// The problems of the levels asked for, by (level, number). A folder of problems without levels
// (level 0) counts as the one level given, and cannot serve several.
std::map<ProblemKey, core::Problem> load_levels(const fs::path& path, const std::vector<int>& levels) {
  std::map<ProblemKey, core::Problem> out;
  int unlevelled = 0;
  for (auto& p : dataset::load_problems(path)) {
    if (p.level == 0) {
      ++unlevelled;
      if (levels.size() == 1) out.emplace(ProblemKey{levels[0], p.number}, std::move(p));
    } else if (std::find(levels.begin(), levels.end(), p.level) != levels.end()) {
      out.emplace(ProblemKey{p.level, p.number}, std::move(p));
    }
  }
  if (unlevelled > 0 && levels.size() > 1)
    throw core::InvalidArgument(fmt::format(
        "{} holds {} problems without a level (a plain folder): it serves one --level, not {}; give one level, or a "
        "KernelBench checkout or JSONL file whose problems name their level",
        path.string(), unlevelled, fmt::join(levels, ",")));
  return out;
}

// The flag a field of rag::RetrievalPromptConfig is set by, for messages.
std::string retrieval_flag(const std::string& field) {
  static const std::map<std::string, std::string> flags = {
      {"index", "--retrieval-index"},
      {"k", "--retrieval-k"},
      {"language", "--retrieval-language"},
      {"max_example_chars", "--retrieval-example-chars"},
      {"max_example_tokens", "--retrieval-example-tokens"},
      {"token_budget", "--retrieval-token-budget"},
      {"leakage_filter", "--no-retrieval-leakage-filter"},
      {"near_threshold", "--retrieval-near-threshold"},
      {"shingle_size", "--retrieval-shingle-size"}};
  const auto it = flags.find(field);
  if (it != flags.end()) return it->second;
  // The query embedder of a dense index: embeddings_api_key_env -> --retrieval-embeddings-api-key-env.
  if (field.rfind("embeddings_", 0) == 0) {
    std::string flag = "--retrieval-" + field;
    std::replace(flag.begin(), flag.end(), '_', '-');
    return flag;
  }
  return field;
}

// `g` with the example provider of its --retrieval-* flags (none without --retrieval-index). The
// token budget is counted with --retrieval-tokenizer, else the checkpoint's tokenizer (`model`,
// when sampling one), else estimated (rag::estimate_tokens).
GenerationsCommand with_examples(GenerationsCommand g, core::KernelLanguage asked, const std::string& model) {
  g.retrieval.leakage.enabled = !g.no_leakage_filter;
  if (const auto problem = rag::check_retrieval_config(g.retrieval, retrieval_flag)) {
    // A missing file is an error of input (exit 1); the rest is the command line's (exit 2).
    if (problem->field == "index") throw core::ConfigError(retrieval_flag("index"), "", problem->message);
    throw apps::UsageError(fmt::format("{}: {}", retrieval_flag(problem->field), problem->message));
  }
  if (!g.retrieval.enabled()) {
    if (!g.retrieval_tokenizer.empty()) throw apps::UsageError("--retrieval-tokenizer: needs --retrieval-index");
    if (g.retrieval.embedder.given() || !g.retrieval.embedder.model.empty())
      throw apps::UsageError("--retrieval-embeddings-*: need --retrieval-index (a dense index)");
    return g;
  }
  fs::path tokenizer_file = g.retrieval_tokenizer;
  if (tokenizer_file.empty() && !model.empty()) tokenizer_file = fs::path(model) / "tokenizer.json";
  rag::TokenCounter count;
  if (!tokenizer_file.empty()) {
    auto tok = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(tokenizer_file));
    count = [tok](std::string_view text) { return tok->encode(text).size(); };
  } else {
    std::cerr << fmt::format("kbrl-eval: no tokenizer for the retrieval token budget (--retrieval-tokenizer): "
                             "estimating {} bytes per token\n",
                             rag::kEstimatedBytesPerToken);
  }
  g.examples = rag::make_example_provider(g.retrieval, asked, std::move(count), retrieval_flag,
                                          apps::checkpoint_embedder_loader());
  return g;
}

env::EnvOptions episode_options(const GenerationsCommand& g, const core::EvalRequest& base) {
  env::EnvOptions o;
  o.prompt.language = base.language;
  o.prompt.precision = base.precision;
  o.prompt.one_shot = !g.no_one_shot;
  o.prompt.thinking_instruction = !g.no_thinking;
  o.prompt.examples = g.examples;
  o.max_turns = g.turns;
  o.early_stop = !g.no_early_stop;
  o.early_stop_min_speedup = g.early_stop_speedup;
  o.keep_thinking = g.keep_thinking;
  return o;
}

// A candidate file as the policy's answer, for the conversation of a later turn: a raw answer
// parsed as the training environment parses it, a bare program taken as the answer's program.
core::Completion completion_of(const std::string& text) {
  core::Completion c = prompt::parse_completion(text);
  if (c.kernel.empty()) {
    c.kernel = candidate_program(text);
    c.format_ok = true;
  }
  return c;
}

// The better of two attempts of one episode: a correct one over an incorrect one, then the faster,
// then the later.
const core::EvalResult* better(const core::EvalResult* a, const core::EvalResult* b) {
  if (a == nullptr) return b;
  if (a->correct != b->correct) return a->correct ? a : b;
  if (a->correct && a->speedup.value_or(0.0) > b->speedup.value_or(0.0)) return a;
  return b;
}

// One sampled episode: its evaluated attempts in turn order, up to the one that ended it.
struct Episode {
  int level = 0, problem = 0, sample = 0;
  std::vector<const core::EvalResult*> attempts;
  bool ended = false;
  const core::EvalResult& best(std::size_t turns) const {
    const core::EvalResult* b = nullptr;
    for (std::size_t t = 0; t < std::min(turns, attempts.size()); ++t) b = better(b, attempts[t]);
    return *b;
  }
};

// Replays every episode from its evaluated attempts and writes the next turn's conversation for
// each that goes on and has no answer for it yet. Returns the episodes; `waiting` counts the
// conversations without an answer.
std::vector<Episode> replay_episodes(const GenerationsCommand& g, const std::map<Key, core::EvalResult>& done,
                                     const std::map<Key, fs::path>& files,
                                     const std::map<ProblemKey, core::Problem>& problems, const env::EnvOptions& options,
                                     int& waiting) {
  std::vector<Episode> episodes;
  waiting = 0;
  for (const auto& [key, first] : done) {
    const auto [level, problem, sample, turn] = key;
    if (turn != 1) continue;
    Episode e{level, problem, sample, {}, false};
    for (int t = 1; t <= g.turns; ++t) {
      const auto it = done.find({level, problem, sample, t});
      if (it == done.end()) break;  // this turn's answer is not evaluated (or not there) yet
      e.attempts.push_back(&it->second);
      if (env::episode_ends(it->second, t - 1, options)) {
        e.ended = true;
        break;
      }
      if (files.count({level, problem, sample, t + 1}) != 0) continue;
      const auto p = problems.find({level, problem});
      if (p == problems.end()) break;  // its problem is not among those loaded: no conversation to write
      auto messages = prompt::build_messages(p->second, options.prompt);
      for (int k = 1; k <= t; ++k) {
        const auto file = files.find({level, problem, sample, k});
        if (file == files.end()) break;
        env::add_attempt(messages, completion_of(core::read_file(file->second)), done.at({level, problem, sample, k}),
                         k - 1, options);
      }
      json::array conversation;
      for (const auto& m : messages) conversation.push_back(json::object{{"role", m.role}, {"content", m.content}});
      const json::object prompt{{"level", level}, {"problem", problem}, {"problem_id", p->second.id},
                                {"sample", sample}, {"turn", t + 1},     {"messages", std::move(conversation)}};
      core::write_file_atomically(apps::prompt_file(g.run, level, problem, sample, t + 1), json::serialize(prompt) + "\n");
      ++waiting;
      break;
    }
    episodes.push_back(std::move(e));
  }
  return episodes;
}

// Summaries of each episode's best attempt (over all its turns, or through turn t), and the
// summary file's JSON: the whole run's numbers, then "levels" (with several) and "turns" (with
// --turns above 1) holding the same numbers per level and through each turn.
struct RunSummary {
  eval::EvalSummary all;
  std::map<int, eval::EvalSummary> levels;
  std::map<int, eval::EvalSummary> turns;
  int waiting = 0;
};

RunSummary summarize_run(const GenerationsCommand& g, const std::vector<Episode>& episodes, int waiting) {
  RunSummary s;
  s.waiting = waiting;
  auto bests = [&](int level, std::size_t through) {
    std::vector<core::EvalResult> out;
    for (const auto& e : episodes)
      if (level == 0 || e.level == level) out.push_back(e.best(through));
    return out;
  };
  const auto every = static_cast<std::size_t>(g.turns);
  s.all = eval::summarize(bests(0, every));
  if (g.levels.size() > 1)
    for (int level : g.levels) s.levels[level] = eval::summarize(bests(level, every));
  if (g.turns > 1)
    for (int t = 1; t <= g.turns; ++t) s.turns[t] = eval::summarize(bests(0, static_cast<std::size_t>(t)));
  return s;
}

json::object to_json(const RunSummary& s) {
  json::object o = eval::to_json_value(s.all).as_object();
  if (!s.levels.empty()) {
    json::object levels;
    for (const auto& [level, sum] : s.levels) levels[std::to_string(level)] = eval::to_json_value(sum);
    o["levels"] = std::move(levels);
  }
  if (!s.turns.empty()) {
    json::object turns;
    for (const auto& [turn, sum] : s.turns) turns[std::to_string(turn)] = eval::to_json_value(sum);
    o["turns"] = std::move(turns);
    o["next_turn_prompts_waiting"] = s.waiting;
  }
  return o;
}

std::string one_line(const eval::EvalSummary& s) {
  std::string out = fmt::format("{} episodes, compiled {:.1f}%, correct {:.1f}%", s.total, 100.0 * s.compile_rate,
                                100.0 * s.correct_rate);
  if (s.fast_p.count(1.0) != 0) out += fmt::format(", fast_1 {:.1f}%", 100.0 * s.fast_p.at(1.0));
  for (const auto& [k, v] : s.pass_at_k) out += fmt::format(", pass@{} {:.1f}%", k, 100.0 * v);
  return out;
}

std::string format_run_summary(const RunSummary& s) {
  std::string out = eval::format_summary(s.all);
  for (const auto& [level, sum] : s.levels) out += fmt::format("  level {}: {}\n", level, one_line(sum));
  for (const auto& [turn, sum] : s.turns) out += fmt::format("  through turn {}: {}\n", turn, one_line(sum));
  if (!s.turns.empty() && s.waiting > 0)
    out += fmt::format("  {} episodes wait for their next answer (*_turn_T_prompt.json in the run folder)\n", s.waiting);
  return out;
}

struct GenerationsOutcome {
  int exit_code = apps::kExitOk;
  int waiting = 0;  // next-turn conversations without an answer
  RunSummary summary;
};

// Evaluates what the run folder holds that eval_results.jsonl does not, then writes the results,
// the summary and (multi-turn) the next turn's conversations.
GenerationsOutcome evaluate_run(const GenerationsCommand& g, const eval::EvaluatorSettings& settings) {
  const fs::path problems_path = problems_of(g);
  const fs::path run_dir = g.run;
  if (!fs::is_directory(run_dir)) throw core::InvalidArgument(fmt::format("--run: {} is not a directory", run_dir.string()));
  const auto problems = load_levels(problems_path, g.levels);
  const auto wanted = [&](int level) { return std::find(g.levels.begin(), g.levels.end(), level) != g.levels.end(); };

  // Every answer file of the levels asked for, turn 1 without a suffix.
  const std::regex name(R"(level_(\d{1,9})_problem_(\d{1,9})_sample_(\d{1,9})(_turn_(\d{1,9}))?_kernel\.py)");
  std::map<Key, fs::path> files;
  int later_turns = 0;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || !std::regex_match(file, m, name) || !wanted(std::stoi(m[1]))) continue;
    const int turn = m[5].matched ? std::stoi(m[5]) : 1;
    if (m[5].matched && turn < 2) {
      std::cerr << fmt::format("warning: {} is skipped: a turn-1 answer has no _turn_ suffix\n", file);
      continue;
    }
    if (turn > g.turns) {
      ++later_turns;
      continue;
    }
    files[{std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), turn}] = entry.path();
  }
  if (later_turns > 0)
    std::cerr << fmt::format("warning: {} answers of turns after --turns {} are not evaluated\n", later_turns, g.turns);
  if (files.empty())
    throw core::InvalidArgument(fmt::format("no level_{}_problem_P_sample_S_kernel.py files in {}",
                                            g.levels.size() == 1 ? std::to_string(g.levels[0]) : "L", run_dir.string()));

  // Resume: what eval_results.jsonl already holds is not evaluated again. A line torn by a kill
  // is not read (and is cut off when the writer below opens the file): that candidate is
  // evaluated again. A line without "level" (written before runs had several) is the level's
  // when one is given; without "turn", turn 1.
  const fs::path jsonl_path = run_dir / "eval_results.jsonl";
  std::map<Key, core::EvalResult> done;
  for (const auto& o : log::read_jsonl(jsonl_path)) {
    try {
      int level = 0;
      if (o.contains("level")) level = static_cast<int>(o.at("level").to_number<int>());
      else if (g.levels.size() == 1) level = g.levels[0];
      if (!wanted(level)) continue;
      const int turn = o.contains("turn") ? static_cast<int>(o.at("turn").to_number<int>()) : 1;
      done[{level, static_cast<int>(o.at("problem").to_number<int>()), static_cast<int>(o.at("sample").to_number<int>()),
            turn}] = json::value_to<core::EvalResult>(o.at("result"));
    } catch (const std::exception&) {
      // an object that is not a result line of ours: its candidate, if any, is evaluated again
    }
  }

  const core::EvalRequest base = base_request(g.request, settings);
  std::vector<std::pair<Key, fs::path>> todo;
  std::set<ProblemKey> missing;
  for (const auto& [key, path] : files) {
    if (done.count(key) != 0) continue;
    const ProblemKey problem{std::get<0>(key), std::get<1>(key)};
    if (problems.count(problem) == 0) {
      missing.insert(problem);
      continue;
    }
    todo.emplace_back(key, path);
  }
  for (const auto& [level, number] : missing)
    std::cerr << fmt::format("warning: no problem {} at level {} in {}; its samples are skipped\n", number, level,
                             problems_path.string());
  std::cerr << fmt::format("{} candidates, {} already evaluated, {} to go\n", files.size(), done.size(), todo.size());

  log::JsonlWriter jsonl(jsonl_path);
  std::size_t unfinished = 0;
  {
    const auto evaluator = eval::make_evaluator(settings);
    std::vector<std::pair<std::pair<Key, fs::path>, std::future<core::EvalResult>>> pending;
    for (const auto& [key, path] : todo) {
      const auto [level, problem, sample, turn] = key;
      core::EvalRequest r = base;
      r.problem = problems.at({level, problem});
      r.candidate_source = candidate_program(core::read_file(path));
      name_request(r, settings, apps::run_file_stem(level, problem, sample, turn));
      pending.emplace_back(std::pair{key, path}, evaluator->submit(std::move(r)));
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
        const auto& [key, path] = it->first;
        const auto [level, problem, sample, turn] = key;
        const json::object line{{"level", level},   {"problem", problem},
                                {"sample", sample}, {"turn", turn},
                                {"file", path.filename().string()}, {"result", json::value_from(r)}};
        jsonl.write(line);
        jsonl.flush();
        // Kept as a resumed run will read it back (Boost.JSON may parse a double an ulp off), so
        // that the summary and eval_results.json do not depend on whether the run was resumed.
        done[key] = json::value_to<core::EvalResult>(core::parse_json(json::serialize(line.at("result"))));
        it = pending.erase(it);
        any = true;
        progress.advance(1, fmt::format("{} correct", correct));
      }
      if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    progress.finish();
    unfinished = pending.size();
    if (g_interrupted) std::cerr << fmt::format("interrupted: {} evaluations not finished; run again to resume\n", unfinished);
  }

  GenerationsOutcome outcome;
  const auto episodes = replay_episodes(g, done, files, problems, episode_options(g, base), outcome.waiting);
  // KernelBench's eval_results.json (eval::kernelbench_results: the current layout or, with
  // --results-layout legacy, the older one), each sample's best attempt; with several levels, one
  // per level in RUN/level_L/, where KernelBench's analysis finds a run of that level.
  for (int level : g.levels) {
    std::map<std::pair<int, int>, core::EvalResult> best;
    for (const auto& e : episodes)
      if (e.level == level) best[{e.problem, e.sample}] = e.best(static_cast<std::size_t>(g.turns));
    const fs::path dir = g.levels.size() == 1 ? run_dir : run_dir / fmt::format("level_{}", level);
    fs::create_directories(dir);
    core::write_file_atomically(dir / "eval_results.json",
                                json::serialize(eval::kernelbench_results(best, eval::parse_kernelbench_layout(g.layout))) + "\n");
  }
  outcome.summary = summarize_run(g, episodes, outcome.waiting);
  const std::string text = json::serialize(to_json(outcome.summary)) + "\n";
  core::write_file_atomically(run_dir / "eval_summary.json", text);
  if (!g.request.summary_json.empty()) core::write_file_atomically(g.request.summary_json, text);
  outcome.exit_code = g_interrupted ? apps::kExitInterrupted : apps::kExitOk;
  return outcome;
}

void catch_interrupts() {
  // First, so that an interrupt at any point ends in the files of what is done and exit code 130.
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
}

int cmd_generations(const GenerationsCommand& given, const eval::EvaluatorSettings& settings) {
  catch_interrupts();
  const GenerationsCommand g = with_examples(given, base_request(given.request, settings).language, "");
  const auto outcome = evaluate_run(g, settings);
  std::cout << format_run_summary(outcome.summary);
  return outcome.exit_code;
}

struct ModelCommand {
  GenerationsCommand generations;
  std::string model, adapter;
  apps::ApiSamplingOptions api;  // with --endpoint: a served model instead of a checkpoint
  int samples = 1;
  std::int64_t max_tokens = 2048;
  double temperature = 1.0;
  double top_p = 1.0;
  std::int64_t top_k = 0;
  std::uint64_t sample_seed = 0;
  std::string chat_template = "auto", model_device = "auto", model_dtype = "auto";
  std::string tensorboard;
  std::int64_t step = -1;
};

// Every number of the summary as a TensorBoard scalar, its path in the JSON its tag (eval/correct_rate,
// eval/turns/2/pass_at_k/pass@1, ...).
void add_scalars(log::TensorBoardWriter& tb, const std::string& tag, const json::value& v, std::int64_t step) {
  if (v.is_number()) tb.add_scalar(tag, v.to_number<double>(), step);
  if (v.is_object())
    for (const auto& [key, sub] : v.as_object()) add_scalars(tb, tag + "/" + std::string(key), sub, step);
}

std::unique_ptr<apps::AnswerSource> answer_source(const ModelCommand& m) {
  apps::SamplingSettings s;
  s.max_tokens = m.max_tokens;
  s.temperature = m.temperature;
  s.top_p = m.top_p;
  s.top_k = m.top_k;
  s.seed = m.sample_seed;
  if (!m.api.endpoint.empty()) return apps::make_api_source(m.api, s);
#ifdef KBRL_EVAL_HAS_MODEL
  apps::ModelSamplingOptions o;
  o.model = m.model;
  o.adapter = m.adapter;
  o.chat_template = m.chat_template;
  o.device = m.model_device;
  o.dtype = m.model_dtype;
  return apps::make_model_source(o, s);
#else
  throw core::Error("kbrl-eval model --model needs libtorch: this kbrl-eval was built without it (KBRL_WITH_TORCH=OFF); "
                    "--endpoint samples a served model instead");
#endif
}

int cmd_model(const ModelCommand& m, const eval::EvaluatorSettings& settings) {
  catch_interrupts();
  if (m.model.empty() == m.api.endpoint.empty())
    throw apps::UsageError("give --model (a checkpoint) or --endpoint (an OpenAI-compatible server), one of them");
  const GenerationsCommand g =
      with_examples(m.generations, base_request(m.generations.request, settings).language, m.model);
  const fs::path run_dir = g.run;
  fs::create_directories(run_dir);
  const std::string problems_path = problems_of(g);
  std::vector<std::pair<int, core::Problem>> problems;
  for (auto& [key, p] : load_levels(problems_path, g.levels)) problems.emplace_back(key.first, std::move(p));
  if (problems.empty())
    throw core::InvalidArgument(fmt::format("no problems of level {} in {}", fmt::join(g.levels, ","), problems_path));
  const auto source = answer_source(m);
  apps::RunSampler sampler(*source, run_dir, m.samples, m.sample_seed, episode_options(g, base_request(g.request, settings)).prompt);
  // Turn by turn: sample what is missing, evaluate it, and go on while episodes wait for their
  // next answer (the conversations the evaluation wrote).
  GenerationsOutcome outcome;
  for (int turn = 1; turn <= g.turns && !g_interrupted; ++turn) {
    const int written = turn == 1 ? sampler.sample_problems(problems) : sampler.sample_prompts(turn);
    std::cerr << fmt::format("turn {}: {} answers sampled into {}\n", turn, written, run_dir.string());
    outcome = evaluate_run(g, settings);
    if (outcome.exit_code != apps::kExitOk || outcome.waiting == 0) break;
  }
  std::cout << format_run_summary(outcome.summary);
  if (!m.tensorboard.empty()) {
    log::TensorBoardWriter tb(fs::path(m.tensorboard) / "tb");
    add_scalars(tb, "eval", to_json(outcome.summary), m.step);
    tb.flush();
    std::cerr << fmt::format("summary written to {} at step {}\n", (fs::path(m.tensorboard) / "tb").string(), m.step);
  }
  return g_interrupted ? apps::kExitInterrupted : outcome.exit_code;
}

// --retrieval-*: kbrl-train's prompt.retrieval.* keys (rag::RetrievalPromptConfig, its defaults).
void add_retrieval_options(CLI::App& cmd, GenerationsCommand& g) {
  const rag::RetrievalPromptConfig d;
  const std::string group = "Retrieved examples (docs/retrieval.md, \"Prompts\")";
  cmd.add_option("--retrieval-index", g.retrieval.index,
                 "an index file written by kbrl-index build: each problem's prompt opens with similar solved examples "
                 "(a dense index also needs --retrieval-embeddings-*, the embedder it was built with)")
      ->type_name("FILE")
      ->group(group);
  cmd.add_option("--retrieval-k", g.retrieval.k, fmt::format("examples asked of the index per problem [default: {}]", d.k))
      ->type_name("N")
      ->group(group);
  cmd.add_option("--retrieval-language", g.retrieval.language,
                 "corpus language of the examples, or any [default: the kernel language asked for]")
      ->type_name("LANG")
      ->group(group);
  cmd.add_option("--retrieval-example-chars", g.retrieval.max_example_chars,
                 fmt::format("each side of an example is cut to this many characters (0: no limit) [default: {}]",
                             d.max_example_chars))
      ->type_name("N")
      ->group(group);
  cmd.add_option("--retrieval-example-tokens", g.retrieval.max_example_tokens,
                 "an example over this many tokens is cut further, or left out (0: no limit) [default: 0]")
      ->type_name("N")
      ->group(group);
  cmd.add_option("--retrieval-token-budget", g.retrieval.token_budget,
                 fmt::format("tokens of the whole examples section at most; examples that do not fit are left out "
                             "whole [default: {}]",
                             d.token_budget))
      ->type_name("N")
      ->group(group);
  cmd.add_flag("--no-retrieval-leakage-filter", g.no_leakage_filter,
               "keep examples whose PyTorch side is the problem's (exact or near copies): for inspection only")
      ->group(group);
  cmd.add_option("--retrieval-near-threshold", g.retrieval.leakage.near_threshold,
                 fmt::format("near copies: the problem's operations and a shingle similarity of at least this "
                             "[default: {}]",
                             d.leakage.near_threshold))
      ->type_name("X")
      ->group(group);
  cmd.add_option("--retrieval-shingle-size", g.retrieval.leakage.shingle_size,
                 fmt::format("tokens per shingle of the near-copy check [default: {}]", d.leakage.shingle_size))
      ->type_name("N")
      ->group(group);
  auto* endpoint = cmd.add_option("--retrieval-embeddings-endpoint", g.retrieval.embedder.endpoint,
                                  "a dense index: an OpenAI-compatible server's API root (/v1 included) serving the "
                                  "model the index was built with")
                      ->type_name("URL")
                      ->group(group);
  auto* checkpoint = cmd.add_option("--retrieval-embeddings-checkpoint", g.retrieval.embedder.checkpoint,
                                    "a dense index: the checkpoint it was built with, embedded in this process")
                         ->type_name("DIR")
                         ->group(group)
                         ->excludes(endpoint);
  cmd.add_option("--retrieval-embeddings-model", g.retrieval.embedder.model,
                 "the served model's name (with --retrieval-embeddings-endpoint, required); with "
                 "--retrieval-embeddings-checkpoint the name the index records [default: the folder's name]")
      ->type_name("NAME")
      ->group(group);
  cmd.add_option("--retrieval-embeddings-api-key-env", g.retrieval.embedder.api_key_env,
                 "the environment variable holding the embeddings server's API key")
      ->type_name("VAR")
      ->group(group)
      ->needs(endpoint);
  cmd.add_option("--retrieval-embeddings-device", g.retrieval.embedder.device,
                 "the embeddings checkpoint's device: auto, cpu, cuda, cuda:N [default: auto]")
      ->type_name("DEVICE")
      ->group(group)
      ->needs(checkpoint);
  cmd.add_option("--retrieval-embeddings-dtype", g.retrieval.embedder.dtype,
                 "the embeddings checkpoint's dtype: auto (bf16 on a GPU, fp32 on the CPU), bf16, fp32")
      ->type_name("DTYPE")
      ->group(group)
      ->needs(checkpoint);
  cmd.add_option("--retrieval-embeddings-max-tokens", g.retrieval.embedder.max_tokens,
                 "embed a problem's first N tokens [default: 0, the model's context]")
      ->type_name("N")
      ->group(group)
      ->needs(checkpoint);
  cmd.add_option("--retrieval-tokenizer", g.retrieval_tokenizer,
                 "tokenizer.json that counts the token budget [default: the checkpoint's with --model; else "
                 "estimated at 3 bytes per token]")
      ->type_name("FILE")
      ->group(group);
}

void add_problem_options(CLI::App& cmd, GenerationsCommand& g) {
  cmd.add_option("--problems", g.problems,
                 "a KernelBench checkout, a folder of problems or a JSONL file (default: $KERNELBENCH_ROOT, else a "
                 "KernelBench/ or kernelbench/ checkout in the working directory or beside --run)")
      ->type_name("PATH");
  cmd.add_option("--level", g.levels,
                 "KernelBench level, or several (1,2,3): a plain folder's problems count as the one level given")
      ->required()
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--run", g.run, "the folder of generations and results")->required()->type_name("DIR");
  cmd.add_option("--results-layout", g.layout,
                 "eval_results.json as KernelBench writes it now (current: problem -> [results with sample_id]) or "
                 "as it did before (legacy: problem -> sample -> result)")
      ->check(CLI::IsMember({"current", "legacy"}))
      ->capture_default_str();
  cmd.add_option("--turns", g.turns,
                 "multi-turn episodes of up to N answers, as kbrl-train's env.multi_turn: after each attempt that "
                 "does not end its episode, RUN/level_L_problem_P_sample_S_turn_T_prompt.json holds the next turn's "
                 "conversation (the feedback of the training environment) [default: 1]")
      ->check(CLI::PositiveNumber);
  cmd.add_flag("--no-early-stop", g.no_early_stop, "multi-turn: go on after a correct kernel (env.early_stop: false)");
  cmd.add_option("--early-stop-speedup", g.early_stop_speedup,
                 "multi-turn: a correct kernel ends its episode only at this speedup [default: 0, any]")
      ->check(CLI::NonNegativeNumber);
  cmd.add_flag("--keep-thinking", g.keep_thinking,
               "multi-turn: earlier answers keep their <think> block, cut short (env.keep_thinking)");
  cmd.add_flag("--no-one-shot", g.no_one_shot, "the task prompt without the worked example");
  cmd.add_flag("--no-thinking", g.no_thinking, "the task prompt does not ask for reasoning in <think> first (prompt.thinking: false)");
  add_retrieval_options(cmd, g);
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
      "Evaluates every RUN/level_L_problem_P_sample_S_kernel.py (and, with --turns, its "
      "..._turn_T_kernel.py answers) against problem P of level L. Writes RUN/eval_results.json (KernelBench's "
      "layout, each sample's best attempt; with several levels, RUN/level_L/eval_results.json), "
      "RUN/eval_results.jsonl (every field, one line per candidate, written as results arrive) and "
      "RUN/eval_summary.json (per level and through each turn). Already evaluated candidates are skipped; Ctrl-C "
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
      "Samples --samples answers per problem from a checkpoint (plus a PEFT adapter) or a served model (--endpoint), "
      "writes them to RUN as "
      "generations (RUN/generations.jsonl holds the raw answers), then evaluates them exactly as `generations` "
      "does; with --turns N, answers each episode's feedback turn by turn. Resumes every half.");
  auto* checkpoint = mod->add_option("--model", model.model, "Hugging Face checkpoint folder (or --endpoint)")->type_name("DIR");
  mod->add_option("--adapter", model.adapter, "PEFT adapter folder")->type_name("DIR")->needs(checkpoint);
  auto* endpoint = mod->add_option("--endpoint", model.api.endpoint,
                                   "an OpenAI-compatible server's API root, /v1 included (vLLM, SGLang, an API provider), "
                                   "sampled instead of a checkpoint (docs/net.md)")
                       ->type_name("URL")
                       ->excludes(checkpoint);
  mod->add_option("--model-name", model.api.model_name, "the served model's name (with --endpoint)")->needs(endpoint);
  mod->add_option("--api-key-env", model.api.api_key_env,
                  "the environment variable holding the server's API key (with --endpoint; the key is in no file or log)")
      ->type_name("VAR")
      ->needs(endpoint);
  mod->add_option("--max-in-flight", model.api.max_in_flight, "requests to the server at once [default: 16]")
      ->check(CLI::PositiveNumber)
      ->needs(endpoint);
  mod->add_option("--api-retries", model.api.max_retries,
                  "retries of a request after a 429, a 5xx, a dropped or timed-out attempt [default: 4]")
      ->check(CLI::NonNegativeNumber)
      ->needs(endpoint);
  mod->add_option("--api-timeout", model.api.timeout_s, "seconds one attempt may take [default: 600]")
      ->check(CLI::PositiveNumber)
      ->needs(endpoint);
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
