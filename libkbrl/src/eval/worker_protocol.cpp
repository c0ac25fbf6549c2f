#include "kbrl/eval/worker_protocol.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <limits>
#include <set>
#include <vector>

#include "kbrl/core/json.hpp"

namespace kbrl::eval {
namespace json = boost::json;
using core::ErrorCategory;

namespace {

// Reads one JSON object of the protocol strictly: every field must be there with its type, and
// finish() refuses fields nobody read, so that a field one side adds and the other ignores is
// found by the golden tests instead of drifting. Messages name the object and the field.
class Fields {
 public:
  Fields(const json::object& o, std::string where) : o_(o), where_(std::move(where)) {}

  const json::value& need(std::string_view key) {
    read_.insert(std::string(key));
    const json::value* v = o_.if_contains(key);
    if (v == nullptr) fail(key, "is missing");
    return *v;
  }
  bool is_null(std::string_view key) { return need(key).is_null(); }

  std::string str(std::string_view key) {
    const auto& v = need(key);
    if (!v.is_string()) wrong(key, "a string", v);
    return std::string(v.get_string());
  }
  bool boolean(std::string_view key) {
    const auto& v = need(key);
    if (!v.is_bool()) wrong(key, "true or false", v);
    return v.get_bool();
  }
  std::int64_t integer(std::string_view key) {
    const auto& v = need(key);
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return static_cast<std::int64_t>(v.get_uint64());
    wrong(key, "an integer", v);
  }
  int int32(std::string_view key) {
    const std::int64_t n = integer(key);
    if (n < std::numeric_limits<int>::min() || n > std::numeric_limits<int>::max()) wrong(key, "a 32-bit integer", need(key));
    return static_cast<int>(n);
  }
  double number(std::string_view key) {
    const auto& v = need(key);
    if (!v.is_number()) wrong(key, "a number", v);
    return v.to_number<double>();
  }
  ErrorCategory category(std::string_view key) {
    const std::string name = str(key);
    try {
      return core::parse_error_category(name);
    } catch (const core::InvalidArgument&) {
      wrong(key, "an error category", need(key));
    }
  }
  std::optional<std::string> str_or_null(std::string_view key) {
    if (is_null(key)) return std::nullopt;
    return str(key);
  }
  std::optional<bool> bool_or_null(std::string_view key) {
    if (is_null(key)) return std::nullopt;
    return boolean(key);
  }
  std::optional<double> number_or_null(std::string_view key) {
    if (is_null(key)) return std::nullopt;
    return number(key);
  }
  const json::object& object(std::string_view key) {
    const auto& v = need(key);
    if (!v.is_object()) wrong(key, "an object", v);
    return v.get_object();
  }
  std::vector<std::string> strings(std::string_view key) {
    const auto& v = need(key);
    if (!v.is_array()) wrong(key, "a list of strings", v);
    std::vector<std::string> out;
    for (const auto& item : v.get_array()) {
      if (!item.is_string()) wrong(key, "a list of strings", v);
      out.emplace_back(item.get_string());
    }
    return out;
  }
  std::map<std::string, std::string> string_map(std::string_view key) {
    std::map<std::string, std::string> out;
    for (const auto& [k, v] : object(key)) {
      if (!v.is_string()) wrong(fmt::format("{}.{}", key, std::string_view(k)), "a string", v);
      out[std::string(k)] = std::string(v.get_string());
    }
    return out;
  }
  std::map<std::string, double> number_map(std::string_view key) {
    std::map<std::string, double> out;
    for (const auto& [k, v] : object(key)) {
      if (!v.is_number()) wrong(fmt::format("{}.{}", key, std::string_view(k)), "a number", v);
      out[std::string(k)] = v.to_number<double>();
    }
    return out;
  }
  std::string nested(std::string_view key) const { return fmt::format("{}.{}", where_, key); }

  void finish() const {
    for (const auto& [k, v] : o_)
      if (!read_.contains(std::string(k))) fail(std::string_view(k), "is not part of the protocol");
  }

  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    throw WorkerProtocolError(fmt::format("{}: field '{}' {}", where_, key, what));
  }
  [[noreturn]] void wrong(std::string_view key, std::string_view expected, const json::value& got) const {
    std::string text = json::serialize(got);
    if (text.size() > 80) text = text.substr(0, 77) + "...";
    throw WorkerProtocolError(fmt::format("{}: field '{}' must be {}, got {}", where_, key, expected, text));
  }

 private:
  const json::object& o_;
  std::string where_;
  std::set<std::string> read_;
};

core::TimingStats timing_of(Fields& f, std::string_view key) {
  Fields t(f.object(key), f.nested(key));
  core::TimingStats s;
  s.mean_ms = t.number("mean");
  s.median_ms = t.number("median");
  s.std_ms = t.number("std");
  s.min_ms = t.number("min");
  s.max_ms = t.number("max");
  s.trials = t.int32("num_trials");
  t.finish();
  return s;
}

std::optional<core::TimingStats> timing_or_null(Fields& f, std::string_view key) {
  if (f.is_null(key)) return std::nullopt;
  return timing_of(f, key);
}

json::object limits_json(const WorkerLimits& l) {
  return {{"file_size_bytes", l.file_size_bytes},
          {"address_space_bytes", l.address_space_bytes},
          {"processes", l.processes},
          {"nice", l.nice}};
}

json::object parse_object(std::string_view line, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec) throw WorkerProtocolError(fmt::format("{}: malformed JSON ({})", what, ec.message()));
  if (!v.is_object()) throw WorkerProtocolError(fmt::format("{}: not a JSON object", what));
  return std::move(v.get_object());
}

// The fields every reply to a compile or run job has. A reply that breaks the protocol but
// carries the worker's own error message keeps it in the exception: it says what went wrong.
struct ReplyHead {
  std::string job_id;
  ErrorCategory category = ErrorCategory::internal;
  std::string message;
  double wall_s = 0;
  std::map<std::string, std::string> metadata;
};

ReplyHead read_head(Fields& f, std::string_view op, std::string_view job_id) {
  ReplyHead h;
  const auto protocol = f.integer("protocol");
  if (protocol != kWorkerProtocolVersion)
    throw WorkerProtocolError(fmt::format("the worker speaks protocol {}, the evaluator {} (a worker script from another "
                                          "kbrl version?)", protocol, kWorkerProtocolVersion));
  if (const auto got = f.str("op"); got != op) f.fail("op", fmt::format("is '{}', expected '{}'", got, op));
  h.job_id = f.str("job_id");
  if (!job_id.empty() && h.job_id != job_id) f.fail("job_id", fmt::format("is '{}', expected '{}'", h.job_id, job_id));
  const std::string status = f.str("status");
  if (status != "ok" && status != "failed") f.wrong("status", "\"ok\" or \"failed\"", f.need("status"));
  h.category = f.category("error_category");
  if ((status == "ok") != (h.category == ErrorCategory::none))
    f.fail("error_category", fmt::format("is '{}' with status '{}'", core::to_string(h.category), status));
  h.message = f.str("error_message");
  h.wall_s = f.number("wall_s");
  h.metadata = f.string_map("metadata");
  return h;
}

template <class Read>
auto with_worker_message(const json::object& reply, Read read) {
  try {
    return read();
  } catch (const WorkerProtocolError& e) {
    const json::value* said = reply.if_contains("error_message");
    if (said == nullptr || !said->is_string() || said->get_string().empty()) throw;
    throw WorkerProtocolError(fmt::format("{}; the worker said: {}", e.what(), std::string_view(said->get_string())));
  }
}

}  // namespace

// ---- jobs -----------------------------------------------------------------------------------

CompileJob compile_job_for(const core::EvalRequest& request) {
  CompileJob job;
  job.language = request.language;
  job.timeout_s = request.options.compile_timeout_s;
  return job;
}

RunJob run_job_for(const core::EvalRequest& request) {
  const auto& o = request.options;
  RunJob job;
  job.precision = request.precision;
  job.correctness_trials = o.correctness_trials;
  job.timing_trials = o.timing_trials;
  job.warmup_runs = o.warmup_runs;
  job.measure_performance = o.measure_performance;
  job.time_reference = o.measure_performance;
  job.input_families = o.input_families;
  job.kernelbench_inputs = o.kernelbench_inputs;
  // The tolerances the prompt states (core::default_tolerance) are the ones the checker applies.
  const core::Tolerance tolerance = core::default_tolerance(request.precision);
  job.atol = o.atol.value_or(tolerance.atol);
  job.rtol = o.rtol.value_or(tolerance.rtol);
  job.timeout_s = o.run_timeout_s;
  return job;
}

json::object to_json(const CompileJob& job) {
  const auto& fb = job.fast_build;
  return {{"protocol", kWorkerProtocolVersion},
          {"op", "compile"},
          {"job_id", job.job_id},
          {"candidate_path", job.candidate_path.string()},
          {"build_dir", job.build_dir.string()},
          {"log_path", job.log_path.string()},
          {"language", core::to_string(job.language)},
          {"timeout_s", job.timeout_s},
          {"limits", limits_json(job.limits)},
          {"fast_build", json::object{{"pch", fb.pch},
                                      {"light_headers", fb.light_headers},
                                      {"parallel_passes", fb.parallel_passes},
                                      {"binding_early", fb.binding_early},
                                      {"dir", fb.dir.string()}}}};
}

json::object to_json(const RunJob& job) {
  return {{"protocol", kWorkerProtocolVersion},
          {"op", "run"},
          {"job_id", job.job_id},
          {"problem_path", job.problem_path.string()},
          {"candidate_path", job.candidate_path.string()},
          {"build_dir", job.build_dir.string()},
          {"log_path", job.log_path.string()},
          {"device", job.device},
          {"precision", core::to_string(job.precision)},
          {"seed", job.seed},
          {"correctness_trials", job.correctness_trials},
          {"timing_trials", job.timing_trials},
          {"warmup_runs", job.warmup_runs},
          {"measure_performance", job.measure_performance},
          {"time_reference", job.time_reference},
          {"input_families", job.input_families},
          {"kernelbench_inputs", job.kernelbench_inputs},
          {"atol", job.atol},
          {"rtol", job.rtol},
          {"timeout_s", job.timeout_s},
          {"limits", limits_json(job.limits)}};
}

std::string write_job(const CompileJob& job) { return json::serialize(to_json(job)); }
std::string write_job(const RunJob& job) { return json::serialize(to_json(job)); }
std::string write_shutdown_job() {
  return json::serialize(json::object{{"protocol", kWorkerProtocolVersion}, {"op", "shutdown"}});
}

// ---- replies --------------------------------------------------------------------------------

WorkerReady read_ready(std::string_view line) {
  const json::object o = parse_object(line, "worker greeting");
  Fields f(o, "worker greeting");
  if (const auto event = f.str("event"); event != "ready") f.fail("event", fmt::format("is '{}', expected 'ready'", event));
  WorkerReady r;
  const auto protocol = f.integer("protocol");
  if (protocol != kWorkerProtocolVersion)
    throw WorkerProtocolError(fmt::format("the worker speaks protocol {}, the evaluator {} (a worker script from another "
                                          "kbrl version?)", protocol, kWorkerProtocolVersion));
  r.protocol = static_cast<int>(protocol);
  r.pid = f.integer("pid");
  r.platform = f.str("platform");
  r.torch = f.str("torch");
  r.timing = f.str("timing");
  r.cuda = f.str_or_null("cuda");
  r.hip = f.str_or_null("hip");
  r.python = f.str("python");
  r.import_s = f.number("import_s");
  f.finish();
  return r;
}

CompileReply read_compile_reply(const json::object& reply, std::string_view job_id) {
  return with_worker_message(reply, [&] {
    Fields f(reply, "worker reply to a compile job");
    const ReplyHead h = read_head(f, "compile", job_id);
    CompileReply r;
    r.job_id = h.job_id;
    r.error_category = h.category;
    r.error_message = h.message;
    r.wall_s = h.wall_s;
    r.metadata = h.metadata;
    r.compile_s = f.number("compile_s");
    f.finish();
    return r;
  });
}

CompileReply read_compile_reply(std::string_view line, std::string_view job_id) {
  return read_compile_reply(parse_object(line, "worker reply to a compile job"), job_id);
}

RunReply read_run_reply(const json::object& reply, std::string_view job_id) {
  return with_worker_message(reply, [&] {
    Fields f(reply, "worker reply to a run job");
    const ReplyHead h = read_head(f, "run", job_id);
    RunReply r;
    r.job_id = h.job_id;
    r.error_category = h.category;
    r.error_message = h.message;
    r.wall_s = h.wall_s;
    r.metadata = h.metadata;
    r.compiled = f.bool_or_null("compiled");
    r.correct = f.boolean("correct");
    r.correct_on_problem_inputs = f.boolean("correct_on_problem_inputs");
    if (!f.is_null("input_families")) {
      Fields families(f.object("input_families"), f.nested("input_families"));
      core::InputFamilies fam;
      fam.tried = families.strings("tried");
      fam.failed = families.strings("failed");
      fam.skipped = families.strings("skipped");
      families.finish();
      r.input_families = std::move(fam);
    }
    r.trials_passed = f.int32("trials_passed");
    r.trials_total = f.int32("trials_total");
    r.max_abs_error = f.number_or_null("max_abs_error");
    r.max_rel_error = f.number_or_null("max_rel_error");
    r.device = f.str_or_null("device");
    r.runtime = timing_or_null(f, "runtime");
    r.ref_runtime = timing_or_null(f, "ref_runtime");
    r.stage_seconds = f.number_map("stage_seconds");
    f.finish();
    // A correct verdict is the whole of one: anything less would be read as a passing kernel.
    if (r.ok() && !(r.correct && r.compiled.value_or(false)))
      f.fail("status", "is 'ok' for a candidate not compiled and correct");
    return r;
  });
}

RunReply read_run_reply(std::string_view line, std::string_view job_id) {
  return read_run_reply(parse_object(line, "worker reply to a run job"), job_id);
}

json::object to_json(const CompileReply& reply) {
  json::object metadata;
  for (const auto& [k, v] : reply.metadata) metadata[k] = v;
  return {{"protocol", kWorkerProtocolVersion},
          {"op", "compile"},
          {"job_id", reply.job_id},
          {"status", reply.ok() ? "ok" : "failed"},
          {"error_category", core::to_string(reply.error_category)},
          {"error_message", reply.error_message},
          {"compile_s", reply.compile_s},
          {"wall_s", reply.wall_s},
          {"metadata", std::move(metadata)}};
}

std::string write_compile_reply(const CompileReply& reply) { return json::serialize(to_json(reply)); }

// ---- what a reply means for the result --------------------------------------------------------

bool apply_compile_reply(const CompileReply& reply, core::EvalResult& result) {
  result.stage_seconds["compile"] = reply.compile_s;
  // What the compile accelerations did ("pch": "used", "light_headers": "minimal", ...).
  for (const auto& [k, v] : reply.metadata) result.metadata["compile_" + k] = v;
  result.compiled = reply.ok();
  if (reply.ok()) return true;
  result.error_category = reply.error_category;
  result.error_message = reply.error_message;
  if (reply.error_category == ErrorCategory::format) result.format_ok = false;
  return false;
}

void apply_run_reply(const RunReply& reply, core::EvalResult& result) {
  if (reply.compiled) result.compiled = *reply.compiled;
  result.correct = reply.correct;
  result.correct_on_problem_inputs = reply.correct_on_problem_inputs;
  if (reply.input_families) result.input_families = *reply.input_families;
  result.trials_passed = reply.trials_passed;
  result.trials_total = reply.trials_total;
  result.max_abs_error = reply.max_abs_error;
  result.max_rel_error = reply.max_rel_error;
  if (reply.device) result.device = *reply.device;
  for (const auto& [k, v] : reply.stage_seconds) result.stage_seconds[k] = v;
  result.runtime = reply.runtime;
  result.ref_runtime = reply.ref_runtime;
  // What the timing noticed ("outside_stream_runs": "3 of 100, 0.0213 ms each", ...).
  for (const auto& [k, v] : reply.metadata) result.metadata["timing_" + k] = v;
  result.error_category = reply.error_category;
  result.error_message = reply.error_message;
}

}  // namespace kbrl::eval
