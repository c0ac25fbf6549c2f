// The worker protocol's C++ side against the golden jobs and replies in
// tests/data/worker_protocol/ (tests/integration/worker_protocol.py checks the worker against the
// same files): the jobs written for a request are exactly the golden ones, the golden replies read
// into the expected results, and a reply that breaks the protocol anywhere is refused with a
// message naming the field.
#include <kbrl/core/json.hpp>
#include <kbrl/eval/worker_protocol.hpp>

#include <boost/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"

using namespace kbrl;
using core::ErrorCategory;
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

const fs::path kGolden = fs::path(KBRL_SOURCE_DIR) / "tests" / "data" / "worker_protocol";

std::string golden_text(const std::string& name) {
  std::ifstream in(kGolden / name, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json::object golden(const std::string& name) { return core::parse_json(golden_text(name)).as_object(); }

// The numbers of a JSON text as the protocol means them: an integer written unsigned by one side
// and read signed by the other is the same number.
json::value normalized(const json::value& v) {
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    return json::value(static_cast<std::int64_t>(v.get_uint64()));
  if (v.is_object()) {
    json::object o;
    for (const auto& [k, x] : v.get_object()) o[k] = normalized(x);
    return o;
  }
  if (v.is_array()) {
    json::array a;
    for (const auto& x : v.get_array()) a.push_back(normalized(x));
    return a;
  }
  return v;
}

void check_same_json(const std::string& written, const json::object& expected) {
  INFO("written:  " << written << "\nexpected: " << json::serialize(expected));
  CHECK(normalized(core::parse_json(written)) == normalized(expected));
}

const char* kBuildDir = "/cache/kbrl/builds/3b1f0c9a8e7d6c5b4a39281706f5e4d3";

// A request with every option at its default (core::EvalOptions): the golden jobs show the
// defaults that reach the worker.
core::EvalRequest default_request() {
  core::EvalRequest r;
  r.request_id = "golden";
  r.language = core::KernelLanguage::cpp;
  r.precision = core::Precision::fp32;
  return r;
}

eval::WorkerLimits golden_limits(int nice) {
  eval::WorkerLimits l;
  l.file_size_bytes = 4ull << 30;
  l.address_space_bytes = 8ull << 30;
  l.processes = 0;
  l.open_files = 4096;
  l.cpu_seconds = 1200;
  l.nice = nice;
  return l;
}

eval::CompileJob golden_compile_job() {
  eval::CompileJob job = eval::compile_job_for(default_request());
  job.job_id = "7-5f2b8c1e";
  job.build_dir = kBuildDir;
  job.candidate_path = job.build_dir / "candidate.py";
  job.log_path = job.build_dir / "compile.log";
  job.limits = golden_limits(10);
  job.fast_build = {.pch = true, .light_headers = true, .parallel_passes = true, .binding_early = true,
                    .dir = "/cache/kbrl/compile_cache"};
  return job;
}

eval::RunJob golden_run_job() {
  eval::RunJob job = eval::run_job_for(default_request());
  job.job_id = "7-5f2b8c1e";
  job.problem_path = "/cache/kbrl/problems/9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d.py";
  job.build_dir = kBuildDir;
  job.candidate_path = job.build_dir / "candidate.py";
  job.log_path = "/cache/kbrl/logs/7-5f2b8c1e.run.log";
  job.device = "cpu";
  job.seed = 1234567;
  job.limits = golden_limits(0);
  return job;
}

// Every path of fields in a JSON object ("runtime.mean", ...), the maps' own keys excluded
// (stage_seconds and metadata may hold any keys).
void field_paths(const json::object& o, std::vector<std::vector<std::string>>& out, std::vector<std::string> path = {}) {
  for (const auto& [k, v] : o) {
    path.emplace_back(k);
    out.push_back(path);
    const bool map = k == "stage_seconds" || k == "metadata";
    if (v.is_object() && !map) field_paths(v.get_object(), out, path);
    path.pop_back();
  }
}

json::value* at_path(json::object& o, const std::vector<std::string>& path) {
  json::value* v = o.if_contains(path[0]);
  for (std::size_t i = 1; v != nullptr && i < path.size(); ++i) v = v->as_object().if_contains(path[i]);
  return v;
}

void erase_path(json::object& o, const std::vector<std::string>& path) {
  json::object* parent = &o;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) parent = &parent->at(path[i]).as_object();
  parent->erase(path.back());
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const eval::WorkerProtocolError& e) {
    return e.what();
  }
  return "";
}

// A JSON value of another kind than `v`: a string for a number, a number for a string, ...
json::value other_kind(const json::value& v) {
  if (v.is_string()) return 17;
  if (v.is_null()) return json::array{};
  return "seventeen";
}

}  // namespace

TEST_CASE("the jobs written for a request are exactly the golden jobs") {
  check_same_json(eval::write_job(golden_compile_job()), golden("compile_job.json"));
  check_same_json(eval::write_job(golden_run_job()), golden("run_job.json"));
  check_same_json(eval::write_shutdown_job(), golden("shutdown_job.json"));
  // One line each: the worker reads a job per line.
  CHECK(eval::write_job(golden_run_job()).find('\n') == std::string::npos);
}

TEST_CASE("the job's settings come from the request's options") {
  core::EvalRequest r = default_request();
  r.precision = core::Precision::bf16;
  r.options.correctness_trials = 2;
  r.options.timing_trials = 7;
  r.options.warmup_runs = 1;
  r.options.measure_performance = false;
  r.options.input_families = false;
  r.options.kernelbench_inputs = true;
  r.options.run_timeout_s = 12;
  r.options.compile_timeout_s = 34;
  const eval::RunJob run = eval::run_job_for(r);
  CHECK(run.precision == core::Precision::bf16);
  CHECK(run.correctness_trials == 2);
  CHECK(run.timing_trials == 7);
  CHECK(run.warmup_runs == 1);
  CHECK_FALSE(run.measure_performance);
  CHECK_FALSE(run.time_reference);
  CHECK_FALSE(run.input_families);
  CHECK(run.kernelbench_inputs);
  CHECK(run.timeout_s == 12);
  // The precision's tolerances (the ones the prompt states), unless the request overrides them.
  CHECK(run.atol == core::default_tolerance(core::Precision::bf16).atol);
  CHECK(run.rtol == core::default_tolerance(core::Precision::bf16).rtol);
  r.options.atol = 0.5;
  r.options.rtol = 0.25;
  CHECK(eval::run_job_for(r).atol == 0.5);
  CHECK(eval::run_job_for(r).rtol == 0.25);
  CHECK(eval::compile_job_for(r).timeout_s == 34);
  CHECK(eval::compile_job_for(r).language == core::KernelLanguage::cpp);
}

TEST_CASE("the golden greeting and compile replies are read field by field") {
  const eval::WorkerReady ready = eval::read_ready(golden_text("ready.json"));
  CHECK(ready.protocol == eval::kWorkerProtocolVersion);
  CHECK(ready.pid == 4242);
  CHECK(ready.platform == "cpu");
  CHECK(ready.torch == "2.11.0+cpu");
  CHECK(ready.timing == "cuda events on the current stream, device-wide guard, new inputs every call");
  CHECK_FALSE(ready.cuda.has_value());
  CHECK_FALSE(ready.hip.has_value());
  CHECK(ready.python == "3.11.2");
  CHECK(ready.import_s == 2.5);
  CHECK(ready.isolation == "landlock ABI 7; seccomp");

  const eval::CompileReply ok = eval::read_compile_reply(golden_text("compile_reply.json"), "7-5f2b8c1e");
  CHECK(ok.ok());
  CHECK(ok.job_id == "7-5f2b8c1e");
  CHECK(ok.compile_s == 1.625);
  CHECK(ok.wall_s == 1.75);
  CHECK(ok.metadata == std::map<std::string, std::string>{{"pch", "used"}});
  // The build directory's record is the reply as the worker wrote it, and reads back the same.
  check_same_json(eval::write_compile_reply(ok), golden("compile_reply.json"));
  CHECK(eval::read_compile_reply(eval::write_compile_reply(ok), "") == ok);

  const eval::CompileReply failed = eval::read_compile_reply(golden_text("compile_reply_failed.json"), "");
  CHECK_FALSE(failed.ok());
  CHECK(failed.error_category == ErrorCategory::compile);
  CHECK(failed.error_message.find("was not declared") != std::string::npos);
  check_same_json(eval::write_compile_reply(failed), golden("compile_reply_failed.json"));

  core::EvalResult r;
  r.format_ok = true;
  CHECK_FALSE(eval::apply_compile_reply(failed, r));
  CHECK_FALSE(r.compiled);
  CHECK(r.error_category == ErrorCategory::compile);
  CHECK(r.error_message == failed.error_message);
  CHECK(r.stage_seconds.at("compile") == 3.5);
  CHECK(r.format_ok);
}

TEST_CASE("the golden compile and run replies give the expected result") {
  core::EvalResult r;
  r.request_id = "golden";
  r.format_ok = true;
  r.device = "the lane's device";  // the evaluator's, until the run reports the device's name
  REQUIRE(eval::apply_compile_reply(eval::read_compile_reply(golden_text("compile_reply.json"), "7-5f2b8c1e"), r));
  eval::apply_run_reply(eval::read_run_reply(golden_text("run_reply.json"), "7-5f2b8c1e"), r);

  core::EvalResult expected;
  expected.request_id = "golden";
  expected.format_ok = true;
  expected.compiled = true;
  expected.correct = true;
  expected.correct_on_problem_inputs = true;
  expected.input_families.tried = {"sign_symmetric", "scaled_up", "scaled_down", "special_values"};
  expected.trials_passed = 5;
  expected.trials_total = 5;
  expected.max_abs_error = 0.0;
  expected.max_rel_error = 0.0;
  expected.runtime = core::TimingStats{0.0625, 0.0625, 0.0078125, 0.046875, 0.125, 100};
  expected.ref_runtime = core::TimingStats{0.125, 0.125, 0.015625, 0.09375, 0.25, 100};
  expected.error_category = ErrorCategory::none;
  expected.device = "cpu";
  expected.stage_seconds = {{"compile", 1.625}, {"start", 0.001953125}, {"setup", 0.0009765625},
                            {"reference", 0.25},  {"load", 0.0625},        {"correctness", 0.125},
                            {"timing", 0.5},      {"timing_checks", 0.0625}, {"exit", 0.015625}};
  expected.metadata = {{"compile_pch", "used"}, {"timing_outside_stream_runs", "3 of 100, 0.0213 ms each"}};
  INFO("got:      " << core::to_json(r) << "\nexpected: " << core::to_json(expected));
  CHECK(r == expected);
}

TEST_CASE("a run whose child never reported keeps what the compile stage found") {
  core::EvalResult r;
  r.format_ok = true;
  r.device = "the lane's device";
  REQUIRE(eval::apply_compile_reply(eval::read_compile_reply(golden_text("compile_reply.json"), ""), r));
  const eval::RunReply crash = eval::read_run_reply(golden_text("run_reply_crash.json"), "7-5f2b8c1e");
  CHECK_FALSE(crash.compiled.has_value());
  CHECK_FALSE(crash.device.has_value());
  CHECK_FALSE(crash.input_families.has_value());
  eval::apply_run_reply(crash, r);
  CHECK(r.compiled);  // the build succeeded; the run crashed
  CHECK_FALSE(r.correct);
  CHECK(r.device == "the lane's device");
  CHECK(r.error_category == ErrorCategory::crash);
  CHECK(r.error_message == "the process exited with code 3 before reporting a result");
  CHECK_FALSE(r.runtime.has_value());
  CHECK_FALSE(r.ref_runtime.has_value());
  CHECK_FALSE(r.max_abs_error.has_value());
  CHECK(r.input_families.tried.empty());
}

TEST_CASE("a reply missing any field, or with one of another type or unknown, is refused naming it") {
  struct Case {
    std::string file;
    std::function<void(const json::object&)> read;
  };
  const std::vector<Case> cases = {
      {"ready.json", [](const json::object& o) { eval::read_ready(json::serialize(o)); }},
      {"compile_reply.json", [](const json::object& o) { eval::read_compile_reply(o, "7-5f2b8c1e"); }},
      {"compile_reply_failed.json", [](const json::object& o) { eval::read_compile_reply(o, "7-5f2b8c1e"); }},
      {"run_reply.json", [](const json::object& o) { eval::read_run_reply(o, "7-5f2b8c1e"); }},
      {"run_reply_crash.json", [](const json::object& o) { eval::read_run_reply(o, "7-5f2b8c1e"); }},
  };
  for (const auto& c : cases) {
    const json::object whole = golden(c.file);
    CHECK(message_of([&] { c.read(whole); }).empty());
    std::vector<std::vector<std::string>> paths;
    field_paths(whole, paths);
    REQUIRE(paths.size() >= 9);
    for (const auto& path : paths) {
      std::string name;  // dotted, as the messages name nested fields: "runtime.mean"
      for (const auto& part : path) name += (name.empty() ? "" : ".") + part;
      INFO(c.file << ": field " << name);
      json::object missing = whole;
      erase_path(missing, path);
      const std::string why_missing = message_of([&] { c.read(missing); });
      CHECK(why_missing.find("field '" + name + "': missing") != std::string::npos);

      json::object wrong = whole;
      json::value* field = at_path(wrong, path);
      *field = other_kind(json::value(*field));
      const std::string why_wrong = message_of([&] { c.read(wrong); });
      INFO(why_wrong);
      CHECK(why_wrong.find("field '" + name + "': ") != std::string::npos);
    }
    json::object extra = whole;
    extra["retries"] = 1;
    CHECK(message_of([&] { c.read(extra); }).find("field 'retries': not part of the protocol") != std::string::npos);
    json::object older = whole;
    older["protocol"] = eval::kWorkerProtocolVersion - 1;
    CHECK(message_of([&] { c.read(older); }).find("speaks protocol") != std::string::npos);
  }
}

TEST_CASE("replies to another job, of another op or with an inconsistent verdict are refused") {
  const json::object run = golden("run_reply.json");
  CHECK(message_of([&] { eval::read_run_reply(run, "8-00000000"); }).find("'job_id'") != std::string::npos);
  CHECK(message_of([&] { eval::read_compile_reply(run, ""); }).find("'op'") != std::string::npos);

  json::object ok_but_failed = run;
  ok_but_failed["error_category"] = "correctness";
  CHECK(message_of([&] { eval::read_run_reply(ok_but_failed, ""); }).find("'error_category'") != std::string::npos);

  json::object ok_but_wrong = run;
  ok_but_wrong["correct"] = false;
  CHECK(message_of([&] { eval::read_run_reply(ok_but_wrong, ""); }).find("'status'") != std::string::npos);

  json::object unknown_category = golden("run_reply_crash.json");
  unknown_category["error_category"] = "gremlins";
  CHECK(message_of([&] { eval::read_run_reply(unknown_category, ""); }).find("field 'error_category': unknown error category 'gremlins'") != std::string::npos);

  json::object bad_status = golden("run_reply_crash.json");
  bad_status["status"] = "maybe";
  CHECK(message_of([&] { eval::read_run_reply(bad_status, ""); }).find("'status'") != std::string::npos);

  json::object fractional = run;
  fractional["trials_passed"] = 4.5;
  CHECK(message_of([&] { eval::read_run_reply(fractional, ""); }).find("field 'trials_passed': expected an integer") !=
        std::string::npos);

  CHECK(message_of([] { eval::read_run_reply(std::string_view("{\"protocol\": 3,"), ""); }).find("worker reply to a run job: not valid JSON") !=
        std::string::npos);
  CHECK(message_of([] { eval::read_ready("[1, 2]"); }).find("worker greeting: expected a JSON object") != std::string::npos);
}

TEST_CASE("a refused reply keeps what the worker said") {
  // The worker's answer to a job it could not read names the job's field; the evaluator's
  // message must still carry it when the reply itself breaks the protocol (here: no job id).
  json::object rejected = golden("run_reply_crash.json");
  rejected["error_category"] = "internal";
  rejected["error_message"] = "job field 'seed' is missing";
  rejected["job_id"] = nullptr;
  const std::string why = message_of([&] { eval::read_run_reply(rejected, "7-5f2b8c1e"); });
  CHECK(why.find("field 'job_id': expected a string") != std::string::npos);
  CHECK(why.find("the worker said: job field 'seed' is missing") != std::string::npos);
}
