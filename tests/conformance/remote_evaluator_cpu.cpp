// The Evaluator conformance suite on RemoteEvaluator over a real kbrl-evald (CPU backend, real
// workers and builds) on loopback: the same candidates as conformance:local_evaluator_cpu, in the
// same work directory, so that the server finds their builds in its cache (RESOURCE_LOCK keeps the
// two from running at once). The server's journal is fresh for each run: every candidate is
// evaluated, none answered from an earlier run.
#include <kbrl/conformance/evaluator_suite.hpp>
#include <kbrl/eval/remote_evaluator.hpp>
#include <kbrl/eval/subprocess.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "bundled_examples.hpp"
#include "conformance_catch.hpp"

using namespace kbrl;
using conformance::testing::require_all_passed;
namespace fs = std::filesystem;

namespace {

// A kbrl-evald on an ephemeral port, stopped (SIGKILL to its group) when the test ends.
struct Server {
  std::unique_ptr<eval::Subprocess> process;
  std::string url;

  explicit Server(const fs::path& dir) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path port_file = dir / "port";
    eval::Subprocess::Options o;
    o.argv = {KBRL_EVALD_PROGRAM, "--listen", "127.0.0.1:0", "--port-file", port_file.string(),
              "--journal", (dir / "journal").string(), "--work-dir", KBRL_CPU_EVALUATOR_WORK,
              "--compile-cache-dir", KBRL_TEST_COMPILE_CACHE, "--compile-workers", "2",
              "--max-memory-bytes", std::to_string(8ull << 30)};
    o.env_unset = {"KBRL_EVALD_TOKEN"};
    o.stderr_path = dir / "stderr.log";
    process = std::make_unique<eval::Subprocess>(o);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(port_file) && std::chrono::steady_clock::now() < deadline && process->running())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(fs::exists(port_file));
    std::ifstream in(port_file);
    int port = 0;
    in >> port;
    url = "http://127.0.0.1:" + std::to_string(port);
  }
};

core::EvalOptions quick_options() {
  core::EvalOptions o;
  o.correctness_trials = 2;
  o.measure_performance = false;
  o.run_timeout_s = 120;
  o.compile_timeout_s = 600;
  return o;
}

eval::RemoteEvaluatorConfig client_config(const std::string& url) {
  eval::RemoteEvaluatorConfig c;
  c.endpoints = {url};
  c.refresh_s = 0.5;
  c.give_up_after_s = 120;
  return c;
}

}  // namespace

TEST_CASE("RemoteEvaluator over kbrl-evald conforms to the Evaluator contract") {
  Server server(fs::path(KBRL_TEST_TMP) / "remote_evaluator_cpu");
  eval::RemoteEvaluator evaluator(client_config(server.url));
  conformance::EvaluatorSuiteOptions o;
  o.evaluator = &evaluator;
  o.make_evaluator = [&] { return std::make_unique<eval::RemoteEvaluator>(client_config(server.url)); };
  o.base.request_id = "remote";
  o.base.problem = kbrl::testing::cumsum_problem();
  o.base.candidate_source = kbrl::testing::cumsum_correct();
  o.base.language = core::KernelLanguage::cpp;
  o.base.options = quick_options();
  o.candidates = conformance::standard_candidates(o.base.candidate_source, 5.0);
  o.repeated_cases = {"correct", "empty", "no_model_new", "syntax_error"};
  const auto report = conformance::run_evaluator_suite(o);
  require_all_passed(report, conformance::evaluator_check_names());
  const auto stats = evaluator.stats();
  INFO("batches " << stats.batches << ", connections " << stats.connections_opened);
  CHECK(stats.gave_up == 0);
  CHECK(stats.connections_opened < stats.batches);  // kept alive, not one per batch
}
