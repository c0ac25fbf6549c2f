// The run log on real files: what a step writes, the lock, and the resume rules (the last
// checkpoint line is the last complete step; a step whose metrics were written but whose
// checkpoint line was not loses its lines before it is redone).
#include "kbrl/train/run_log.hpp"

#include <cstdio>
#include <filesystem>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/log/jsonl.hpp"
#include "kbrl/log/run_dir.hpp"

using namespace kbrl;
namespace fs = std::filesystem;

namespace {

train::RunConfig config(const fs::path& dir) {
  return train::load_run_config(std::nullopt, {"log_path=" + dir.string(), "seed=3"});
}

std::vector<core::TrajectoryGroup> groups(double reward) {
  core::Transition t;
  t.prompt_text = "<|im_start|>user";
  t.completion.text = "answer";
  t.completion.tokens = {4, 5, 6};
  t.reward = reward;
  t.breakdown.total = reward;
  t.breakdown.terms["format"] = reward;
  t.done = true;
  core::EvalResult e;
  e.problem_id = "p";
  t.eval = e;
  core::TrajectoryGroup g;
  g.problem_id = "p";
  g.trajectories = {{"p", {t}}, {"p", {t}}};
  return {g};
}

// Writes step `step` as the loop does; `complete`: with its checkpoint line.
void write_step(train::RunLog& log, std::int64_t step, bool complete) {
  boost::json::object m;
  m["step"] = step;
  m["reward/mean"] = 0.5;
  m["time/step"] = 1.0;
  log.write_traces(step, groups(0.5), {{{0.25}, {-0.25}}});
  log.write_metrics(m, {0.5, 0.5}, {0.25, -0.25}, {});
  log.write_progress_line(m);
  if (complete) {
    auto c = train::checkpoint_paths(step);
    c.optimizer_steps = step + 1;
    log.write_checkpoint(c);
  }
}

std::vector<std::int64_t> steps_in(const fs::path& file) {
  std::vector<std::int64_t> out;
  for (const auto& o : log::read_jsonl(file)) out.push_back(o.at("step").as_int64());
  return out;
}

}  // namespace

TEST_CASE("checkpoint folders are named by the step they complete, 1-based") {
  const auto c = train::checkpoint_paths(0);
  CHECK(c.step == 0);
  CHECK(c.state == "checkpoints/step_000001/state");
  CHECK(c.adapter == "checkpoints/step_000001/adapter");
  CHECK(train::checkpoint_paths(41).state == "checkpoints/step_000042/state");
}

TEST_CASE("a step's lines, and a resume that drops what the last checkpoint does not cover") {
  const fs::path dir = fs::path(KBRL_TEST_TMP) / "run_log" / "resume";
  fs::remove_all(dir);
  std::FILE* quiet = std::tmpfile();
  {
    train::RunLog log(config(dir), quiet);
    CHECK(fs::exists(dir / "config.yaml"));
    CHECK(log::read_run_status(dir).state == "running");
    CHECK_THROWS_AS(train::RunLog(config(dir), quiet), core::Error);  // the lock is held
    CHECK_FALSE(log.last_checkpoint().has_value());
    log.start(0, 4);
    write_step(log, 0, true);
    write_step(log, 1, false);  // killed between the metrics line and the checkpoint line
  }
  const auto traces = log::read_jsonl(dir / "traces.jsonl");
  REQUIRE(traces.size() == 4);
  CHECK(traces[1].at("sample").to_number<int>() == 1);
  CHECK(traces[1].at("advantage").as_double() == -0.25);
  CHECK(traces[0].at("prompt").as_string() == "<|im_start|>user");
  CHECK(traces[0].at("num_tokens").to_number<int>() == 3);
  CHECK(traces[0].at("reward_terms").at("terms").at("format").as_double() == 0.5);
  CHECK(traces[0].at("problem_id").as_string() == "p");
  CHECK(fs::exists(dir / "tb"));
  CHECK(log::read_run_status(dir).state == "crashed");  // nobody holds the lock, nothing was marked

  train::RunLog log(config(dir), quiet);
  const auto last = log.last_checkpoint();
  REQUIRE(last.has_value());
  CHECK(last->step == 0);
  CHECK(last->state == "checkpoints/step_000001/state");
  CHECK(last->optimizer_steps == 1);
  CHECK(steps_in(dir / "metrics.jsonl") == std::vector<std::int64_t>{0, 1});
  log.start(last->step + 1, 4);
  CHECK(steps_in(dir / "metrics.jsonl") == std::vector<std::int64_t>{0});
  CHECK(steps_in(dir / "traces.jsonl") == std::vector<std::int64_t>{0, 0});
  write_step(log, 1, true);
  CHECK(steps_in(dir / "metrics.jsonl") == std::vector<std::int64_t>{0, 1});
  CHECK(steps_in(dir / "checkpoints.jsonl") == std::vector<std::int64_t>{0, 1});
  log.mark_stopped();
  CHECK(log::read_run_status(dir).state == "stopped");
  std::fclose(quiet);
}
