#include "kbrl/eval/worker_protocol.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <set>
#include <vector>

#include "kbrl/core/json.hpp"
#include "kbrl/core/json_reader.hpp"

namespace kbrl::eval {
namespace json = boost::json;
using core::ErrorCategory;

namespace {

// Reads one JSON object of the protocol with core::JsonReader's typed checks, adding what a
// wire format needs beyond them: every field present (null only where the protocol allows it),
// and finish() refusing fields nobody read, so that a field one side adds and the other ignores
// is found by the golden tests instead of drifting. Errors are core::ConfigErrors naming the
// message and the dotted field; the read_* functions turn them into WorkerProtocolErrors.
class Fields {
 public:
  Fields(const json::object& o, const core::JsonReader& reader, std::string prefix = "")
      : o_(o), reader_(reader), prefix_(std::move(prefix)) {}

  std::string field(std::string_view key) const { return core::JsonReader::field_name(prefix_, key); }
  [[noreturn]] void fail(std::string_view key, const std::string& what) const { reader_.fail(field(key), what); }

  const json::value& need(std::string_view key) {
    read_.insert(std::string(key));
    const json::value* v = o_.if_contains(key);
    if (v == nullptr) fail(key, "missing");
    return *v;
  }
  bool is_null(std::string_view key) { return need(key).is_null(); }

  std::string str(std::string_view key) { return reader_.string(need(key), field(key)); }
  bool boolean(std::string_view key) { return reader_.boolean(need(key), field(key)); }
  std::int64_t int64(std::string_view key) { return reader_.int64(need(key), field(key)); }
  int integer(std::string_view key) { return reader_.integer(need(key), field(key)); }
  double number(std::string_view key) { return reader_.number(need(key), field(key)); }
  ErrorCategory category(std::string_view key) {
    return reader_.name(need(key), field(key), [](std::string_view name) { return core::parse_error_category(name); });
  }
  std::optional<std::string> str_or_null(std::string_view key) {
    if (is_null(key)) return std::nullopt;
    return str(key);
  }
  std::optional<bool> bool_or_null(std::string_view key) {
    if (is_null(key)) return std::nullopt;
    return boolean(key);
  }
  std::optional<double> number_or_null(std::string_view key) { return reader_.optional_number(need(key), field(key)); }
  // The object at `key`, read by a Fields of its own.
  Fields nested(std::string_view key) { return Fields(reader_.object(need(key), field(key)), reader_, field(key)); }
  std::vector<std::string> strings(std::string_view key) {
    std::vector<std::string> out;
    const auto& items = reader_.array(need(key), field(key));
    for (std::size_t i = 0; i < items.size(); ++i) out.push_back(reader_.string(items[i], fmt::format("{}[{}]", field(key), i)));
    return out;
  }
  // An object whose keys are free (metadata, stage_seconds), each value read by `read`.
  template <class T, class Read>
  std::map<std::string, T> map(std::string_view key, Read read) {
    std::map<std::string, T> out;
    for (const auto& [k, v] : reader_.object(need(key), field(key)))
      out[std::string(k)] = read(v, core::JsonReader::field_name(field(key), std::string_view(k)));
    return out;
  }
  std::map<std::string, std::string> string_map(std::string_view key) {
    return map<std::string>(key, [&](const json::value& v, const std::string& f) { return reader_.string(v, f); });
  }
  std::map<std::string, double> number_map(std::string_view key) {
    return map<double>(key, [&](const json::value& v, const std::string& f) { return reader_.number(v, f); });
  }

  void finish() const {
    for (const auto& [k, v] : o_)
      if (!read_.contains(std::string(k))) fail(std::string_view(k), "not part of the protocol");
  }

 private:
  const json::object& o_;
  const core::JsonReader& reader_;
  std::string prefix_;
  std::set<std::string> read_;
};

core::TimingStats timing_of(Fields& f, std::string_view key) {
  Fields t = f.nested(key);
  core::TimingStats s;
  s.mean_ms = t.number("mean");
  s.median_ms = t.number("median");
  s.std_ms = t.number("std");
  s.min_ms = t.number("min");
  s.max_ms = t.number("max");
  s.trials = t.integer("num_trials");
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
          {"open_files", l.open_files},
          {"cpu_seconds", l.cpu_seconds},
          {"nice", l.nice}};
}

json::object parse_object(std::string_view line, const std::string& where) {
  try {
    const core::JsonReader reader(where);
    const json::value v = reader.parse(line);
    return reader.object(v, "");
  } catch (const core::ConfigError& e) {
    throw WorkerProtocolError(e.what());
  }
}

// Runs `read` on `reply`: the ConfigError of a field that breaks the protocol becomes a
// WorkerProtocolError, which keeps the worker's own error message where the reply has one (the
// answer to a job the worker refused says which field it missed).
template <class Read>
auto strictly(const json::object& reply, Read read) {
  try {
    return read();
  } catch (const core::ConfigError& e) {
    const json::value* said = reply.if_contains("error_message");
    if (said == nullptr || !said->is_string() || said->get_string().empty()) throw WorkerProtocolError(e.what());
    throw WorkerProtocolError(fmt::format("{}; the worker said: {}", e.what(), std::string_view(said->get_string())));
  }
}

void check_protocol(Fields& f) {
  if (const auto protocol = f.int64("protocol"); protocol != kWorkerProtocolVersion)
    f.fail("protocol", fmt::format("the worker speaks protocol {}, the evaluator {} (a worker script from another kbrl "
                                   "version?)", protocol, kWorkerProtocolVersion));
}

// The fields every reply to a compile or run job has.
struct ReplyHead {
  std::string job_id;
  ErrorCategory category = ErrorCategory::internal;
  std::string message;
  double wall_s = 0;
  std::map<std::string, std::string> metadata;
};

ReplyHead read_head(Fields& f, std::string_view op, std::string_view job_id) {
  ReplyHead h;
  check_protocol(f);
  if (const auto got = f.str("op"); got != op) f.fail("op", fmt::format("is '{}', expected '{}'", got, op));
  h.job_id = f.str("job_id");
  if (!job_id.empty() && h.job_id != job_id) f.fail("job_id", fmt::format("is '{}', expected '{}'", h.job_id, job_id));
  const std::string status = f.str("status");
  if (status != "ok" && status != "failed") f.fail("status", fmt::format("expected \"ok\" or \"failed\", got '{}'", status));
  h.category = f.category("error_category");
  if ((status == "ok") != (h.category == ErrorCategory::none))
    f.fail("error_category", fmt::format("is '{}' with status '{}'", core::to_string(h.category), status));
  h.message = f.str("error_message");
  h.wall_s = f.number("wall_s");
  h.metadata = f.string_map("metadata");
  return h;
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
  const std::string where = "worker greeting";
  const json::object o = parse_object(line, where);
  return strictly(o, [&] {
    const core::JsonReader reader(where);
    Fields f(o, reader);
    if (const auto event = f.str("event"); event != "ready") f.fail("event", fmt::format("is '{}', expected 'ready'", event));
    WorkerReady r;
    check_protocol(f);
    r.protocol = kWorkerProtocolVersion;
    r.pid = f.int64("pid");
    r.platform = f.str("platform");
    r.torch = f.str("torch");
    r.timing = f.str("timing");
    r.cuda = f.str_or_null("cuda");
    r.hip = f.str_or_null("hip");
    r.python = f.str("python");
    r.import_s = f.number("import_s");
    r.isolation = f.str("isolation");
    f.finish();
    return r;
  });
}

CompileReply read_compile_reply(const json::object& reply, std::string_view job_id) {
  return strictly(reply, [&] {
    const core::JsonReader reader("worker reply to a compile job");
    Fields f(reply, reader);
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
  return strictly(reply, [&] {
    const core::JsonReader reader("worker reply to a run job");
    Fields f(reply, reader);
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
      Fields families = f.nested("input_families");
      core::InputFamilies fam;
      fam.tried = families.strings("tried");
      fam.failed = families.strings("failed");
      fam.skipped = families.strings("skipped");
      families.finish();
      r.input_families = std::move(fam);
    }
    r.trials_passed = f.integer("trials_passed");
    r.trials_total = f.integer("trials_total");
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
