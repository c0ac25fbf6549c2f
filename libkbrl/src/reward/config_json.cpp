// Strict JSON reading and complete writing of RewardConfig. Reading starts from the named preset
// (or an empty config) and overrides only the keys present; every key is checked.
#include <boost/json.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/core/json_reader.hpp"
#include "kbrl/reward/config.hpp"

namespace kbrl::reward {

namespace json = boost::json;

namespace {

void read_format(const core::JsonReader& r, const json::value& v, FormatOptions& o) {
  const auto& obj = r.object(v, "format");
  r.only_keys(obj, "format", {"fail_value"});
  if (auto* x = obj.if_contains("fail_value")) o.fail_value = r.number(*x, "format.fail_value");
}

void read_compile(const core::JsonReader& r, const json::value& v, CompileOptions& o) {
  const auto& obj = r.object(v, "compile");
  r.only_keys(obj, "compile", {"rejected_value"});
  if (auto* x = obj.if_contains("rejected_value")) o.rejected_value = r.number(*x, "compile.rejected_value");
}

void read_code_length(const core::JsonReader& r, const json::value& v, CodeLengthOptions& o) {
  const auto& obj = r.object(v, "code_length");
  r.only_keys(obj, "code_length", {"min_chars", "max_chars", "require_correct"});
  if (auto* x = obj.if_contains("min_chars")) o.min_chars = r.integer(*x, "code_length.min_chars");
  if (auto* x = obj.if_contains("max_chars")) o.max_chars = r.integer(*x, "code_length.max_chars");
  if (auto* x = obj.if_contains("require_correct"))
    o.require_correct = r.boolean(*x, "code_length.require_correct");
}

void read_correctness(const core::JsonReader& r, const json::value& v, CorrectnessOptions& o) {
  const auto& obj = r.object(v, "correctness");
  r.only_keys(obj, "correctness", {"partial_credit"});
  if (auto* x = obj.if_contains("partial_credit"))
    o.partial_credit = r.boolean(*x, "correctness.partial_credit");
}

void read_speed(const core::JsonReader& r, const json::value& v, SpeedOptions& o) {
  const auto& obj = r.object(v, "speed");
  r.only_keys(obj, "speed", {"formula", "cap", "min_speedup", "require_correct"});
  if (auto* x = obj.if_contains("formula"))
    o.formula = r.name(*x, "speed.formula", parse_speed_formula);
  if (auto* x = obj.if_contains("cap")) o.cap = r.optional_number(*x, "speed.cap");
  if (auto* x = obj.if_contains("min_speedup"))
    o.min_speedup = r.optional_number(*x, "speed.min_speedup");
  if (auto* x = obj.if_contains("require_correct"))
    o.require_correct = r.boolean(*x, "speed.require_correct");
}

void read_length(const core::JsonReader& r, const json::value& v, LengthOptions& o) {
  const auto& obj = r.object(v, "length");
  r.only_keys(obj, "length", {"target_tokens", "limit_tokens", "penalize_truncated"});
  if (auto* x = obj.if_contains("target_tokens"))
    o.target_tokens = r.optional_integer(*x, "length.target_tokens");
  if (auto* x = obj.if_contains("limit_tokens"))
    o.limit_tokens = r.optional_integer(*x, "length.limit_tokens");
  if (auto* x = obj.if_contains("penalize_truncated"))
    o.penalize_truncated = r.boolean(*x, "length.penalize_truncated");
}

void read_thinking(const core::JsonReader& r, const json::value& v, ThinkingOptions& o) {
  const auto& obj = r.object(v, "thinking");
  r.only_keys(obj, "thinking", {"min_chars", "required"});
  if (auto* x = obj.if_contains("min_chars")) o.min_chars = r.integer(*x, "thinking.min_chars");
  if (auto* x = obj.if_contains("required")) o.required = r.boolean(*x, "thinking.required");
}

void read_clip(const core::JsonReader& r, const json::value& v, ClipOptions& o) {
  const auto& obj = r.object(v, "clip");
  r.only_keys(obj, "clip", {"min", "max"});
  if (auto* x = obj.if_contains("min")) o.min = r.optional_number(*x, "clip.min");
  if (auto* x = obj.if_contains("max")) o.max = r.optional_number(*x, "clip.max");
}

void read_multi_turn(const core::JsonReader& r, const json::value& v, MultiTurnOptions& o) {
  const auto& obj = r.object(v, "multi_turn");
  r.only_keys(obj, "multi_turn", {"gamma", "form", "success_bonus", "failure_penalty", "normalize_returns"});
  if (auto* x = obj.if_contains("gamma")) o.gamma = r.number(*x, "multi_turn.gamma");
  if (auto* x = obj.if_contains("form")) o.form = r.name(*x, "multi_turn.form", parse_return_form);
  if (auto* x = obj.if_contains("success_bonus")) o.success_bonus = r.number(*x, "multi_turn.success_bonus");
  if (auto* x = obj.if_contains("failure_penalty")) o.failure_penalty = r.number(*x, "multi_turn.failure_penalty");
  if (auto* x = obj.if_contains("normalize_returns")) o.normalize_returns = r.boolean(*x, "multi_turn.normalize_returns");
}

json::value optional_value(const std::optional<double>& v) {
  return v ? json::value(*v) : json::value(nullptr);
}
json::value optional_value(const std::optional<int>& v) {
  return v ? json::value(*v) : json::value(nullptr);
}

}  // namespace

RewardConfig RewardConfig::from_json(const json::value& jv, std::string_view where,
                                     const RewardRegistry& registry) {
  const core::JsonReader r{std::string(where)};
  if (jv.is_string()) {
    json::object shorthand;
    shorthand["preset"] = jv.get_string();
    return from_json(shorthand, where, registry);
  }
  const auto& obj = r.object(jv, "");
  r.only_keys(obj, "",
              {"preset", "name", "weights", "format", "compile", "correctness", "speed", "length", "code_length",
               "thinking", "static_check_value", "clip", "multi_turn", "params"});

  RewardConfig c;
  if (auto* x = obj.if_contains("preset")) {
    const std::string preset_name = r.string(*x, "preset");
    try {
      c = preset(preset_name);
    } catch (const core::InvalidArgument& e) {
      r.fail("preset", e.what());
    }
  }
  if (auto* x = obj.if_contains("name")) c.name = r.string(*x, "name");
  if (auto* x = obj.if_contains("weights")) {
    for (const auto& kv : r.object(*x, "weights")) {
      const std::string term(kv.key());
      c.weights[term] = r.number(kv.value(), "weights." + term);
    }
  }
  if (auto* x = obj.if_contains("format")) read_format(r, *x, c.format);
  if (auto* x = obj.if_contains("compile")) read_compile(r, *x, c.compile);
  if (auto* x = obj.if_contains("correctness")) read_correctness(r, *x, c.correctness);
  if (auto* x = obj.if_contains("speed")) read_speed(r, *x, c.speed);
  if (auto* x = obj.if_contains("length")) read_length(r, *x, c.length);
  if (auto* x = obj.if_contains("code_length")) read_code_length(r, *x, c.code_length);
  if (auto* x = obj.if_contains("thinking")) read_thinking(r, *x, c.thinking);
  if (auto* x = obj.if_contains("static_check_value"))
    c.static_check_value = r.optional_number(*x, "static_check_value");
  if (auto* x = obj.if_contains("clip")) read_clip(r, *x, c.clip);
  if (auto* x = obj.if_contains("multi_turn")) read_multi_turn(r, *x, c.multi_turn);
  if (auto* x = obj.if_contains("params")) {
    for (const auto& kv : r.object(*x, "params")) {
      const std::string term(kv.key());
      c.params[term] = r.object(kv.value(), "params." + term);
    }
  }
  c.validate(registry, where);
  return c;
}

RewardConfig RewardConfig::from_json_text(std::string_view text, std::string_view where,
                                          const RewardRegistry& registry) {
  json::value jv;
  try {
    jv = core::parse_json(text);
  } catch (const core::InvalidArgument& e) {
    throw core::ConfigError(std::string(where), "", e.what());
  }
  return from_json(jv, where, registry);
}

RewardConfig RewardConfig::load(const std::filesystem::path& path, const RewardRegistry& registry) {
  return from_json_text(core::read_file(path), path.string(), registry);
}

json::value RewardConfig::to_json() const {
  json::object w;
  for (const auto& [term, value] : weights) w[term] = value;
  json::object p;
  for (const auto& [term, object] : params) p[term] = object;
  return json::object{
      {"name", name},
      {"weights", std::move(w)},
      {"format", {{"fail_value", format.fail_value}}},
      {"compile", {{"rejected_value", compile.rejected_value}}},
      {"correctness", {{"partial_credit", correctness.partial_credit}}},
      {"speed",
       {{"formula", to_string(speed.formula)},
        {"cap", optional_value(speed.cap)},
        {"min_speedup", optional_value(speed.min_speedup)},
        {"require_correct", speed.require_correct}}},
      {"length",
       {{"target_tokens", optional_value(length.target_tokens)},
        {"limit_tokens", optional_value(length.limit_tokens)},
        {"penalize_truncated", length.penalize_truncated}}},
      {"code_length",
       {{"min_chars", code_length.min_chars},
        {"max_chars", code_length.max_chars},
        {"require_correct", code_length.require_correct}}},
      {"thinking", {{"min_chars", thinking.min_chars}, {"required", thinking.required}}},
      {"static_check_value", optional_value(static_check_value)},
      {"clip", {{"min", optional_value(clip.min)}, {"max", optional_value(clip.max)}}},
      {"multi_turn",
       {{"gamma", multi_turn.gamma},
        {"form", to_string(multi_turn.form)},
        {"success_bonus", multi_turn.success_bonus},
        {"failure_penalty", multi_turn.failure_penalty},
        {"normalize_returns", multi_turn.normalize_returns}}},
      {"params", std::move(p)},
  };
}

void tag_invoke(json::value_from_tag, json::value& jv, const RewardConfig& c) { jv = c.to_json(); }

RewardConfig tag_invoke(json::value_to_tag<RewardConfig>, const json::value& jv) {
  return RewardConfig::from_json(jv);
}

}  // namespace kbrl::reward
