// The Python module `kbrl`: what a Python RL framework needs to score kernels with kbrl, as thin
// bindings over the torch-free library (docs/python.md). Values cross the boundary in core's JSON
// mapping (core/json.hpp) as plain dicts and lists, so Python sees the same field names as
// kbrl-eval's eval_results.jsonl and kbrl-evald's wire protocol, and there is one mapping to keep.
// Evaluations run with the GIL released; errors become kbrl.Error and its subclasses with the
// library's message.
#include <dlfcn.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <boost/json.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kbrl/check/static_check.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/core/json_reader.hpp"
#include "kbrl/core/types.hpp"
#include "kbrl/dataset/load.hpp"
#include "kbrl/eval/evaluator.hpp"
#include "kbrl/eval/local_evaluator.hpp"
#include "kbrl/eval/remote_evaluator.hpp"
#include "kbrl/eval/settings.hpp"
#include "kbrl/eval/summary.hpp"
#include "kbrl/prompt/answer_parser.hpp"
#include "kbrl/prompt/task_prompt.hpp"
#include "kbrl/reward/config.hpp"
#include "kbrl/reward/reward.hpp"
#include "kbrl/version.hpp"

#ifndef KBRL_WORKER_FROM_MODULE
#define KBRL_WORKER_FROM_MODULE ""
#endif

namespace py = pybind11;
namespace json = boost::json;
namespace fs = std::filesystem;
using namespace kbrl;

namespace {

// kbrl.Error (RuntimeError) for core::Error; kbrl.ConfigError and kbrl.InvalidArgument (both
// also ValueError, what Python code catches for bad arguments) for bad input.
PyObject* g_error = nullptr;
PyObject* g_config_error = nullptr;
PyObject* g_invalid_argument = nullptr;

// ---- Python values <-> JSON ----------------------------------------------------------------

std::string type_name(py::handle h) { return py::str(py::type::handle_of(h).attr("__name__")); }

std::string utf8(py::handle h) { return h.cast<std::string>(); }

// A Python value as JSON: None, bool, int, float, str, os.PathLike (as its path), mappings with
// str keys, lists and tuples. `path` names the value in errors ("requests[2].options").
json::value to_json(py::handle h, const std::string& path) {
  if (h.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::isinstance<py::int_>(h)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow == 0) return static_cast<std::int64_t>(v);
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(h.ptr());
      if (!PyErr_Occurred()) return static_cast<std::uint64_t>(u);
      PyErr_Clear();
    }
    throw core::InvalidArgument(fmt::format("{}: integer {} is out of range", path, utf8(py::str(h))));
  }
  if (py::isinstance<py::float_>(h)) return h.cast<double>();
  if (py::isinstance<py::str>(h)) return json::string(utf8(h));
  if (py::hasattr(h, "__fspath__")) return json::string(utf8(py::module_::import("os").attr("fspath")(h)));
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    json::array a;
    std::size_t i = 0;
    for (auto item : h) a.push_back(to_json(item, fmt::format("{}[{}]", path, i++)));
    return a;
  }
  if (py::isinstance<py::dict>(h) || py::isinstance(h, py::module_::import("collections.abc").attr("Mapping"))) {
    json::object o;
    for (auto item : py::reinterpret_borrow<py::dict>(py::dict(py::reinterpret_borrow<py::object>(h)))) {
      if (!py::isinstance<py::str>(item.first))
        throw core::InvalidArgument(fmt::format("{}: keys must be str, not {}", path, type_name(item.first)));
      const std::string key = utf8(item.first);
      o[key] = to_json(item.second, core::JsonReader::field_name(path, key));
    }
    return o;
  }
  throw core::InvalidArgument(fmt::format("{}: a {} has no JSON form (expected None, bool, int, float, str, a path, "
                                          "a dict or a list)",
                                          path, type_name(h)));
}

// Strings from the evaluator (compiler logs cut at a byte limit) may end inside a UTF-8
// sequence: decoded with replacement rather than failing the whole result.
py::object to_python(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return py::none();
    case json::kind::bool_: return py::bool_(v.get_bool());
    case json::kind::int64: return py::int_(v.get_int64());
    case json::kind::uint64: return py::int_(v.get_uint64());
    case json::kind::double_: return py::float_(v.get_double());
    case json::kind::string: {
      const auto& s = v.get_string();
      PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
      if (o == nullptr) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(o);
    }
    case json::kind::array: {
      py::list l;
      for (const auto& x : v.get_array()) l.append(to_python(x));
      return l;
    }
    case json::kind::object: {
      py::dict d;
      for (const auto& kv : v.get_object()) d[py::str(std::string(kv.key()))] = to_python(kv.value());
      return d;
    }
  }
  return py::none();
}

template <class T>
py::object to_python_value(const T& x) {
  return to_python(json::value_from(x));
}

// value_to<T> with core's lenient-missing / strict-type reading, its InvalidArgument prefixed
// with where the value came from.
template <class T>
T from_json_value(const json::value& v, const std::string& where) {
  try {
    return json::value_to<T>(v);
  } catch (const core::InvalidArgument& e) {
    throw core::InvalidArgument(fmt::format("{}: {}", where, e.what()));
  }
}

// ---- requests ----------------------------------------------------------------------------------

// What an evaluator fills into a request dict that leaves it out: kbrl-eval's defaults (the
// device's usual language, fp32, the evaluator settings' options).
struct RequestDefaults {
  core::KernelLanguage language = core::KernelLanguage::cpp;
  core::EvalOptions options;
};

core::KernelLanguage usual_language(core::DevicePlatform platform) {
  switch (platform) {
    case core::DevicePlatform::cpu: return core::KernelLanguage::cpp;
    case core::DevicePlatform::cuda: return core::KernelLanguage::cuda;
    case core::DevicePlatform::hip: return core::KernelLanguage::hip;
  }
  return core::KernelLanguage::cuda;
}

const std::initializer_list<std::string_view> kProblemKeys = {"id",     "level",        "number", "name",
                                                              "source", "content_hash", "origin", "needs_weights"};

core::Problem problem_from(const json::value& v, const std::string& where) {
  const core::JsonReader reader(where);
  reader.only_keys(reader.object(v, "problem"), "problem", kProblemKeys);
  core::Problem p = from_json_value<core::Problem>(v, where + ": problem");
  if (p.source.empty()) reader.fail("problem.source", "must not be empty");
  // The caches key on the hash: one that does not match the source would mix up problems.
  const std::string hash = core::python_content_hash(p.source);
  if (!p.content_hash.empty() && p.content_hash != hash)
    reader.fail("problem.content_hash", fmt::format("does not match the source (its hash is {})", hash));
  p.content_hash = hash;
  return p;
}

// A request dict in EvalRequest's JSON form (core/json.hpp): request_id, problem (a dict as
// load_problems gives), candidate_source, language, precision, options. Unknown keys are refused
// (a misspelled option must not be ignored); what is left out comes from `defaults`.
core::EvalRequest request_from(py::handle h, const RequestDefaults& defaults, const std::string& where) {
  if (!py::isinstance<py::dict>(h))
    throw core::InvalidArgument(fmt::format("{}: expected a dict in EvalRequest's JSON form, got a {}", where, type_name(h)));
  json::value v = to_json(h, where);
  const core::JsonReader reader(where);
  json::object& o = v.as_object();
  reader.only_keys(o, "", {"request_id", "problem", "candidate_source", "language", "precision", "options"});
  const json::value* problem = core::JsonReader::member(o, "problem");
  if (problem == nullptr) reader.fail("problem", "missing (a dict such as kbrl.load_problems() returns)");
  const core::Problem p = problem_from(*problem, where);
  if (core::JsonReader::member(o, "candidate_source") == nullptr)
    reader.fail("candidate_source", "missing (the program defining ModelNew)");
  json::object options = json::value_from(defaults.options).as_object();
  if (const json::value* given = core::JsonReader::member(o, "options")) {
    const auto& g = reader.object(*given, "options");
    reader.only_keys(g, "options",
                     {"correctness_trials", "timing_trials", "warmup_runs", "measure_performance", "seed", "atol",
                      "rtol", "compile_timeout_s", "run_timeout_s", "input_families", "kernelbench_inputs"});
    for (const auto& kv : g) options[kv.key()] = kv.value();
  }
  o["options"] = std::move(options);
  o.erase("problem");
  core::EvalRequest r = from_json_value<core::EvalRequest>(v, where);
  r.problem = p;
  if (core::JsonReader::member(o, "language") == nullptr) r.language = defaults.language;
  return r;
}

// ---- waiting with the GIL released ----------------------------------------------------------

// Waits for `f` in short slices without the GIL, so other Python threads run and Ctrl-C
// (KeyboardInterrupt) still reaches the caller. Throws TimeoutError after `timeout_s`.
template <class Future>
void wait_for_result(Future& f, std::optional<double> timeout_s) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  while (true) {
    auto slice = std::chrono::duration<double>(0.1);
    if (timeout_s) {
      const auto left = std::chrono::duration<double>(*timeout_s) - (clock::now() - start);
      if (left < slice) slice = left;
    }
    std::future_status status = std::future_status::timeout;
    {
      py::gil_scoped_release release;
      if (slice.count() > 0) status = f.wait_for(slice);
      else status = f.wait_for(std::chrono::seconds(0));
    }
    if (status == std::future_status::ready) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (timeout_s && clock::now() - start >= std::chrono::duration<double>(*timeout_s)) {
      PyErr_SetString(PyExc_TimeoutError, fmt::format("no result within {} s", *timeout_s).c_str());
      throw py::error_already_set();
    }
  }
}

// One submitted evaluation. Holds the evaluator object so it outlives its futures.
class EvalFuture {
 public:
  EvalFuture(std::future<core::EvalResult> f, py::object owner) : future_(f.share()), owner_(std::move(owner)) {}
  bool done() const { return future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
  py::object result(std::optional<double> timeout) {
    wait_for_result(future_, timeout);
    return to_python_value(future_.get());
  }

 private:
  std::shared_future<core::EvalResult> future_;
  py::object owner_;
};

// ---- evaluators -----------------------------------------------------------------------------

// What LocalEvaluator (and any other evaluator the module exposes) shares: the C++ evaluator and
// the defaults its requests are completed with.
class PyEvaluator {
 public:
  virtual ~PyEvaluator() = default;

  // A reference for the call's duration: close() from another thread while this call runs
  // without the GIL leaves the evaluator alive until the call is done with it.
  std::shared_ptr<eval::Evaluator> evaluator() const {
    if (!evaluator_) throw core::Error("the evaluator is closed");
    return evaluator_;
  }

  // Destroying a LocalEvaluator stops its workers and answers what is pending: without the GIL,
  // so that threads waiting on results can take them.
  void close() {
    std::shared_ptr<eval::Evaluator> e = std::move(evaluator_);
    py::gil_scoped_release release;
    e.reset();
  }

  core::EvalRequest request(py::handle h, const std::string& where) const { return request_from(h, defaults_, where); }

  std::vector<py::object> evaluate(py::iterable requests) {
    std::vector<core::EvalRequest> converted;
    for (auto r : requests) converted.push_back(request(r, fmt::format("requests[{}]", converted.size())));
    const std::shared_ptr<eval::Evaluator> e = evaluator();
    std::vector<std::future<core::EvalResult>> futures;
    futures.reserve(converted.size());
    {
      py::gil_scoped_release release;
      for (auto& r : converted) futures.push_back(e->submit(std::move(r)));
    }
    std::vector<py::object> out;
    out.reserve(futures.size());
    for (auto& f : futures) {
      wait_for_result(f, std::nullopt);
      out.push_back(to_python_value(f.get()));
    }
    return out;
  }

  std::future<core::EvalResult> submit(py::handle request_dict) {
    core::EvalRequest r = request(request_dict, "request");
    const std::shared_ptr<eval::Evaluator> e = evaluator();
    py::gil_scoped_release release;
    return e->submit(std::move(r));
  }

 protected:
  std::shared_ptr<eval::Evaluator> evaluator_;
  RequestDefaults defaults_;
};

// ---- evaluator settings (eval/settings.hpp) --------------------------------------------------

// A Python value as the settings schema takes it: a scalar's text, a list's items, a dict's
// entries (kbrl-train's YAML goes through the same SettingValue).
std::string setting_scalar(py::handle v, const std::string& key) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::int_>(v)) return utf8(py::str(v));
  if (py::isinstance<py::float_>(v)) return utf8(py::repr(v));  // shortest text that reads back the same
  if (py::isinstance<py::str>(v)) return utf8(v);
  if (py::hasattr(v, "__fspath__")) return utf8(py::module_::import("os").attr("fspath")(v));
  throw core::InvalidArgument(
      fmt::format("evaluator setting '{}': a {} is not a setting value (bool, int, float, str or a path)", key, type_name(v)));
}

eval::SettingValue setting_value(py::handle v, const std::string& key) {
  if (v.is_none()) return std::monostate{};
  if (py::isinstance<py::dict>(v)) {
    std::map<std::string, std::string> entries;
    for (auto item : py::reinterpret_borrow<py::dict>(v))
      entries[setting_scalar(item.first, key)] = setting_scalar(item.second, key);
    return entries;
  }
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    std::vector<std::string> items;
    for (auto item : v) items.push_back(setting_scalar(item, key));
    return items;
  }
  return setting_scalar(v, key);
}

// The canonical value of a setting as a Python value of its type.
py::object setting_python(const eval::Setting& s, const eval::SettingValue& v) {
  using T = eval::SettingType;
  if (std::holds_alternative<std::monostate>(v)) return py::none();
  const auto scalar = [&](const std::string& text) -> py::object {
    switch (s.type) {
      case T::boolean: return py::bool_(text == "true");
      case T::integer:
      case T::size:
      case T::integer_list: return py::int_(py::str(text));
      case T::number: return py::float_(std::stod(text));
      default: return py::str(text);
    }
  };
  if (const auto* text = std::get_if<std::string>(&v)) return scalar(*text);
  if (const auto* items = std::get_if<std::vector<std::string>>(&v)) {
    py::list l;
    for (const auto& i : *items) l.append(scalar(i));
    return l;
  }
  py::dict d;
  for (const auto& [k, x] : std::get<std::map<std::string, std::string>>(v)) d[py::str(k)] = py::str(x);
  return d;
}

eval::SettingsProfile parse_profile(const std::string& name) {
  if (name == "training") return eval::SettingsProfile::training;
  if (name == "evaluation") return eval::SettingsProfile::evaluation;
  throw core::InvalidArgument(fmt::format("profile '{}' is not training or evaluation", name));
}

// `profile`'s defaults, then `settings` (a dict), then the keyword arguments, each through the
// schema's own checks: a setting is refused here exactly as kbrl-eval refuses its flag.
eval::EvaluatorSettings settings_from(const std::string& profile, const py::object& settings, const py::kwargs& kwargs) {
  eval::EvaluatorSettings out = eval::default_evaluator_settings(parse_profile(profile));
  const auto apply = [&](py::handle key_object, py::handle value) {
    if (!py::isinstance<py::str>(key_object))
      throw core::InvalidArgument(fmt::format("evaluator settings: keys must be str, not {}", type_name(key_object)));
    const std::string key = utf8(key_object);
    const eval::Setting* s = eval::find_evaluator_setting(key);
    if (s == nullptr)
      throw core::InvalidArgument(
          fmt::format("unknown evaluator setting '{}' (kbrl.evaluator_settings() lists them)", key));
    const std::string reason = s->set(out, setting_value(value, key));
    if (!reason.empty()) throw core::InvalidArgument(fmt::format("evaluator setting '{}': {}", key, reason));
  };
  if (!settings.is_none()) {
    if (!py::isinstance<py::dict>(settings))
      throw core::InvalidArgument(fmt::format("settings: expected a dict of setting -> value, got a {}", type_name(settings)));
    for (auto item : py::reinterpret_borrow<py::dict>(settings)) apply(item.first, item.second);
  }
  for (auto item : kwargs) apply(item.first, item.second);
  return out;
}

py::dict settings_dict(const eval::EvaluatorSettings& settings) {
  py::dict d;
  for (const auto& s : eval::evaluator_settings()) d[py::str(s.key)] = setting_python(s, s.get(settings));
  return d;
}

// The installed worker beside the installed module (<prefix>/share/kbrl from
// <prefix>/lib/pythonX.Y/site-packages): the library's own lookup starts from the running
// program, which here is the Python interpreter.
fs::path worker_beside_module() {
  Dl_info info{};
  static const int anchor = 0;
  if (std::string_view(KBRL_WORKER_FROM_MODULE).empty() || ::dladdr(&anchor, &info) == 0 || info.dli_fname == nullptr)
    return {};
  const fs::path candidate = (fs::path(info.dli_fname).parent_path() / KBRL_WORKER_FROM_MODULE).lexically_normal();
  std::error_code ec;
  return fs::is_regular_file(candidate, ec) ? candidate : fs::path();
}

class PyLocalEvaluator : public PyEvaluator {
 public:
  explicit PyLocalEvaluator(eval::EvaluatorSettings settings) : settings_(std::move(settings)) {
    if (!settings_.endpoints.empty())
      throw core::InvalidArgument(
          "evaluator setting 'endpoints' names kbrl-evald servers: use kbrl.RemoteEvaluator, or kbrl.make_evaluator "
          "(which picks the evaluator the settings describe)");
    eval::LocalEvaluatorConfig config = eval::local_evaluator_config(settings_);
    const char* env_worker = std::getenv("KBRL_WORKER_SCRIPT");
    if (config.worker_script.empty() && (env_worker == nullptr || *env_worker == '\0'))
      config.worker_script = worker_beside_module();
    defaults_.language = usual_language(config.platform);
    defaults_.options = settings_.options;
    py::gil_scoped_release release;  // starting workers takes a while
    evaluator_ = std::make_unique<eval::LocalEvaluator>(std::move(config));
  }

  py::dict settings() const { return settings_dict(settings_); }

  py::dict stats() const {
    const auto& local = dynamic_cast<const eval::LocalEvaluator&>(*evaluator());
    const auto s = local.stats();
    py::dict d;
    d["submitted"] = s.submitted;
    d["finished"] = s.finished;
    d["compiles"] = s.compiles;
    d["compile_cache_hits"] = s.compile_cache_hits;
    d["builds_discarded"] = s.builds_discarded;
    d["baseline_cache_hits"] = s.baseline_cache_hits;
    d["workers_started"] = s.workers_started;
    d["workers_lost"] = s.workers_lost;
    d["jobs_retried"] = s.jobs_retried;
    return d;
  }

  eval::LocalEvaluatorConfig config() const { return dynamic_cast<const eval::LocalEvaluator&>(*evaluator()).config(); }

 private:
  eval::EvaluatorSettings settings_;
};

// RemoteEvaluator: requests go to kbrl-evald servers with their options, so of the evaluator
// settings it takes only those that land in EvalOptions; the rest are the servers' own flags.
eval::EvaluatorSettings request_settings_from(const std::string& profile, const py::object& settings,
                                              const py::kwargs& kwargs) {
  const auto check = [](py::handle key) {
    if (!py::isinstance<py::str>(key)) return;
    const eval::Setting* s = eval::find_evaluator_setting(utf8(key));
    if (s != nullptr && s->field.rfind("EvalOptions::", 0) != 0 && s->key != "endpoints")
      throw core::InvalidArgument(fmt::format(
          "evaluator setting '{}' is the servers' (a kbrl-evald flag, --{}); RemoteEvaluator takes the request "
          "options only (trials, timing, seed, tolerances, input families, timeouts)",
          s->key, s->flag));
  };
  if (py::isinstance<py::dict>(settings))
    for (auto item : py::reinterpret_borrow<py::dict>(settings)) check(item.first);
  for (auto item : kwargs) check(item.first);
  return settings_from(profile, settings, kwargs);
}

class PyRemoteEvaluator : public PyEvaluator {
 public:
  // `c` holds the servers; the settings give the requests' options.
  PyRemoteEvaluator(eval::EvaluatorSettings settings, eval::RemoteEvaluatorConfig c, core::KernelLanguage language)
      : settings_(std::move(settings)) {
    defaults_.language = language;
    defaults_.options = settings_.options;
    py::gil_scoped_release release;
    evaluator_ = std::make_unique<eval::RemoteEvaluator>(std::move(c));
  }

  // Python's constructor: endpoints as a list of entries, one string of them or a file (else the
  // settings' `endpoints`), and the client's knobs.
  static std::unique_ptr<PyRemoteEvaluator> create(
      const py::object& endpoints, const py::object& settings, const std::string& language, const std::string& profile,
      const std::optional<std::string>& token, const std::optional<fs::path>& token_file, const std::string& token_env,
      const std::optional<fs::path>& ca_file, bool verify_tls, double refresh_s, double connect_timeout_s,
      double request_timeout_s, double backoff_initial_s, double backoff_max_s, double give_up_after_s, int max_batch,
      const py::kwargs& kwargs) {
    eval::EvaluatorSettings options = request_settings_from(profile, settings, kwargs);
    eval::RemoteEvaluatorConfig c;
    if (endpoints.is_none()) {
      c = eval::remote_evaluator_config(options.endpoints);
    } else if (py::isinstance<py::str>(endpoints) || py::hasattr(endpoints, "__fspath__")) {
      c = eval::remote_evaluator_config(json::value_to<std::string>(to_json(endpoints, "endpoints")));
    } else {
      for (auto e : endpoints) c.endpoints.push_back(json::value_to<std::string>(to_json(e, "endpoints[]")));
    }
    if (token) c.token = *token;
    if (token_file) c.token_file = *token_file;
    c.token_env = token_env;
    if (ca_file) c.ca_file = *ca_file;
    c.verify_tls = verify_tls;
    c.refresh_s = refresh_s;
    c.connect_timeout_s = connect_timeout_s;
    c.request_timeout_s = request_timeout_s;
    c.backoff_initial_s = backoff_initial_s;
    c.backoff_max_s = backoff_max_s;
    c.give_up_after_s = give_up_after_s;
    c.max_batch = max_batch;
    return std::make_unique<PyRemoteEvaluator>(std::move(options), std::move(c), core::parse_kernel_language(language));
  }

  py::dict settings() const {
    py::dict d;
    for (const auto& s : eval::evaluator_settings())
      if (s.field.rfind("EvalOptions::", 0) == 0) d[py::str(s.key)] = setting_python(s, s.get(settings_));
    return d;
  }

  py::dict stats() const {
    const auto s = dynamic_cast<const eval::RemoteEvaluator&>(*evaluator()).stats();
    py::dict d;
    d["submitted"] = s.submitted;
    d["delivered"] = s.delivered;
    d["batches"] = s.batches;
    d["redispatched"] = s.redispatched;
    d["queue_full"] = s.queue_full;
    d["draining"] = s.draining;
    d["server_failures"] = s.server_failures;
    d["gave_up"] = s.gave_up;
    d["connections_opened"] = s.connections_opened;
    d["results_by_server"] = s.results_by_server;
    return d;
  }

  std::map<std::string, int> servers() const {
    return dynamic_cast<const eval::RemoteEvaluator&>(*evaluator()).servers();
  }

 private:
  eval::EvaluatorSettings settings_;
};

// eval::make_evaluator for Python: a RemoteEvaluator when the settings name endpoints (requests
// get the settings' options and the device's usual language; the other settings are the
// servers'), else a LocalEvaluator.
std::unique_ptr<PyEvaluator> make_evaluator(const py::object& settings, const std::string& profile, const py::kwargs& kwargs) {
  eval::EvaluatorSettings s = settings_from(profile, settings, kwargs);
  if (s.endpoints.empty()) return std::make_unique<PyLocalEvaluator>(std::move(s));
  eval::RemoteEvaluatorConfig c = eval::remote_evaluator_config(s.endpoints);
  const core::KernelLanguage language = usual_language(s.local.platform);
  return std::make_unique<PyRemoteEvaluator>(std::move(s), std::move(c), language);
}

py::list settings_schema() {
  const auto evaluation = eval::default_evaluator_settings(eval::SettingsProfile::evaluation);
  const auto training = eval::default_evaluator_settings(eval::SettingsProfile::training);
  static const std::map<eval::SettingType, const char*> kTypes = {
      {eval::SettingType::boolean, "bool"},          {eval::SettingType::integer, "int"},
      {eval::SettingType::size, "int"},              {eval::SettingType::number, "float"},
      {eval::SettingType::text, "str"},              {eval::SettingType::path, "path"},
      {eval::SettingType::choice, "choice"},         {eval::SettingType::integer_list, "list[int]"},
      {eval::SettingType::severity_map, "dict[str, str]"}};
  py::list out;
  for (const auto& s : eval::evaluator_settings()) {
    py::dict d;
    d["key"] = s.key;
    d["flag"] = "--" + s.flag;
    d["aliases"] = s.aliases;
    d["type"] = kTypes.at(s.type);
    d["optional"] = s.optional;
    d["choices"] = s.choices;
    d["group"] = s.group;
    d["field"] = s.field;
    d["help"] = s.help;
    d["default_training"] = setting_python(s, s.get(training));
    d["default_evaluation"] = setting_python(s, s.get(evaluation));
    out.append(std::move(d));
  }
  return out;
}

// ---- the static checker -------------------------------------------------------------------

// config: None, a dict in StaticCheckConfig's JSON form, or the path of such a JSON file; the
// keyword arguments override its fields (severity entries over the config's).
py::object run_static_check(const std::string& candidate, const py::object& config,
                                                  const std::optional<std::string>& language,
                                                  const std::optional<std::string>& precision,
                                                  const std::optional<std::string>& reference_source,
                                                  const py::object& severity) {
  check::StaticCheckConfig c;
  if (py::isinstance<py::str>(config) || py::hasattr(config, "__fspath__")) {
    c = check::load_static_check_config(json::value_to<std::string>(to_json(config, "config")));
  } else if (!config.is_none()) {
    c = from_json_value<check::StaticCheckConfig>(to_json(config, "config"), "config");
  }
  if (language) c.language = core::parse_kernel_language(*language);
  if (precision) c.precision = core::parse_precision(*precision);
  if (reference_source) c.reference_source = *reference_source;
  if (!severity.is_none()) {
    const json::value v = to_json(severity, "severity");
    const core::JsonReader reader("static_check");
    for (const auto& kv : reader.object(v, "severity"))
      c.severity[kv.key()] = reader.name(kv.value(), core::JsonReader::field_name("severity", kv.key()), core::parse_severity);
  }
  check::validate(c);
  return to_python_value(check::static_check(candidate, c));
}

py::list static_check_rules() {
  py::list out;
  for (const auto& r : check::static_check_rules()) {
    py::dict d;
    d["name"] = r.name;
    d["category"] = r.category;
    d["default_severity"] = std::string(core::to_string(r.default_severity));
    d["description"] = r.description;
    out.append(std::move(d));
  }
  return out;
}

// ---- completions and rewards --------------------------------------------------------------

// A completion: the sampled text (parsed as the RL loop parses it) or a dict in Completion's JSON
// form; num_tokens and truncated feed the length term.
core::Completion completion_from(const py::object& completion, std::optional<int> num_tokens, bool truncated,
                                 bool starts_in_thinking) {
  core::Completion c;
  if (py::isinstance<py::str>(completion)) {
    c = prompt::parse_completion(utf8(completion), prompt::ParseOptions{starts_in_thinking});
  } else {
    const json::value v = to_json(completion, "completion");
    const core::JsonReader reader("completion");
    reader.only_keys(reader.object(v, ""), "",
                     {"text", "tokens", "num_tokens", "truncated", "thinking", "has_thinking", "kernel",
                      "has_kernel_block", "format_ok"});
    c = from_json_value<core::Completion>(v, "completion");
  }
  if (num_tokens) c.num_tokens = *num_tokens;
  if (truncated) c.truncated = true;
  return c;
}

core::EvalResult result_from(const py::object& result) {
  if (!py::isinstance<py::dict>(result))
    throw core::InvalidArgument(fmt::format("result: expected a dict (an evaluation result), got a {}", type_name(result)));
  return from_json_value<core::EvalResult>(to_json(result, "result"), "result");
}

reward::RewardConfig reward_config_from(const py::object& config) {
  return reward::RewardConfig::from_json(to_json(config, "reward config"), "reward config");
}

class PyRewardConfig {
 public:
  explicit PyRewardConfig(reward::RewardConfig c) : config_(std::move(c)) {}
  const reward::RewardConfig& get() const { return config_; }

  py::object breakdown(const py::object& result, const py::object& completion, std::optional<int> num_tokens,
                       bool truncated, bool starts_in_thinking) const {
    const auto b = reward::compute_reward(result_from(result), completion_from(completion, num_tokens, truncated, starts_in_thinking),
                                          config_);
    return to_python_value(b);
  }

 private:
  reward::RewardConfig config_;
};

PyRewardConfig reward_config_arg(const py::object& config) {
  if (py::isinstance<PyRewardConfig>(config)) return config.cast<PyRewardConfig>();
  return PyRewardConfig(reward_config_from(config));
}

}  // namespace

PYBIND11_MODULE(kbrl, m) {
  m.doc() =
      "kbrl for Python: the static checker, LocalEvaluator and RemoteEvaluator, problems, answer parsing and rewards "
      "(docs/python.md). Requests, results, problems and findings are dicts in kbrl's JSON form.";
  m.attr("__version__") = KBRL_VERSION;
  m.attr("git_describe") = KBRL_GIT_DESCRIBE;

  g_error = PyErr_NewExceptionWithDoc("kbrl.Error", "An error kbrl raises on purpose (the C++ message).",
                                      PyExc_RuntimeError, nullptr);
  py::tuple value_bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_config_error = PyErr_NewExceptionWithDoc("kbrl.ConfigError", "A malformed file or configuration (names the field).",
                                             value_bases.ptr(), nullptr);
  g_invalid_argument = PyErr_NewExceptionWithDoc(
      "kbrl.InvalidArgument", "An argument that is not valid (names the field or value).", value_bases.ptr(), nullptr);
  m.attr("Error") = py::handle(g_error);
  m.attr("ConfigError") = py::handle(g_config_error);
  m.attr("InvalidArgument") = py::handle(g_invalid_argument);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const core::ConfigError& e) {
      PyErr_SetString(g_config_error, e.what());
    } catch (const core::InvalidArgument& e) {
      PyErr_SetString(g_invalid_argument, e.what());
    } catch (const core::Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });

  // Problems and prompts.
  m.def(
      "load_problems", [](const fs::path& path) { return to_python_value(dataset::load_problems(path)); }, py::arg("path"),
      "Problems from a KernelBench checkout, a folder of <number>_<Name>.py files or a JSONL file, as dicts "
      "(id, level, number, name, source, content_hash, origin, needs_weights).");
  m.def(
      "load_problem_file",
      [](const fs::path& path, int level, const std::string& id_prefix) {
        return to_python_value(dataset::load_problem_file(path, level, id_prefix));
      },
      py::arg("path"), py::arg("level") = 0, py::arg("id_prefix") = "", "One KernelBench-format problem file, as a dict.");
  m.def(
      "build_messages",
      [](const py::object& problem, const std::string& language, const std::string& precision, bool one_shot,
         const std::string& hardware, bool thinking_instruction, const std::string& extra_instructions) {
        prompt::PromptOptions o;
        o.language = core::parse_kernel_language(language);
        o.precision = core::parse_precision(precision);
        o.one_shot = one_shot;
        o.hardware = hardware;
        o.thinking_instruction = thinking_instruction;
        o.extra_instructions = extra_instructions;
        return to_python_value(prompt::build_messages(problem_from(to_json(problem, "problem"), "build_messages"), o));
      },
      py::arg("problem"), py::kw_only(), py::arg("language") = "cuda", py::arg("precision") = "fp32",
      py::arg("one_shot") = true, py::arg("hardware") = "", py::arg("thinking_instruction") = true,
      py::arg("extra_instructions") = "",
      "The task as chat messages [{'role': 'system', ...}, {'role': 'user', ...}] for one problem (docs/prompts.md).");
  m.def(
      "parse_completion",
      [](const std::string& text, bool starts_in_thinking) {
        return to_python_value(prompt::parse_completion(text, prompt::ParseOptions{starts_in_thinking}));
      },
      py::arg("text"), py::kw_only(), py::arg("starts_in_thinking") = false,
      "Splits a sampled answer into thinking and the kernel program, as the RL loop does: a dict with text, "
      "thinking, has_thinking, kernel, has_kernel_block, format_ok, ...");

  // The static checker.
  m.def("static_check", &run_static_check, py::arg("candidate"), py::arg("config") = py::none(), py::kw_only(),
        py::arg("language") = py::none(), py::arg("precision") = py::none(), py::arg("reference_source") = py::none(),
        py::arg("severity") = py::none(),
        "Static-check findings for a candidate program, ordered by line: dicts (rule, category, severity, line, "
        "message). config: a dict in the static-check config's JSON form or the path of such a file "
        "(docs/static-checks.md); language, precision, reference_source and severity ({rule: 'off'|'warning'|'error'}) "
        "override it.");
  m.def(
      "has_errors",
      [](const py::object& findings) {
        return check::has_errors(from_json_value<std::vector<core::StaticFinding>>(to_json(findings, "findings"), "findings"));
      },
      py::arg("findings"), "Whether any finding has severity error (the candidate is rejected).");
  m.def("static_check_rules", &static_check_rules, "Every rule: name, category, default_severity, description.");

  // Evaluators.
  m.def("evaluator_settings", &settings_schema,
        "The evaluator settings schema (eval/settings.hpp): key, flag, type, defaults of both profiles, help. "
        "LocalEvaluator takes the keys.");
  py::class_<EvalFuture>(m, "EvalFuture", "A submitted evaluation.")
      .def("done", &EvalFuture::done, "Whether the result is there.")
      .def("result", &EvalFuture::result, py::arg("timeout") = py::none(),
           "The result dict, waiting for it without the GIL; TimeoutError after `timeout` seconds.");
  py::class_<PyEvaluator>(m, "Evaluator", "What every evaluator offers: evaluate, submit, close.")
      .def("evaluate", &PyEvaluator::evaluate, py::arg("requests"),
           "Evaluates every request (dicts in EvalRequest's JSON form: problem, candidate_source, and optionally "
           "request_id, language, precision, options) at once and returns their results as dicts, in order. "
           "Bad candidates are results, never exceptions; the GIL is released while they run.")
      .def(
          "submit",
          [](py::object self, py::handle request) {
            return EvalFuture(self.cast<PyEvaluator&>().submit(request), self);
          },
          py::arg("request"), "Queues one request; returns an EvalFuture.")
      .def("close", &PyEvaluator::close, "Stops the evaluator (pending requests get an `internal` result).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyEvaluator& self, py::args) { self.close(); });
  py::class_<PyLocalEvaluator, PyEvaluator>(
      m, "LocalEvaluator",
      "Evaluates on this machine with kbrl's worker processes (docs/evaluator.md). Settings are the evaluator "
      "settings' keys (kbrl.evaluator_settings(); kbrl-train's evaluator.* keys), as a dict and/or keyword "
      "arguments, e.g. LocalEvaluator(device='cuda', gpus=[0, 1], timing_trials=20). profile picks the defaults: "
      "'training' (kbrl-train's) or 'evaluation' (kbrl-eval's).")
      .def(py::init([](const py::object& settings, const std::string& profile, const py::kwargs& kwargs) {
             return std::make_unique<PyLocalEvaluator>(settings_from(profile, settings, kwargs));
           }),
           py::arg("settings") = py::none(), py::kw_only(), py::arg("profile") = "training")
      .def_property_readonly("settings", &PyLocalEvaluator::settings, "Every setting's value, by key.")
      .def_property_readonly("work_dir", [](const PyLocalEvaluator& e) { return e.config().work_dir; },
                             "Builds, logs and reference timings (resolved: the setting, else $KBRL_WORK_DIR, else ~/.cache/kbrl).")
      .def_property_readonly("worker_script", [](const PyLocalEvaluator& e) { return e.config().worker_script; },
                             "The worker program the evaluator runs (resolved).")
      .def_property_readonly("python", [](const PyLocalEvaluator& e) { return e.config().python; },
                             "The interpreter the workers run on (resolved).")
      .def("stats", &PyLocalEvaluator::stats, "Counts: submitted, finished, compiles, cache hits, workers.");

  py::class_<PyRemoteEvaluator, PyEvaluator>(
      m, "RemoteEvaluator",
      "Evaluates on kbrl-evald servers (docs/services.md). endpoints: a list of http(s)://host:port or "
      "dns://name:port entries, or one string of them comma-separated, or the path of a file of them (re-read); "
      "None: the 'endpoints' setting. "
      "Requests that leave out their language get `language`; their options come from the request-option "
      "settings (timing_trials, seed, ... as for LocalEvaluator; the servers' own settings are their flags).")
      .def(py::init(&PyRemoteEvaluator::create), py::arg("endpoints") = py::none(), py::arg("settings") = py::none(), py::kw_only(), py::arg("language") = "cuda",
           py::arg("profile") = "training", py::arg("token") = py::none(), py::arg("token_file") = py::none(),
           py::arg("token_env") = "KBRL_EVALD_TOKEN", py::arg("ca_file") = py::none(), py::arg("verify_tls") = true,
           py::arg("refresh_s") = 2.0, py::arg("connect_timeout_s") = 5.0, py::arg("request_timeout_s") = 0.0,
           py::arg("backoff_initial_s") = 0.25, py::arg("backoff_max_s") = 10.0, py::arg("give_up_after_s") = 600.0,
           py::arg("max_batch") = 64)
      .def_property_readonly("settings", &PyRemoteEvaluator::settings, "The request options, by setting key.")
      .def("stats", &PyRemoteEvaluator::stats, "Counts: submitted, delivered, batches, re-dispatches, failures, ...")
      .def("servers", &PyRemoteEvaluator::servers, "The servers known now and the concurrency each advertised.");

  m.def("make_evaluator", &make_evaluator, py::arg("settings") = py::none(), py::kw_only(),
        py::arg("profile") = "training",
        "The evaluator the settings describe, as kbrl-train and kbrl-eval make it: a RemoteEvaluator when the "
        "setting 'endpoints' names kbrl-evald servers (their token from $KBRL_EVALD_TOKEN or the file "
        "$KBRL_EVALD_TOKEN_FILE names), else a LocalEvaluator.");
  m.def(
      "summarize",
      [](const py::object& results) {
        return to_python(eval::to_json_value(
            eval::summarize(from_json_value<std::vector<core::EvalResult>>(to_json(results, "results"), "results"))));
      },
      py::arg("results"), "kbrl-eval's summary of results: compile and correct rates, fast_p, speedups, pass@k.");

  // Rewards.
  py::class_<PyRewardConfig>(m, "RewardConfig",
                             "A reward configuration (docs/rewards.md): a preset name (RewardConfig.presets(): kernel_rl's "
                             "'default', 'stage1', 'stage2', 'stage3', 'sparse'; 'kevin'; kbrl's 'kbrl_stage1' ...) or a "
                             "dict as in kbrl-train's reward section ({'preset': 'stage2', "
                             "'weights': {...}, ...}).")
      .def(py::init([](const py::object& config) { return PyRewardConfig(reward_config_from(config)); }),
           py::arg("config") = "default")
      .def_static(
          "load", [](const fs::path& path) { return PyRewardConfig(reward::RewardConfig::load(path)); }, py::arg("path"),
          "Reads a JSON reward config file.")
      .def_static("presets", &reward::RewardConfig::preset_names)
      .def_property_readonly("name", [](const PyRewardConfig& c) { return c.get().name; })
      .def("to_dict", [](const PyRewardConfig& c) { return to_python(c.get().to_json()); },
           "Every field (RewardConfig(config.to_dict()) is the same config).")
      .def("breakdown", &PyRewardConfig::breakdown, py::arg("result"), py::arg("completion"), py::kw_only(),
           py::arg("num_tokens") = py::none(), py::arg("truncated") = false, py::arg("starts_in_thinking") = false,
           "The reward of one evaluation result for a completion (its text, or a dict as parse_completion gives): "
           "{total, unclipped, terms, values, zeroed_by_static_check, clipped}.")
      .def(
          "reward",
          [](const PyRewardConfig& c, const py::object& result, const py::object& completion, std::optional<int> num_tokens,
             bool truncated, bool starts_in_thinking) {
            return reward::compute_reward(result_from(result), completion_from(completion, num_tokens, truncated, starts_in_thinking),
                                          c.get())
                .total;
          },
          py::arg("result"), py::arg("completion"), py::kw_only(), py::arg("num_tokens") = py::none(),
          py::arg("truncated") = false, py::arg("starts_in_thinking") = false, "breakdown(...)['total'].");
  m.def(
      "compute_reward",
      [](const py::object& result, const py::object& completion, const py::object& config, std::optional<int> num_tokens,
         bool truncated, bool starts_in_thinking) {
        return reward_config_arg(config).breakdown(result, completion, num_tokens, truncated, starts_in_thinking);
      },
      py::arg("result"), py::arg("completion"), py::arg("config") = "default", py::kw_only(),
      py::arg("num_tokens") = py::none(), py::arg("truncated") = false, py::arg("starts_in_thinking") = false,
      "RewardConfig(config).breakdown(result, completion, ...): the reward and its per-term breakdown.");
}
