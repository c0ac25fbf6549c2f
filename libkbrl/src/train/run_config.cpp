#include "kbrl/train/run_config.hpp"

#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/dataset/load.hpp"
#include "kbrl/prompt/chat_renderer.hpp"
#include "kbrl/rag/corpus.hpp"

namespace kbrl::train {

namespace fs = std::filesystem;

namespace {

// --- values: YAML node -> C++ and back -------------------------------------------------------

template <class T> struct TypeName;
template <> struct TypeName<std::string> { static constexpr const char* value = "a string"; };
template <> struct TypeName<int> { static constexpr const char* value = "an integer"; };
template <> struct TypeName<std::uint64_t> { static constexpr const char* value = "a non-negative integer"; };
template <> struct TypeName<double> { static constexpr const char* value = "a number"; };
template <> struct TypeName<bool> { static constexpr const char* value = "true or false"; };
template <> struct TypeName<std::vector<std::string>> { static constexpr const char* value = "a list of strings (or one string)"; };
template <> struct TypeName<std::vector<int>> { static constexpr const char* value = "a list of integers"; };

template <class T>
std::optional<T> parse_value(const YAML::Node& n) {
  try {
    if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<int>>) {
      if (n.IsNull()) return T{};
      // One string is a list of one: dataset.include="level1/*" on a command line.
      if constexpr (std::is_same_v<T, std::vector<std::string>>)
        if (n.IsScalar()) return T{n.as<std::string>()};
      if (!n.IsSequence()) return std::nullopt;
      T out;
      for (const auto& item : n) {
        if (!item.IsScalar()) return std::nullopt;
        out.push_back(item.as<typename T::value_type>());
      }
      return out;
    } else {
      if (!n.IsScalar()) {
        if constexpr (std::is_same_v<T, std::string>)
          if (n.IsNull()) return std::string();
        return std::nullopt;
      }
      if constexpr (std::is_same_v<T, std::uint64_t>) {
        if (!n.Scalar().empty() && n.Scalar()[0] == '-') return std::nullopt;
      }
      if constexpr (std::is_same_v<T, double>) {
        const double v = n.as<double>();
        if (!std::isfinite(v)) return std::nullopt;
        return v;
      }
      return n.as<T>();
    }
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

std::string yaml_scalar(const std::string& s) {
  YAML::Emitter e;
  e << YAML::DoubleQuoted << s;
  return e.c_str();
}
std::string to_text(const std::string& v) { return yaml_scalar(v); }
std::string to_text(int v) { return std::to_string(v); }
std::string to_text(std::uint64_t v) { return std::to_string(v); }
std::string to_text(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}
std::string to_text(bool v) { return v ? "true" : "false"; }
std::string to_text(const std::vector<std::string>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + yaml_scalar(v[i]);
  return s + "]";
}
std::string to_text(const std::vector<int>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// --- the schema -------------------------------------------------------------------------------

struct Entry {
  std::string key, doc;
  std::vector<std::string> aliases;  // earlier names, still read
  std::function<std::string(const RunConfig&)> get;
  // Sets the value; returns an error text ("expected ...", or the check's) or empty.
  std::function<std::string(RunConfig&, const YAML::Node&)> set;
};

template <class T>
using Check = std::function<std::string(const T&)>;  // empty: fine

template <class T>
Entry make_entry(std::string key, std::function<T&(RunConfig&)> ref, std::string doc, Check<T> check) {
  Entry e;
  e.key = std::move(key);
  e.doc = std::move(doc);
  e.get = [ref](const RunConfig& c) { return to_text(ref(const_cast<RunConfig&>(c))); };
  e.set = [ref, check](RunConfig& c, const YAML::Node& n) -> std::string {
    auto v = parse_value<T>(n);
    if (!v) return fmt::format("expected {}", TypeName<T>::value);
    if (check) {
      if (auto err = check(*v); !err.empty()) return err;
    }
    ref(c) = std::move(*v);
    return {};
  };
  return e;
}

template <class S, class T>
Entry field(std::string key, S RunConfig::*section, T S::*member, std::string doc, Check<T> check = {}) {
  return make_entry<T>(std::move(key), [section, member](RunConfig& c) -> T& { return c.*section.*member; },
                       std::move(doc), std::move(check));
}
template <class T>
Entry top(std::string key, T RunConfig::*member, std::string doc, Check<T> check = {}) {
  return make_entry<T>(std::move(key), [member](RunConfig& c) -> T& { return c.*member; }, std::move(doc),
                       std::move(check));
}

Check<std::string> one_of(std::vector<std::string> names) {
  return [names](const std::string& v) -> std::string {
    if (std::find(names.begin(), names.end(), v) != names.end()) return {};
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return fmt::format("'{}' is not one of: {}", v, list);
  };
}
Check<int> at_least(int lo, std::string note = {}) {
  return [lo, note](const int& v) { return v >= lo ? std::string() : fmt::format("{} is below {}{}", v, lo, note); };
}
Check<double> in_range(double lo, double hi, bool hi_open = false) {
  return [=](const double& v) {
    const bool ok = v >= lo && (hi_open ? v < hi : v <= hi);
    return ok ? std::string() : fmt::format("{} is outside [{}, {}{}", v, lo, hi, hi_open ? ")" : "]");
  };
}
Check<double> positive() {
  return [](const double& v) { return v > 0 ? std::string() : fmt::format("{} must be positive", v); };
}
Check<double> non_negative() {
  return [](const double& v) { return v >= 0 ? std::string() : fmt::format("{} must not be negative", v); };
}

Check<std::vector<std::string>> globs() {
  return [](const std::vector<std::string>& v) -> std::string {
    try {
      for (const auto& g : v) dataset::check_glob(g);
    } catch (const core::InvalidArgument& e) {
      return e.what();
    }
    return {};
  };
}

Check<std::string> device_name() {
  return [](const std::string& v) -> std::string {
    if (v == "auto" || v == "cpu" || v == "cuda") return {};
    if (v.rfind("cuda:", 0) == 0 && v.size() > 5 && std::all_of(v.begin() + 5, v.end(), ::isdigit)) return {};
    return fmt::format("'{}' is not auto, cpu, cuda or cuda:N", v);
  };
}

// A YAML value as the evaluator settings take it; nullopt for nested structures.
std::optional<eval::SettingValue> setting_value(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return eval::SettingValue();
  if (n.IsScalar()) return eval::SettingValue(n.Scalar());
  if (n.IsSequence()) {
    std::vector<std::string> items;
    for (const auto& item : n) {
      if (!item.IsScalar()) return std::nullopt;
      items.push_back(item.Scalar());
    }
    return eval::SettingValue(std::move(items));
  }
  if (n.IsMap()) {
    std::map<std::string, std::string> entries;
    for (const auto& kv : n) {
      if (!kv.first.IsScalar() || !kv.second.IsScalar()) return std::nullopt;
      entries[kv.first.Scalar()] = kv.second.Scalar();
    }
    return eval::SettingValue(std::move(entries));
  }
  return std::nullopt;
}

std::string yaml_text(const eval::Setting& s, const eval::SettingValue& v) {
  using T = eval::SettingType;
  const bool strings = s.type == T::text || s.type == T::path || s.type == T::choice || s.type == T::severity_map;
  const auto item = [&](const std::string& x) { return strings ? yaml_scalar(x) : x; };
  if (const auto* x = std::get_if<std::string>(&v)) return item(*x);
  if (const auto* l = std::get_if<std::vector<std::string>>(&v)) {
    std::string out = "[";
    for (std::size_t i = 0; i < l->size(); ++i) out += (i ? ", " : "") + item((*l)[i]);
    return out + "]";
  }
  if (const auto* m = std::get_if<std::map<std::string, std::string>>(&v)) {
    std::string out = "{";
    for (const auto& [k, x] : *m) out += (out.size() > 1 ? ", " : "") + yaml_scalar(k) + ": " + item(x);
    return out + "}";
  }
  return "null";
}

// evaluator.<key>: one of the evaluator settings (eval/settings.hpp), which owns its type,
// default and checks.
Entry evaluator_entry(const eval::Setting& setting) {
  const eval::Setting* s = &setting;  // an element of the static table: lives as long as the program
  Entry e;
  e.key = "evaluator." + s->key;
  for (const auto& a : s->aliases) e.aliases.push_back("evaluator." + a);
  e.doc = s->help + " (kbrl-eval: `--" + s->flag + "`)";
  e.get = [s](const RunConfig& c) { return yaml_text(*s, s->get(c.evaluator)); };
  e.set = [s](RunConfig& c, const YAML::Node& n) -> std::string {
    const auto v = setting_value(n);
    if (!v) return "expected a value, a list or a map of values";
    return s->set(c.evaluator, *v);
  };
  return e;
}

const std::vector<Entry>& schema() {
  static const std::vector<Entry> entries = [] {
    std::vector<std::string> templates = prompt::renderer_names();
    templates.insert(templates.begin(), "auto");
    using R = RunConfig;
    std::vector<Entry> e;
    e.push_back(top("log_path", &R::log_path, "the run directory (required): config, metrics, traces, checkpoints, TensorBoard",
                    Check<std::string>([](const std::string& v) { return v.empty() ? std::string("must not be empty") : std::string(); })));
    e.push_back(top("seed", &R::seed, "seeds the data order, the LoRA initialization and every sampling call"));
    e.push_back(top("eval_every", &R::eval_every, "steps between evaluations on the held-out split (0: none)", at_least(0)));
    e.push_back(top("save_every", &R::save_every, "steps between checkpoints (the last step and a stop always save)", at_least(1)));
    e.push_back(field("model.path", &R::model, &ModelSection::path, "Hugging Face checkpoint folder: config.json, *.safetensors, tokenizer.json"));
    e.push_back(field("model.dtype", &R::model, &ModelSection::dtype, "auto (bf16 on a GPU, fp32 on the CPU), bf16 or fp32", one_of({"auto", "bf16", "fp32"})));
    e.push_back(field("model.device", &R::model, &ModelSection::device, "auto (cuda:0 when there is a GPU), cpu, cuda, cuda:N", device_name()));
    e.push_back(field("model.chat_template", &R::model, &ModelSection::chat_template, "auto (from the tokenizer's special tokens) or a renderer name", one_of(templates)));
    e.push_back(field("lora.rank", &R::lora, &LoraSection::rank, "LoRA rank", at_least(1)));
    e.push_back(field("lora.alpha", &R::lora, &LoraSection::alpha, "LoRA alpha (scale alpha / rank, or alpha / sqrt(rank) with rslora)", positive()));
    e.push_back(field("lora.dropout", &R::lora, &LoraSection::dropout, "dropout on the adapters' input while training", in_range(0, 1, true)));
    e.push_back(field("lora.rslora", &R::lora, &LoraSection::rslora, "rank-stabilized scaling"));
    e.push_back(field("lora.target_modules", &R::lora, &LoraSection::target_modules, "projections that get adapters",
                      Check<std::vector<std::string>>([](const std::vector<std::string>& v) { return v.empty() ? std::string("must name at least one module") : std::string(); })));
    e.push_back(field("lora.init_adapter", &R::lora, &LoraSection::init_adapter, "start from this PEFT adapter folder, or a run directory's last checkpointed adapter (an SFT run), instead of fresh adapters; its own rank, alpha and targets apply"));
    e.push_back(field("dataset.problems", &R::dataset, &DatasetSection::problems, "a KernelBench checkout, a folder of problems or a JSONL file (empty: $KERNELBENCH_ROOT, else a KernelBench/ or kernelbench/ checkout in the working directory or beside log_path)"));
    e.push_back(field("dataset.levels", &R::dataset, &DatasetSection::levels, "KernelBench levels to keep (empty: all)"));
    e.push_back(field("dataset.include", &R::dataset, &DatasetSection::include,
                      "globs on problem names or ids: keep the problems that match any (empty: all); docs/dataset.md", globs()));
    e.push_back(field("dataset.exclude", &R::dataset, &DatasetSection::exclude,
                      "globs on problem names or ids: then leave out the problems that match any", globs()));
    e.push_back(field("dataset.eval_fraction", &R::dataset, &DatasetSection::eval_fraction, "share of problems held out for evaluation", in_range(0, 1, true)));
    e.push_back(field("dataset.eval_problems", &R::dataset, &DatasetSection::eval_problems,
                      "globs on problem names or ids naming the held-out problems instead (empty: eval_fraction picks them)", globs()));
    e.push_back(field("dataset.batch_size", &R::dataset, &DatasetSection::batch_size, "problems per step", at_least(1)));
    e.push_back(field("dataset.group_size", &R::dataset, &DatasetSection::group_size, "rollouts per problem (the GRPO group)",
                      at_least(2, " (GRPO compares the rollouts of a group: one alone has no advantage)")));
    e.push_back(field("dataset.num_epochs", &R::dataset, &DatasetSection::num_epochs, "passes over the training problems", at_least(1)));
    e.push_back(field("dataset.max_steps", &R::dataset, &DatasetSection::max_steps, "steps to run (0: num_epochs worth)", at_least(0)));
    e.push_back(field("dataset.shuffle", &R::dataset, &DatasetSection::shuffle, "a seeded shuffle per epoch"));
    e.push_back(field("prompt.language", &R::prompt, &PromptSection::language, "kernel language asked for and evaluated", one_of({"cuda", "triton", "hip", "cpp"})));
    e.push_back(field("prompt.precision", &R::prompt, &PromptSection::precision, "precision of the problems' inputs", one_of({"fp32", "fp16", "bf16"})));
    e.push_back(field("prompt.one_shot", &R::prompt, &PromptSection::one_shot, "include the worked example"));
    e.push_back(field("prompt.thinking", &R::prompt, &PromptSection::thinking, "ask for reasoning inside <think> first"));
    e.push_back(field("prompt.hardware", &R::prompt, &PromptSection::hardware, "a note on the target GPU for the prompt (empty: none)"));
    // prompt.retrieval.*: rag::RetrievalPromptConfig, which owns the defaults and the checks
    // (kbrl-eval's --retrieval-* flags fill the same struct).
    const auto retrieval = [&e](std::string name, auto ref, std::string doc, auto check) {
      using T = std::remove_reference_t<decltype(ref(std::declval<RunConfig&>()))>;
      e.push_back(make_entry<T>("prompt.retrieval." + std::move(name), std::function<T&(RunConfig&)>(ref), std::move(doc),
                                Check<T>(check)));
    };
    retrieval("index", [](R& c) -> std::string& { return c.prompt.retrieval.index; },
              "an index file written by kbrl-index build: similar solved examples go before the task (empty: none; "
              "docs/retrieval.md)",
              Check<std::string>());
    retrieval("k", [](R& c) -> int& { return c.prompt.retrieval.k; }, "examples asked of the index per problem",
              at_least(0));
    retrieval("language", [](R& c) -> std::string& { return c.prompt.retrieval.language; },
              "corpus language of the examples (empty: prompt.language; any: every language)", Check<std::string>());
    retrieval("max_example_chars", [](R& c) -> int& { return c.prompt.retrieval.max_example_chars; },
              "each side of an example (PyTorch program, kernel) is cut to this many characters (0: no limit)",
              at_least(0));
    retrieval("max_example_tokens", [](R& c) -> int& { return c.prompt.retrieval.max_example_tokens; },
              "an example over this many tokens is cut further, or left out (0: no limit)", at_least(0));
    retrieval("token_budget", [](R& c) -> int& { return c.prompt.retrieval.token_budget; },
              "tokens of the whole examples section at most, counted with the policy's tokenizer: examples that do "
              "not fit are left out whole",
              at_least(0));
    retrieval("leakage_filter", [](R& c) -> bool& { return c.prompt.retrieval.leakage.enabled; },
              "leave out examples whose PyTorch side is the problem's (exact or near copies); off only to inspect",
              Check<bool>());
    retrieval("near_threshold", [](R& c) -> double& { return c.prompt.retrieval.leakage.near_threshold; },
              "a near copy has the problem's operations and a shingle Jaccard similarity of at least this",
              Check<double>([](const double& v) { return v > 0 && v <= 1 ? std::string() : fmt::format("{} is outside (0, 1]", v); }));
    retrieval("shingle_size", [](R& c) -> int& { return c.prompt.retrieval.leakage.shingle_size; },
              "tokens per shingle of the near-copy check", at_least(1));
    // The query embedder of a dense index (rag::EmbedderSettings, kbrl-index's --embeddings-* flags).
    retrieval("embeddings_endpoint", [](R& c) -> std::string& { return c.prompt.retrieval.embedder.endpoint; },
              "a dense index: an OpenAI-compatible server's API root, /v1 included, serving the model the index was "
              "built with (POST /embeddings)",
              Check<std::string>());
    retrieval("embeddings_model", [](R& c) -> std::string& { return c.prompt.retrieval.embedder.model; },
              "a dense index: the served model's name (with embeddings_endpoint, required); with "
              "embeddings_checkpoint, the name the index records (empty: the folder's name)",
              Check<std::string>());
    retrieval("embeddings_api_key_env", [](R& c) -> std::string& { return c.prompt.retrieval.embedder.api_key_env; },
              "embeddings_endpoint: the environment variable holding the API key (empty: none; the key is never "
              "written)",
              Check<std::string>());
    retrieval("embeddings_checkpoint", [](R& c) -> std::string& { return c.prompt.retrieval.embedder.checkpoint; },
              "a dense index: the Hugging Face checkpoint it was built with, embedded in this process (mean-pooled "
              "last hidden states)",
              Check<std::string>());
    retrieval("embeddings_device", [](R& c) -> std::string& { return c.prompt.retrieval.embedder.device; },
              "embeddings_checkpoint: auto (cuda:0 when there is a GPU), cpu, cuda, cuda:N", Check<std::string>());
    retrieval("embeddings_dtype", [](R& c) -> std::string& { return c.prompt.retrieval.embedder.dtype; },
              "embeddings_checkpoint: auto (bf16 on a GPU, fp32 on the CPU), bf16 or fp32",
              one_of({"auto", "bf16", "fp32"}));
    retrieval("embeddings_max_tokens", [](R& c) -> int& { return c.prompt.retrieval.embedder.max_tokens; },
              "embeddings_checkpoint: a problem's first N tokens are embedded (0: the model's context)", at_least(0));
    e.push_back(field("sampling.max_tokens", &R::sampling, &SamplingSection::max_tokens, "tokens per answer at most", at_least(1)));
    e.push_back(field("sampling.temperature", &R::sampling, &SamplingSection::temperature, "sampling temperature (0: greedy)", non_negative()));
    e.push_back(field("sampling.top_p", &R::sampling, &SamplingSection::top_p, "nucleus sampling (1: off)",
                      Check<double>([](const double& v) { return v > 0 && v <= 1 ? std::string() : fmt::format("{} is outside (0, 1]", v); })));
    e.push_back(field("sampling.top_k", &R::sampling, &SamplingSection::top_k, "top-k sampling (0: off)", at_least(0)));
    e.push_back(field("sampling.groups_per_call", &R::sampling, &SamplingSection::groups_per_call,
                      "groups sampled in one batch (x group_size rows); a chunk's evaluations start as soon as it is sampled", at_least(1)));
    e.push_back(field("sampling.backend", &R::sampling, &SamplingSection::backend,
                      "who samples: policy (the model in this process) or openai (an OpenAI-compatible server given the adapter after each step)",
                      one_of({"policy", "openai"})));
    e.push_back(field("sampling.endpoint", &R::sampling, &SamplingSection::endpoint,
                      "openai: the server's API root, /v1 included (e.g. http://127.0.0.1:8000/v1)"));
    e.push_back(field("sampling.api_key_env", &R::sampling, &SamplingSection::api_key_env,
                      "openai: the environment variable holding the API key (empty: none; the key is never written)"));
    e.push_back(field("sampling.max_in_flight", &R::sampling, &SamplingSection::max_in_flight, "openai: requests on the wire at once", at_least(1)));
    e.push_back(field("sampling.max_retries", &R::sampling, &SamplingSection::max_retries,
                      "openai: retries of a request after a 429, a 5xx or a lost connection", at_least(0)));
    e.push_back(field("sampling.request_timeout_s", &R::sampling, &SamplingSection::request_timeout_s,
                      "openai: seconds one attempt of one request may take", positive()));
    for (const auto& setting : eval::evaluator_settings()) e.push_back(evaluator_entry(setting));
    e.push_back(field("env.multi_turn", &R::env, &EnvSection::multi_turn, "refinement episodes with feedback (MultiTurnKernelBenchEnv)"));
    e.push_back(field("env.max_turns", &R::env, &EnvSection::max_turns, "attempts per multi-turn episode", at_least(1)));
    e.push_back(field("env.early_stop", &R::env, &EnvSection::early_stop, "end an episode at its first correct kernel"));
    e.push_back(field("env.early_stop_min_speedup", &R::env, &EnvSection::early_stop_min_speedup, "...that is at least this fast (0: any)", non_negative()));
    e.push_back(field("env.kernel_excerpt_chars", &R::env, &EnvSection::kernel_excerpt_chars, "earlier kernels are cut to this length in later prompts", at_least(100)));
    e.push_back(field("env.error_excerpt_chars", &R::env, &EnvSection::error_excerpt_chars, "error excerpts in feedback are cut to this length", at_least(100)));
    e.push_back(field("env.keep_thinking", &R::env, &EnvSection::keep_thinking, "earlier answers keep their <think> block in later prompts (the seeds' flow); false: it is removed"));
    e.push_back(field("env.thinking_excerpt_chars", &R::env, &EnvSection::thinking_excerpt_chars, "with keep_thinking, earlier thinking is cut to this length (head and tail)", at_least(100)));
    e.push_back(field("train.mode", &R::train, &TrainSection::mode,
                      "grpo (reinforcement learning on the problems) or sft (supervised fine-tuning on sft.data; docs/training-runs.md)",
                      one_of({"grpo", "sft"})));
    e.push_back(field("train.loss", &R::train, &TrainSection::loss, "policy loss", one_of({"importance_sampling", "ppo", "cispo", "cross_entropy"})));
    e.push_back(field("train.clip_low", &R::train, &TrainSection::clip_low, "lower bound on the ratio p/q (ppo, cispo)", positive()));
    e.push_back(field("train.clip_high", &R::train, &TrainSection::clip_high, "upper bound on the ratio p/q (ppo, cispo)", positive()));
    e.push_back(field("train.normalization", &R::train, &TrainSection::normalization, "how token terms become the loss (docs/training.md)",
                      one_of({"sum", "token_mean", "sequence_mean", "constant"})));
    e.push_back(field("train.learning_rate", &R::train, &TrainSection::learning_rate, "AdamW learning rate", non_negative()));
    e.push_back(field("train.beta1", &R::train, &TrainSection::beta1, "AdamW beta1", in_range(0, 1, true)));
    e.push_back(field("train.beta2", &R::train, &TrainSection::beta2, "AdamW beta2", in_range(0, 1, true)));
    e.push_back(field("train.eps", &R::train, &TrainSection::eps, "AdamW epsilon", positive()));
    e.push_back(field("train.warmup_steps", &R::train, &TrainSection::warmup_steps,
                      "steps over which the learning rate rises linearly to train.learning_rate (step s of them: (s + 1) / warmup_steps of it); 0: none", at_least(0)));
    e.push_back(field("train.weight_decay", &R::train, &TrainSection::weight_decay, "AdamW decoupled weight decay", non_negative()));
    e.push_back(field("train.grad_clip", &R::train, &TrainSection::grad_clip, "clip the global gradient norm to this (0: off)", non_negative()));
    e.push_back(field("train.num_substeps", &R::train, &TrainSection::num_substeps, "optimizer steps per batch (the batch split evenly)", at_least(1)));
    e.push_back(field("train.micro_batch_tokens", &R::train, &TrainSection::micro_batch_tokens, "padded tokens per forward/backward micro-batch", at_least(1)));
    e.push_back(field("train.activation_checkpointing", &R::train, &TrainSection::activation_checkpointing, "recompute each layer in the backward pass"));
    e.push_back(field("train.advantage_std_normalize", &R::train, &TrainSection::advantage_std_normalize, "divide advantages by the group's standard deviation"));
    e.push_back(field("train.negative_advantage_weight", &R::train, &TrainSection::negative_advantage_weight,
                      "negative advantages are multiplied by this (1: plain GRPO; 0: only rollouts better than their "
                      "group's mean are reinforced)", in_range(0, 1)));
    e.push_back(field("train.mask_truncated", &R::train, &TrainSection::mask_truncated,
                      "leave completions cut at sampling.max_tokens out of the update (their rewards still count in "
                      "their group's advantages)"));
    e.push_back(field("train.remove_constant_reward_groups", &R::train, &TrainSection::remove_constant_reward_groups, "leave groups whose rewards are all equal out of the update"));
    e.push_back(field("train.max_steps_off_policy", &R::train, &TrainSection::max_steps_off_policy,
                      "0: synchronous steps; k >= 1: batch s is sampled from the weights after step s - k while earlier "
                      "batches are evaluated and trained (docs/training-runs.md)",
                      at_least(0)));
    std::vector<std::string> presets = rag::corpus_preset_names();
    presets.insert(presets.begin(), "");
    e.push_back(field("sft.data", &R::sft, &SftSection::data, "sft: files of examples, JSONL or CSV (docs/training-runs.md, \"Supervised warm start\")"));
    e.push_back(field("sft.format", &R::sft, &SftSection::format,
                      "corpus (PyTorch program -> kernel pairs, asked as RL asks and answered in the <KERNEL> format), "
                      "prompt_answer (a prompt and its answer, verbatim) or messages (chat messages, the last one the answer)",
                      one_of({"corpus", "prompt_answer", "messages"})));
    e.push_back(field("sft.preset", &R::sft, &SftSection::preset, "corpus: kernelbook or sakana, the field mapping of that export (docs/retrieval.md)",
                      one_of(presets)));
    e.push_back(field("sft.source_field", &R::sft, &SftSection::source_field, "corpus: the PyTorch program's field (empty: the preset's, else source)"));
    e.push_back(field("sft.kernel_field", &R::sft, &SftSection::kernel_field, "corpus: the answer program's field (empty: the preset's, else kernel)"));
    e.push_back(field("sft.id_fields", &R::sft, &SftSection::id_fields, "corpus: fields joined with / into an example's id (empty: the preset's, else <file>:<line>)"));
    e.push_back(field("sft.language", &R::sft, &SftSection::language,
                      "corpus: the kernel language of the files' rows (empty: the preset's, else prompt.language); rows of another language than prompt.language are left out"));
    e.push_back(field("sft.language_field", &R::sft, &SftSection::language_field, "corpus: a field holding each row's language (empty: the preset's, else none)"));
    e.push_back(field("sft.correct_field", &R::sft, &SftSection::correct_field, "corpus: keep only rows this field marks correct (empty: the preset's, else every row)"));
    e.push_back(field("sft.level_field", &R::sft, &SftSection::level_field, "corpus: a field holding each row's KernelBench level (empty: the preset's, else none)"));
    e.push_back(field("sft.levels", &R::sft, &SftSection::levels, "corpus: keep rows of these levels (empty: all; needs a level field)"));
    e.push_back(field("sft.prompt_field", &R::sft, &SftSection::prompt_field, "prompt_answer: the prompt's field"));
    e.push_back(field("sft.answer_field", &R::sft, &SftSection::answer_field, "prompt_answer: the answer's field"));
    e.push_back(field("sft.heldout_data", &R::sft, &SftSection::heldout_data, "files of held-out examples in sft.format (empty: hold out sft.heldout_fraction of sft.data)"));
    e.push_back(field("sft.heldout_fraction", &R::sft, &SftSection::heldout_fraction,
                      "share of sft.data's problems (corpus) or prompts held out for sft/heldout_loss, by a seeded hash", in_range(0, 1, true)));
    e.push_back(field("sft.batch_size", &R::sft, &SftSection::batch_size, "examples per optimizer step (micro-batched by train.micro_batch_tokens)", at_least(1)));
    e.push_back(field("sft.num_epochs", &R::sft, &SftSection::num_epochs, "passes over the training examples", at_least(1)));
    e.push_back(field("sft.max_steps", &R::sft, &SftSection::max_steps, "steps to run (0: num_epochs worth)", at_least(0)));
    e.push_back(field("sft.shuffle", &R::sft, &SftSection::shuffle, "a seeded shuffle per epoch"));
    e.push_back(field("sft.max_tokens", &R::sft, &SftSection::max_tokens, "prompt + answer tokens of an example at most", at_least(2)));
    e.push_back(field("sft.overlong", &R::sft, &SftSection::overlong, "a longer example: skip (left out, counted) or truncate (its answer's end cut)",
                      one_of({"skip", "truncate"})));
    e.push_back(field("sft.learning_rate", &R::sft, &SftSection::learning_rate, "AdamW learning rate of sft (0: train.learning_rate)", non_negative()));
    e.push_back(field("sft.lr_schedule", &R::sft, &SftSection::lr_schedule, "constant, linear or cosine (decaying toward 0 over the run's steps, after the warmup)",
                      one_of({"constant", "linear", "cosine"})));
    e.push_back(field("sft.warmup_steps", &R::sft, &SftSection::warmup_steps, "steps of linear warmup from 0", at_least(0)));
    return e;
  }();
  return entries;
}

// Keys that no longer exist, with what replaced them: a config written for an older kbrl fails
// with the way to say the same thing now, instead of "unknown key".
const std::map<std::string, std::string>& retired_keys() {
  static const std::map<std::string, std::string> keys = {
      {"dataset.name_pattern",
       "was replaced by dataset.include, a list of globs (one string is a list of one): write "
       "dataset.include: [\"<pattern>\"], and dataset.exclude for problems to leave out"},
      // One owner per setting: the returns behind multi-turn advantages are the reward's.
      {"train.async",
       "was replaced by train.max_steps_off_policy: 0 (the default) is the synchronous loop, 1 or more "
       "overlaps sampling with evaluation and training; remove train.async"},
      {"env.gamma",
       "was removed: the discount of later turns is the reward's, reward.multi_turn.gamma (with "
       "reward.multi_turn.form); set reward.multi_turn.gamma instead"},
  };
  return keys;
}

const Entry* find_entry(const std::string& key) {
  for (const auto& e : schema())
    if (e.key == key || std::find(e.aliases.begin(), e.aliases.end(), key) != e.aliases.end()) return &e;
  return nullptr;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string unknown_key_message(const std::string& key) {
  std::string best;
  std::size_t best_d = 4;
  const std::string last = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
  for (const auto& e : schema()) {
    std::size_t d = edit_distance(key, e.key);
    const std::string elast = e.key.substr(e.key.rfind('.') == std::string::npos ? 0 : e.key.rfind('.') + 1);
    if (elast == last) d = std::min<std::size_t>(d, 1);
    if (d < best_d) best_d = d, best = e.key;
  }
  bool is_section = false;
  for (const auto& e : schema())
    if (e.key.rfind(key + ".", 0) == 0) is_section = true;
  if (is_section) return fmt::format("'{}' is a section: give its keys (docs/configs.md)", key);
  return best.empty() ? fmt::format("unknown key '{}' (docs/configs.md lists every key)", key)
                      : fmt::format("unknown key '{}' (did you mean '{}'?)", key, best);
}

// A YAML mapping's key is any node: an empty key, a mapping or a list (YAML's "? " complex key)
// is no name of a setting, and reading the last two as a string throws yaml-cpp's conversion error.
const char* key_not_a_name(const YAML::Node& key) {
  return key.IsNull() ? "a key is empty" : "a key must be a name, not a mapping or a list";
}

// YAML -> JSON for the reward subtree (RewardConfig reads JSON). Quoted scalars stay strings.
// `path` is the dotted key of `n`, for errors.
boost::json::value to_json(const YAML::Node& n, const std::string& path) {
  if (n.IsMap()) {
    boost::json::object o;
    for (const auto& kv : n) {
      if (!kv.first.IsScalar()) throw core::ConfigError(path, "", key_not_a_name(kv.first));
      o[kv.first.Scalar()] = to_json(kv.second, path + "." + kv.first.Scalar());
    }
    return o;
  }
  if (n.IsSequence()) {
    boost::json::array a;
    for (std::size_t i = 0; i < n.size(); ++i) a.push_back(to_json(n[i], fmt::format("{}[{}]", path, i)));
    return a;
  }
  if (n.IsNull()) return nullptr;
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return boost::json::string(s);
  if (s == "true" || s == "True") return true;
  if (s == "false" || s == "False") return false;
  try {
    std::size_t used = 0;
    const long long i = std::stoll(s, &used);
    if (used == s.size()) return static_cast<std::int64_t>(i);
  } catch (...) {  // NOLINT: not an integer
  }
  try {
    std::size_t used = 0;
    const double d = std::stod(s, &used);
    if (used == s.size()) return d;
  } catch (...) {  // NOLINT: not a number
  }
  return boost::json::string(s);
}

struct Source {
  std::string file;  // the YAML file, or empty
  std::map<std::string, std::string> overrides;  // key -> the override text
  std::string where(const std::string& key, const YAML::Node& n) const {
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)
      if (key == it->first || key.rfind(it->first + ".", 0) == 0 || it->first.rfind(key + ".", 0) == 0)
        return fmt::format("override '{}'", it->second);
    if (file.empty()) return "config";
    return n.Mark().is_null() ? file : fmt::format("{}:{}", file, n.Mark().line + 1);
  }
};

// The config.yaml of a run started by an older kbrl says `train.async: false` next to
// `train.max_steps_off_policy: 1`, a bound that meant nothing while steps were synchronous. That
// run resumes as it ran, synchronous: both keys are read as max_steps_off_policy 0. (An older kbrl
// refused `train.async: true`, so no run has it; it gets the retired key's message, and so does
// the key given as an override, which is someone typing the old name.)
bool older_synchronous_train_section(const YAML::Node& node, const std::string& prefix, const Source& src) {
  if (prefix != "train" || src.overrides.count("train.async") != 0) return false;
  if (!node.IsMap() || !node["async"] || !node["async"].IsScalar()) return false;
  bool async = true;
  return YAML::convert<bool>::decode(node["async"], async) && !async;
}

void apply_tree(RunConfig& c, const YAML::Node& node, const std::string& prefix, const Source& src,
                const reward::RewardRegistry& registry) {
  const bool older_synchronous = older_synchronous_train_section(node, prefix, src);
  if (older_synchronous) c.train.max_steps_off_policy = 0;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) throw core::ConfigError(src.where(prefix, kv.first), prefix, key_not_a_name(kv.first));
    const std::string key = prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (older_synchronous && (key == "train.async" ||
                              (key == "train.max_steps_off_policy" && src.overrides.count(key) == 0)))
      continue;
    if (key == "reward") {
      try {
        c.reward = reward::RewardConfig::from_json(to_json(v, key), "reward", registry);
      } catch (const core::ConfigError& e) {
        throw core::ConfigError(src.where(key, v), "reward", e.what());
      }
      continue;
    }
    if (v.IsMap() && find_entry(key) == nullptr) {
      apply_tree(c, v, key, src, registry);
      continue;
    }
    const Entry* e = find_entry(key);
    if (e == nullptr) {
      if (const auto retired = retired_keys().find(key); retired != retired_keys().end())
        throw core::ConfigError(src.where(key, v), key, retired->second);
      throw core::ConfigError(src.where(key, v), key, unknown_key_message(key));
    }
    if (const auto err = e->set(c, v); !err.empty()) throw core::ConfigError(src.where(key, v), key, err);
  }
}

// yaml-cpp keeps both entries of a key written twice in one mapping, and applying them in turn
// would let the later one win without a word: a duplicate anywhere in the file (the reward
// section included) is an error naming both lines.
void reject_duplicate_keys(const YAML::Node& node, const std::string& prefix, const std::string& file) {
  if (node.IsSequence()) {
    for (std::size_t i = 0; i < node.size(); ++i)
      reject_duplicate_keys(node[i], fmt::format("{}[{}]", prefix, i), file);
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, int> first_line;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;  // not a name: apply_tree and to_json refuse it
    const std::string& name = kv.first.Scalar();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    const int line = kv.first.Mark().line + 1;
    if (const auto [it, fresh] = first_line.emplace(name, line); !fresh)
      throw core::ConfigError(fmt::format("{}:{}", file, line), key,
                              fmt::format("duplicate key: '{}' is already set at line {}", name, it->second));
    reject_duplicate_keys(kv.second, key, file);
  }
}

// Puts `value` at the dotted `path` of `root`, making maps on the way. The reward section may be
// a preset's name: it becomes {preset: name} so that fields can be set on top of it.
void set_path(YAML::Node root, const std::string& path, const YAML::Node& value, const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) throw core::ConfigError(fmt::format("override '{}'", text), path, "empty key segment");
    parts.push_back(p);
  }
  YAML::Node cur = root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = cur[parts[i]];
    if (next.IsScalar() && i == 0 && parts[0] == "reward") {
      YAML::Node m(YAML::NodeType::Map);
      m["preset"] = next.Scalar();
      cur[parts[i]] = m;
      next.reset(cur[parts[i]]);
    } else if (next.IsDefined() && !next.IsNull() && !next.IsMap()) {
      throw core::ConfigError(fmt::format("override '{}'", text), path,
                              fmt::format("'{}' holds a value, not a section", parts[i]));
    }
    if (!next.IsDefined() || next.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next.reset(cur[parts[i]]);
    }
    cur.reset(next);
  }
  cur[parts.back()] = value;
}

// train.mode=sft: what the sft section must say before anything loads (the files themselves are
// read by train/sft_data.hpp, whose errors name them).
void check_sft_section(const SftSection& s, const std::string& where) {
  if (s.data.empty())
    throw core::ConfigError(where, "sft.data",
                            "train.mode=sft needs the files of examples: sft.data=[file.jsonl, ...] (JSONL or CSV)");
  const bool corpus = s.format == "corpus";
  const std::pair<const char*, bool> corpus_only[] = {
      {"sft.preset", !s.preset.empty()},           {"sft.source_field", !s.source_field.empty()},
      {"sft.kernel_field", !s.kernel_field.empty()}, {"sft.id_fields", !s.id_fields.empty()},
      {"sft.language", !s.language.empty()},       {"sft.language_field", !s.language_field.empty()},
      {"sft.correct_field", !s.correct_field.empty()}, {"sft.level_field", !s.level_field.empty()},
      {"sft.levels", !s.levels.empty()}};
  if (!corpus)
    for (const auto& [key, set] : corpus_only)
      if (set) throw core::ConfigError(where, key, fmt::format("is read only with sft.format=corpus (this run: {})", s.format));
  if (s.format != "prompt_answer") {
    const SftSection defaults;
    if (s.prompt_field != defaults.prompt_field || s.answer_field != defaults.answer_field)
      throw core::ConfigError(where, s.prompt_field != defaults.prompt_field ? "sft.prompt_field" : "sft.answer_field",
                              fmt::format("is read only with sft.format=prompt_answer (this run: {})", s.format));
  }
  if (s.prompt_field.empty() || s.answer_field.empty())
    throw core::ConfigError(where, s.prompt_field.empty() ? "sft.prompt_field" : "sft.answer_field", "must not be empty");
  if (corpus && !s.levels.empty() && s.level_field.empty() &&
      (s.preset.empty() || rag::corpus_preset(s.preset).level_field.empty()))
    throw core::ConfigError(where, "sft.levels", "needs a level field: set sft.level_field (or a preset that has one)");
  if (corpus && !s.language.empty()) {
    try {
      core::parse_kernel_language(s.language);
    } catch (const core::InvalidArgument& e) {
      throw core::ConfigError(where, "sft.language", e.what());
    }
  }
}

}  // namespace

RunConfig load_run_config(const std::optional<fs::path>& yaml, const std::vector<std::string>& overrides,
                          const reward::RewardRegistry& registry) {
  Source src;
  YAML::Node root(YAML::NodeType::Map);
  if (yaml) {
    src.file = yaml->string();
    if (!fs::exists(*yaml)) throw core::ConfigError(src.file, "", "no such file");
    try {
      root = YAML::LoadFile(yaml->string());
    } catch (const YAML::ParserException& e) {
      throw core::ConfigError(fmt::format("{}:{}", src.file, e.mark.line + 1), "", e.msg);
    } catch (const YAML::Exception& e) {
      throw core::ConfigError(src.file, "", e.what());
    }
    if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    if (!root.IsMap()) throw core::ConfigError(src.file, "", "the top level must be a mapping of keys");
    reject_duplicate_keys(root, "", src.file);
  }
  for (const auto& text : overrides) {
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0)
      throw core::ConfigError(fmt::format("override '{}'", text), "", "expected key=value (a dotted key, e.g. dataset.batch_size=4)");
    const std::string key = text.substr(0, eq), value = text.substr(eq + 1);
    YAML::Node v;
    try {
      // A leading '*' is YAML's alias, which a one-value document cannot resolve: on a command
      // line it is a glob (dataset.include=*relu*), so the text is taken as it is.
      v = !value.empty() && value[0] == '*' ? YAML::Node(value) : YAML::Load(value);
    } catch (const YAML::Exception& e) {
      throw core::ConfigError(fmt::format("override '{}'", text), key, fmt::format("bad value: {}", e.what()));
    }
    if (key.rfind("reward", 0) != 0 && key.find('.') == std::string::npos && find_entry(key) == nullptr)
      throw core::ConfigError(fmt::format("override '{}'", text), key, unknown_key_message(key));
    // reward.<field>=... edits the reward in force: without a reward section that is the
    // default preset, not an empty reward.
    if (key.rfind("reward.", 0) == 0 && !static_cast<const YAML::Node&>(root)["reward"]) {
      YAML::Node preset(YAML::NodeType::Map);
      preset["preset"] = RunConfig{}.reward.name;
      root["reward"] = preset;
    }
    set_path(root, key, v, text);
    src.overrides[key] = text;
  }
  RunConfig c;
  apply_tree(c, root, "", src, registry);
  if (c.log_path.empty())
    throw core::ConfigError(src.file.empty() ? "config" : src.file, "log_path", "is required (the run directory); add log_path=<dir>");
  const std::string device(core::to_string(c.evaluator.local.platform));
  if (c.prompt.language == "cpp" && device != "cpu")
    throw core::ConfigError(src.file.empty() ? "config" : src.file, "prompt.language",
                            fmt::format("cpp kernels run on the cpu evaluator, not {}", device));
  if ((c.prompt.language == "cuda" && device != "cuda") || (c.prompt.language == "hip" && device != "hip"))
    throw core::ConfigError(src.file.empty() ? "config" : src.file, "prompt.language",
                            fmt::format("{} kernels need evaluator.device={}", c.prompt.language, c.prompt.language));
  // Retrieval: the checks that span fields (k = 0 or a budget of 0 with an index) and the index file.
  if (const auto problem = rag::check_retrieval_config(
          c.prompt.retrieval, [](const std::string& field) { return "prompt.retrieval." + field; }))
    throw core::ConfigError(src.file.empty() ? "config" : src.file, "prompt.retrieval." + problem->field, problem->message);
  // The episode shaping of multi-turn returns would be read by no one in a single-turn run.
  const auto& mt = c.reward.multi_turn;
  if (!c.env.multi_turn && (mt.success_bonus != 0.0 || mt.failure_penalty != 0.0 || mt.normalize_returns))
    throw core::ConfigError(src.file.empty() ? "config" : src.file, "reward.multi_turn",
                            "success_bonus, failure_penalty and normalize_returns shape multi-turn episodes: set "
                            "env.multi_turn=true, or leave them at 0 / false");
  if (c.sampling.backend == "openai" && c.sampling.endpoint.empty())
    throw core::ConfigError(src.file.empty() ? "config" : src.file, "sampling.endpoint",
                            "sampling.backend=openai needs the server's API root, e.g. sampling.endpoint=http://127.0.0.1:8000/v1");
  if (c.sampling.backend != "openai" && !c.sampling.endpoint.empty())
    throw core::ConfigError(src.file.empty() ? "config" : src.file, "sampling.endpoint",
                            "is read only with sampling.backend=openai");
  if (c.train.mode == "sft") check_sft_section(c.sft, src.file.empty() ? "config" : src.file);
  // evaluator.static_check_config is read now (an error names that file), not after the model has
  // loaded.
  if (!c.evaluator.static_check_config.empty()) eval::local_evaluator_config(c.evaluator);
  return c;
}

std::filesystem::path problems_path(const RunConfig& config) {
  if (!config.dataset.problems.empty()) return config.dataset.problems;
  namespace fs = std::filesystem;
  try {
    return dataset::find_kernelbench({fs::current_path(), fs::absolute(config.log_path).parent_path()});
  } catch (const core::InvalidArgument& e) {
    throw core::ConfigError("config", "dataset.problems", e.what());
  }
}

dataset::ProblemFilter problem_filter(const DatasetSection& d) {
  dataset::ProblemFilter f;
  f.levels = d.levels;
  f.include = d.include;
  f.exclude = d.exclude;
  return f;
}

std::string to_yaml(const RunConfig& config) {
  std::string out = "# kbrl-train configuration, every key resolved (docs/configs.md).\n";
  std::string section;
  for (const auto& e : schema()) {
    const auto dot = e.key.find('.');
    const std::string s = dot == std::string::npos ? "" : e.key.substr(0, dot);
    const std::string name = dot == std::string::npos ? e.key : e.key.substr(dot + 1);
    if (s != section) {
      out += "\n" + s + ":\n";
      section = s;
    }
    out += (s.empty() ? "" : "  ") + name + ": " + e.get(config) + "\n";
  }
  // JSON is YAML: the reward section in RewardConfig's own complete form.
  out += "\nreward: " + boost::json::serialize(config.reward.to_json()) + "\n";
  return out;
}

void write_resolved(const RunConfig& config, const fs::path& path) {
  core::write_file_atomically(path, to_yaml(config));
}

std::string config_reference_markdown() {
  const RunConfig defaults;
  std::string out = "| key | default | meaning |\n|---|---|---|\n";
  for (const auto& e : schema()) {
    std::string d = e.get(defaults);
    std::string doc;  // a '|' would end the cell
    for (char ch : e.doc) doc += ch == '|' ? std::string("\\|") : std::string(1, ch);
    out += fmt::format("| `{}` | `{}` | {} |\n", e.key, d, doc);
  }
  out += "| `reward` | `" + defaults.reward.name +
         "` | a preset name or a reward object (docs/rewards.md; `default` is kernel_rl's default reward); "
         "`reward.<field>=...` edits one field |\n";
  // The reward's own fields are documented in docs/rewards.md; these two also drive training.
  out += fmt::format("| `reward.multi_turn.gamma` | `{}` | discount of later turns' rewards in a turn's return (multi-turn advantages) |\n",
                     to_text(defaults.reward.multi_turn.gamma));
  out += fmt::format("| `reward.multi_turn.form` | `{}` | `sum`: R_t = r_t + gamma R_(t+1); `max`: the best discounted later reward |\n",
                     reward::to_string(defaults.reward.multi_turn.form));
  out += fmt::format("| `reward.multi_turn.success_bonus` | `{}` | added to the last turn's return of an episode whose kernel was correct at some turn (env.multi_turn only) |\n",
                     to_text(defaults.reward.multi_turn.success_bonus));
  out += fmt::format("| `reward.multi_turn.failure_penalty` | `{}` | added to the last turn's return of an episode that never had a correct kernel (env.multi_turn only) |\n",
                     to_text(defaults.reward.multi_turn.failure_penalty));
  out += fmt::format("| `reward.multi_turn.normalize_returns` | `{}` | z-score the returns within each episode of two turns or more (env.multi_turn only) |\n",
                     defaults.reward.multi_turn.normalize_returns ? "true" : "false");
  return out;
}

}  // namespace kbrl::train
