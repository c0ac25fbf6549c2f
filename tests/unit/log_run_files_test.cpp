// The run directory's files: JSON Lines across torn writes, TensorBoard event files read back by
// TensorBoard's own reader, and the run lock's states with real processes (one SIGKILLed).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/log/jsonl.hpp"
#include "kbrl/log/run_dir.hpp"
#include "kbrl/log/tensorboard.hpp"

namespace fs = std::filesystem;
using namespace kbrl::log;

namespace {

fs::path scratch(const std::string& name) {
  const auto dir = fs::path(KBRL_TEST_TMP) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  REQUIRE(::pclose(p) == 0);
  return out;
}

}  // namespace

TEST_CASE("crc32c matches the known check value") {
  CHECK(crc32c("123456789") == 0xE3069283U);
  CHECK(crc32c("") == 0U);
}

TEST_CASE("jsonl drops a torn last line when read and when reopened") {
  const auto dir = scratch("jsonl");
  const auto file = dir / "m.jsonl";
  {
    JsonlWriter w(file);
    w.write({{"step", 0}});
    w.write({{"step", 1}});
    w.flush();
  }
  { std::ofstream(file, std::ios::app) << "{\"step\": 2, \"rew"; }  // a kill mid-write
  CHECK(read_jsonl(file).size() == 2);
  {
    JsonlWriter w(file);
    w.write({{"step", 2}});
    w.flush();
  }
  const auto lines = read_jsonl(file);
  REQUIRE(lines.size() == 3);
  CHECK(lines[2].at("step").as_int64() == 2);
  CHECK(filter_jsonl(file, [](const boost::json::object& o) { return o.at("step").as_int64() < 1; }) == 2);
  CHECK(read_jsonl(file).size() == 1);
  CHECK(read_jsonl(dir / "missing.jsonl").empty());
}

TEST_CASE("filtering keeps the lines it keeps exactly as they were written") {
  const auto dir = scratch("jsonl_verbatim");
  const auto file = dir / "metrics.jsonl";
  // Read and written again, this number comes back one digit off (Boost.JSON's parser is not
  // exact to the last bit), and the spacing would change.
  const std::string kept = R"({"step": 0, "advantage/mean": -1.0408340855860843e-17, "x": 0.1})";
  { std::ofstream(file) << kept << "\n" << R"({"step": 1})" << "\n"; }
  CHECK(filter_jsonl(file, [](const boost::json::object& o) { return o.at("step").as_int64() < 1; }) == 1);
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == kept + "\n");
}

TEST_CASE("tensorboard reads our scalars and histograms") {
  const auto dir = scratch("tensorboard");
  {
    TensorBoardWriter tb(dir);
    for (int s = 1; s <= 3; ++s) tb.add_scalar("reward/mean", 0.25 * s, s, 1000.0 + s);
    tb.add_scalar("reward/mean", std::nan(""), 4);  // skipped
    tb.add_histogram("reward", {-1.0, 0.0, 0.5, 0.5, 2.0, 1e30}, 3);
    tb.flush();
  }
  const std::string script = dir.string() + "/read.py";
  {
    std::ofstream py(script);
    py << "import json, sys\n"
          "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
          "acc = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0, 'histograms': 0})\n"
          "acc.Reload()\n"
          "s = [[e.step, e.value, e.wall_time] for e in acc.Scalars('reward/mean')]\n"
          "h = acc.Histograms('reward')[0]\n"
          "v = h.histogram_value\n"
          "print(json.dumps({'scalars': s, 'step': h.step, 'min': v.min, 'max': v.max, 'num': v.num, 'sum': v.sum,\n"
          "  'sum_squares': v.sum_squares, 'limits': list(v.bucket_limit), 'counts': list(v.bucket)}))\n";
  }
  const auto out = boost::json::parse(run_capture(std::string(KBRL_PYTHON_EXE) + " " + script + " " + dir.string()));
  const auto& o = out.as_object();
  const auto& scalars = o.at("scalars").as_array();
  REQUIRE(scalars.size() == 3);
  for (int s = 0; s < 3; ++s) {
    CHECK(scalars[s].as_array()[0].as_int64() == s + 1);
    CHECK(scalars[s].as_array()[1].to_number<double>() == 0.25 * (s + 1));
    CHECK(scalars[s].as_array()[2].to_number<double>() == 1001.0 + s);
  }
  CHECK(o.at("step").as_int64() == 3);
  CHECK(o.at("min").to_number<double>() == -1.0);
  CHECK(o.at("max").to_number<double>() == 1e30);
  CHECK(o.at("num").to_number<double>() == 6);
  CHECK(o.at("sum").to_number<double>() == Catch::Approx(1e30));
  double total = 0;
  for (const auto& c : o.at("counts").as_array()) total += c.to_number<double>();
  CHECK(total == 6);
  // The two 0.5s share a bucket whose limit is the first default limit above 0.5.
  const auto& limits = o.at("limits").as_array();
  const auto& counts = o.at("counts").as_array();
  bool found = false;
  for (std::size_t i = 0; i < limits.size(); ++i)
    if (counts[i].to_number<double>() == 2) {
      found = true;
      CHECK(limits[i].to_number<double>() > 0.5);
      CHECK(limits[i].to_number<double>() < 0.5 * 1.1 + 1e-12);
    }
  CHECK(found);
}

TEST_CASE("a run lock reports the run state and refuses a second holder") {
  const auto root = scratch("runs");
  const auto a = root / "a", b = root / "b", c = root / "c";
  {
    RunLock lock(a);
    { JsonlWriter(a / "metrics.jsonl").write({{"step", 0}, {"reward/mean", 0.5}}); }
    CHECK(read_run_status(a).state == "running");
    try {
      RunLock second(a);
      FAIL("a second lock was granted");
    } catch (const kbrl::core::Error& e) {
      CHECK(std::string(e.what()).find(a.string()) != std::string::npos);
      CHECK(std::string(e.what()).find(std::to_string(::getpid())) != std::string::npos);
    }
    lock.mark_finished();
  }
  const auto sa = read_run_status(a);
  CHECK(sa.state == "finished");
  CHECK(sa.steps == 1);
  REQUIRE(sa.last_reward.has_value());
  CHECK(*sa.last_reward == 0.5);

  // A child takes the lock and is killed: nobody releases it but the kernel.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    { RunLock lock(b); (void)!::write(ready[1], "x", 1); ::pause(); }
    ::_exit(0);
  }
  char x = 0;
  REQUIRE(::read(ready[0], &x, 1) == 1);
  CHECK(read_run_status(b).state == "running");
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  CHECK(read_run_status(b).state == "crashed");
  {
    RunLock again(b);  // a crashed run can be taken over (resumed)
    CHECK(read_run_status(b).state == "running");
    again.mark_stopped();
  }
  fs::create_directories(c);
  const auto runs = list_runs(root);
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].state == "finished");
  CHECK(runs[1].state == "stopped");
  const auto table = format_run_table(runs);
  CHECK(table.find("finished") != std::string::npos);
  CHECK(table.find("0.5000") != std::string::npos);
  CHECK(format_run_status(runs[1]).find("stopped") != std::string::npos);
}
