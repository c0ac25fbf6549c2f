// The evaluator settings (kbrl/eval/settings.hpp) from both ends: every setting is reachable as a
// kbrl-eval flag and as a kbrl-train `evaluator.*` key, and each lands in the field of
// LocalEvaluatorConfig or EvalOptions it names; the two programs' defaults differ only where the
// schema says; bad values are refused alike; docs/evaluator.md's table is the generated one.
#include "kbrl/eval/settings.hpp"

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "catch.hpp"
#include "cli.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/train/run_config.hpp"

using namespace kbrl;
namespace fs = std::filesystem;
using eval::EvaluatorSettings;
using eval::LocalEvaluatorConfig;

namespace {

fs::path scratch() {
  const auto dir = fs::path(KBRL_TEST_TMP) / "evaluator_settings";
  fs::create_directories(dir);
  return dir;
}

// A static-check config file that turns one rule off.
fs::path severity_file() {
  const auto p = scratch() / "severity.json";
  std::ofstream(p) << R"({"severity": {"side_stream": "off"}})";
  return p;
}

// One setting set to a value other than both programs' defaults: as kbrl-eval's flag takes it, as
// kbrl-train's override takes it, and what must then hold of the configuration it names.
struct Case {
  std::vector<std::string> flag_args;  // after the program name
  std::string override_value;          // evaluator.<key>=<this>
  std::function<bool(const LocalEvaluatorConfig&, const core::EvalOptions&)> landed;
  // For a setting outside both (endpoints): checked on the settings themselves instead.
  std::function<bool(const EvaluatorSettings&)> landed_in_settings = {};
};

bool landed(const Case& c, const EvaluatorSettings& s) {
  return c.landed_in_settings ? c.landed_in_settings(s) : c.landed(eval::local_evaluator_config(s), s.options);
}

std::map<std::string, Case> cases() {
  const std::string file = severity_file().string();
  using C = LocalEvaluatorConfig;
  using O = core::EvalOptions;
  std::map<std::string, Case> m;
  m["correctness_trials"] = {{"--trials", "7"}, "7", [](const C&, const O& o) { return o.correctness_trials == 7; }};
  m["timing"] = {{"--no-timing"}, "false", [](const C&, const O& o) { return !o.measure_performance; }};
  m["timing_trials"] = {{"--timing-trials", "33"}, "33", [](const C&, const O& o) { return o.timing_trials == 33; }};
  m["warmup_runs"] = {{"--warmup", "9"}, "9", [](const C&, const O& o) { return o.warmup_runs == 9; }};
  m["seed"] = {{"--seed", "1234"}, "1234", [](const C&, const O& o) { return o.seed == std::uint64_t{1234}; }};
  m["atol"] = {{"--atol", "0.5"}, "0.5", [](const C&, const O& o) { return o.atol == 0.5; }};
  m["rtol"] = {{"--rtol", "0.25"}, "0.25", [](const C&, const O& o) { return o.rtol == 0.25; }};
  m["input_families"] = {{"--no-input-families"}, "false", [](const C&, const O& o) { return !o.input_families; }};
  m["kernelbench_inputs"] = {{"--kernelbench-inputs"}, "true", [](const C&, const O& o) { return o.kernelbench_inputs; }};
  m["compile_timeout_s"] = {{"--compile-timeout", "12.5"}, "12.5", [](const C&, const O& o) { return o.compile_timeout_s == 12.5; }};
  m["run_timeout_s"] = {{"--run-timeout", "7"}, "7", [](const C&, const O& o) { return o.run_timeout_s == 7; }};
  m["device"] = {{"--device", "hip"}, "hip", [](const C& c, const O&) { return c.platform == core::DevicePlatform::hip; }};
  m["gpus"] = {{"--gpus", "1,3"}, "[1, 3]", [](const C& c, const O&) { return c.devices == std::vector<int>{1, 3}; }};
  m["cpu_run_lanes"] = {{"--cpu-run-lanes", "2"}, "2", [](const C& c, const O&) { return c.cpu_run_lanes == 2; }};
  m["work_dir"] = {{"--work-dir", "/tmp/w"}, "/tmp/w", [](const C& c, const O&) { return c.work_dir == "/tmp/w"; }};
  m["baseline_cache"] = {{"--no-baseline-cache"}, "false", [](const C& c, const O&) { return !c.baseline_cache; }};
  m["keep_logs"] = {{"--keep-logs"}, "true", [](const C& c, const O&) { return c.keep_logs; }};
  m["python"] = {{"--python", "/opt/py/bin/python3"}, "/opt/py/bin/python3",
                 [](const C& c, const O&) { return c.python == "/opt/py/bin/python3"; }};
  m["worker_script"] = {{"--worker-script", "/opt/w.py"}, "/opt/w.py",
                        [](const C& c, const O&) { return c.worker_script == "/opt/w.py"; }};
  m["worker_start_timeout_s"] = {{"--worker-start-timeout", "42"}, "42",
                                 [](const C& c, const O&) { return c.worker_start_timeout_s == 42; }};
  m["deadline_grace_s"] = {{"--deadline-grace", "5"}, "5", [](const C& c, const O&) { return c.grace_s == 5; }};
  m["excessive_speedup"] = {{"--excessive-speedup", "4.5"}, "4.5",
                            [](const C& c, const O&) { return c.excessive_speedup == 4.5; }};
  m["compile_workers"] = {{"--compile-workers", "3"}, "3", [](const C& c, const O&) { return c.compile_workers == 3; }};
  m["compile_nice"] = {{"--compile-nice", "0"}, "0", [](const C& c, const O&) { return c.compile_nice == 0; }};
  m["cuda_arch"] = {{"--cuda-arch", "9.0"}, "\"9.0\"", [](const C& c, const O&) { return c.cuda_arch == "9.0"; }};
  m["gpu_arch"] = {{"--gpu-arch", "gfx90a;gfx942"}, "\"gfx90a;gfx942\"",
                   [](const C& c, const O&) { return c.gpu_arch == "gfx90a;gfx942"; }};
  m["compile_pch"] = {{"--no-compile-pch"}, "false", [](const C& c, const O&) { return !c.compile_pch; }};
  m["compile_light_headers"] = {{"--no-light-headers"}, "false", [](const C& c, const O&) { return !c.compile_light_headers; }};
  m["compile_parallel_passes"] = {{"--no-parallel-passes"}, "false",
                                  [](const C& c, const O&) { return !c.compile_parallel_passes; }};
  m["compile_cache_dir"] = {{"--compile-cache-dir", "/tmp/cc"}, "/tmp/cc",
                            [](const C& c, const O&) { return c.compile_cache_dir == "/tmp/cc"; }};
  m["static_check"] = {{"--no-static-check"}, "false", [](const C& c, const O&) { return !c.static_checks; }};
  m["static_check_policy"] = {{"--static-policy", "fusion"}, "fusion",
                              [](const C& c, const O&) { return c.static_check_policy == "fusion"; }};
  m["static_check_config"] = {{"--static-config", file}, file, [](const C& c, const O&) {
                                return c.static_check_severity.size() == 1 &&
                                       c.static_check_severity.at("side_stream") == core::Severity::off;
                              }};
  m["static_check_severity"] = {{"--static-check-severity", "try_except_fallback=warning"},
                                "{try_except_fallback: warning}", [](const C& c, const O&) {
                                  return c.static_check_severity.size() == 1 &&
                                         c.static_check_severity.at("try_except_fallback") == core::Severity::warning;
                                }};
  m["sandbox"] = {{"--sandbox", "off"}, "off", [](const C& c, const O&) { return c.sandbox == eval::SandboxMode::off; }};
  m["max_file_size_bytes"] = {{"--max-file-size-bytes", "1000"}, "1000",
                              [](const C& c, const O&) { return c.limits.file_size_bytes == 1000; }};
  m["max_memory_bytes"] = {{"--max-memory-bytes", "2000"}, "2000",
                           [](const C& c, const O&) { return c.limits.address_space_bytes == 2000; }};
  m["endpoints"] = {{"--endpoints", "http://a:1,dns://svc.ns:8470"}, "http://a:1,dns://svc.ns:8470", {},
                    [](const EvaluatorSettings& s) { return s.endpoints == "http://a:1,dns://svc.ns:8470"; }};
  m["max_processes"] = {{"--max-processes", "64"}, "64", [](const C& c, const O&) { return c.limits.processes == 64; }};
  m["max_open_files"] = {{"--max-open-files", "256"}, "256", [](const C& c, const O&) { return c.limits.open_files == 256; }};
  m["max_cpu_seconds"] = {{"--max-cpu-seconds", "30"}, "30", [](const C& c, const O&) { return c.limits.cpu_seconds == 30; }};
  return m;
}

// kbrl-eval's side: the flags as a subcommand of kbrl-eval gets them.
EvaluatorSettings from_flags(const std::vector<std::string>& args) {
  CLI::App app("test", "kbrl-eval");
  apps::EvaluatorFlags flags(app, eval::SettingsProfile::evaluation);
  std::vector<const char*> argv{"kbrl-eval"};
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return flags.settings();
}

// kbrl-train's side: the overrides (after log_path) through the run configuration.
train::RunConfig from_overrides(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), "log_path=runs/settings");
  return train::load_run_config(std::nullopt, overrides);
}

std::string usage_error(const std::vector<std::string>& args) {
  try {
    from_flags(args);
  } catch (const apps::UsageError& e) {
    return e.what();
  } catch (const CLI::ParseError& e) {
    return std::string("parse error: ") + e.what();
  }
  return "no error";
}

std::string config_error(const std::vector<std::string>& overrides) {
  try {
    from_overrides(overrides);
  } catch (const core::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("every evaluator setting has a case in this test") {
  const auto all = cases();
  std::set<std::string> keys;
  for (const auto& s : eval::evaluator_settings()) {
    keys.insert(s.key);
    INFO("setting " << s.key << " has no case: add one above");
    CHECK(all.count(s.key) == 1);
  }
  for (const auto& [key, c] : all) {
    INFO("case " << key << " names no setting");
    CHECK(keys.count(key) == 1);
  }
}

TEST_CASE("every evaluator setting is a kbrl-eval flag and lands in the field it names") {
  const auto defaults = eval::default_evaluator_settings(eval::SettingsProfile::evaluation);
  for (const auto& [key, c] : cases()) {
    INFO("kbrl-eval " << c.flag_args[0] << " (" << key << ")");
    CHECK_FALSE(landed(c, defaults));  // the value is not a default
    const auto s = from_flags(c.flag_args);
    CHECK(landed(c, s));
  }
}

TEST_CASE("every evaluator setting is a kbrl-train key, lands in the field it names and survives config.yaml") {
  const auto path = scratch() / "resolved.yaml";
  for (const auto& [key, c] : cases()) {
    INFO("kbrl-train evaluator." << key << "=" << c.override_value);
    std::vector<std::string> overrides{"evaluator." + key + "=" + c.override_value};
    if (key == "device") overrides.push_back("prompt.language=hip");  // cpp kernels need the cpu
    const auto config = from_overrides(overrides);
    CHECK_FALSE(landed(c, train::RunConfig{}.evaluator));
    CHECK(landed(c, config.evaluator));
    train::write_resolved(config, path);
    const auto back = train::load_run_config(path, {});
    CHECK(landed(c, back.evaluator));
    CHECK(train::to_yaml(back) == train::to_yaml(config));
  }
}

TEST_CASE("the two programs' defaults differ in timing only, as the schema says") {
  const auto evaluation = eval::default_evaluator_settings(eval::SettingsProfile::evaluation);
  const auto training = eval::default_evaluator_settings(eval::SettingsProfile::training);
  CHECK(evaluation.options.timing_trials == 100);
  CHECK(evaluation.options.warmup_runs == 5);
  CHECK(training.options.timing_trials == 20);
  CHECK(training.options.warmup_runs == 3);
  std::vector<std::string> differ;
  for (const auto& s : eval::evaluator_settings())
    if (s.get(evaluation) != s.get(training)) differ.push_back(s.key);
  CHECK(differ == std::vector<std::string>{"timing_trials", "warmup_runs"});
  // Each program starts from its profile: kbrl-eval with no flags, kbrl-train with no keys.
  const auto no_flags = from_flags({});
  const auto no_keys = from_overrides({}).evaluator;
  for (const auto& s : eval::evaluator_settings()) {
    INFO(s.key);
    CHECK(s.get(no_flags) == s.get(evaluation));
    CHECK(s.get(no_keys) == s.get(training));
  }
}

TEST_CASE("bad values are refused by both programs with the flag or key named") {
  CHECK(has(usage_error({"--trials", "0"}), "--trials: 0 is below 1"));
  CHECK(has(config_error({"evaluator.correctness_trials=0"}), "0 is below 1"));
  CHECK(has(config_error({"evaluator.correctness_trials=0"}), "evaluator.correctness_trials"));
  CHECK(has(usage_error({"--compile-nice", "20"}), "--compile-nice: 20 is above 19"));
  CHECK(has(config_error({"evaluator.compile_nice=20"}), "20 is above 19"));
  CHECK(has(usage_error({"--sandbox", "maybe"}), "'maybe' is not one of: on, off"));
  CHECK(has(config_error({"evaluator.sandbox=maybe"}), "'maybe' is not one of: on, off"));
  CHECK(has(usage_error({"--timing-trials", "many"}), "--timing-trials: expected an integer"));
  CHECK(has(config_error({"evaluator.timing_trials=many"}), "expected an integer"));
  CHECK(has(usage_error({"--run-timeout", "-1"}), "must be positive"));
  CHECK(has(usage_error({"--gpus", "0,x"}), "'x' is not one"));
  CHECK(has(config_error({"evaluator.gpus=[0, -1]"}), "-1 is below 0"));
  CHECK(has(usage_error({"--static-check-severity", "no_such_rule=off"}), "unknown static-check rule 'no_such_rule'"));
  CHECK(has(config_error({"evaluator.static_check_severity={side_stream: loud}"}), "'loud' for rule side_stream"));
  CHECK(has(usage_error({"--seed", "-3"}), "expected a non-negative integer"));
  CHECK(has(usage_error({"--no-such-flag"}), "parse error"));
  CHECK(has(usage_error({"--endpoints", "ftp://x:1"}), "--endpoints: endpoints 'ftp://x:1'"));
  CHECK(has(config_error({"evaluator.endpoints=dns://nameonly"}), "dns://NAME:PORT"));
}

TEST_CASE("earlier kbrl-train spellings are still read: evaluator.workers, sandbox true/false/auto") {
  const auto c = from_overrides({"evaluator.workers=6", "evaluator.sandbox=false"});
  CHECK(c.evaluator.local.compile_workers == 6);
  CHECK(c.evaluator.local.sandbox == eval::SandboxMode::off);
  CHECK(from_overrides({"evaluator.sandbox=true"}).evaluator.local.sandbox == eval::SandboxMode::on);
  CHECK(from_overrides({"evaluator.sandbox=auto"}).evaluator.local.sandbox == eval::SandboxMode::on);
  const std::string yaml = train::to_yaml(c);
  CHECK(has(yaml, "compile_workers: 6"));
  CHECK_FALSE(has(yaml, "  workers:"));
  CHECK(has(yaml, "sandbox: \"off\""));
}

TEST_CASE("static-check severities: the map applies over the file's") {
  const auto file = scratch() / "two_rules.json";
  std::ofstream(file) << R"({"severity": {"side_stream": "off", "try_except_fallback": "warning"}})";
  const auto s = from_flags({"--static-config", file.string(), "--static-check-severity",
                             "try_except_fallback=error,side_stream=off", "--static-check-severity", "calls_reference=warning"});
  const auto c = eval::local_evaluator_config(s);
  CHECK(c.static_check_severity.at("side_stream") == core::Severity::off);
  CHECK(c.static_check_severity.at("try_except_fallback") == core::Severity::error);
  CHECK(c.static_check_severity.at("calls_reference") == core::Severity::warning);
  // A file that is not there fails when the evaluator is configured, naming the file.
  EvaluatorSettings missing;
  missing.static_check_config = scratch() / "no_such.json";
  try {
    eval::local_evaluator_config(missing);
    FAIL("no error for a missing file");
  } catch (const core::ConfigError& e) {
    CHECK(has(e.what(), "no_such.json"));
  }
  // kbrl-train reads the file with its configuration, before anything runs.
  const std::string at_load = config_error({"evaluator.static_check_config=" + missing.static_check_config.string()});
  CHECK(has(at_load, "no_such.json"));
  // kbrl-train: a file and a map; an override adds a rule to the YAML's map.
  const auto yaml = scratch() / "severity.yaml";
  std::ofstream(yaml) << "log_path: runs/s\nevaluator:\n  static_check_config: " << file.string()
                      << "\n  static_check_severity:\n    side_stream: warning\n";
  const auto config = train::load_run_config(yaml, {"evaluator.static_check_severity.calls_reference=off"});
  const auto tc = eval::local_evaluator_config(config.evaluator);
  CHECK(tc.static_check_severity.at("side_stream") == core::Severity::warning);
  CHECK(tc.static_check_severity.at("try_except_fallback") == core::Severity::warning);
  CHECK(tc.static_check_severity.at("calls_reference") == core::Severity::off);
}

TEST_CASE("docs/evaluator.md lists every evaluator setting with both defaults") {
  std::ifstream in(fs::path(KBRL_SOURCE_DIR) / "docs/evaluator.md");
  std::stringstream docs;
  docs << in.rdbuf();
  INFO("regenerate the table from eval::evaluator_settings_markdown()");
  CHECK(has(docs.str(), eval::evaluator_settings_markdown()));
}
