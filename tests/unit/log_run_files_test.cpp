// The run directory's files: JSON Lines across torn writes, TensorBoard event files compared byte
// for byte with TensorFlow's and TensorBoard's writers and read back by TensorBoard's own reader,
// and the run lock's states with real processes (one SIGKILLed).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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
  const int status = ::pclose(p);
  INFO(out);
  REQUIRE(status == 0);
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double number(const boost::json::value& v) { return std::strtod(std::string(v.as_string()).c_str(), nullptr); }

// The one event file a writer left in `dir`.
fs::path only_event_file(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  return files[0];
}

const std::string kPython = KBRL_PYTHON_EXE;
const fs::path kTbData = fs::path(KBRL_SOURCE_DIR) / "tests/data/tensorboard";
const std::string kTbCheck = std::string(KBRL_SOURCE_DIR) + "/tests/unit/tensorboard_check.py";

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

// Bytes this process has read through read(2) and pread(2) so far (Linux's /proc/self/io rchar):
// shows how much of a file a reader touched, without timing anything.
std::uint64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  FAIL("no rchar in /proc/self/io");
  return 0;
}

TEST_CASE("read_last_jsonl reads the last lines from the end of a large file") {
  const auto dir = scratch("jsonl_tail");
  const auto file = dir / "metrics.jsonl";
  constexpr int kLines = 200000;  // about 18 MB
  {
    JsonlWriter w(file);
    for (int i = 0; i < kLines; ++i) w.write({{"step", i}, {"reward/mean", 0.5}, {"pad", std::string(60, 'x')}});
    w.flush();
  }
  REQUIRE(fs::file_size(file) > 15'000'000);
  const auto before = bytes_read_so_far();
  const auto last = read_last_jsonl(file, 3);
  const auto read = bytes_read_so_far() - before;
  REQUIRE(last.size() == 3);
  CHECK(last[0].at("step").as_int64() == kLines - 3);
  CHECK(last[2].at("step").as_int64() == kLines - 1);
  INFO("bytes read: " << read);
  CHECK(read < 1'000'000);  // the tail, not the 18 MB

  // A kill mid-write leaves a torn line, here cut just before its newline so that it even parses:
  // it is not a line yet.
  { std::ofstream(file, std::ios::app) << "{\"step\": " << kLines << ", \"reward/mean\": 0.5}"; }
  const auto after_kill = read_last_jsonl(file, 2);
  REQUIRE(after_kill.size() == 2);
  CHECK(after_kill[1].at("step").as_int64() == kLines - 1);
  // The same lines as reading the whole file.
  const auto all = read_jsonl(file);
  REQUIRE(all.size() == static_cast<std::size_t>(kLines));
  CHECK(read_last_jsonl(file, 1).back() == all.back());
}

TEST_CASE("read_last_jsonl across block boundaries, long lines and bad lines") {
  const auto dir = scratch("jsonl_tail_edges");
  const auto file = dir / "m.jsonl";
  CHECK(read_last_jsonl(dir / "missing.jsonl", 5).empty());
  { std::ofstream(file, std::ios::trunc); }
  CHECK(read_last_jsonl(file, 5).empty());
  { std::ofstream(file, std::ios::trunc) << "{\"a\": 1}"; }  // one torn line only
  CHECK(read_last_jsonl(file, 5).empty());
  // Lines longer than the first blocks read (64 KiB, then 128 KiB), an unparsable line, a
  // non-object, a blank line and a torn end: the same objects as read_jsonl, the last n of them.
  {
    std::ofstream out(file, std::ios::trunc);
    out << "{\"i\": 0}\n";
    out << "{\"i\": 1, \"big\": \"" << std::string(300000, 'y') << "\"}\n";
    out << "not json\n";
    out << "[1, 2]\n";
    out << "\n";
    out << "{\"i\": 2}\n";
    out << "{\"i\": 3, \"big\": \"" << std::string(70000, 'z') << "\"}\n";
    out << "{\"i\": 4}";  // torn: no newline
  }
  const auto all = read_jsonl(file);
  REQUIRE(all.size() == 4);
  for (std::size_t n = 0; n <= 6; ++n) {
    INFO("n = " << n);
    const auto tail = read_last_jsonl(file, n);
    REQUIRE(tail.size() == std::min<std::size_t>(n, 4));
    for (std::size_t k = 0; k < tail.size(); ++k) CHECK(tail[k] == all[all.size() - tail.size() + k]);
  }
}

TEST_CASE("tensorboard reads our scalars and histograms") {
  const auto dir = scratch("tensorboard");
  {
    TensorBoardWriter tb(dir);
    for (int s = 1; s <= 3; ++s) tb.add_scalar("reward/mean", 0.25 * s, s, 1000.0 + s);
    tb.add_scalar("reward/mean", std::nan(""), 4);  // skipped
    tb.add_histogram("reward", {-1.0, 0.0, 0.5, 0.5, 2.0, 1e30, std::nan(""), INFINITY}, 3);  // non-finite left out
    tb.add_histogram("empty", {std::nan("")}, 3);  // nothing left: nothing written
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

// tests/data/tensorboard/reference.tfevents is what TensorFlow's C++ summary writer writes for
// events.json (make_reference.py made it; its --check test redoes that where TensorFlow is
// installed). The same events from kbrl's writer must be the same bytes: framing, CRCs, every
// field's encoding, the histogram buckets. Then TensorBoard's own Python writer, which needs no
// TensorFlow, must write them too, and the file name must be the one it gives.
TEST_CASE("tensorboard event files are byte for byte what TensorFlow and TensorBoard write") {
  const auto dir = scratch("tensorboard_reference");
  const auto script = boost::json::parse(slurp(kTbData / "events.json")).as_object();
  {
    TensorBoardWriter tb(dir, number(script.at("start_time")));
    for (const auto& item : script.at("events").as_array()) {
      const auto& ev = item.as_object();
      const std::string kind(ev.at("kind").as_string());
      const std::int64_t step = ev.at("step").as_int64();
      const double wall = number(ev.at("wall_time"));
      if (kind == "scalar") {
        tb.add_scalar(std::string(ev.at("tag").as_string()), number(ev.at("value")), step, wall);
      } else if (kind == "histogram") {
        std::vector<double> values;
        for (const auto& v : ev.at("values").as_array()) values.push_back(number(v));
        tb.add_histogram(std::string(ev.at("tag").as_string()), values, step, wall);
      } else {
        REQUIRE(kind == "session_start");
        tb.add_session_start(step, wall);
      }
    }
    tb.flush();
  }
  const fs::path file = only_event_file(dir);
  const std::string ours = slurp(file), reference = slurp(kTbData / "reference.tfevents");
  CHECK(ours.size() == reference.size());
  std::size_t first_difference = 0;
  while (first_difference < std::min(ours.size(), reference.size()) && ours[first_difference] == reference[first_difference])
    ++first_difference;
  INFO("first differing byte at offset " << first_difference);
  CHECK(ours == reference);

  const std::string out = run_capture(kPython + " " + kTbCheck + " compare " + file.string() + " " +
                                      (kTbData / "events.json").string() + " " + (kTbData / "reference.tfevents").string());
  CHECK(out.find("the same bytes as TensorBoard's EventFileWriter") != std::string::npos);
}

// A run killed after writing steps 1-5 and resumed from its checkpoint at step 3 writes steps 3-6
// again, into a new file. With the session-start event TensorBoard's reader drops the first
// run's steps 3-5 and shows each step once; without it (the control) step 3 shows twice.
TEST_CASE("a session start makes TensorBoard drop a resumed run's redone steps") {
  auto write_runs = [](const fs::path& dir, bool session_start) {
    {
      TensorBoardWriter first(dir, 1700000000.0);
      for (int s = 1; s <= 5; ++s) first.add_scalar("reward/mean", s, s, 1700000000.0 + s);
    }
    TensorBoardWriter resumed(dir, 1700000100.0);  // a later start: its file sorts after the first
    if (session_start) resumed.add_session_start(3, 1700000100.0);
    for (int s = 3; s <= 6; ++s) resumed.add_scalar("reward/mean", 10 * s, s, 1700000100.0 + s);
  };
  auto read_steps = [](const fs::path& dir) {
    return boost::json::parse(run_capture(kPython + " " + kTbCheck + " purge " + dir.string() + " reward/mean")).as_object();
  };
  const auto with = scratch("tensorboard_resume");
  write_runs(with, true);
  const auto steps = read_steps(with);
  REQUIRE(steps.size() == 6);
  for (int s = 1; s <= 6; ++s) {
    INFO("step " << s);
    const auto& values = steps.at(std::to_string(s)).as_array();
    REQUIRE(values.size() == 1);
    CHECK(values[0].to_number<double>() == (s < 3 ? s : 10 * s));
  }
  const auto without = scratch("tensorboard_resume_control");
  write_runs(without, false);
  CHECK(read_steps(without).at("3").as_array().size() == 2);
}

TEST_CASE("a run lock reports the run state and refuses a second holder") {
  const auto root = scratch("runs");
  const auto a = root / "a", b = root / "b", c = root / "c";
  {
    RunLock lock(a);
    { JsonlWriter(a / "metrics.jsonl").write({{"step", 0}, {"reward/mean", 0.5}}); }
    {
      JsonlWriter checkpoints(c / "checkpoints.jsonl");
      checkpoints.write({{"step", 0}, {"state", "checkpoints/step_000000/state"}});
      checkpoints.write({{"step", 4}, {"state", "checkpoints/step_000004/state"}});
    }
    {
      JsonlWriter metrics(c / "metrics.jsonl");
      for (int s = 0; s < 6; ++s) metrics.write({{"step", s}, {"reward/mean", 0.125 * s}});
    }
    { std::ofstream(c / "metrics.jsonl", std::ios::app) << "{\"step\": 6, \"rew"; }  // killed mid-line
    const auto sc = read_run_status(c);
    CHECK(sc.state == "new");
    CHECK(sc.steps == 6);
    REQUIRE(sc.last_reward.has_value());
    CHECK(*sc.last_reward == 0.625);
    REQUIRE(sc.checkpoint_step.has_value());
    CHECK(*sc.checkpoint_step == 4);
    CHECK(format_run_status(sc).find("checkpoint:  step 4") != std::string::npos);
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
  CHECK_FALSE(sa.checkpoint_step.has_value());
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
