// PEFT's LoRA on kbrl's decoder. The formats follow what PEFT 0.21 writes and loads: config keys
// as in adapter_config.json, tensor keys "base_model.model.<module>.lora_{A,B}.weight".
#include "kbrl/model/torch/lora.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <boost/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "kbrl/core/error.hpp"
#include "kbrl/core/json_reader.hpp"
#include "kbrl/model/safetensors.hpp"
#include "kbrl/model/torch/torch_tensors.hpp"
#include "kbrl/core/text.hpp"

namespace kbrl::model {
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr const char* kPrefix = "base_model.model.";
std::string key_a(const std::string& module) { return kPrefix + module + ".lora_A.weight"; }
std::string key_b(const std::string& module) { return kPrefix + module + ".lora_B.weight"; }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void freeze(DecoderModel& model) {
  for (const auto& [name, t] : named_tensors(model)) t.requires_grad_(false);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// LoraConfig

void LoraConfig::validate() const {
  if (rank <= 0) throw core::InvalidArgument(core::cat("LoraConfig.rank must be positive, got ", rank));
  if (!std::isfinite(alpha)) throw core::InvalidArgument("LoraConfig.alpha must be finite");
  if (!(dropout >= 0.0 && dropout < 1.0))
    throw core::InvalidArgument(core::cat("LoraConfig.dropout must lie in [0, 1), got ", dropout));
  if (target_regex.empty() && target_modules.empty())
    throw core::InvalidArgument("LoraConfig.target_modules is empty (and no target_regex)");
  for (const auto& t : target_modules)
    if (t.empty()) throw core::InvalidArgument("LoraConfig.target_modules holds an empty name");
  if (!target_regex.empty()) {
    try {
      const std::regex re(target_regex);
    } catch (const std::regex_error& e) {
      throw core::InvalidArgument(core::cat("LoraConfig.target_regex is not a regular expression: ", e.what()));
    }
  }
}

double LoraConfig::scale() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
}

bool LoraConfig::targets(const std::string& module_name) const {
  if (!target_regex.empty()) return std::regex_match(module_name, std::regex(target_regex));
  for (const auto& t : target_modules)
    if (module_name == t || ends_with(module_name, "." + t)) return true;
  return false;
}

// ---------------------------------------------------------------------------------------------
// Attaching

std::vector<std::pair<std::string, at::Tensor>> named_tensors(const DecoderModel& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const DecoderWeights& w = model.weights();
  const auto linear = [&](const std::string& name, const Linear& l) {
    out.emplace_back(name + ".weight", l.weight);
    if (l.bias.defined()) out.emplace_back(name + ".bias", l.bias);
  };
  out.emplace_back("model.embed_tokens.weight", w.embed_tokens);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const DecoderLayer& l = w.layers[i];
    const std::string p = core::cat("model.layers.", i, ".");
    out.emplace_back(p + "input_layernorm.weight", l.input_norm);
    linear(p + "self_attn.q_proj", l.q_proj);
    linear(p + "self_attn.k_proj", l.k_proj);
    linear(p + "self_attn.v_proj", l.v_proj);
    linear(p + "self_attn.o_proj", l.o_proj);
    if (l.q_norm.defined()) out.emplace_back(p + "self_attn.q_norm.weight", l.q_norm);
    if (l.k_norm.defined()) out.emplace_back(p + "self_attn.k_norm.weight", l.k_norm);
    out.emplace_back(p + "post_attention_layernorm.weight", l.post_attention_norm);
    linear(p + "mlp.gate_proj", l.gate_proj);
    linear(p + "mlp.up_proj", l.up_proj);
    linear(p + "mlp.down_proj", l.down_proj);
  }
  out.emplace_back("model.norm.weight", w.norm);
  if (!model.config().tie_word_embeddings) linear("lm_head", w.lm_head);
  return out;
}

static void check_attachable(DecoderModel& model, const std::vector<std::string>& modules, const std::string& what) {
  if (modules.empty()) throw core::InvalidArgument(core::cat(what, ": no module of the model matches target_modules"));
  for (const auto& [name, linear] : model.linears()) {
    if (linear->lora) throw core::InvalidArgument(core::cat(what, ": the model already has an adapter on ", name));
  }
  if (model.config().tie_word_embeddings)
    for (const auto& m : modules)
      if (m == "lm_head")
        throw core::InvalidArgument(core::cat(what, ": lm_head is tied to the embedding; an adapter on it is not supported"));
}

LoraModel LoraModel::attach(DecoderModel& model, const LoraConfig& config, c10::ScalarType adapter_dtype) {
  config.validate();
  LoraModel lora(model, config);
  for (const auto& [name, linear] : model.linears())
    if (config.targets(name)) lora.modules_.push_back(name);
  check_attachable(model, lora.modules_, "LoraModel::attach");
  freeze(model);

  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(config.seed);
  const auto options = at::TensorOptions().dtype(adapter_dtype).device(model.device());
  for (const auto& [name, linear] : model.linears()) {
    if (!config.targets(name)) continue;
    const auto out = linear->weight.size(0), in = linear->weight.size(1);
    // kaiming_uniform_(a=sqrt(5)) on [r, in]: gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    at::Tensor a = at::empty({config.rank, in}, at::kFloat).uniform_(-bound, bound, gen).to(options);
    LoraAdapter adapter;
    adapter.a = a.requires_grad_(true);
    adapter.b = at::zeros({out, config.rank}, options).requires_grad_(true);
    adapter.scale = config.scale();
    adapter.dropout = config.dropout;
    linear->lora = std::move(adapter);
  }
  return lora;
}

std::vector<std::pair<std::string, at::Tensor>> LoraModel::trainable_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, linear] : model_->linears()) {
    if (!linear->lora) continue;
    out.emplace_back(key_a(name), linear->lora->a);
    out.emplace_back(key_b(name), linear->lora->b);
  }
  return out;
}

std::vector<at::Tensor> LoraModel::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : trainable_parameters()) out.push_back(t);
  return out;
}

void LoraModel::set_training(bool training) {
  training_ = training;
  for (const auto& [name, linear] : model_->linears())
    if (linear->lora) linear->lora->training = training;
}

void LoraModel::detach() {
  for (const auto& [name, linear] : model_->linears()) linear->lora.reset();
  modules_.clear();
}

DecoderModel LoraModel::merged() const {
  DecoderModel copy = *model_;
  const c10::NoGradGuard no_grad;
  for (const auto& [name, linear] : copy.linears()) {
    if (!linear->lora) continue;
    const LoraAdapter& l = *linear->lora;
    const at::ScalarType wide = at::promote_types(linear->weight.scalar_type(), l.a.scalar_type());
    const at::Tensor delta = at::matmul(l.b.to(wide), l.a.to(wide)) * l.scale;
    linear->weight = (linear->weight.to(wide) + delta).to(linear->weight.scalar_type());
    linear->lora.reset();
  }
  return copy;
}

void LoraModel::save_merged(const fs::path& dir, const fs::path& base_model_dir) const {
  if (!fs::is_regular_file(base_model_dir / "config.json"))
    throw core::InvalidArgument(core::cat("save_merged: ", (base_model_dir / "config.json").string(), " does not exist"));
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(base_model_dir)) {
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || ends_with(file, ".safetensors") || file == "model.safetensors.index.json")
      continue;
    fs::copy_file(entry.path(), dir / file, fs::copy_options::overwrite_existing);
  }
  const DecoderModel m = merged();
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, t] : named_tensors(m)) tensors.emplace(name, t.detach());
  save_tensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
}

// ---------------------------------------------------------------------------------------------
// PEFT files

void LoraModel::save(const fs::path& dir, const std::string& base_model_name_or_path) const {
  fs::create_directories(dir);
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, t] : trainable_parameters()) tensors.emplace(name, t.detach());
  save_tensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});

  // Every key PEFT 0.21 writes, with its defaults, so PEFT loads the file as its own.
  json::object c;
  c["alora_invocation_tokens"] = nullptr;
  c["alpha_pattern"] = json::object();
  c["arrow_config"] = nullptr;
  c["auto_mapping"] = nullptr;
  c["base_model_name_or_path"] = base_model_name_or_path;
  c["bias"] = "none";
  c["corda_config"] = nullptr;
  c["ensure_weight_tying"] = false;
  c["eva_config"] = nullptr;
  c["exclude_modules"] = nullptr;
  c["fan_in_fan_out"] = false;
  c["inference_mode"] = true;
  c["init_lora_weights"] = true;
  c["kasa_config"] = nullptr;
  c["layer_replication"] = nullptr;
  c["layers_pattern"] = nullptr;
  c["layers_to_transform"] = nullptr;
  c["loftq_config"] = json::object();
  // An integral alpha as an integer, as PEFT users write it.
  if (config_.alpha == std::floor(config_.alpha) && std::abs(config_.alpha) < 1e15) {
    c["lora_alpha"] = static_cast<std::int64_t>(config_.alpha);
  } else {
    c["lora_alpha"] = config_.alpha;
  }
  c["lora_bias"] = false;
  c["lora_dropout"] = config_.dropout;
  c["lora_ga_config"] = nullptr;
  c["megatron_config"] = nullptr;
  c["megatron_core"] = "megatron.core";
  c["modules_to_save"] = nullptr;
  c["monteclora_config"] = nullptr;
  c["peft_type"] = "LORA";
  c["qalora_group_size"] = 16;
  c["r"] = config_.rank;
  c["rank_pattern"] = json::object();
  c["revision"] = nullptr;
  if (!config_.target_regex.empty()) {
    c["target_modules"] = config_.target_regex;
  } else {
    json::array targets;
    for (const auto& t : config_.target_modules) targets.emplace_back(t);
    c["target_modules"] = std::move(targets);
  }
  c["target_parameters"] = nullptr;
  c["task_type"] = "CAUSAL_LM";
  c["trainable_token_indices"] = nullptr;
  c["use_bdlora"] = nullptr;
  c["use_dora"] = false;
  c["use_qalora"] = false;
  c["use_rslora"] = config_.use_rslora;
  c["velora_config"] = nullptr;
  std::ofstream out(dir / "adapter_config.json", std::ios::trunc);
  out << json::serialize(c) << "\n";
  if (!out) throw core::InvalidArgument(core::cat("cannot write ", (dir / "adapter_config.json").string()));
}

namespace {

json::object read_config(const fs::path& path) {
  json::value v = core::read_json_file(path);
  if (!v.is_object()) throw core::ConfigError(path.string(), "", "not a JSON object");
  return v.as_object();
}

// A value that means "off" for an option we do not compute: null, false, "" or an empty
// container (PEFT writes these defaults).
bool is_off(const json::value& v) {
  if (v.is_null()) return true;
  if (v.is_bool()) return !v.as_bool();
  if (v.is_object()) return v.as_object().empty();
  if (v.is_array()) return v.as_array().empty();
  if (v.is_string()) return v.as_string().empty();
  return false;
}

}  // namespace

LoraModel LoraModel::load(DecoderModel& model, const fs::path& dir, c10::ScalarType adapter_dtype) {
  const fs::path config_path = dir / "adapter_config.json";
  const std::string where = config_path.string();
  const json::object c = read_config(config_path);

  const auto field = [&](const char* key) -> const json::value* {
    const auto it = c.find(key);
    return it == c.end() ? nullptr : &it->value();
  };
  const auto require = [&](const char* key) -> const json::value& {
    const json::value* v = field(key);
    if (v == nullptr) throw core::ConfigError(where, key, "missing");
    return *v;
  };
  const auto number = [&](const char* key, const json::value& v) {
    if (!v.is_number()) throw core::ConfigError(where, key, "must be a number");
    return v.to_number<double>();
  };

  const json::value& peft_type = require("peft_type");
  if (!peft_type.is_string() || peft_type.as_string() != "LORA")
    throw core::ConfigError(where, "peft_type",
                            core::cat("must be \"LORA\", found ", json::serialize(peft_type),
                                        " (only LoRA adapters are supported)"));
  if (const json::value* t = field("task_type"); t != nullptr && !t->is_null() &&
                                                 !(t->is_string() && t->as_string() == "CAUSAL_LM"))
    throw core::ConfigError(where, "task_type", core::cat("must be \"CAUSAL_LM\", found ", json::serialize(*t)));
  if (const json::value* b = field("bias"); b != nullptr && !(b->is_string() && b->as_string() == "none"))
    throw core::ConfigError(where, "bias",
                            core::cat("must be \"none\", found ", json::serialize(*b), " (trained biases are not supported)"));
  // Options that change what the adapter computes or which tensors it holds.
  for (const char* key : {"modules_to_save", "use_dora", "lora_bias", "fan_in_fan_out", "rank_pattern", "alpha_pattern",
                          "layers_to_transform", "exclude_modules", "trainable_token_indices", "target_parameters",
                          "layer_replication", "use_qalora", "alora_invocation_tokens", "use_bdlora", "arrow_config",
                          "velora_config", "monteclora_config"}) {
    if (const json::value* v = field(key); v != nullptr && !is_off(*v))
      throw core::ConfigError(where, key, core::cat("is set to ", json::serialize(*v), "; kbrl's LoRA does not support it"));
  }

  LoraConfig config;
  const json::value& r = require("r");
  if (!r.is_int64() && !r.is_uint64()) throw core::ConfigError(where, "r", "must be an integer");
  config.rank = r.to_number<std::int64_t>();
  config.alpha = number("lora_alpha", require("lora_alpha"));
  if (const json::value* v = field("lora_dropout"); v != nullptr && !v->is_null()) config.dropout = number("lora_dropout", *v);
  if (const json::value* v = field("use_rslora"); v != nullptr && !v->is_null()) {
    if (!v->is_bool()) throw core::ConfigError(where, "use_rslora", "must be true or false");
    config.use_rslora = v->as_bool();
  }
  const json::value& targets = require("target_modules");
  config.target_modules.clear();
  if (targets.is_string()) {
    config.target_regex = std::string(targets.as_string());
  } else if (targets.is_array()) {
    for (const auto& t : targets.as_array()) {
      if (!t.is_string()) throw core::ConfigError(where, "target_modules", "must hold strings");
      config.target_modules.emplace_back(t.as_string());
    }
  } else {
    throw core::ConfigError(where, "target_modules", "must be a list of names or one regular expression");
  }
  try {
    config.validate();
  } catch (const core::InvalidArgument& e) {
    throw core::ConfigError(where, "", e.what());
  }

  LoraModel lora(model, config);
  for (const auto& [name, linear] : model.linears())
    if (config.targets(name)) lora.modules_.push_back(name);
  try {
    check_attachable(model, lora.modules_, "LoraModel::load");
  } catch (const core::InvalidArgument& e) {
    throw core::ConfigError(where, "target_modules", e.what());
  }

  const fs::path tensors_path = dir / "adapter_model.safetensors";
  const Checkpoint file(tensors_path);
  std::vector<std::string> problems;
  std::set<std::string> used;
  const auto options = at::TensorOptions().dtype(adapter_dtype).device(model.device());
  const auto take = [&](const std::string& key, std::vector<std::int64_t> shape) -> at::Tensor {
    used.insert(key);
    if (!file.contains(key)) {
      problems.push_back(core::cat("missing ", key, " (expected shape ", core::shape_string(shape), ")"));
      return {};
    }
    const TensorInfo& info = file.info(key);
    if (info.shape != shape) {
      problems.push_back(core::cat(key, ": expected shape ", core::shape_string(shape), " (r = ", config.rank,
                                     "), found ", core::shape_string(info.shape)));
      return {};
    }
    return load_tensor(file, key, options);
  };
  std::map<std::string, LoraAdapter> adapters;
  for (const auto& [name, linear] : model.linears()) {
    if (!config.targets(name)) continue;
    LoraAdapter adapter;
    adapter.a = take(key_a(name), {config.rank, linear->weight.size(1)});
    adapter.b = take(key_b(name), {linear->weight.size(0), config.rank});
    adapter.scale = config.scale();
    adapter.dropout = config.dropout;
    adapters.emplace(name, std::move(adapter));
  }
  for (const auto& name : file.tensor_names())
    if (!used.contains(name)) problems.push_back(core::cat("unexpected tensor ", name));
  if (!problems.empty()) {
    std::string list;
    for (const auto& p : problems) list += "\n  " + p;
    throw core::ConfigError(tensors_path.string(), "",
                            core::cat("does not match ", where, " and the model (", problems.size(), " problems):", list));
  }

  freeze(model);
  for (const auto& [name, linear] : model.linears()) {
    auto it = adapters.find(name);
    if (it == adapters.end()) continue;
    it->second.a.requires_grad_(true);
    it->second.b.requires_grad_(true);
    linear->lora = std::move(it->second);
  }
  return lora;
}

}  // namespace kbrl::model
