#include "kbrl/model/config.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/json_reader.hpp"

namespace kbrl::model {
namespace json = boost::json;
namespace fs = std::filesystem;
using core::ConfigError;

namespace {

// Typed access by key to one JSON object (core::JsonReader does the type checks), naming the
// dotted key path in every error. A null value counts as missing, as transformers treats it.
class Keys {
 public:
  Keys(const json::object& o, std::string where, std::string prefix = "")
      : o_(o), reader_(std::move(where)), prefix_(std::move(prefix)) {}

  std::string path(std::string_view key) const { return prefix_ + std::string(key); }
  const json::value* find(std::string_view key) const { return core::JsonReader::member(o_, key); }
  [[noreturn]] void fail(std::string_view key, const std::string& what) const { reader_.fail(path(key), what); }

  std::int64_t integer(std::string_view key) const { return reader_.int64(required(key), path(key)); }
  std::optional<std::int64_t> integer_or(std::string_view key) const {
    const json::value* v = find(key);
    return v == nullptr ? std::nullopt : std::optional<std::int64_t>(reader_.int64(*v, path(key)));
  }
  double number(std::string_view key) const { return reader_.number(required(key), path(key)); }
  std::optional<double> number_or(std::string_view key) const {
    const json::value* v = find(key);
    return v == nullptr ? std::nullopt : std::optional<double>(reader_.number(*v, path(key)));
  }
  bool boolean_or(std::string_view key, bool fallback) const {
    const json::value* v = find(key);
    return v == nullptr ? fallback : reader_.boolean(*v, path(key));
  }
  std::optional<std::string> string_or(std::string_view key) const {
    const json::value* v = find(key);
    return v == nullptr ? std::nullopt : std::optional<std::string>(reader_.string(*v, path(key)));
  }

 private:
  const json::value& required(std::string_view key) const {
    const json::value* v = find(key);
    if (v == nullptr) fail(key, "missing");
    return *v;
  }

  const json::object& o_;
  core::JsonReader reader_;
  std::string prefix_;
};

Architecture parse_architecture(const Keys& k) {
  constexpr std::string_view kSupported = "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";
  if (const json::value* a = k.find("architectures")) {
    if (!a->is_array() || a->get_array().empty() || !a->get_array()[0].is_string())
      k.fail("architectures", "expected a list of architecture names");
    const std::string_view name = a->get_array()[0].get_string();
    if (name == "LlamaForCausalLM") return Architecture::Llama;
    if (name == "Qwen2ForCausalLM") return Architecture::Qwen2;
    if (name == "Qwen3ForCausalLM") return Architecture::Qwen3;
    k.fail("architectures", fmt::format("unknown architecture '{}' (supported: {})", name, kSupported));
  }
  // Configs saved on their own (not with a model) carry only model_type.
  const auto type = k.string_or("model_type");
  if (!type) k.fail("architectures", fmt::format("missing (and no model_type either); supported: {}", kSupported));
  if (*type == "llama") return Architecture::Llama;
  if (*type == "qwen2") return Architecture::Qwen2;
  if (*type == "qwen3") return Architecture::Qwen3;
  k.fail("model_type", fmt::format("unknown model type '{}' (supported: llama, qwen2, qwen3)", *type));
}

// v5 writes rope_parameters {rope_type, rope_theta, factor, ...}; v4 writes rope_theta at the
// top level and rope_scaling {rope_type or type, factor, ...} (or null).
RopeConfig parse_rope(const Keys& top, const std::string& where) {
  RopeConfig rope;
  const json::object* params = nullptr;
  std::string params_key;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (const json::value* v = top.find(key)) {
      if (!v->is_object()) top.fail(key, "expected an object");
      params = &v->get_object();
      params_key = key;
      break;
    }
  }
  rope.theta = top.number_or("rope_theta").value_or(10000.0);
  if (params == nullptr) return rope;

  const Keys k(*params, where, params_key + ".");
  for (const char* layer_type : {"full_attention", "sliding_attention"})
    if (k.find(layer_type)) k.fail(layer_type, "per-layer-type rope parameters are not supported");
  if (const auto theta = k.number_or("rope_theta")) rope.theta = *theta;
  if (const auto partial = k.number_or("partial_rotary_factor"); partial && *partial != 1.0)
    k.fail("partial_rotary_factor", "partial rotary embeddings are not supported");
  std::string type = k.string_or("rope_type").value_or(k.string_or("type").value_or("default"));
  if (type == "default") {
    rope.type = RopeConfig::Type::kDefault;
  } else if (type == "linear") {
    rope.type = RopeConfig::Type::kLinear;
    rope.factor = k.number("factor");
  } else if (type == "llama3") {
    rope.type = RopeConfig::Type::kLlama3;
    rope.factor = k.number("factor");
    rope.low_freq_factor = k.number("low_freq_factor");
    rope.high_freq_factor = k.number("high_freq_factor");
    rope.original_max_position_embeddings = k.integer("original_max_position_embeddings");
    if (rope.high_freq_factor <= rope.low_freq_factor)
      k.fail("high_freq_factor", "must be greater than low_freq_factor");
  } else {
    k.fail(k.find("rope_type") ? "rope_type" : "type",
           fmt::format("unsupported rope type '{}' (supported: default, linear, llama3)", type));
  }
  return rope;
}

void check_positive(const Keys& k, std::string_view key, std::int64_t v) {
  if (v <= 0) k.fail(key, fmt::format("must be positive, got {}", v));
}

}  // namespace

std::string_view architecture_name(Architecture a) {
  switch (a) {
    case Architecture::Llama: return "LlamaForCausalLM";
    case Architecture::Qwen2: return "Qwen2ForCausalLM";
    case Architecture::Qwen3: return "Qwen3ForCausalLM";
  }
  return "?";
}

ModelConfig parse_model_config(std::string_view json_text, const std::string& where) {
  const json::value root_value = core::JsonReader(where).parse(json_text);
  if (!root_value.is_object()) throw ConfigError(where, "", "not a JSON object");
  const json::object& root = root_value.get_object();
  const Keys k(root, where);

  ModelConfig c;
  c.architecture = parse_architecture(k);
  c.vocab_size = k.integer("vocab_size");
  c.hidden_size = k.integer("hidden_size");
  c.intermediate_size = k.integer("intermediate_size");
  c.num_hidden_layers = k.integer("num_hidden_layers");
  c.num_attention_heads = k.integer("num_attention_heads");
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"})
    check_positive(k, key, k.integer(key));
  // Absent means multi-head attention, as in transformers.
  c.num_key_value_heads = k.integer_or("num_key_value_heads").value_or(c.num_attention_heads);
  check_positive(k, "num_key_value_heads", c.num_key_value_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    k.fail("num_key_value_heads", fmt::format("{} does not divide num_attention_heads {}", c.num_key_value_heads,
                                              c.num_attention_heads));
  if (c.architecture == Architecture::Qwen3) {
    c.head_dim = k.integer("head_dim");  // Qwen3 decouples it from hidden_size / heads
  } else if (const auto hd = k.integer_or("head_dim")) {
    c.head_dim = *hd;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      k.fail("num_attention_heads", fmt::format("does not divide hidden_size {} (and no head_dim is given)", c.hidden_size));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  check_positive(k, "head_dim", c.head_dim);
  if (c.head_dim % 2 != 0) k.fail("head_dim", fmt::format("rotary embeddings need an even head_dim, got {}", c.head_dim));
  c.max_position_embeddings = k.integer_or("max_position_embeddings").value_or(0);
  c.rms_norm_eps = k.number("rms_norm_eps");
  if (!(c.rms_norm_eps > 0)) k.fail("rms_norm_eps", "must be positive");
  c.rope = parse_rope(k, where);
  if (!(c.rope.theta > 0)) k.fail("rope_theta", "must be positive");
  c.tie_word_embeddings = k.boolean_or("tie_word_embeddings", false);

  if (const auto act = k.string_or("hidden_act"); act && *act != "silu")
    k.fail("hidden_act", fmt::format("only silu is supported, got '{}'", *act));
  switch (c.architecture) {
    case Architecture::Llama:
      c.qkv_bias = c.o_bias = k.boolean_or("attention_bias", false);
      c.mlp_bias = k.boolean_or("mlp_bias", false);
      if (const auto tp = k.integer_or("pretraining_tp"); tp && *tp != 1)
        k.fail("pretraining_tp", "only 1 is supported");
      break;
    case Architecture::Qwen2:
      c.qkv_bias = true;
      c.o_bias = false;
      break;
    case Architecture::Qwen3:
      c.qkv_bias = c.o_bias = k.boolean_or("attention_bias", false);
      c.qk_norm = true;
      break;
  }
  if (c.architecture != Architecture::Llama) {
    if (k.boolean_or("use_sliding_window", false))
      k.fail("use_sliding_window", "sliding-window attention is not supported");
  }
  if (const json::value* types = k.find("layer_types")) {
    if (!types->is_array()) k.fail("layer_types", "expected a list");
    for (const json::value& t : types->get_array())
      if (!t.is_string() || t.get_string() != "full_attention")
        k.fail("layer_types", fmt::format("only full_attention layers are supported, got {}", json::serialize(t)));
  }

  c.dtype = k.string_or("dtype").value_or(k.string_or("torch_dtype").value_or(""));
  if (const json::value* eos = k.find("eos_token_id")) {
    if (eos->is_array()) {
      for (const json::value& id : eos->get_array()) {
        if (!id.is_int64() && !id.is_uint64()) k.fail("eos_token_id", "expected integers");
        c.eos_token_ids.push_back(id.is_int64() ? id.get_int64() : static_cast<std::int64_t>(id.get_uint64()));
      }
    } else {
      c.eos_token_ids.push_back(k.integer("eos_token_id"));
    }
  }
  c.bos_token_id = k.integer_or("bos_token_id");
  return c;
}

ModelConfig load_model_config(const fs::path& path) {
  const fs::path file = fs::is_directory(path) ? path / "config.json" : path;
  return parse_model_config(core::read_file(file), file.string());
}

}  // namespace kbrl::model
