// The whole kbrl-eval program on examples/solutions, the way a user runs it on an RL batch:
// every candidate (correct, slow, wrong, broken, hacking) gets the verdict that
// examples/solutions/expected.json records, the static checker's errors included, the three result
// files are written and readable, and a second run over the same folder resumes: nothing is
// evaluated again. A third run with --no-static-check shows what the checker is there for: the
// candidates it rejects get their runtime verdicts, and for some that is "correct". A fourth, after
// a line of eval_results.jsonl was torn, evaluates that candidate again.
//
// Registered as one CTest test (integration:kbrl_eval_solutions) with its own long timeout, not
// through the *_test.cpp glob: the candidates are built for real, cold, which takes minutes.
#include <sys/wait.h>

#include <kbrl/core/json.hpp>
#include <kbrl/core/types.hpp>
#include <kbrl/check/static_check.hpp>

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"

#ifndef KBRL_EVAL_PROGRAM
#error "KBRL_EVAL_PROGRAM (the path of the kbrl-eval binary) must be defined by the build"
#endif

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace kbrl;

namespace {

const fs::path kSolutions = fs::path(KBRL_SOURCE_DIR) / "examples" / "solutions";
const fs::path kProblems = fs::path(KBRL_SOURCE_DIR) / "examples" / "problems";
const std::regex kCandidateName(R"(level_1_problem_(\d+)_sample_(\d+)_kernel\.py)");

// One entry of expected.json: either {"correct": true}, or {"error_category": name | [names]}
// with optional "message_contains": {category: text}. "static_rules": [rule names] are exactly the
// rules that report an error for the candidate (kbrl-eval runs the static checker by default);
// naming any makes static_check the only verdict allowed, and then "without_static_check" is
// the verdict of a run with the checker off (an entry of the same form, without static rules).
struct Expected {
  bool correct = false;
  std::vector<core::ErrorCategory> categories;
  std::map<core::ErrorCategory, std::string> message_contains;
  std::set<std::string> static_rules;
  std::shared_ptr<const Expected> without_static_check;
};

bool contains_category(const std::vector<core::ErrorCategory>& v, core::ErrorCategory c) {
  return std::find(v.begin(), v.end(), c) != v.end();
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Expected parse_expected(const json::object& o, bool top_level) {
  for (const auto& [key, value] : o) {
    INFO("unknown key " << std::string(key));
    CHECK((key == "correct" || key == "error_category" || key == "message_contains" ||
           (top_level && (key == "static_rules" || key == "without_static_check"))));
  }
  Expected e;
  if (const auto* c = o.if_contains("correct")) e.correct = c->as_bool();
  if (const auto* c = o.if_contains("error_category")) {
    if (c->is_string()) {
      e.categories.push_back(core::parse_error_category(c->as_string()));
    } else {
      for (const auto& name : c->as_array()) e.categories.push_back(core::parse_error_category(name.as_string()));
    }
  }
  if (const auto* m = o.if_contains("message_contains"))
    for (const auto& [category, text] : m->as_object())
      e.message_contains[core::parse_error_category(category)] = std::string(text.as_string());
  if (const auto* rules = o.if_contains("static_rules"))
    for (const auto& rule : rules->as_array()) {
      INFO("static rule " << rule);
      CHECK(check::find_static_check_rule(rule.as_string()) != nullptr);
      e.static_rules.insert(std::string(rule.as_string()));
    }
  if (const auto* w = o.if_contains("without_static_check"))
    e.without_static_check = std::make_shared<const Expected>(parse_expected(w->as_object(), false));
  // Exactly one of the two kinds of verdict. An entry names static_check exactly when it names
  // static rules, and then it says what happens without the checker.
  REQUIRE(e.correct != !e.categories.empty());
  const bool static_verdict = contains_category(e.categories, core::ErrorCategory::static_check);
  REQUIRE(static_verdict == !e.static_rules.empty());
  if (static_verdict) REQUIRE(e.categories == std::vector<core::ErrorCategory>{core::ErrorCategory::static_check});
  if (top_level) REQUIRE(static_verdict == (e.without_static_check != nullptr));
  return e;
}

std::map<std::string, Expected> load_expected(const fs::path& path) {
  std::map<std::string, Expected> out;
  const json::value root = core::parse_json(read_text(path));
  REQUIRE(root.is_object());
  for (const auto& [file, entry] : root.as_object()) {
    INFO(path.string() << ": " << std::string(file));
    REQUIRE(entry.is_object());
    out.emplace(std::string(file), parse_expected(entry.as_object(), true));
  }
  return out;
}

struct Run {
  int exit_code = -1;
  std::string out;
  std::string err;
  double seconds = 0;
};

std::string quoted(const fs::path& p) {
  std::string s = "'";
  for (char c : p.string()) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return s + "'";
}

Run run_kbrl_eval(const fs::path& run_dir, const fs::path& work_dir, const fs::path& logs, const std::string& tag,
                  const std::string& extra_args = "") {
  const fs::path out_path = logs / (tag + ".stdout");
  const fs::path err_path = logs / (tag + ".stderr");
  const std::string command =
      fmt::format("{} generations --problems {} --level 1 --run {} --device cpu --timing-trials 5 --warmup 1 "
                  "--work-dir {} --compile-cache-dir {} {} > {} 2> {}",
                  quoted(KBRL_EVAL_PROGRAM), quoted(kProblems), quoted(run_dir), quoted(work_dir),
                  quoted(KBRL_TEST_COMPILE_CACHE), extra_args,
                  quoted(out_path), quoted(err_path));
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system(command.c_str());
  Run r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  return r;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

// The program's stderr without its progress lines, for failure messages.
std::string without_progress(const std::string& err) {
  std::string out;
  for (const auto& line : lines_of(err))
    if (line.find("evaluating:") == std::string::npos) out += line + "\n";
  return out;
}

std::string describe(const core::EvalResult& r) {
  std::string rules;  // the static checker's findings, "rule (severity)"
  for (const auto& f : r.static_findings)
    rules += fmt::format("{}{} ({})", rules.empty() ? " [" : ", ", f.rule, core::to_string(f.severity));
  if (!rules.empty()) rules += "]";
  if (r.correct) return (r.speedup ? fmt::format("correct, {:.2f}x", *r.speedup) : "correct") + rules;
  return fmt::format("{}: {}{}", core::to_string(r.error_category), r.error_message.substr(0, r.error_message.find('\n')),
                     rules);
}

// The results in eval_results.jsonl's text, by file name, printed in (problem, sample) order.
std::map<std::string, core::EvalResult> read_results(const std::string& jsonl_text, std::size_t count) {
  const auto jsonl_lines = lines_of(jsonl_text);
  REQUIRE(jsonl_lines.size() == count);
  std::map<std::string, core::EvalResult> results;
  for (const auto& line : jsonl_lines) {
    const auto o = core::parse_json(line).as_object();
    const std::string file(o.at("file").as_string());
    std::smatch m;
    REQUIRE(std::regex_match(file, m, kCandidateName));
    CHECK(o.at("problem").to_number<int>() == std::stoi(m[1]));
    CHECK(o.at("sample").to_number<int>() == std::stoi(m[2]));
    INFO(file << " appears twice in eval_results.jsonl");
    REQUIRE(results.emplace(file, json::value_to<core::EvalResult>(o.at("result"))).second);
  }

  std::vector<std::pair<std::pair<int, int>, std::string>> in_order;  // (problem, sample) -> file
  for (const auto& [file, r] : results) {
    std::smatch m;
    std::regex_match(file, m, kCandidateName);
    in_order.push_back({{std::stoi(m[1]), std::stoi(m[2])}, file});
  }
  std::sort(in_order.begin(), in_order.end());
  for (const auto& [key, file] : in_order) std::cout << fmt::format("  {:40} {}\n", file, describe(results.at(file)));
  return results;
}

// `r`, the result for `file`, has the verdict `want` names, static errors included.
void check_verdict(const std::string& file, const Expected& want, const core::EvalResult& r, const fs::path& work_dir) {
  INFO(file << " -> " << describe(r) << "\nfull message: " << r.error_message);
  std::smatch m;
  REQUIRE(std::regex_match(file, m, kCandidateName));
  CHECK(r.request_id == fmt::format("level_1_problem_{}_sample_{}", m[1].str(), m[2].str()));
  std::set<std::string> static_errors;
  for (const auto& f : r.static_findings)
    if (f.severity == core::Severity::error) static_errors.insert(f.rule);
  CHECK(static_errors == want.static_rules);
  CHECK(r.static_ok == want.static_rules.empty());
  if (want.correct) {
    CHECK(r.correct);
    CHECK(r.error_category == core::ErrorCategory::none);
    CHECK(r.format_ok);
    CHECK(r.compiled);
    CHECK(r.trials_passed == 5);  // kbrl-eval's default --trials
    CHECK(r.trials_total == 5);
    REQUIRE(r.runtime.has_value());
    REQUIRE(r.ref_runtime.has_value());
    CHECK(r.runtime->trials == 5);
    CHECK(r.ref_runtime->trials == 5);
    REQUIRE(r.speedup.has_value());
    CHECK(*r.speedup > 0);
    return;
  }
  CHECK_FALSE(r.correct);
  CHECK(contains_category(want.categories, r.error_category));
  CHECK_FALSE(r.error_message.empty());
  // Feedback fit for a policy: no paths of this machine (the build folders are inside work_dir).
  CHECK(r.error_message.find(fs::canonical(work_dir).string()) == std::string::npos);
  if (auto text = want.message_contains.find(r.error_category); text != want.message_contains.end())
    CHECK(r.error_message.find(text->second) != std::string::npos);
  switch (r.error_category) {
    case core::ErrorCategory::static_check:
      CHECK_FALSE(r.static_ok);
      CHECK_FALSE(r.static_findings.empty());
      CHECK_FALSE(r.compiled);  // rejected before any build
      for (const auto& rule : want.static_rules) CHECK(r.error_message.find(rule) != std::string::npos);
      break;
    case core::ErrorCategory::compile:
      CHECK_FALSE(r.compiled);
      CHECK_FALSE(r.runtime.has_value());
      break;
    case core::ErrorCategory::correctness:
    case core::ErrorCategory::runtime:
      CHECK(r.compiled);
      CHECK_FALSE(r.runtime.has_value());  // timing starts only after every trial passed
      break;
    default:
      break;
  }
}

}  // namespace

TEST_CASE("kbrl-eval generations gives every example solution its expected verdict and resumes") {
  const auto expected = load_expected(kSolutions / "expected.json");

  const fs::path scratch = fs::path(KBRL_TEST_TMP) / "kbrl_eval_solutions";
  const fs::path run_dir = scratch / "run";
  // Shared with the other CPU evaluator tests of the bundled solutions, which run after this one
  // and find the builds in its cache (a build is keyed by its content, so a cached one is what a
  // fresh build would give).
  const fs::path work_dir = KBRL_CPU_EVALUATOR_WORK;
  fs::remove_all(scratch);
  fs::create_directories(run_dir);
  fs::create_directories(work_dir);

  // The candidates, and nothing else, go into the run folder; each has an expected verdict and
  // each expected verdict has a candidate.
  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(kSolutions)) {
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, kCandidateName)) continue;
    fs::copy_file(entry.path(), run_dir / name);
    files.insert(name);
  }
  REQUIRE_FALSE(files.empty());
  for (const auto& f : files) {
    INFO(f << " has no entry in expected.json");
    CHECK(expected.count(f) == 1);
  }
  for (const auto& [f, e] : expected) {
    INFO("expected.json names " << f << ", which is not in examples/solutions");
    CHECK(files.count(f) == 1);
  }

  // ---- first run: everything is evaluated --------------------------------------------------
  const Run first = run_kbrl_eval(run_dir, work_dir, scratch, "first");
  std::cout << fmt::format("kbrl-eval on {} candidates: {:.1f} s\n", files.size(), first.seconds);
  INFO("stderr:\n" << without_progress(first.err));
  REQUIRE(first.exit_code == 0);
  CHECK(first.err.find(fmt::format("{} candidates, 0 already evaluated, {} to go", files.size(), files.size())) !=
        std::string::npos);

  const std::string jsonl_text = read_text(run_dir / "eval_results.jsonl");
  const auto results = read_results(jsonl_text, files.size());

  // Candidates that are nothing but PyTorch calls with the right values cannot be told from
  // kernels at run time: only the static checker (on by default in kbrl-eval) rejects them, so
  // every entry's static errors are required, rule by rule (a kbrl-eval that skipped the checker
  // would count those candidates correct).
  for (const auto& [file, want] : expected) {
    const auto it = results.find(file);
    if (it == results.end()) continue;  // reported above
    check_verdict(file, want, it->second, work_dir);
  }

  // eval_results.json: KernelBench's current layout, problem -> [results with sample_id], the
  // same verdicts.
  const json::value kb = core::parse_json(read_text(run_dir / "eval_results.json"));
  REQUIRE(kb.is_object());
  std::size_t kb_count = 0;
  for (const auto& [file, r] : results) {
    std::smatch m;
    REQUIRE(std::regex_match(file, m, kCandidateName));
    INFO(file << " in eval_results.json");
    const auto* problem = kb.as_object().if_contains(m[1].str());
    REQUIRE(problem != nullptr);
    REQUIRE(problem->is_array());
    const json::object* sample = nullptr;
    for (const auto& entry : problem->as_array())
      if (entry.as_object().at("sample_id").to_number<int>() == std::stoi(m[2])) sample = &entry.as_object();
    REQUIRE(sample != nullptr);
    CHECK(sample->at("correctness").as_bool() == r.correct);
    CHECK(sample->at("compiled").as_bool() == r.compiled);
  }
  for (const auto& [problem, samples] : kb.as_object()) kb_count += samples.as_array().size();
  CHECK(kb_count == files.size());

  // eval_summary.json: counts that agree with the results.
  const json::value summary = core::parse_json(read_text(run_dir / "eval_summary.json"));
  REQUIRE(summary.is_object());
  CHECK(summary.as_object().at("total").to_number<int>() == static_cast<int>(files.size()));
  const auto n_correct = std::count_if(results.begin(), results.end(), [](const auto& kv) { return kv.second.correct; });
  CHECK(summary.as_object().at("correct").to_number<int>() == static_cast<int>(n_correct));

  // ---- second run: resumes, evaluates nothing ----------------------------------------------
  const Run second = run_kbrl_eval(run_dir, work_dir, scratch, "second");
  std::cout << fmt::format("kbrl-eval again on the same folder: {:.1f} s\n", second.seconds);
  INFO("stderr of the second run:\n" << without_progress(second.err));
  REQUIRE(second.exit_code == 0);
  CHECK(second.err.find(fmt::format("{} candidates, {} already evaluated, 0 to go", files.size(), files.size())) !=
        std::string::npos);
  CHECK(read_text(run_dir / "eval_results.jsonl") == jsonl_text);  // not a line added or changed
  const json::value kb_again = core::parse_json(read_text(run_dir / "eval_results.json"));
  CHECK(kb_again == kb);
  CHECK(core::parse_json(read_text(run_dir / "eval_summary.json")) == summary);

  // ---- third run: the static checker off, on the candidates it rejects ----------------------
  // Their runtime verdicts: the runtime defenses catch some, the rest pass as correct, which is
  // why the first run requires every static error above. Nothing is built again (pure Python,
  // or cached in work_dir).
  const fs::path unchecked_dir = scratch / "run_without_static_check";
  fs::create_directories(unchecked_dir);
  std::size_t unchecked = 0;
  for (const auto& [file, want] : expected)
    if (want.without_static_check != nullptr && files.count(file) == 1) {
      fs::copy_file(kSolutions / file, unchecked_dir / file);
      ++unchecked;
    }
  REQUIRE(unchecked > 0);
  const Run third = run_kbrl_eval(unchecked_dir, work_dir, scratch, "third", "--no-static-check");
  std::cout << fmt::format("kbrl-eval --no-static-check on {} candidates: {:.1f} s\n", unchecked, third.seconds);
  INFO("stderr of the run without the static checker:\n" << without_progress(third.err));
  REQUIRE(third.exit_code == 0);
  const auto unchecked_results = read_results(read_text(unchecked_dir / "eval_results.jsonl"), unchecked);
  for (const auto& [file, r] : unchecked_results) {
    INFO(file << " without the static checker");
    CHECK(r.static_findings.empty());  // the checker did not run
    check_verdict(file, *expected.at(file).without_static_check, r, work_dir);
  }
  // ---- fourth run: a line torn by a kill is evaluated again, and the file stays JSON Lines ----
  // A kill in the middle of a write leaves the last line without its end; the resumed run must
  // not read it, must evaluate that candidate again and must not glue its new line onto it.
  const auto last_start = jsonl_text.rfind('\n', jsonl_text.size() - 2) + 1;
  const std::string last_line = jsonl_text.substr(last_start, jsonl_text.size() - 1 - last_start);
  const std::string torn_file(core::parse_json(last_line).as_object().at("file").as_string());
  {
    std::ofstream out(run_dir / "eval_results.jsonl", std::ios::binary | std::ios::trunc);
    out << jsonl_text.substr(0, last_start + last_line.size() / 2);
  }
  const Run fourth = run_kbrl_eval(run_dir, work_dir, scratch, "fourth");
  INFO("stderr of the fourth run:\n" << without_progress(fourth.err));
  REQUIRE(fourth.exit_code == 0);
  CHECK(fourth.err.find(fmt::format("{} candidates, {} already evaluated, 1 to go", files.size(), files.size() - 1)) !=
        std::string::npos);
  const std::string text_after = read_text(run_dir / "eval_results.jsonl");
  CHECK(text_after.substr(0, last_start) == jsonl_text.substr(0, last_start));  // the whole lines kept as they were
  const auto lines_after = lines_of(text_after);
  REQUIRE(lines_after.size() == files.size());
  const auto again = core::parse_json(lines_after.back()).as_object();
  CHECK(std::string(again.at("file").as_string()) == torn_file);
  CHECK(json::value_to<core::EvalResult>(again.at("result")).correct == results.at(torn_file).correct);
  CHECK(core::parse_json(read_text(run_dir / "eval_summary.json")).as_object().at("total").to_number<int>() ==
        static_cast<int>(files.size()));
}
