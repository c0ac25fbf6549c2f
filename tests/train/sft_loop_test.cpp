// Supervised runs (train.mode=sft, run_sft_loop) of the demo policy on short chat examples, on the
// CPU: the run directory of an RL run with sft metrics, a held-out loss every eval_every steps and
// at the end, resume after an interruption (and after a kill between a step's metrics and its
// checkpoint line) ending with the uninterrupted run's losses and weights, a loss that falls, and
// a run that starts from another run's adapter. The demo model comes from the train:sft_demo_model
// fixture (scripts/make_demo_model.py).
#include "kbrl/train/torch/sft_loop.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/log/jsonl.hpp"
#include "kbrl/log/run_dir.hpp"
#include "kbrl/model/torch/torch_tensors.hpp"
#include "kbrl/train/run_log.hpp"
#include "test_files.hpp"

using namespace kbrl;
using namespace kbrl::train;
namespace fs = std::filesystem;

namespace {

// Short conversations: the answer is a function of the question a small model can pick up.
fs::path write_examples(const fs::path& dir, int n) {
  const char* words[] = {"relu", "gelu", "softmax", "matmul", "conv", "norm", "mean", "sum", "max", "scan", "sort", "topk"};
  std::string lines;
  for (int i = 0; i < n; ++i) {
    const std::string w = words[i % 12];
    lines += "{\"id\": \"ex" + std::to_string(i) + "\", \"messages\": [{\"role\": \"system\", \"content\": \"You write kernels.\"}, "
             "{\"role\": \"user\", \"content\": \"Name the kernel for " + w + " " + std::to_string(i) +
             ".\"}, {\"role\": \"assistant\", \"content\": \"<KERNEL>\\nclass ModelNew: " + w + "_kernel(" +
             std::to_string(i) + ")\\n</KERNEL>\"}]}\n";
  }
  const auto path = dir / "examples.jsonl";
  std::ofstream(path) << lines;
  return path;
}

RunConfig sft_config(const fs::path& run, const fs::path& data) {
  RunConfig c;
  c.log_path = run.string();
  c.seed = 3;
  c.model.path = KBRL_SFT_DEMO_MODEL;
  c.model.device = "cpu";
  c.model.dtype = "fp32";
  c.lora.rank = 4;
  c.lora.alpha = 8;
  c.train.mode = "sft";
  c.train.learning_rate = 1e-2;
  c.sft.format = "messages";
  c.sft.data = {data.string()};
  c.sft.heldout_fraction = 0.25;
  c.sft.batch_size = 3;
  c.eval_every = 2;
  return c;
}

RlLoopResult train_run(const RunConfig& c, std::int64_t max_steps_this_run = 0) {
  RlLoopOptions o;
  o.max_steps_this_run = max_steps_this_run;
  return run_sft_loop(c, o);
}

std::vector<boost::json::object> lines(const fs::path& p) { return log::read_jsonl(p); }

// Each step's metrics without the wall-clock ones.
std::vector<boost::json::object> metrics_without_time(const fs::path& run) {
  auto out = lines(run / "metrics.jsonl");
  for (auto& m : out)
    for (auto it = m.begin(); it != m.end();)
      if (it->key().starts_with("time/")) it = m.erase(it);
      else ++it;
  return out;
}

// A checkpoint's tensors: its adapter and state (parameters, AdamW moments and steps), without
// the random generators' states.
std::map<std::string, at::Tensor> checkpoint_tensors(const fs::path& run, std::int64_t step) {
  const auto c = checkpoint_paths(step);
  std::map<std::string, at::Tensor> out;
  for (const auto& [dir, file] : {std::pair{c.adapter, "adapter_model.safetensors"}, std::pair{c.state, "parameters.safetensors"},
                                  std::pair{c.state, "optimizer.safetensors"}})
    for (auto& [name, t] : model::load_tensors(run / dir / file))
      if (!name.starts_with("rng.")) out[std::string(file) + ":" + name] = t;
  return out;
}

void check_same_tensors(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  REQUIRE_FALSE(a.empty());
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(b.count(name) == 1);
    CHECK(at::equal(t, b.at(name)));
  }
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a supervised run writes an RL run's files with its losses") {
  const auto root = test::scratch("sft_run_files");
  const auto run = root / "run";
  const auto c = sft_config(run, write_examples(root, 12));  // 9 to train, 3 held out: 3 steps
  const auto r = train_run(c);
  CHECK(r.steps_done == 3);
  CHECK(r.total_steps == 3);
  CHECK_FALSE(r.stopped);
  for (const char* f : {"config.yaml", "metrics.jsonl", "traces.jsonl", "checkpoints.jsonl", "run.json", "logs.log", "sft_data.json"})
    CHECK(fs::is_regular_file(run / f));
  CHECK(has(core::read_file(run / "config.yaml"), "mode: \"sft\""));
  CHECK(log::read_run_status(run).state == "finished");

  const auto metrics = lines(run / "metrics.jsonl");
  REQUIRE(metrics.size() == 3);
  for (std::size_t s = 0; s < metrics.size(); ++s) {
    const auto& m = metrics[s];
    CHECK(m.at("step").as_int64() == static_cast<std::int64_t>(s));
    for (const char* k : {"sft/loss", "sft/grad_norm", "sft/lr", "sft/examples", "sft/epoch", "tokens/answer", "tokens/prompt",
                          "train/step", "time/train", "time/step"})
      CHECK(m.contains(k));
    CHECK(m.at("sft/lr").as_double() == 1e-2);
    CHECK(m.at("sft/examples").as_double() == 3);
    CHECK(m.at("sft/loss").as_double() > 0);
    CHECK(m.at("train/step").as_double() == static_cast<double>(s + 1));
  }
  // Held out: every eval_every (2) steps and at the end.
  CHECK_FALSE(metrics[0].contains("sft/heldout_loss"));
  CHECK(metrics[1].contains("sft/heldout_loss"));
  CHECK(metrics[2].contains("sft/heldout_loss"));

  const auto traces = lines(run / "traces.jsonl");
  std::size_t train_lines = 0, heldout_lines = 0;
  double heldout_sum = 0, heldout_tokens = 0;
  for (const auto& t : traces) {
    const bool held = t.at("split").as_string() == "heldout";
    (held ? heldout_lines : train_lines)++;
    CHECK(t.at("example").as_string().starts_with("ex"));
    CHECK(t.at("answer_tokens").as_int64() > 3);
    if (held && t.at("step").as_int64() == 2) {
      heldout_sum += t.at("loss").as_double() * static_cast<double>(t.at("answer_tokens").as_int64());
      heldout_tokens += static_cast<double>(t.at("answer_tokens").as_int64());
    }
  }
  CHECK(train_lines == 9);
  CHECK(heldout_lines == 6);
  // The held-out loss is the token mean of the held-out examples' losses.
  CHECK(metrics[2].at("sft/heldout_loss").as_double() == Catch::Approx(heldout_sum / heldout_tokens).epsilon(1e-5));

  const auto ckpts = lines(run / "checkpoints.jsonl");
  REQUIRE(ckpts.size() == 3);
  CHECK(ckpts[2].at("optimizer_steps").as_int64() == 3);
  CHECK(fs::is_regular_file(run / "checkpoints/step_000003/adapter/adapter_config.json"));
  CHECK(fs::is_regular_file(run / "checkpoints/step_000003/state/optimizer.safetensors"));
  CHECK(resolve_init_adapter(run) == run / "checkpoints/step_000003/adapter");
  bool events = false;
  for (const auto& e : fs::directory_iterator(run / "tb")) events = events || e.path().filename().string().starts_with("events.out.tfevents");
  CHECK(events);
  const auto data = core::parse_json(core::read_file(run / "sft_data.json")).as_object();
  CHECK(data.at("train_examples").as_int64() == 9);
  CHECK(data.at("heldout_examples").as_int64() == 3);
  CHECK(data.at("heldout_ids").as_array().size() == 3);
  const std::string log = core::read_file(run / "logs.log");
  CHECK(has(log, "sft data: 12 rows, 12 kept; 9 training and 3 held-out examples"));
  CHECK(has(log, "step 3/3 done in"));
  CHECK(has(log, "held-out loss"));
}

TEST_CASE("an interrupted supervised run resumes to the uninterrupted run's losses and weights") {
  const auto root = test::scratch("sft_resume");
  const auto data = write_examples(root, 12);
  auto config = [&](const std::string& name) {
    auto c = sft_config(root / name, data);
    c.sft.num_epochs = 2;  // 6 steps, a new order in the second epoch
    c.eval_every = 1;
    return c;
  };
  REQUIRE(train_run(config("straight")).steps_done == 6);
  // Stopped after 2 steps, then after 2 more, then to the end: each invocation a new process's worth.
  const auto first = train_run(config("resumed"), 2);
  CHECK(first.steps_done == 2);
  CHECK(log::read_run_status(root / "resumed").state == "stopped");
  const auto second = train_run(config("resumed"), 2);
  CHECK(second.first_step == 2);
  CHECK(train_run(config("resumed")).steps_done == 6);
  CHECK(metrics_without_time(root / "resumed") == metrics_without_time(root / "straight"));
  CHECK(lines(root / "resumed" / "traces.jsonl") == lines(root / "straight" / "traces.jsonl"));
  CHECK(lines(root / "resumed" / "checkpoints.jsonl") == lines(root / "straight" / "checkpoints.jsonl"));
  check_same_tensors(checkpoint_tensors(root / "resumed", 5), checkpoint_tensors(root / "straight", 5));
  CHECK(has(core::read_file(root / "resumed" / "logs.log"), "resuming"));

  // A kill between step 3's metrics line and its checkpoint line: its checkpoint folder and lines
  // are there, the checkpoint line is not. The resume redoes step 3 and writes it once.
  const auto redo = root / "redo";
  fs::copy(root / "straight", redo, fs::copy_options::recursive);
  const auto keep = [&](const char* file, std::int64_t last) {
    log::filter_jsonl(redo / file, [last](const boost::json::object& o) { return o.at("step").as_int64() <= last; });
  };
  keep("checkpoints.jsonl", 2);
  keep("metrics.jsonl", 3);
  keep("traces.jsonl", 3);
  for (const char* later : {"step_000005", "step_000006"}) fs::remove_all(redo / "checkpoints" / later);
  auto c = config("redo");
  const auto r = train_run(c);
  CHECK(r.first_step == 3);
  CHECK(metrics_without_time(redo) == metrics_without_time(root / "straight"));
  CHECK(lines(redo / "traces.jsonl") == lines(root / "straight" / "traces.jsonl"));
  check_same_tensors(checkpoint_tensors(redo, 5), checkpoint_tensors(root / "straight", 5));
}

TEST_CASE("the supervised loss falls over epochs on a tiny set") {
  const auto root = test::scratch("sft_learns");
  auto c = sft_config(root / "run", write_examples(root, 4));
  c.sft.heldout_fraction = 0;
  c.sft.batch_size = 4;
  c.sft.num_epochs = 24;
  c.train.learning_rate = 3e-2;
  c.train.activation_checkpointing = false;
  REQUIRE(train_run(c).steps_done == 24);
  const auto m = lines(root / "run" / "metrics.jsonl");
  const double first = m.front().at("sft/loss").as_double(), last = m.back().at("sft/loss").as_double();
  INFO("first " << first << ", last " << last);
  CHECK(last < 0.4 * first);
  CHECK(has(core::read_file(root / "run" / "logs.log"), "no held-out examples"));
}

TEST_CASE("a run starts from another run's adapter, named by its run directory") {
  const auto root = test::scratch("sft_init_adapter");
  const auto data = write_examples(root, 12);
  const auto first = sft_config(root / "first", data);
  REQUIRE(train_run(first).steps_done == 3);
  auto c = sft_config(root / "second", data);
  c.lora.init_adapter = (root / "first").string();
  c.lora.rank = 16;  // the adapter's own configuration wins
  c.train.learning_rate = 0;
  c.sft.max_steps = 1;
  REQUIRE(train_run(c).steps_done == 1);
  const auto a = model::load_tensors(root / "first" / "checkpoints/step_000003/adapter/adapter_model.safetensors");
  const auto b = model::load_tensors(root / "second" / "checkpoints/step_000001/adapter/adapter_model.safetensors");
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    CHECK(at::equal(t, b.at(name)));
  }
  // Its first loss is the loss of the first run's weights on that batch: not a fresh adapter's.
  c.lora.init_adapter.clear();
  c.log_path = (root / "fresh").string();
  REQUIRE(train_run(c).steps_done == 1);
  CHECK(lines(root / "second" / "metrics.jsonl")[0].at("sft/loss").as_double() !=
        lines(root / "fresh" / "metrics.jsonl")[0].at("sft/loss").as_double());
  CHECK_THROWS_AS(resolve_init_adapter(root), core::ConfigError);
}
