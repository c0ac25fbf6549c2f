#include "kbrl/core/json.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <charconv>
#include <cmath>
#include <fmt/format.h>

#include "kbrl/core/error.hpp"

namespace kbrl::core {
namespace json = boost::json;

namespace {

const json::object& as_object(const json::value& jv, std::string_view type) {
  if (!jv.is_object()) throw InvalidArgument(fmt::format("{}: expected a JSON object", type));
  return jv.get_object();
}

// Reads o[key] into out when present (and not null); wrong types name the key.
template <class T>
void read(const json::object& o, std::string_view key, T& out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return;
  try {
    out = json::value_to<T>(*v);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}.{}", key, e.what()));
  } catch (const std::exception& e) {
    throw InvalidArgument(fmt::format("field '{}': {} (got {})", key, e.what(), json::serialize(*v)));
  }
}

template <class T>
void read(const json::object& o, std::string_view key, std::optional<T>& out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) {
    out.reset();
    return;
  }
  T tmp{};
  read(o, key, tmp);
  out = std::move(tmp);
}

template <class T>
json::value opt(const std::optional<T>& v) {
  return v ? json::value_from(*v) : json::value(nullptr);
}

template <class E, class Parse>
E enum_from(const json::value& jv, Parse parse) {
  if (!jv.is_string()) throw InvalidArgument(fmt::format("expected a string, got {}", json::serialize(jv)));
  return parse(std::string_view(jv.get_string()));
}

// Builds the value as Boost.JSON's own parser does, but converts each number's text with
// std::from_chars (correctly rounded): Boost.JSON before 1.83 parses about one decimal double in
// ten one unit in the last place away from what its serializer wrote, so a value written and
// read back (a gathered rollout, a resumed run's state) would not be the value that was written.
struct ExactNumbers {
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();
  json::value_stack st;
  std::string number;  // the text of a number that arrives in parts

  bool on_document_begin(boost::system::error_code&) { return true; }
  bool on_document_end(boost::system::error_code&) { return true; }
  bool on_object_begin(boost::system::error_code&) { return true; }
  bool on_object_end(std::size_t n, boost::system::error_code&) {
    st.push_object(n);
    return true;
  }
  bool on_array_begin(boost::system::error_code&) { return true; }
  bool on_array_end(std::size_t n, boost::system::error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_key(s);
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view s, boost::system::error_code&) {
    number.append(s.data(), s.size());
    return true;
  }
  bool on_int64(std::int64_t i, json::string_view, boost::system::error_code&) {
    number.clear();
    st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, boost::system::error_code&) {
    number.clear();
    st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view s, boost::system::error_code& ec) {
    number.append(s.data(), s.size());
    double exact = 0;
    const auto [end, err] = std::from_chars(number.data(), number.data() + number.size(), exact);
    const bool parsed = err == std::errc{} && end == number.data() + number.size();
    number.clear();
    // Beyond the largest double: an error, not Boost's infinity, which no JSON text can hold (a
    // value read from one must serialize back to valid JSON). Below the smallest: Boost's value.
    if (!parsed && !std::isfinite(d)) {
      ec = boost::system::errc::make_error_code(boost::system::errc::result_out_of_range);
      return false;
    }
    st.push_double(parsed ? exact : d);
    return true;
  }
  bool on_bool(bool b, boost::system::error_code&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(boost::system::error_code&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_comment(json::string_view, boost::system::error_code&) { return true; }
};

}  // namespace

json::value parse_json(std::string_view text, boost::system::error_code& ec) {
  json::basic_parser<ExactNumbers> p(json::parse_options{});
  p.handler().st.reset();
  const std::size_t used = p.write_some(false, text.data(), text.size(), ec);
  if (!ec && used < text.size()) ec = json::error::extra_data;
  if (ec) return nullptr;
  return p.handler().st.release();
}

json::value parse_json(std::string_view text) {
  boost::system::error_code ec;
  json::value v = parse_json(text, ec);
  if (ec) throw InvalidArgument(fmt::format("malformed JSON: {}", ec.message()));
  return v;
}

// ---- enums --------------------------------------------------------------------------------

#define KBRL_JSON_ENUM(T, parse)                                                   \
  void tag_invoke(json::value_from_tag, json::value& jv, const T& v) {             \
    jv = json::string(to_string(v));                                               \
  }                                                                                \
  T tag_invoke(json::value_to_tag<T>, const json::value& jv) { return enum_from<T>(jv, parse); }

KBRL_JSON_ENUM(KernelLanguage, parse_kernel_language)
KBRL_JSON_ENUM(Precision, parse_precision)
KBRL_JSON_ENUM(DevicePlatform, parse_device_platform)
KBRL_JSON_ENUM(Severity, parse_severity)
KBRL_JSON_ENUM(ErrorCategory, parse_error_category)
#undef KBRL_JSON_ENUM

// ---- records ------------------------------------------------------------------------------

void tag_invoke(json::value_from_tag, json::value& jv, const Problem& p) {
  jv = {{"id", p.id},         {"level", p.level},   {"number", p.number},
        {"name", p.name},     {"source", p.source}, {"content_hash", p.content_hash},
        {"origin", p.origin}, {"needs_weights", p.needs_weights}};
}
Problem tag_invoke(json::value_to_tag<Problem>, const json::value& jv) {
  const auto& o = as_object(jv, "Problem");
  Problem p;
  read(o, "id", p.id);
  read(o, "level", p.level);
  read(o, "number", p.number);
  read(o, "name", p.name);
  read(o, "source", p.source);
  read(o, "content_hash", p.content_hash);
  read(o, "origin", p.origin);
  read(o, "needs_weights", p.needs_weights);
  return p;
}

void tag_invoke(json::value_from_tag, json::value& jv, const Message& m) {
  jv = {{"role", m.role}, {"content", m.content}};
}
Message tag_invoke(json::value_to_tag<Message>, const json::value& jv) {
  const auto& o = as_object(jv, "Message");
  Message m;
  read(o, "role", m.role);
  read(o, "content", m.content);
  return m;
}

void tag_invoke(json::value_from_tag, json::value& jv, const Completion& c) {
  jv = {{"text", c.text},
        {"tokens", json::value_from(c.tokens)},
        {"num_tokens", c.num_tokens},
        {"truncated", c.truncated},
        {"thinking", c.thinking},
        {"has_thinking", c.has_thinking},
        {"kernel", c.kernel},
        {"has_kernel_block", c.has_kernel_block},
        {"format_ok", c.format_ok}};
}
Completion tag_invoke(json::value_to_tag<Completion>, const json::value& jv) {
  const auto& o = as_object(jv, "Completion");
  Completion c;
  read(o, "text", c.text);
  read(o, "tokens", c.tokens);
  read(o, "num_tokens", c.num_tokens);
  read(o, "truncated", c.truncated);
  read(o, "thinking", c.thinking);
  read(o, "has_thinking", c.has_thinking);
  read(o, "kernel", c.kernel);
  read(o, "has_kernel_block", c.has_kernel_block);
  read(o, "format_ok", c.format_ok);
  return c;
}

void tag_invoke(json::value_from_tag, json::value& jv, const EvalOptions& e) {
  jv = {{"correctness_trials", e.correctness_trials},
        {"timing_trials", e.timing_trials},
        {"warmup_runs", e.warmup_runs},
        {"measure_performance", e.measure_performance},
        {"seed", opt(e.seed)},
        {"atol", opt(e.atol)},
        {"rtol", opt(e.rtol)},
        {"compile_timeout_s", e.compile_timeout_s},
        {"run_timeout_s", e.run_timeout_s},
        {"input_families", e.input_families},
        {"kernelbench_inputs", e.kernelbench_inputs}};
}
EvalOptions tag_invoke(json::value_to_tag<EvalOptions>, const json::value& jv) {
  const auto& o = as_object(jv, "EvalOptions");
  EvalOptions e;
  read(o, "correctness_trials", e.correctness_trials);
  read(o, "timing_trials", e.timing_trials);
  read(o, "warmup_runs", e.warmup_runs);
  read(o, "measure_performance", e.measure_performance);
  read(o, "seed", e.seed);
  read(o, "atol", e.atol);
  read(o, "rtol", e.rtol);
  read(o, "compile_timeout_s", e.compile_timeout_s);
  read(o, "run_timeout_s", e.run_timeout_s);
  read(o, "input_families", e.input_families);
  read(o, "kernelbench_inputs", e.kernelbench_inputs);
  return e;
}

void tag_invoke(json::value_from_tag, json::value& jv, const EvalRequest& r) {
  jv = {{"request_id", r.request_id},
        {"problem", json::value_from(r.problem)},
        {"candidate_source", r.candidate_source},
        {"language", json::value_from(r.language)},
        {"precision", json::value_from(r.precision)},
        {"options", json::value_from(r.options)}};
}
EvalRequest tag_invoke(json::value_to_tag<EvalRequest>, const json::value& jv) {
  const auto& o = as_object(jv, "EvalRequest");
  EvalRequest r;
  read(o, "request_id", r.request_id);
  read(o, "problem", r.problem);
  read(o, "candidate_source", r.candidate_source);
  read(o, "language", r.language);
  read(o, "precision", r.precision);
  read(o, "options", r.options);
  return r;
}

void tag_invoke(json::value_from_tag, json::value& jv, const StaticFinding& f) {
  jv = {{"rule", f.rule},
        {"category", f.category},
        {"severity", json::value_from(f.severity)},
        {"line", f.line},
        {"message", f.message}};
}
StaticFinding tag_invoke(json::value_to_tag<StaticFinding>, const json::value& jv) {
  const auto& o = as_object(jv, "StaticFinding");
  StaticFinding f;
  read(o, "rule", f.rule);
  read(o, "category", f.category);
  read(o, "severity", f.severity);
  read(o, "line", f.line);
  read(o, "message", f.message);
  return f;
}

void tag_invoke(json::value_from_tag, json::value& jv, const TimingStats& t) {
  jv = {{"mean", t.mean_ms}, {"median", t.median_ms}, {"std", t.std_ms},
        {"min", t.min_ms},   {"max", t.max_ms},       {"num_trials", t.trials}};
}
TimingStats tag_invoke(json::value_to_tag<TimingStats>, const json::value& jv) {
  const auto& o = as_object(jv, "TimingStats");
  TimingStats t;
  read(o, "mean", t.mean_ms);
  read(o, "median", t.median_ms);
  read(o, "std", t.std_ms);
  read(o, "min", t.min_ms);
  read(o, "max", t.max_ms);
  read(o, "num_trials", t.trials);
  return t;
}

void tag_invoke(json::value_from_tag, json::value& jv, const InputFamilies& f) {
  jv = {{"tried", json::value_from(f.tried)}, {"failed", json::value_from(f.failed)}, {"skipped", json::value_from(f.skipped)}};
}
InputFamilies tag_invoke(json::value_to_tag<InputFamilies>, const json::value& jv) {
  const auto& o = as_object(jv, "InputFamilies");
  InputFamilies f;
  read(o, "tried", f.tried);
  read(o, "failed", f.failed);
  read(o, "skipped", f.skipped);
  return f;
}

// KernelBench's eval_results.json entries use compiled, correctness, runtime (mean ms, -1 when
// not timed), ref_runtime and metadata; we keep those names and add ours beside them.
void tag_invoke(json::value_from_tag, json::value& jv, const EvalResult& r) {
  json::object o;
  o["request_id"] = r.request_id;
  o["problem_id"] = r.problem_id;
  o["format_ok"] = r.format_ok;
  o["static_findings"] = json::value_from(r.static_findings);
  o["static_ok"] = r.static_ok;
  o["compiled"] = r.compiled;
  o["correctness"] = r.correct;
  o["correct_on_problem_inputs"] = r.correct_on_problem_inputs;
  o["input_families"] = json::value_from(r.input_families);
  o["trials_passed"] = r.trials_passed;
  o["trials_total"] = r.trials_total;
  o["max_abs_error"] = opt(r.max_abs_error);
  o["max_rel_error"] = opt(r.max_rel_error);
  o["runtime"] = r.runtime ? r.runtime->mean_ms : -1.0;
  o["ref_runtime"] = r.ref_runtime ? r.ref_runtime->mean_ms : -1.0;
  o["runtime_stats"] = opt(r.runtime);
  o["ref_runtime_stats"] = opt(r.ref_runtime);
  o["speedup"] = opt(r.speedup);
  o["error_category"] = json::value_from(r.error_category);
  o["error_message"] = r.error_message;
  o["device"] = r.device;
  o["stage_seconds"] = json::value_from(r.stage_seconds);
  o["metadata"] = json::value_from(r.metadata);
  jv = std::move(o);
}
EvalResult tag_invoke(json::value_to_tag<EvalResult>, const json::value& jv) {
  const auto& o = as_object(jv, "EvalResult");
  EvalResult r;
  read(o, "request_id", r.request_id);
  read(o, "problem_id", r.problem_id);
  read(o, "format_ok", r.format_ok);
  read(o, "static_findings", r.static_findings);
  read(o, "static_ok", r.static_ok);
  read(o, "compiled", r.compiled);
  read(o, "correctness", r.correct);
  read(o, "correct_on_problem_inputs", r.correct_on_problem_inputs);
  read(o, "input_families", r.input_families);
  read(o, "trials_passed", r.trials_passed);
  read(o, "trials_total", r.trials_total);
  read(o, "max_abs_error", r.max_abs_error);
  read(o, "max_rel_error", r.max_rel_error);
  read(o, "runtime_stats", r.runtime);
  read(o, "ref_runtime_stats", r.ref_runtime);
  read(o, "speedup", r.speedup);
  read(o, "error_category", r.error_category);
  read(o, "error_message", r.error_message);
  read(o, "device", r.device);
  read(o, "stage_seconds", r.stage_seconds);
  read(o, "metadata", r.metadata);
  return r;
}

void tag_invoke(json::value_from_tag, json::value& jv, const RewardBreakdown& b) {
  jv = {{"total", b.total},
        {"unclipped", b.unclipped},
        {"terms", json::value_from(b.terms)},
        {"values", json::value_from(b.values)},
        {"zeroed_by_static_check", b.zeroed_by_static_check},
        {"clipped", b.clipped}};
}
RewardBreakdown tag_invoke(json::value_to_tag<RewardBreakdown>, const json::value& jv) {
  const auto& o = as_object(jv, "RewardBreakdown");
  RewardBreakdown b;
  read(o, "total", b.total);
  read(o, "unclipped", b.unclipped);
  read(o, "terms", b.terms);
  read(o, "values", b.values);
  read(o, "zeroed_by_static_check", b.zeroed_by_static_check);
  read(o, "clipped", b.clipped);
  return b;
}

void tag_invoke(json::value_from_tag, json::value& jv, const Transition& t) {
  jv = {{"observation", json::value_from(t.observation)},
        {"prompt_tokens", json::value_from(t.prompt_tokens)},
        {"prompt_text", t.prompt_text},
        {"completion", json::value_from(t.completion)},
        {"logprobs", json::value_from(t.logprobs)},
        {"eval", opt(t.eval)},
        {"reward", t.reward},
        {"breakdown", json::value_from(t.breakdown)},
        {"done", t.done},
        {"metrics", json::value_from(t.metrics)}};
}
Transition tag_invoke(json::value_to_tag<Transition>, const json::value& jv) {
  const auto& o = as_object(jv, "Transition");
  Transition t;
  read(o, "observation", t.observation);
  read(o, "prompt_tokens", t.prompt_tokens);
  read(o, "prompt_text", t.prompt_text);
  read(o, "completion", t.completion);
  read(o, "logprobs", t.logprobs);
  read(o, "eval", t.eval);
  read(o, "reward", t.reward);
  read(o, "breakdown", t.breakdown);
  read(o, "done", t.done);
  read(o, "metrics", t.metrics);
  return t;
}

void tag_invoke(json::value_from_tag, json::value& jv, const Trajectory& t) {
  jv = {{"problem_id", t.problem_id},
        {"transitions", json::value_from(t.transitions)},
        {"total_reward", t.total_reward()}};
}
Trajectory tag_invoke(json::value_to_tag<Trajectory>, const json::value& jv) {
  const auto& o = as_object(jv, "Trajectory");
  Trajectory t;
  read(o, "problem_id", t.problem_id);
  read(o, "transitions", t.transitions);
  return t;
}

void tag_invoke(json::value_from_tag, json::value& jv, const TrajectoryGroup& g) {
  jv = {{"problem_id", g.problem_id}, {"level", g.level}, {"trajectories", json::value_from(g.trajectories)}};
}
TrajectoryGroup tag_invoke(json::value_to_tag<TrajectoryGroup>, const json::value& jv) {
  const auto& o = as_object(jv, "TrajectoryGroup");
  TrajectoryGroup g;
  read(o, "problem_id", g.problem_id);
  if (o.contains("level")) read(o, "level", g.level);  // absent in groups written before it was
  read(o, "trajectories", g.trajectories);
  return g;
}

}  // namespace kbrl::core
