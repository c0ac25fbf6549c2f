#include "kbrl/eval/settings.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

#include "kbrl/core/error.hpp"
#include "kbrl/check/static_check.hpp"
#include "kbrl/eval/remote_evaluator.hpp"

namespace kbrl::eval {

namespace fs = std::filesystem;

EvaluatorSettings default_evaluator_settings(SettingsProfile profile) {
  EvaluatorSettings s;
  if (profile == SettingsProfile::training) {
    s.options.timing_trials = 20;
    s.options.warmup_runs = 3;
  }
  return s;
}

std::unique_ptr<Evaluator> make_evaluator(const EvaluatorSettings& settings) {
  if (!settings.endpoints.empty()) return std::make_unique<RemoteEvaluator>(remote_evaluator_config(settings.endpoints));
  return std::make_unique<LocalEvaluator>(local_evaluator_config(settings));
}

LocalEvaluatorConfig local_evaluator_config(const EvaluatorSettings& settings) {
  LocalEvaluatorConfig c = settings.local;
  if (!settings.static_check_config.empty()) {
    auto severity = check::load_static_check_config(settings.static_check_config).severity;
    for (const auto& [rule, level] : settings.local.static_check_severity) severity[rule] = level;
    c.static_check_severity = std::move(severity);
  }
  return c;
}

namespace {

// --- text -> values (the same rules for a flag's argument and a YAML scalar) -----------------

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::optional<bool> parse_bool(const std::string& text) {
  std::string t = trim(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  // YAML 1.1's spellings, as yaml-cpp reads them.
  if (t == "true" || t == "yes" || t == "on" || t == "y") return true;
  if (t == "false" || t == "no" || t == "off" || t == "n") return false;
  return std::nullopt;
}

template <class T>
std::optional<T> parse_integer(const std::string& text) {
  const std::string t = trim(text);
  if (t.empty() || (std::is_unsigned_v<T> && t[0] == '-')) return std::nullopt;
  T v{};
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_number(const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string number_text(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // stays a number in YAML: 600.0
  return s;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  if (trim(text).empty()) return out;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    out.push_back(trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// The scalar of `v`, or nullopt with `error` set.
std::optional<std::string> scalar_of(const SettingValue& v, const char* expected, std::string& error) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  error = fmt::format("expected {}", expected);
  return std::nullopt;
}

// A list's items: a list, or one comma-separated scalar.
std::optional<std::vector<std::string>> items_of(const SettingValue& v) {
  if (const auto* l = std::get_if<std::vector<std::string>>(&v)) return *l;
  if (const auto* s = std::get_if<std::string>(&v)) return split_commas(*s);
  if (std::holds_alternative<std::monostate>(v)) return std::vector<std::string>{};
  return std::nullopt;
}

// --- the builders ------------------------------------------------------------------------------

template <class T>
using Ref = std::function<T&(EvaluatorSettings&)>;

template <class M>
Ref<M> local(M LocalEvaluatorConfig::*member) {
  return [member](EvaluatorSettings& s) -> M& { return s.local.*member; };
}
template <class M>
Ref<M> request(M core::EvalOptions::*member) {
  return [member](EvaluatorSettings& s) -> M& { return s.options.*member; };
}
template <class T>
const T& read(const Ref<T>& ref, const EvaluatorSettings& s) {
  return ref(const_cast<EvaluatorSettings&>(s));  // the ref only reads here
}

struct Names {
  std::string key, flag, group, field, help;
  std::vector<std::string> aliases = {};
};

Setting base(const Names& n, SettingType type) {
  Setting s;
  s.key = n.key;
  s.flag = n.flag.empty() ? [&] {
    std::string f = n.key;
    std::replace(f.begin(), f.end(), '_', '-');
    return f;
  }()
                          : n.flag;
  s.aliases = n.aliases;
  s.type = type;
  s.group = n.group;
  s.field = n.field;
  s.help = n.help;
  return s;
}

Setting boolean(const Names& n, Ref<bool> ref) {
  Setting s = base(n, SettingType::boolean);
  s.set = [ref](EvaluatorSettings& e, const SettingValue& v) -> std::string {
    std::string err;
    const auto text = scalar_of(v, "true or false", err);
    if (!text) return err;
    const auto b = parse_bool(*text);
    if (!b) return "expected true or false";
    ref(e) = *b;
    return {};
  };
  s.get = [ref](const EvaluatorSettings& e) -> SettingValue { return std::string(read(ref, e) ? "true" : "false"); };
  return s;
}

template <class T>
Setting integer(const Names& n, Ref<T> ref, T lo, T hi = std::numeric_limits<T>::max()) {
  Setting s = base(n, std::is_same_v<T, int> ? SettingType::integer : SettingType::size);
  const char* expected = std::is_same_v<T, int> ? "an integer" : "a non-negative integer";
  s.set = [ref, lo, hi, expected](EvaluatorSettings& e, const SettingValue& v) -> std::string {
    std::string err;
    const auto text = scalar_of(v, expected, err);
    if (!text) return err;
    const auto i = parse_integer<T>(*text);
    if (!i) return fmt::format("expected {}", expected);
    if (*i < lo) return fmt::format("{} is below {}", *i, lo);
    if (*i > hi) return fmt::format("{} is above {}", *i, hi);
    ref(e) = *i;
    return {};
  };
  s.get = [ref](const EvaluatorSettings& e) -> SettingValue { return std::to_string(read(ref, e)); };
  return s;
}

// A number that must be above `lo` (or at least `lo` with lo_closed).
Setting number(const Names& n, Ref<double> ref, double lo, bool lo_closed) {
  Setting s = base(n, SettingType::number);
  s.set = [ref, lo, lo_closed](EvaluatorSettings& e, const SettingValue& v) -> std::string {
    std::string err;
    const auto text = scalar_of(v, "a number", err);
    if (!text) return err;
    const auto x = parse_number(*text);
    if (!x) return "expected a number";
    if (lo_closed ? *x < lo : *x <= lo)
      return lo == 0 ? fmt::format("{} must be {}", *x, lo_closed ? "non-negative" : "positive")
                     : fmt::format("{} is below {}", *x, lo);
    ref(e) = *x;
    return {};
  };
  s.get = [ref](const EvaluatorSettings& e) -> SettingValue { return number_text(read(ref, e)); };
  return s;
}

Setting optional_number(const Names& n, Ref<std::optional<double>> ref) {
  Setting s = base(n, SettingType::number);
  s.optional = true;
  s.set = [ref](EvaluatorSettings& e, const SettingValue& v) -> std::string {
    if (std::holds_alternative<std::monostate>(v)) {
      ref(e).reset();
      return {};
    }
    std::string err;
    const auto text = scalar_of(v, "a number", err);
    if (!text) return err;
    const auto x = parse_number(*text);
    if (!x) return "expected a number";
    if (*x < 0) return fmt::format("{} must be non-negative", *x);
    ref(e) = *x;
    return {};
  };
  s.get = [ref](const EvaluatorSettings& e) -> SettingValue {
    const auto& v = read(ref, e);
    return v ? SettingValue(number_text(*v)) : SettingValue();
  };
  return s;
}

Setting optional_size(const Names& n, Ref<std::optional<std::uint64_t>> ref) {
  Setting s = base(n, SettingType::size);
  s.optional = true;
  s.set = [ref](EvaluatorSettings& e, const SettingValue& v) -> std::string {
    if (std::holds_alternative<std::monostate>(v)) {
      ref(e).reset();
      return {};
    }
    std::string err;
    const auto text = scalar_of(v, "a non-negative integer", err);
    if (!text) return err;
    const auto i = parse_integer<std::uint64_t>(*text);
    if (!i) return "expected a non-negative integer";
    ref(e) = *i;
    return {};
  };
  s.get = [ref](const EvaluatorSettings& e) -> SettingValue {
    const auto& v = read(ref, e);
    return v ? SettingValue(std::to_string(*v)) : SettingValue();
  };
  return s;
}

template <class T>  // std::string or fs::path
Setting text(const Names& n, Ref<T> ref, SettingType type) {
  Setting s = base(n, type);
  s.set = [ref](EvaluatorSettings& e, const SettingValue& v) -> std::string {
    if (std::holds_alternative<std::monostate>(v)) {
      ref(e) = T();
      return {};
    }
    std::string err;
    const auto t = scalar_of(v, "a string", err);
    if (!t) return err;
    ref(e) = T(*t);
    return {};
  };
  s.get = [ref](const EvaluatorSettings& e) -> SettingValue {
    if constexpr (std::is_same_v<T, fs::path>) return read(ref, e).string();
    else return read(ref, e);
  };
  return s;
}

// One of `choices`; `legacy` maps other accepted spellings (earlier configs) onto a choice.
template <class T>
Setting choice(const Names& n, Ref<T> ref, std::vector<std::pair<std::string, T>> choices,
               std::vector<std::pair<std::string, std::string>> legacy = {}) {
  Setting s = base(n, SettingType::choice);
  for (const auto& c : choices) s.choices.push_back(c.first);
  s.set = [ref, choices, legacy](EvaluatorSettings& e, const SettingValue& v) -> std::string {
    std::string err;
    auto t = scalar_of(v, "a string", err);
    if (!t) return err;
    *t = trim(*t);
    for (const auto& [from, to] : legacy)
      if (*t == from) *t = to;
    for (const auto& [name, value] : choices)
      if (*t == name) {
        ref(e) = value;
        return {};
      }
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c.first;
    return fmt::format("'{}' is not one of: {}", *t, list);
  };
  s.get = [ref, choices](const EvaluatorSettings& e) -> SettingValue {
    for (const auto& [name, value] : choices)
      if (read(ref, e) == value) return name;
    return std::string();
  };
  return s;
}

Setting integer_list(const Names& n, Ref<std::vector<int>> ref) {
  Setting s = base(n, SettingType::integer_list);
  s.set = [ref](EvaluatorSettings& e, const SettingValue& v) -> std::string {
    const auto items = items_of(v);
    if (!items) return "expected a list of integers";
    std::vector<int> out;
    for (const auto& item : *items) {
      const auto i = parse_integer<int>(item);
      if (!i) return fmt::format("expected a list of integers ('{}' is not one)", item);
      if (*i < 0) return fmt::format("{} is below 0", *i);
      out.push_back(*i);
    }
    ref(e) = std::move(out);
    return {};
  };
  s.get = [ref](const EvaluatorSettings& e) -> SettingValue {
    std::vector<std::string> out;
    for (int i : read(ref, e)) out.push_back(std::to_string(i));
    return out;
  };
  return s;
}

Setting severity_map(const Names& n, Ref<std::map<std::string, core::Severity>> ref) {
  Setting s = base(n, SettingType::severity_map);
  s.set = [ref](EvaluatorSettings& e, const SettingValue& v) -> std::string {
    std::map<std::string, std::string> entries;
    if (const auto* m = std::get_if<std::map<std::string, std::string>>(&v)) {
      entries = *m;
    } else if (const auto items = items_of(v)) {
      for (const auto& item : *items) {
        const auto eq = item.find('=');
        if (eq == std::string::npos) return fmt::format("expected RULE=LEVEL, not '{}'", item);
        entries[trim(item.substr(0, eq))] = trim(item.substr(eq + 1));
      }
    } else {
      return "expected a map of rule: off|warning|error";
    }
    std::map<std::string, core::Severity> out;
    for (const auto& [rule, level] : entries) {
      if (check::find_static_check_rule(rule) == nullptr)
        return fmt::format("unknown static-check rule '{}' (docs/static-checks.md lists them)", rule);
      try {
        out[rule] = core::parse_severity(level);
      } catch (const core::InvalidArgument&) {
        return fmt::format("'{}' for rule {} is not off, warning or error", level, rule);
      }
    }
    ref(e) = std::move(out);
    return {};
  };
  s.get = [ref](const EvaluatorSettings& e) -> SettingValue {
    std::map<std::string, std::string> out;
    for (const auto& [rule, level] : read(ref, e)) out[rule] = std::string(core::to_string(level));
    return out;
  };
  return s;
}

std::vector<Setting> make_settings() {
  using L = LocalEvaluatorConfig;
  using O = core::EvalOptions;
  std::vector<Setting> e;
  const std::string evaluation = "evaluation", evaluator = "evaluator", compiling = "compiling", checks = "static checks",
                    isolation = "isolation";

  // What each request asks for.
  e.push_back(integer<int>({"correctness_trials", "trials", evaluation, "EvalOptions::correctness_trials",
                            "correctness trials per candidate, each on fresh inputs"},
                           request(&O::correctness_trials), 1));
  e.push_back(boolean({"timing", "", evaluation, "EvalOptions::measure_performance",
                       "time candidate and reference (false: check correctness only)"},
                      request(&O::measure_performance)));
  e.push_back(integer<int>({"timing_trials", "", evaluation, "EvalOptions::timing_trials", "timed runs per candidate"},
                           request(&O::timing_trials), 1));
  e.push_back(integer<int>({"warmup_runs", "warmup", evaluation, "EvalOptions::warmup_runs", "runs before timing"},
                           request(&O::warmup_runs), 0));
  e.push_back(optional_size({"seed", "", evaluation, "EvalOptions::seed",
                             "fixed seed for inputs and weights (unset: a fresh seed per evaluation)"},
                            request(&O::seed)));
  e.push_back(optional_number({"atol", "", evaluation, "EvalOptions::atol",
                               "absolute tolerance of the correctness check (unset: the precision's, docs/evaluator.md)"},
                              request(&O::atol)));
  e.push_back(optional_number({"rtol", "", evaluation, "EvalOptions::rtol",
                               "relative tolerance of the correctness check (unset: the precision's)"},
                              request(&O::rtol)));
  e.push_back(boolean({"input_families", "", evaluation, "EvalOptions::input_families",
                       "extra trials on transformed inputs: sign-symmetric, scaled, special values (docs/evaluator.md)"},
                      request(&O::input_families)));
  e.push_back(boolean({"kernelbench_inputs", "", evaluation, "EvalOptions::kernelbench_inputs",
                       "make inputs on the host and copy them, exactly as KernelBench does (slow for large problems)"},
                      request(&O::kernelbench_inputs)));
  e.push_back(number({"compile_timeout_s", "compile-timeout", evaluation, "EvalOptions::compile_timeout_s",
                      "seconds a build may take"},
                     request(&O::compile_timeout_s), 0, false));
  e.push_back(number({"run_timeout_s", "run-timeout", evaluation, "EvalOptions::run_timeout_s",
                      "seconds checks and timing may take"},
                     request(&O::run_timeout_s), 0, false));

  // The evaluator: where and with what it runs.
  {
    Setting endpoints = text<std::string>(
        {"endpoints", "", evaluator, "EvaluatorSettings::endpoints",
         "kbrl-evald servers to evaluate on instead of this machine: URL[,URL...], dns://NAME:PORT or a file of "
         "them (docs/services.md); the token from $KBRL_EVALD_TOKEN. The evaluator settings other than the "
         "evaluation options are then the servers'"},
        [](EvaluatorSettings& s) -> std::string& { return s.endpoints; }, SettingType::text);
    endpoints.set = [plain = endpoints.set](EvaluatorSettings& settings, const SettingValue& v) -> std::string {
      if (auto error = plain(settings, v); !error.empty()) return error;
      if (settings.endpoints.empty()) return {};
      try {
        remote_evaluator_config(settings.endpoints);
      } catch (const core::InvalidArgument& x) {
        return x.what();
      }
      return {};
    };
    e.push_back(std::move(endpoints));
  }
  e.push_back(choice<core::DevicePlatform>(
      {"device", "", evaluator, "LocalEvaluatorConfig::platform", "where kernels run"}, local(&L::platform),
      {{"cpu", core::DevicePlatform::cpu}, {"cuda", core::DevicePlatform::cuda}, {"hip", core::DevicePlatform::hip}}));
  e.push_back(integer_list({"gpus", "", evaluator, "LocalEvaluatorConfig::devices",
                            "GPU indices, one run lane each (empty: GPU 0; ignored on the cpu)"},
                           local(&L::devices)));
  e.push_back(integer<int>({"cpu_run_lanes", "", evaluator, "LocalEvaluatorConfig::cpu_run_lanes",
                            "parallel run lanes on the cpu (1 keeps timings exclusive)"},
                           local(&L::cpu_run_lanes), 1));
  e.push_back(text<fs::path>({"work_dir", "", evaluator, "LocalEvaluatorConfig::work_dir",
                              "build cache, logs, baseline timings (empty: for kbrl-eval $KBRL_WORK_DIR, else ~/.cache/kbrl; "
                              "for kbrl-train eval_work in the run directory)"},
                             local(&L::work_dir), SettingType::path));
  e.push_back(boolean({"baseline_cache", "", evaluator, "LocalEvaluatorConfig::baseline_cache",
                       "time each reference once per device and settings, and reuse the work dir's timings"},
                      local(&L::baseline_cache)));
  e.push_back(boolean({"keep_logs", "", evaluator, "LocalEvaluatorConfig::keep_logs",
                       "keep every worker child's log in the work dir, not only failures'"},
                      local(&L::keep_logs)));
  e.push_back(text<std::string>({"python", "", evaluator, "LocalEvaluatorConfig::python",
                                 "interpreter with torch for the workers (empty: $KBRL_PYTHON, else the build's)"},
                                local(&L::python), SettingType::text));
  e.push_back(text<fs::path>({"worker_script", "", evaluator, "LocalEvaluatorConfig::worker_script",
                              "the worker program (empty: $KBRL_WORKER_SCRIPT, else the installed one)"},
                             local(&L::worker_script), SettingType::path));
  e.push_back(number({"worker_start_timeout_s", "worker-start-timeout", evaluator,
                      "LocalEvaluatorConfig::worker_start_timeout_s",
                      "seconds a worker may take to start (importing torch on a cold machine is slow)"},
                     local(&L::worker_start_timeout_s), 0, false));
  e.push_back(number({"excessive_speedup", "", evaluator, "LocalEvaluatorConfig::excessive_speedup",
                      "a correct candidate more than this many times faster than the reference is flagged in its "
                      "metadata (excessive_speedup, KernelBench's check); 0: off"},
                     local(&L::excessive_speedup), 0, true));
  e.push_back(number({"deadline_grace_s", "deadline-grace", evaluator, "LocalEvaluatorConfig::grace_s",
                      "seconds the evaluator waits past a worker's own stage timeout before killing it"},
                     local(&L::grace_s), 0, true));

  // Builds.
  e.push_back(integer<int>({"compile_workers", "", compiling, "LocalEvaluatorConfig::compile_workers",
                            "parallel builds (0: one per usable CPU: the affinity mask, a cgroup CPU quota)", {"workers"}},
                           local(&L::compile_workers), 0));
  e.push_back(integer<int>({"compile_nice", "", compiling, "LocalEvaluatorConfig::compile_nice",
                            "niceness of the compilers, 0 to 19 (0: the evaluator's own)"},
                           local(&L::compile_nice), 0, 19));
  e.push_back(text<std::string>({"cuda_arch", "", compiling, "LocalEvaluatorConfig::cuda_arch",
                                 "TORCH_CUDA_ARCH_LIST for builds, e.g. 9.0 (empty: detect)"},
                                local(&L::cuda_arch), SettingType::text));
  e.push_back(text<std::string>({"gpu_arch", "", compiling, "LocalEvaluatorConfig::gpu_arch",
                                 "hip: offload architectures for builds (PYTORCH_ROCM_ARCH, hipcc's --offload-arch), e.g. "
                                 "gfx950 or gfx90a;gfx942 (empty: torch's choice)"},
                                local(&L::gpu_arch), SettingType::text));
  e.push_back(boolean({"compile_pch", "", compiling, "LocalEvaluatorConfig::compile_pch",
                       "precompiled torch/extension.h for the binding file (docs/evaluator.md, \"Compile speed\")"},
                      local(&L::compile_pch)));
  e.push_back(boolean({"compile_light_headers", "light-headers", compiling, "LocalEvaluatorConfig::compile_light_headers",
                       "compile CUDA sources against fewer torch headers first"},
                      local(&L::compile_light_headers)));
  e.push_back(boolean({"compile_parallel_passes", "parallel-passes", compiling,
                       "LocalEvaluatorConfig::compile_parallel_passes",
                       "run nvcc's host and device passes side by side (needs light headers)"},
                      local(&L::compile_parallel_passes)));
  e.push_back(text<fs::path>({"compile_cache_dir", "", compiling, "LocalEvaluatorConfig::compile_cache_dir",
                              "shared precompiled headers and shadow headers (empty: compile_cache in the work dir)"},
                             local(&L::compile_cache_dir), SettingType::path));

  // The static checker.
  e.push_back(boolean({"static_check", "", checks, "LocalEvaluatorConfig::static_checks",
                       "run the static checker before compiling (runtime defenses apply either way)"},
                      local(&L::static_checks)));
  {
    std::vector<std::pair<std::string, std::string>> policies;
    for (const auto& name : check::static_check_policies()) policies.emplace_back(name, name);
    e.push_back(choice<std::string>({"static_check_policy", "static-policy", checks, "LocalEvaluatorConfig::static_check_policy",
                                     "the severities to start from: strict (a library call for any of the reference's "
                                     "ops is an error), kernelbench (KernelBench's split: PyTorch ops are warnings), "
                                     "fusion (library calls allowed while the kernel does some of the problem's work); "
                                     "the file's and static_check_severity's are applied over it (docs/static-checks.md)"},
                                    local(&L::static_check_policy), std::move(policies)));
  }
  e.push_back(text<fs::path>({"static_check_config", "static-config", checks,
                              "LocalEvaluatorConfig::static_check_severity",
                              "a JSON file of severities, {\"severity\": {\"rule\": \"off|warning|error\"}} "
                              "(docs/static-checks.md)"},
                             [](EvaluatorSettings& s) -> fs::path& { return s.static_check_config; }, SettingType::path));
  e.push_back(severity_map({"static_check_severity", "", checks, "LocalEvaluatorConfig::static_check_severity",
                            "severities by rule, over the file's: rule=off|warning|error"},
                           local(&L::static_check_severity)));

  // Isolation of the workers.
  // Older spellings: `true` / `false` (kbrl-train's first), and `auto`, which used to fall back
  // to running unsandboxed where bubblewrap was missing and now requires it like `on`: nothing
  // runs unsandboxed unless a user says `off`.
  e.push_back(choice<SandboxMode>({"sandbox", "", isolation, "LocalEvaluatorConfig::sandbox",
                                   "bubblewrap around the workers: on (evaluation refuses to start without it) "
                                   "or off (candidates run unsandboxed)"},
                                  local(&L::sandbox), {{"on", SandboxMode::on}, {"off", SandboxMode::off}},
                                  {{"true", "on"}, {"false", "off"}, {"auto", "on"}}));
  e.push_back(integer<std::uint64_t>({"max_file_size_bytes", "", isolation, "ResourceLimits::file_size_bytes",
                                      "largest file a worker child may write (0: no limit)"},
                                     [](EvaluatorSettings& s) -> std::uint64_t& { return s.local.limits.file_size_bytes; },
                                     0));
  e.push_back(integer<std::uint64_t>(
      {"max_memory_bytes", "", isolation, "ResourceLimits::address_space_bytes",
       "virtual memory of a worker child on the cpu (0: half the machine's memory; 18446744073709551615: no limit)"},
      [](EvaluatorSettings& s) -> std::uint64_t& { return s.local.limits.address_space_bytes; }, 0));
  e.push_back(integer<std::uint64_t>({"max_processes", "", isolation, "ResourceLimits::processes",
                                      "processes a worker child's user may run (RLIMIT_NPROC; 0: no limit)"},
                                     [](EvaluatorSettings& s) -> std::uint64_t& { return s.local.limits.processes; }, 0));
  e.push_back(integer<std::uint64_t>({"max_open_files", "", isolation, "ResourceLimits::open_files",
                                      "files a worker child may hold open (RLIMIT_NOFILE; 0: no limit)"},
                                     [](EvaluatorSettings& s) -> std::uint64_t& { return s.local.limits.open_files; },
                                     0));
  e.push_back(integer<std::uint64_t>(
      {"max_cpu_seconds", "", isolation, "ResourceLimits::cpu_seconds",
       "CPU time of a worker child, all its threads (RLIMIT_CPU; 0: its stage's timeout times the cores; "
       "18446744073709551615: no limit)"},
      [](EvaluatorSettings& s) -> std::uint64_t& { return s.local.limits.cpu_seconds; }, 0));
  return e;
}

}  // namespace

std::string Setting::value_name() const {
  switch (type) {
    case SettingType::boolean: return "";
    case SettingType::integer:
    case SettingType::size: return "N";
    case SettingType::number: return key.size() > 2 && key.substr(key.size() - 2) == "_s" ? "SECONDS" : "X";
    case SettingType::text: return "TEXT";
    case SettingType::path: return "PATH";
    case SettingType::choice: {
      std::string s;
      for (const auto& c : choices) s += (s.empty() ? "" : "|") + c;
      return s;
    }
    case SettingType::integer_list: return "N,...";
    case SettingType::severity_map: return "RULE=LEVEL,...";
  }
  return "";
}

const std::vector<Setting>& evaluator_settings() {
  static const std::vector<Setting> settings = make_settings();
  return settings;
}

const Setting* find_evaluator_setting(std::string_view key) {
  for (const auto& s : evaluator_settings()) {
    if (s.key == key) return &s;
    if (std::find(s.aliases.begin(), s.aliases.end(), key) != s.aliases.end()) return &s;
  }
  return nullptr;
}

std::string setting_text(const SettingValue& value) {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  std::string out;
  if (const auto* l = std::get_if<std::vector<std::string>>(&value))
    for (const auto& item : *l) out += (out.empty() ? "" : ",") + item;
  if (const auto* m = std::get_if<std::map<std::string, std::string>>(&value))
    for (const auto& [k, v] : *m) out += (out.empty() ? "" : ",") + k + "=" + v;
  return out;
}

namespace {
// A table cell: '|' would end it.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}
}  // namespace

std::string evaluator_settings_markdown() {
  const auto eval_defaults = default_evaluator_settings(SettingsProfile::evaluation);
  const auto train_defaults = default_evaluator_settings(SettingsProfile::training);
  const auto shown = [](const Setting& s, const EvaluatorSettings& e) {
    const auto v = s.get(e);
    if (std::holds_alternative<std::monostate>(v)) return std::string("unset");
    const std::string t = setting_text(v);
    return t.empty() ? std::string("empty") : fmt::format("`{}`", t);
  };
  std::string out =
      "| kbrl-eval flag | kbrl-train key (`evaluator.`) | default: kbrl-eval | default: kbrl-train | meaning | sets |\n"
      "|---|---|---|---|---|---|\n";
  for (const auto& s : evaluator_settings()) {
    const std::string flag = s.type == SettingType::boolean ? fmt::format("`--{0}`, `--no-{0}`", s.flag)
                                                            : fmt::format("`--{} {}`", s.flag, s.value_name());
    out += fmt::format("| {} | `{}` | {} | {} | {} | `{}` |\n", cell(flag), s.key, cell(shown(s, eval_defaults)),
                       cell(shown(s, train_defaults)), cell(s.help), s.field);
  }
  return out;
}

}  // namespace kbrl::eval
