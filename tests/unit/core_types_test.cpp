#include <kbrl/core/error.hpp>
#include <kbrl/core/json.hpp>

#include <cmath>
#include <random>

#include "catch.hpp"

using namespace kbrl::core;

namespace {
template <class T>
T round_trip(const T& v) {
  return from_json<T>(to_json(v));
}

EvalResult sample_result() {
  EvalResult r;
  r.request_id = "req-7";
  r.problem_id = "bundled/03_softmax";
  r.format_ok = true;
  r.static_findings = {{"torch_compute_op", "bypass", Severity::warning, 12, "torch.softmax in forward"}};
  r.compiled = true;
  r.correct = true;
  r.trials_passed = 5;
  r.trials_total = 5;
  r.max_abs_error = 1.5e-7;
  r.max_rel_error = 2e-6;
  r.runtime = TimingStats{0.5, 0.49, 0.01, 0.48, 0.6, 100};
  r.ref_runtime = TimingStats{1.0, 1.0, 0.02, 0.97, 1.1, 100};
  r.speedup = 2.0;
  r.device = "cpu";
  r.stage_seconds = {{"compile", 12.5}, {"total", 14.0}};
  r.metadata = {{"hardware", "cpu"}};
  return r;
}
}  // namespace

TEST_CASE("enum names parse back with aliases and unknown names are rejected with the list") {
  for (auto l : {KernelLanguage::cuda, KernelLanguage::triton, KernelLanguage::hip, KernelLanguage::cpp})
    CHECK(parse_kernel_language(to_string(l)) == l);
  CHECK(parse_kernel_language("C++") == KernelLanguage::cpp);
  CHECK(parse_precision("bfloat16") == Precision::bf16);
  CHECK(parse_device_platform("ROCm") == DevicePlatform::hip);
  CHECK(parse_error_category("out_of_memory") == ErrorCategory::out_of_memory);
  try {
    parse_kernel_language("fortran");
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("accepted: cuda, triton, hip, cpp") != std::string::npos);
  }
}

TEST_CASE("every platform runs its own languages") {
  CHECK(languages_for(DevicePlatform::cpu) == std::vector{KernelLanguage::cpp});
  CHECK(languages_for(DevicePlatform::cuda) == std::vector{KernelLanguage::cuda, KernelLanguage::triton});
}

TEST_CASE("core types survive a JSON round trip") {
  Problem p{"level1/19_ReLU", 1, 19, "ReLU", "import torch\n", "abc", "KernelBench/level1/19_ReLU.py", false};
  CHECK(round_trip(p) == p);

  EvalRequest req;
  req.request_id = "r1";
  req.problem = p;
  req.candidate_source = "class ModelNew: pass";
  req.language = KernelLanguage::triton;
  req.precision = Precision::bf16;
  req.options.seed = 42;
  req.options.atol = 1e-3;
  CHECK(round_trip(req) == req);

  const EvalResult r = sample_result();
  CHECK(round_trip(r) == r);

  Completion c{"<think>t</think>x", {1, 2, 3}, 3, true, "t", true, "class ModelNew: ...", true, true};
  RewardBreakdown b{0.75, 0.75, {{"format", 0.75}}, {{"format", 1.0}}, false, false};
  Transition t{{{"user", "hi"}}, {5, 6}, c, {-0.5f, -1.0f, -0.25f}, r, 0.75, true, {{"turn", 1.0}}, "<|im_start|>user\nhi", b};
  Trajectory traj{"bundled/03_softmax", {t, t}};
  CHECK(round_trip(traj) == traj);
  CHECK(traj.total_reward() == 1.5);
  TrajectoryGroup g{"bundled/03_softmax", {traj}, 1};
  CHECK(round_trip(g) == g);
}

TEST_CASE("parse_json reads every double back exactly as to_json wrote it") {
  // Boost.JSON's own parser (before 1.83) is one unit in the last place off for about one in
  // ten of these.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  int differ = 0;
  for (int i = 0; i < 20000; ++i) {
    const double x = std::ldexp(unit(rng), static_cast<int>(rng() % 200) - 100);
    differ += parse_json(to_json(x)).as_double() != x;
  }
  CHECK(differ == 0);
  CHECK(parse_json("-9.821428571428573E-2").as_double() == -0.09821428571428573);
  const auto v = parse_json(R"({"a": [1, -2, 18446744073709551615, 0.5, 1e-400, "x", null, true], "b": {}})");
  const auto& a = v.at("a").as_array();
  CHECK(a.at(0).as_int64() == 1);
  CHECK(a.at(1).as_int64() == -2);
  CHECK(a.at(2).as_uint64() == 18446744073709551615ull);
  CHECK(a.at(3).as_double() == 0.5);
  CHECK(a.at(4).as_double() == 0.0);  // below the smallest double
  // Beyond the largest: no double holds it, and infinity would serialize as invalid JSON (found
  // by fuzzing: a result read from such text could not be written back).
  CHECK_THROWS_WITH(parse_json("[1e400]"), Catch::Matchers::ContainsSubstring("malformed JSON"));
  CHECK_THROWS_WITH(parse_json("{\"x\": -1.6E520}"), Catch::Matchers::ContainsSubstring("malformed JSON"));
  CHECK(a.at(5).as_string() == "x");
  CHECK(v.at("b").as_object().empty());
  CHECK_THROWS_WITH(parse_json("{} x"), Catch::Matchers::ContainsSubstring("malformed JSON"));
  CHECK_THROWS_WITH(parse_json("[1,"), Catch::Matchers::ContainsSubstring("malformed JSON"));
  boost::system::error_code ec;
  CHECK(parse_json("{\"a\": 1} {}", ec).is_null());
  CHECK(ec);
}

TEST_CASE("EvalResult JSON keeps KernelBench's field names") {
  const auto v = parse_json(to_json(sample_result())).as_object();
  CHECK(v.at("compiled").as_bool());
  CHECK(v.at("correctness").as_bool());
  CHECK(v.at("runtime").as_double() == 0.5);
  CHECK(v.at("ref_runtime").as_double() == 1.0);
  CHECK(v.at("metadata").as_object().at("hardware").as_string() == "cpu");
  EvalResult untimed;
  const auto u = parse_json(to_json(untimed)).as_object();
  CHECK(u.at("runtime").as_double() == -1.0);
  CHECK(u.at("speedup").is_null());
}

TEST_CASE("reading JSON: missing keys keep defaults and wrong types name the key") {
  const auto opts = from_json<EvalOptions>(R"({"timing_trials": 7})");
  CHECK(opts.timing_trials == 7);
  CHECK(opts.correctness_trials == 5);
  CHECK_FALSE(opts.seed.has_value());
  try {
    from_json<EvalOptions>(R"({"timing_trials": "many"})");
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("timing_trials") != std::string::npos);
  }
  CHECK_THROWS_AS(from_json<EvalRequest>(R"({"language": "cobol"})"), InvalidArgument);
  CHECK_THROWS_AS(from_json<Problem>("{not json"), InvalidArgument);
  CHECK_THROWS_AS(from_json<Problem>("[1,2]"), InvalidArgument);
}

TEST_CASE("ConfigError names the file and the field") {
  const ConfigError e("configs/a.json", "reward.speed.cap", "must be positive");
  CHECK(std::string(e.what()) == "configs/a.json: field 'reward.speed.cap': must be positive");
  CHECK(e.field() == "reward.speed.cap");
}
