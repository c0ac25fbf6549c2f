// The configuration of a kbrl-train run: a YAML file plus `key=value` overrides with dotted
// paths (dataset.batch_size=4 reward.preset=stage2), checked against one schema that also writes
// the resolved config.yaml and docs/configs.md. Unknown keys, wrong types and bad values fail
// with core::ConfigError naming the file (and line) or the override, and the key; so does a key
// written twice in one mapping of the file. No torch here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kbrl/dataset/filter.hpp"
#include "kbrl/eval/settings.hpp"
#include "kbrl/rag/retrieval_prompt.hpp"
#include "kbrl/reward/config.hpp"

namespace kbrl::train {

struct ModelSection {
  std::string path;                    // Hugging Face checkpoint folder (config.json, safetensors, tokenizer.json)
  std::string dtype = "auto";          // auto | bf16 | fp32 (auto: bf16 on cuda, fp32 on cpu)
  std::string device = "auto";         // auto | cpu | cuda | cuda:N
  std::string chat_template = "auto";  // auto, or a renderer name
};
struct LoraSection {
  int rank = 32;
  double alpha = 64;
  double dropout = 0;
  bool rslora = false;
  std::vector<std::string> target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  std::string init_adapter;  // start from this PEFT adapter folder
};
struct DatasetSection {
  std::string problems;  // empty: dataset::find_kernelbench ($KERNELBENCH_ROOT, a checkout nearby)
  std::vector<int> levels;  // empty: all
  std::vector<std::string> include;  // globs on names or ids: keep what matches any (empty: all)
  std::vector<std::string> exclude;  // globs on names or ids: then drop what matches any
  double eval_fraction = 0.1;
  std::vector<std::string> eval_problems;
  int batch_size = 4;
  int group_size = 4;
  int num_epochs = 1;
  int max_steps = 0;  // 0: num_epochs worth of batches
  bool shuffle = true;
};
struct PromptSection {
  std::string language = "cpp";
  std::string precision = "fp32";
  bool one_shot = true;
  bool thinking = true;
  std::string hardware;
  // Retrieved examples before the task (prompt.retrieval.*; docs/retrieval.md, "Prompts"): on
  // when retrieval.index names an index file.
  rag::RetrievalPromptConfig retrieval;
};
struct SamplingSection {
  int max_tokens = 4096;
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;
  int groups_per_call = 4;  // groups sampled together (x group_size rows); each chunk's evaluations start when it is sampled
  // "policy": the in-process model samples; "openai": an OpenAI-compatible server (kbrl-serve,
  // vLLM with runtime LoRA loading) samples from the policy's adapter, reloaded after each step
  // (docs/training-runs.md, "Sampling on an inference server").
  std::string backend = "policy";
  std::string endpoint;     // openai: the API's root, /v1 included
  std::string api_key_env;  // openai: the environment variable holding the key (empty: none)
  int max_in_flight = 32;   // openai: requests on the wire at once
  int max_retries = 4;      // openai: retries of a failed request (429, 5xx, connection)
  double request_timeout_s = 1800;  // openai: one attempt of one request
};
struct EnvSection {
  bool multi_turn = false;
  int max_turns = 4;
  // The discount of later turns is reward.multi_turn (RewardConfig::multi_turn): one owner.
  bool early_stop = true;
  double early_stop_min_speedup = 0;
  int kernel_excerpt_chars = 4000;
  int error_excerpt_chars = 1500;
  bool keep_thinking = false;
  int thinking_excerpt_chars = 2000;
};
struct TrainSection {
  // "grpo": reinforcement learning on the problems with the evaluator (run_rl_loop); "sft":
  // supervised fine-tuning on the prompt/answer pairs of sft.* (run_sft_loop, docs/training-runs.md,
  // "Supervised warm start").
  std::string mode = "grpo";
  std::string loss = "importance_sampling";
  double clip_low = 0.8;  // ratio bounds for ppo and cispo
  double clip_high = 1.2;
  std::string normalization = "token_mean";
  double learning_rate = 1e-4;
  int warmup_steps = 0;  // the learning rate rises linearly from learning_rate / warmup_steps
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0, grad_clip = 1.0;
  int num_substeps = 1;
  int micro_batch_tokens = 8192;
  bool activation_checkpointing = true;
  bool advantage_std_normalize = false;
  double negative_advantage_weight = 1.0;  // AdvantageOptions::negative_weight
  bool mask_truncated = false;             // DataOptions::mask_truncated
  bool remove_constant_reward_groups = true;
  // 0: synchronous. k >= 1: batch s is sampled with the weights of step s - k while earlier
  // batches are evaluated and trained (an asynchronous pipeline); samples staler than k are dropped.
  int max_steps_off_policy = 0;
};

// train.mode=sft: the supervised examples and their schedule (train/sft_data.hpp). The optimizer
// (AdamW's betas, eps, weight decay, gradient clipping) and the micro-batching are train.*'s.
struct SftSection {
  std::vector<std::string> data;  // files of examples: JSONL (.jsonl, .ndjson, .json) or CSV
  // corpus: PyTorch program -> kernel pairs (rag's corpus reader), asked as RL asks a problem and
  // answered in the <KERNEL> format; prompt_answer: a user prompt and its answer, verbatim;
  // messages: JSONL {"messages": [{"role", "content"}, ...]}, the last one the assistant's answer.
  std::string format = "corpus";
  // corpus: the field mapping (rag::CorpusSpec). Empty: the preset's, else source / kernel, ids
  // "<file>:<line>", every row of the language below.
  std::string preset;  // kernelbook | sakana (empty: none)
  std::string source_field;
  std::string kernel_field;
  std::vector<std::string> id_fields;
  std::string language;  // the files' kernel language (empty: the preset's, else prompt.language)
  std::string language_field;
  std::string correct_field;
  std::string level_field;
  std::vector<int> levels;  // keep these levels (empty: all)
  std::string prompt_field = "prompt";  // prompt_answer
  std::string answer_field = "answer";
  std::vector<std::string> heldout_data;  // held-out files (the same format); empty: a share of data
  double heldout_fraction = 0.1;          // share of the problems (prompts) held out when heldout_data is empty
  int batch_size = 8;                     // examples per optimizer step
  int num_epochs = 1;
  int max_steps = 0;  // 0: num_epochs worth
  bool shuffle = true;
  int max_tokens = 8192;          // prompt + answer tokens at most
  std::string overlong = "skip";  // skip | truncate (the answer's end is cut)
  double learning_rate = 0;       // 0: train.learning_rate
  std::string lr_schedule = "constant";  // constant | linear | cosine (to 0 at the last step)
  int warmup_steps = 0;                  // linear warmup from 0 over these steps
};

struct RunConfig {
  std::string log_path;
  std::uint64_t seed = 0;
  ModelSection model;
  LoraSection lora;
  DatasetSection dataset;
  PromptSection prompt;
  SamplingSection sampling;
  // The evaluator's settings (eval/settings.hpp): the `evaluator.*` keys, kbrl-train's defaults.
  eval::EvaluatorSettings evaluator = eval::default_evaluator_settings(eval::SettingsProfile::training);
  EnvSection env;
  TrainSection train;
  SftSection sft;
  reward::RewardConfig reward = reward::RewardConfig::preset("default");
  int eval_every = 0;  // steps between held-out evaluations; 0: none
  int save_every = 1;  // steps between checkpoints (the last step and a stop always save)
};

// YAML first (none: defaults), then each override in order. The result is validated; log_path
// is required. Registry: where user reward terms are looked up.
RunConfig load_run_config(const std::optional<std::filesystem::path>& yaml, const std::vector<std::string>& overrides,
                          const reward::RewardRegistry& registry = reward::default_registry());

// The problems the dataset section selects (levels, include and exclude globs), for
// dataset::filter_problems.
dataset::ProblemFilter problem_filter(const DatasetSection& dataset);

// Where the run's problems are: dataset.problems, or when that is empty the KernelBench checkout
// found for this run (dataset::find_kernelbench: $KERNELBENCH_ROOT, else KernelBench/ or
// kernelbench/ in the working directory or beside log_path). Throws core::ConfigError for
// dataset.problems saying where it looked.
std::filesystem::path problems_path(const RunConfig& config);

// Every key, in schema order, as YAML that load_run_config reads back to an equal config.
std::string to_yaml(const RunConfig& config);
void write_resolved(const RunConfig& config, const std::filesystem::path& path);

// docs/configs.md's table of keys (key, default, meaning), generated from the schema.
std::string config_reference_markdown();

}  // namespace kbrl::train
