// kbrl-train's configuration: YAML then overrides, every kind of error with the place and key,
// the resolved file reading back equal, the example configs, and docs/configs.md in step with the
// schema.
#include "kbrl/train/run_config.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/types.hpp"
#include "kbrl/dataset/filter.hpp"
#include "kbrl/rag/corpus_index.hpp"
#include "kbrl/rag/dense_index.hpp"
#include "kbrl/rag/hashing_embedder.hpp"

using namespace kbrl;
using train::load_run_config;
namespace fs = std::filesystem;

namespace {

fs::path write_yaml(const std::string& name, const std::string& text) {
  const auto dir = fs::path(KBRL_TEST_TMP) / "run_config";
  fs::create_directories(dir);
  const auto p = dir / name;
  std::ofstream(p) << text;
  return p;
}

std::string error_of(const std::optional<fs::path>& yaml, const std::vector<std::string>& overrides) {
  try {
    load_run_config(yaml, overrides);
  } catch (const core::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("defaults and overrides with dotted keys") {
  const auto c = load_run_config(std::nullopt, {"log_path=runs/x", "dataset.batch_size=8", "lora.target_modules=[q_proj, v_proj]",
                                                "dataset.levels=[1,2]", "reward.preset=kbrl_stage2", "reward.weights.speed=0.5",
                                                "train.learning_rate=3e-5", "env.multi_turn=true"});
  CHECK(c.log_path == "runs/x");
  CHECK(c.dataset.batch_size == 8);
  CHECK(c.dataset.group_size == 4);
  CHECK(c.lora.target_modules == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK(c.dataset.levels == std::vector<int>{1, 2});
  CHECK(c.reward.name == "kbrl_stage2");
  CHECK(c.reward.weight("speed") == 0.5);
  CHECK(c.reward.weight("correctness") == 0.7);
  CHECK(c.train.learning_rate == 3e-5);
  CHECK(c.env.multi_turn);
}

TEST_CASE("overrides win over the file and a preset name can be edited field by field") {
  const auto yaml = write_yaml("base.yaml", "log_path: runs/a\ndataset:\n  batch_size: 2\n  group_size: 8\nreward: kbrl_stage1\n");
  const auto c = load_run_config(yaml, {"dataset.batch_size=6", "reward.weights.length=0.25",
                                        "reward.length.target_tokens=10", "reward.length.limit_tokens=20"});
  CHECK(c.dataset.batch_size == 6);
  CHECK(c.dataset.group_size == 8);
  CHECK(c.reward.name == "kbrl_stage1");
  CHECK(c.reward.weight("length") == 0.25);
  CHECK(c.reward.weight("format") == 0.4);
}

TEST_CASE("errors name the place and the key") {
  const auto yaml = write_yaml("bad.yaml", "log_path: runs/a\ndataset:\n  batch_sise: 2\n");
  const auto unknown = error_of(yaml, {});
  CHECK(has(unknown, "bad.yaml:3"));
  CHECK(has(unknown, "batch_sise"));
  CHECK(has(unknown, "did you mean 'dataset.batch_size'"));
  const auto type = error_of(std::nullopt, {"log_path=x", "dataset.batch_size=four"});
  CHECK(has(type, "override 'dataset.batch_size=four'"));
  CHECK(has(type, "expected an integer"));
  CHECK(has(error_of(std::nullopt, {"log_path=x", "dataset.group_size=1"}), "GRPO"));
  const auto loss = error_of(std::nullopt, {"log_path=x", "train.loss=reinforce"});
  CHECK(has(loss, "importance_sampling"));
  CHECK(has(loss, "cispo"));
  CHECK(has(error_of(std::nullopt, {"log_path=x", "dataset.eval_fraction=1.5"}), "outside [0, 1)"));
  CHECK(has(error_of(std::nullopt, {"dataset.batch_size"}), "expected key=value"));
  CHECK(has(error_of(std::nullopt, {}), "log_path"));
  CHECK(has(error_of(std::nullopt, {"log_path=x", "dataset=3"}), "is a section"));
  CHECK(has(error_of(std::nullopt, {"log_path=x", "reward.weights.spede=1"}), "spede"));
  CHECK(has(error_of(std::nullopt, {"log_path=x", "prompt.language=cuda"}), "evaluator.device=cuda"));
  const auto syntax = write_yaml("syntax.yaml", "log_path: runs/a\ndataset: [1, 2\n");
  CHECK(has(error_of(syntax, {}), "syntax.yaml:"));
  CHECK(has(error_of(fs::path("/nonexistent/config.yaml"), {}), "no such file"));
}

TEST_CASE("the multi-turn discount has one owner: reward.multi_turn") {
  const auto c = load_run_config(std::nullopt, {"log_path=x", "env.multi_turn=true", "reward.multi_turn.gamma=0.9",
                                                "reward.multi_turn.form=max"});
  // An edit of the default reward (kernel_rl's default), not a reward of its own.
  CHECK(c.reward.name == "default");
  CHECK(c.reward.weights == reward::RewardConfig::preset("default").weights);
  CHECK(c.reward.multi_turn.gamma == 0.9);
  CHECK(c.reward.multi_turn.form == reward::ReturnForm::max);
  CHECK(load_run_config(std::nullopt, {"log_path=x"}).reward.multi_turn.gamma == 0.4);
  // The key it replaced says where the setting went, from an override and from a file.
  const auto async = error_of(std::nullopt, {"log_path=x", "train.async=false"});
  CHECK(has(async, "field 'train.async': was replaced by train.max_steps_off_policy"));
  CHECK(load_run_config(std::nullopt, {"log_path=x"}).train.max_steps_off_policy == 0);  // synchronous
  CHECK(has(error_of(std::nullopt, {"log_path=x", "train.max_steps_off_policy=-1"}), "train.max_steps_off_policy"));
  const auto removed = error_of(std::nullopt, {"log_path=x", "env.gamma=0.5"});
  CHECK(has(removed, "field 'env.gamma': was removed"));
  CHECK(has(removed, "reward.multi_turn.gamma"));
  const auto yaml = write_yaml("old_gamma.yaml", "log_path: runs/a\nenv:\n  multi_turn: true\n  gamma: 0.4\n");
  const auto from_file = error_of(yaml, {});
  CHECK(has(from_file, "old_gamma.yaml:4"));
  CHECK(has(from_file, "reward.multi_turn.gamma"));
  CHECK(has(train::config_reference_markdown(), "| `reward.multi_turn.gamma` | `0.4` |"));
  // kernel_rl's episode shaping: read in multi-turn runs, refused where nothing would read it.
  const auto shaped = load_run_config(std::nullopt, {"log_path=x", "env.multi_turn=true", "reward.multi_turn.success_bonus=0.5",
                                                     "reward.multi_turn.failure_penalty=-0.1",
                                                     "reward.multi_turn.normalize_returns=true"});
  CHECK(shaped.reward.multi_turn.success_bonus == 0.5);
  CHECK(shaped.reward.multi_turn.failure_penalty == -0.1);
  CHECK(shaped.reward.multi_turn.normalize_returns);
  CHECK(has(error_of(std::nullopt, {"log_path=x", "reward.multi_turn.success_bonus=0.5"}), "env.multi_turn=true"));
  CHECK(has(error_of(std::nullopt, {"log_path=x", "env.multi_turn=true", "reward.multi_turn.success_bonus=-1"}),
            "multi_turn.success_bonus"));
}

TEST_CASE("a run started before asynchronous steps resumes synchronous") {
  // What an older kbrl saved in a run's config.yaml: async off, and a bound that meant nothing.
  const auto old = write_yaml("older_run.yaml", "log_path: runs/a\ntrain:\n  async: false\n  max_steps_off_policy: 1\n");
  CHECK(load_run_config(old, {}).train.max_steps_off_policy == 0);
  // ...and an override of the new key still applies on top of it.
  CHECK(load_run_config(old, {"train.max_steps_off_policy=2"}).train.max_steps_off_policy == 2);
  // async: true was never accepted, so it is the retired key's error.
  const auto on = write_yaml("older_async.yaml", "log_path: runs/a\ntrain:\n  async: true\n");
  CHECK(has(error_of(on, {}), "was replaced by train.max_steps_off_policy"));
}

TEST_CASE("the resolved config reads back equal") {
  const auto c = load_run_config(std::nullopt, {"log_path=runs/r", "seed=42", "lora.rank=16", "lora.alpha=8.5",
                                                "dataset.include=[level1/1*, \"*relu*\"]", "dataset.exclude=level1/19_*",
                                                "sampling.temperature=0.7",
                                                "reward=kevin", "prompt.hardware=H100 \"SXM\""});
  const auto path = fs::path(KBRL_TEST_TMP) / "run_config" / "resolved.yaml";
  fs::create_directories(path.parent_path());
  train::write_resolved(c, path);
  const auto back = load_run_config(path, {});
  CHECK(train::to_yaml(back) == train::to_yaml(c));
  CHECK(back.seed == 42);
  CHECK(back.lora.alpha == 8.5);
  CHECK(back.prompt.hardware == "H100 \"SXM\"");
  CHECK(back.reward == c.reward);
  CHECK(back.sampling.temperature == 0.7);
  CHECK(back.dataset.include == std::vector<std::string>{"level1/1*", "*relu*"});
  CHECK(back.dataset.exclude == std::vector<std::string>{"level1/19_*"});
}

TEST_CASE("dataset include and exclude globs select the problems") {
  const auto yaml = write_yaml("globs.yaml",
                               "log_path: runs/g\n"
                               "dataset:\n"
                               "  levels: [1, 2]\n"
                               "  include: [\"*relu*\", \"level1/2*\"]\n"
                               "  exclude:\n"
                               "    - \"*gelu*\"\n");
  const auto c = load_run_config(yaml, {});
  CHECK(c.dataset.include == std::vector<std::string>{"*relu*", "level1/2*"});
  CHECK(c.dataset.exclude == std::vector<std::string>{"*gelu*"});
  const auto f = train::problem_filter(c.dataset);
  CHECK(f.levels == std::vector<int>{1, 2});
  CHECK(f.include == c.dataset.include);
  CHECK(f.exclude == c.dataset.exclude);
  // One string on the command line is a list of one; an override replaces the file's list.
  const auto o = load_run_config(yaml, {"dataset.include=level2/*", "dataset.exclude=[]"});
  CHECK(o.dataset.include == std::vector<std::string>{"level2/*"});
  CHECK(o.dataset.exclude.empty());
  // A leading '*' would be a YAML alias: on the command line it is the glob.
  CHECK(load_run_config(yaml, {"dataset.exclude=*gelu*"}).dataset.exclude == std::vector<std::string>{"*gelu*"});
  // Applied to the bundled problems through dataset::filter_problems.
  std::vector<core::Problem> problems(3);
  problems[0].id = "level1/19_ReLU", problems[0].name = "ReLU", problems[0].level = 1;
  problems[1].id = "level1/26_GELU_", problems[1].name = "GELU_", problems[1].level = 1;
  problems[2].id = "level2/1_Conv2D_ReLU_GELU", problems[2].name = "Conv2D_ReLU_GELU", problems[2].level = 2;
  const auto kept = dataset::filter_problems(problems, f);
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].id == "level1/19_ReLU");

  const auto bad = write_yaml("bad_glob.yaml", "log_path: runs/g\ndataset:\n  exclude: [\"level[12/*\"]\n");
  const auto bad_glob = error_of(bad, {});
  CHECK(has(bad_glob, "bad_glob.yaml:3"));
  CHECK(has(bad_glob, "dataset.exclude"));
  CHECK(has(bad_glob, "never closed"));
  CHECK(has(error_of(std::nullopt, {"log_path=x", "dataset.include={a: 1}"}), "expected a list of strings"));
}

TEST_CASE("the retired dataset.name_pattern says what replaced it") {
  const auto yaml = write_yaml("old.yaml", "log_path: runs/o\ndataset:\n  batch_size: 2\n  name_pattern: \"level1/*\"\n");
  const auto from_file = error_of(yaml, {});
  CHECK(has(from_file, "old.yaml:4"));
  CHECK(has(from_file, "dataset.name_pattern"));
  CHECK(has(from_file, "replaced by dataset.include"));
  CHECK(has(error_of(std::nullopt, {"log_path=x", "dataset.name_pattern=*relu*"}), "replaced by dataset.include"));
}

TEST_CASE("a key written twice in the file is an error naming both lines") {
  const auto top = write_yaml("dup_top.yaml", "log_path: runs/a\nseed: 1\ndataset:\n  batch_size: 2\nseed: 2\n");
  const auto top_error = error_of(top, {});
  CHECK(has(top_error, "dup_top.yaml:5"));
  CHECK(has(top_error, "field 'seed'"));
  CHECK(has(top_error, "already set at line 2"));
  // Two sections of the same name: their keys would merge silently otherwise.
  const auto section = write_yaml("dup_section.yaml", "log_path: runs/a\ndataset:\n  batch_size: 2\nlora:\n  rank: 8\ndataset:\n  group_size: 4\n");
  CHECK(has(error_of(section, {}), "dup_section.yaml:6"));
  const auto nested = write_yaml("dup_nested.yaml", "log_path: runs/a\ndataset:\n  batch_size: 2\n  levels: [1]\n  batch_size: 8\n");
  const auto nested_error = error_of(nested, {});
  CHECK(has(nested_error, "dup_nested.yaml:5"));
  CHECK(has(nested_error, "dataset.batch_size"));
  CHECK(has(nested_error, "already set at line 3"));
  // Deeper, inside the reward object, and with the key quoted the second time.
  const auto reward = write_yaml("dup_reward.yaml",
                                 "log_path: runs/a\nreward:\n  preset: kbrl_stage2\n  weights:\n    speed: 0.5\n    \"speed\": 0.7\n");
  const auto reward_error = error_of(reward, {});
  CHECK(has(reward_error, "dup_reward.yaml:6"));
  CHECK(has(reward_error, "reward.weights.speed"));
  // The same key in two different mappings is no duplicate; an override may repeat a key.
  const auto fine = write_yaml("no_dup.yaml", "log_path: runs/a\nlora:\n  rank: 8\nsampling:\n  top_k: 8\n");
  CHECK(load_run_config(fine, {"seed=1", "seed=2"}).seed == 2);
}

TEST_CASE("a key that is a mapping or a list (or empty) is an error naming its place") {
  // YAML's complex keys ("? "): found by fuzzing, they escaped as yaml-cpp's conversion error.
  const auto top = write_yaml("key_list.yaml", "log_path: runs/a\n? [seed, 2]\n: 1\n");
  const auto top_error = error_of(top, {});
  CHECK(has(top_error, "key_list.yaml:2"));
  CHECK(has(top_error, "a key must be a name, not a mapping or a list"));
  const auto nested = write_yaml("key_map.yaml", "log_path: runs/a\ndataset:\n  batch_size: 2\n  ? {group_size: 4}\n  : 1\n");
  const auto nested_error = error_of(nested, {});
  CHECK(has(nested_error, "key_map.yaml:4"));
  CHECK(has(nested_error, "field 'dataset'"));
  const auto reward = write_yaml("key_reward.yaml", "log_path: runs/a\nreward:\n  preset: kbrl_stage2\n  weights:\n    ? [speed]\n    : 0.5\n");
  const auto reward_error = error_of(reward, {});
  CHECK(has(reward_error, "reward.weights: a key must be a name"));
  CHECK(has(error_of(write_yaml("key_empty.yaml", "log_path: runs/a\n: 1\n"), {}), "a key is empty"));
}

TEST_CASE("the example configs are valid") {
  const fs::path dir = fs::path(KBRL_SOURCE_DIR) / "examples/configs";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    INFO(e.path().string());
    CHECK_NOTHROW(load_run_config(e.path(), {}));
    ++n;
  }
  CHECK(n >= 3);
  const auto demo = load_run_config(dir / "cpu_demo.yaml", {});
  CHECK(demo.evaluator.local.platform == core::DevicePlatform::cpu);
  CHECK(load_run_config(dir / "multi_turn.yaml", {}).env.multi_turn);
}

TEST_CASE("docs/configs.md lists every key with its default") {
  const std::string docs = read(fs::path(KBRL_SOURCE_DIR) / "docs/configs.md");
  const std::string table = train::config_reference_markdown();
  INFO("regenerate the table with: kbrl-train keys");
  CHECK(has(docs, table));
}

TEST_CASE("prompt.retrieval: nested or dotted, checked, and written back") {
  const auto dir = fs::path(KBRL_TEST_TMP) / "run_config";
  fs::create_directories(dir);
  const auto index = dir / "examples.kbrlidx";
  std::ofstream(index) << "an index file need only exist for the config; the loader reads it\n";
  // Off by default: no index, the defaults of rag::RetrievalPromptConfig.
  const auto plain = load_run_config(std::nullopt, {"log_path=runs/r"});
  CHECK_FALSE(plain.prompt.retrieval.enabled());
  CHECK(plain.prompt.retrieval.k == rag::RetrievalPromptConfig{}.k);
  CHECK(plain.prompt.retrieval.leakage.enabled);

  const auto yaml = write_yaml("retrieval.yaml", "log_path: runs/r\nprompt:\n  retrieval:\n    index: " + index.string() +
                                                     "\n    k: 4\n    language: any\n    max_example_chars: 3000\n"
                                                     "    max_example_tokens: 900\n    token_budget: 2500\n"
                                                     "    leakage_filter: true\n    near_threshold: 0.85\n    shingle_size: 4\n");
  const auto c = load_run_config(yaml, {"prompt.retrieval.k=2"});
  const auto& r = c.prompt.retrieval;
  CHECK(r.index == index.string());
  CHECK(r.k == 2);  // the override wins
  CHECK(r.language == "any");
  CHECK(r.max_example_chars == 3000);
  CHECK(r.max_example_tokens == 900);
  CHECK(r.token_budget == 2500);
  CHECK(r.leakage.enabled);
  CHECK(r.leakage.near_threshold == 0.85);
  CHECK(r.leakage.shingle_size == 4);
  const auto resolved = dir / "retrieval_resolved.yaml";
  train::write_resolved(c, resolved);
  CHECK(has(read(resolved), "  retrieval.token_budget: 2500\n"));
  const auto back = load_run_config(resolved, {});
  CHECK(train::to_yaml(back) == train::to_yaml(c));
  CHECK(back.prompt.retrieval.k == 2);
  CHECK_FALSE(load_run_config(yaml, {"prompt.retrieval.leakage_filter=false"}).prompt.retrieval.leakage.enabled);

  // Errors name the key: a missing index file, k = 0 with an index, a negative budget, a bad threshold.
  CHECK(has(error_of(std::nullopt, {"log_path=r", "prompt.retrieval.index=" + (dir / "missing.kbrlidx").string()}),
            "field 'prompt.retrieval.index': " + (dir / "missing.kbrlidx").string() + ": no such file"));
  CHECK(has(error_of(yaml, {"prompt.retrieval.k=0"}), "field 'prompt.retrieval.k': 0 examples with an index"));
  CHECK(has(error_of(yaml, {"prompt.retrieval.token_budget=-1"}), "field 'prompt.retrieval.token_budget': -1 is below 0"));
  CHECK(has(error_of(yaml, {"prompt.retrieval.token_budget=0"}), "0 leaves no room for an example"));
  CHECK(has(error_of(yaml, {"prompt.retrieval.near_threshold=0"}), "field 'prompt.retrieval.near_threshold': 0 is outside (0, 1]"));
  CHECK(has(error_of(yaml, {"prompt.retrieval.max_example_chars=-3"}), "-3 is below 0"));
  CHECK(has(error_of(yaml, {"prompt.retrieval.top_k=3"}), "unknown key 'prompt.retrieval.top_k'"));
  // k = 0 without an index is retrieval off, not an error.
  CHECK_NOTHROW(load_run_config(std::nullopt, {"log_path=r", "prompt.retrieval.k=0"}));
}

TEST_CASE("prompt.retrieval embedder keys: read and written back, checked against the kind of index") {
  const auto dir = fs::path(KBRL_TEST_TMP) / "run_config_dense";
  fs::create_directories(dir);
  const auto checkpoint = dir / "embedder";
  fs::create_directories(checkpoint);
  const auto c = load_run_config(std::nullopt, {"log_path=runs/r", "prompt.retrieval.embeddings_checkpoint=" + checkpoint.string(),
                                                "prompt.retrieval.embeddings_device=cpu", "prompt.retrieval.embeddings_dtype=fp32",
                                                "prompt.retrieval.embeddings_max_tokens=512"});
  const auto& e = c.prompt.retrieval.embedder;
  CHECK(e.checkpoint == checkpoint.string());
  CHECK(e.device == "cpu");
  CHECK(e.dtype == "fp32");
  CHECK(e.max_tokens == 512);
  const auto resolved = dir / "resolved.yaml";
  train::write_resolved(c, resolved);
  CHECK(train::to_yaml(load_run_config(resolved, {})) == train::to_yaml(c));
  const auto served = load_run_config(std::nullopt, {"log_path=r", "prompt.retrieval.embeddings_endpoint=http://127.0.0.1:8000/v1",
                                                     "prompt.retrieval.embeddings_model=qwen-embed",
                                                     "prompt.retrieval.embeddings_api_key_env=EMBED_KEY"});
  CHECK(served.prompt.retrieval.embedder.endpoint == "http://127.0.0.1:8000/v1");
  CHECK(served.prompt.retrieval.embedder.model == "qwen-embed");
  CHECK(served.prompt.retrieval.embedder.api_key_env == "EMBED_KEY");

  // Settings that do not go together, named by their keys.
  CHECK(has(error_of(std::nullopt, {"log_path=r", "prompt.retrieval.embeddings_endpoint=http://h/v1"}),
            "field 'prompt.retrieval.embeddings_model': prompt.retrieval.embeddings_endpoint needs the served model's name"));
  CHECK(has(error_of(std::nullopt, {"log_path=r", "prompt.retrieval.embeddings_device=cuda"}),
            "field 'prompt.retrieval.embeddings_device': is for prompt.retrieval.embeddings_checkpoint"));
  CHECK(has(error_of(std::nullopt, {"log_path=r", "prompt.retrieval.embeddings_dtype=fp8"}), "prompt.retrieval.embeddings_dtype"));
  CHECK(has(error_of(std::nullopt, {"log_path=r", "prompt.retrieval.embeddings_max_tokens=-1"}), "prompt.retrieval.embeddings_max_tokens"));

  // A BM25 index takes no embedder: refused when the config is read, before anything loads.
  const auto bm25 = dir / "examples.kbrlidx";
  std::vector<rag::CorpusEntry> entries(2);
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string op = i == 0 ? "relu" : "tanh";
    entries[i].id = op;
    entries[i].source = "import torch\nx = torch." + op + "(x)\n";
    entries[i].kernel = "__global__ void " + op + "_kernel() {}\n";
    entries[i].language = "cuda";
  }
  rag::CorpusIndex::build(entries).save(bm25);
  CHECK(has(error_of(std::nullopt, {"log_path=r", "prompt.retrieval.index=" + bm25.string(),
                                    "prompt.retrieval.embeddings_checkpoint=" + checkpoint.string()}),
            "field 'prompt.retrieval.embeddings_checkpoint': " + bm25.string() + " is a BM25 index"));
  CHECK_NOTHROW(load_run_config(std::nullopt, {"log_path=r", "prompt.retrieval.index=" + bm25.string()}));

  // A dense index needs them: the error names the key and the embedder the index was built with.
  if (!rag::dense_retrieval_available()) return;  // no dense index without FAISS
  const auto dense = dir / "examples.kbrldix";
  rag::DenseIndex::build(entries, std::make_shared<rag::HashingEmbedder>(32)).save(dense);
  const std::string missing = error_of(std::nullopt, {"log_path=r", "prompt.retrieval.index=" + dense.string()});
  CHECK(has(missing, "field 'prompt.retrieval.embeddings_endpoint': "));
  CHECK(has(missing, "a dense index of embeddings of 'kbrl-hashing-terms-v1' (32 dimensions)"));
  CHECK(has(missing, "prompt.retrieval.embeddings_checkpoint"));
  CHECK_NOTHROW(load_run_config(std::nullopt, {"log_path=r", "prompt.retrieval.index=" + dense.string(),
                                               "prompt.retrieval.embeddings_checkpoint=" + checkpoint.string()}));
}
