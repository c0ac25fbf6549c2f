// The evaluator's settings, defined once: every knob of LocalEvaluatorConfig and of the
// EvalOptions copied into each request, with its name, type, default, help, the field it sets and
// its checks. kbrl-eval's flags and kbrl-train's `evaluator.*` keys are both generated from this
// table, so every setting is reachable from both programs and refused alike (docs/evaluator.md).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/eval/local_evaluator.hpp"

namespace kbrl::eval {

// What a user sets about evaluation, in the two places it lands.
struct EvaluatorSettings {
  LocalEvaluatorConfig local;  // evaluator-wide: device, builds, sandbox, caches, compile accelerations
  core::EvalOptions options;   // copied into every request: trials, timing, seed, inputs, timeouts
  // A JSON file of static-check severities (docs/static-checks.md), read when the evaluator is
  // configured; local.static_check_severity is applied over it.
  std::filesystem::path static_check_config;
  // kbrl-evald servers to evaluate on instead of this machine (remote_evaluator_config's forms:
  // URL[,URL...], dns://NAME:PORT or a file of them); empty: a LocalEvaluator of `local`.
  std::string endpoints;
};

// Whose defaults. They differ in one place only, here: training times fewer runs (a reward needs
// a rough speedup, and every step waits for its slowest candidate), kbrl-eval reports speedups as
// KernelBench does.
enum class SettingsProfile {
  evaluation,  // kbrl-eval: 100 timed runs after 5 warm-up runs
  training,    // kbrl-train: 20 timed runs after 3 warm-up runs
};
EvaluatorSettings default_evaluator_settings(SettingsProfile profile);

// The evaluator these settings describe: a RemoteEvaluator on `endpoints` when set (docs/services.md;
// its token from $KBRL_EVALD_TOKEN, or the file $KBRL_EVALD_TOKEN_FILE names), else a
// LocalEvaluator of local_evaluator_config(settings). Throws as their constructors do.
std::unique_ptr<Evaluator> make_evaluator(const EvaluatorSettings& settings);

// The configuration a LocalEvaluator is built with: `settings.local`, its static-check severities
// being static_check_config's with local.static_check_severity over them. Throws
// core::ConfigError naming the file when it cannot be read.
LocalEvaluatorConfig local_evaluator_config(const EvaluatorSettings& settings);

enum class SettingType {
  boolean,       // kbrl-eval: --x and --no-x
  integer,       // int
  size,          // std::uint64_t (bytes, counts)
  number,        // double, finite
  text,
  path,
  choice,        // one of Setting::choices
  integer_list,  // "0,1" or a YAML list
  severity_map,  // rule -> off|warning|error: "rule=level,..." or a YAML map
};

// A value as a front end hands it over: unset (YAML's null; an optional setting becomes unset, a
// text or path empty), a scalar's text, a list's items, or a map's entries. A list may also come
// as one comma-separated scalar, a map as "key=value" items.
using SettingValue = std::variant<std::monostate, std::string, std::vector<std::string>, std::map<std::string, std::string>>;

struct Setting {
  std::string key;   // kbrl-train: evaluator.<key>
  std::string flag;  // kbrl-eval: --<flag> (a boolean also --no-<flag>)
  std::vector<std::string> aliases;  // earlier kbrl-train keys, still read (a resumed run's config.yaml)
  SettingType type = SettingType::text;
  bool optional = false;             // may be unset (then the evaluator decides)
  std::vector<std::string> choices;  // SettingType::choice
  std::string group;                 // for help output: "evaluation", "evaluator", "compiling", ...
  std::string field;                 // where it lands: "EvalOptions::timing_trials"
  std::string help;
  // Sets the value; returns the reason it is refused ("expected an integer", "0 is below 1") or "".
  std::function<std::string(EvaluatorSettings&, const SettingValue&)> set;
  // The value in its canonical form (what `set` reads back to the same settings).
  std::function<SettingValue(const EvaluatorSettings&)> get;

  // For help: "N", "SECONDS", "PATH", "auto|on|off", "RULE=LEVEL,..." ("" for a boolean).
  std::string value_name() const;
};

// Every setting, in help order (grouped).
const std::vector<Setting>& evaluator_settings();
// The setting with this key or alias, or nullptr.
const Setting* find_evaluator_setting(std::string_view key);

// A value as one line of text: a scalar as is, items joined by ',', entries as key=value,
// unset as "".
std::string setting_text(const SettingValue& value);

// docs/evaluator.md's table of settings (flag, key, defaults of both profiles, meaning, field).
std::string evaluator_settings_markdown();

}  // namespace kbrl::eval
