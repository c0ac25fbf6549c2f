// Chat rendering to ids and stop tokens from a checkpoint's configuration files.
#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include "kbrl/core/json_reader.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/tokenizer/chat_tokens.hpp"

namespace kbrl::tokenizer {
namespace {

namespace json = boost::json;

std::optional<json::value> read_json_file(const std::filesystem::path& path) {
  const auto text = core::read_file_if_exists(path);
  if (!text) return std::nullopt;
  return core::JsonReader(path.string()).parse(*text);
}

void add_unique(std::vector<TokenId>& ids, TokenId id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

TokenId checked_id(const json::value& v, const std::filesystem::path& file, const std::string& field,
                   const Tokenizer& tokenizer) {
  if (!v.is_int64() && !v.is_uint64()) throw core::ConfigError(file.string(), field, "expected an integer token id");
  const auto id = v.is_int64() ? v.as_int64() : static_cast<std::int64_t>(std::min<std::uint64_t>(v.as_uint64(), 1ULL << 40));
  if (id < 0 || static_cast<std::uint64_t>(id) >= tokenizer.id_limit() || !tokenizer.id_to_token(static_cast<TokenId>(id)))
    throw core::ConfigError(file.string(), field, fmt::format("{} is not a token id of the tokenizer", id));
  return static_cast<TokenId>(id);
}

}  // namespace

std::vector<TokenId> render_chat_ids(const prompt::ChatRenderer& renderer, const Tokenizer& tokenizer,
                                     const std::vector<core::Message>& messages, bool add_generation_prompt) {
  return tokenizer.encode(renderer.render(messages, add_generation_prompt), EncodeOptions{});
}

std::vector<TokenId> stop_sequence_ids(const prompt::ChatRenderer& renderer, const Tokenizer& tokenizer) {
  std::vector<TokenId> ids;
  for (const std::string& stop : renderer.stop_sequences()) {
    const std::vector<TokenId> encoded = tokenizer.encode(stop);
    if (encoded.size() == 1) add_unique(ids, encoded.front());
  }
  return ids;
}

std::vector<TokenId> checkpoint_stop_ids(const std::filesystem::path& checkpoint_dir, const Tokenizer& tokenizer) {
  std::vector<TokenId> ids;
  const auto generation = checkpoint_dir / "generation_config.json";
  if (auto root = read_json_file(generation)) {
    if (!root->is_object()) throw core::ConfigError(generation.string(), "", "expected a JSON object");
    if (const auto* eos = root->as_object().if_contains("eos_token_id"); eos != nullptr && !eos->is_null()) {
      if (eos->is_array()) {
        for (std::size_t i = 0; i < eos->as_array().size(); ++i)
          add_unique(ids, checked_id(eos->as_array()[i], generation, fmt::format("eos_token_id[{}]", i), tokenizer));
      } else {
        add_unique(ids, checked_id(*eos, generation, "eos_token_id", tokenizer));
      }
    }
  }
  const auto config = checkpoint_dir / "tokenizer_config.json";
  if (auto root = read_json_file(config)) {
    if (!root->is_object()) throw core::ConfigError(config.string(), "", "expected a JSON object");
    if (const auto* eos = root->as_object().if_contains("eos_token"); eos != nullptr && !eos->is_null()) {
      const json::value* content = eos;
      if (eos->is_object()) content = eos->as_object().if_contains("content");
      if (content == nullptr || !content->is_string())
        throw core::ConfigError(config.string(), "eos_token", "expected a string or an object with a string 'content'");
      const auto id = tokenizer.token_to_id(content->as_string());
      if (!id)
        throw core::ConfigError(config.string(), "eos_token",
                                fmt::format("'{}' is not a token of the tokenizer", std::string_view(content->as_string())));
      add_unique(ids, *id);
    }
  }
  if (ids.empty())
    throw core::ConfigError(checkpoint_dir.string(), "eos_token_id",
                            "no stop token: neither generation_config.json's eos_token_id nor tokenizer_config.json's "
                            "eos_token names one");
  return ids;
}

std::unique_ptr<prompt::ChatRenderer> chat_renderer_for(const std::string& name, const Tokenizer& tokenizer,
                                                        const std::filesystem::path& checkpoint_dir) {
  if (name != "auto") return prompt::make_renderer(name);
  auto has = [&](std::string_view token) { return tokenizer.token_to_id(token).has_value(); };
  if (has("<|start_header_id|>")) return prompt::make_renderer("llama3");
  if (has("<|im_start|>")) return prompt::make_renderer(has("<think>") ? "qwen3" : "chatml");
  std::string names;
  for (const auto& n : prompt::renderer_names()) names += (names.empty() ? "" : ", ") + n;
  throw core::ConfigError((checkpoint_dir / "tokenizer.json").string(), "chat template",
                          fmt::format("the tokenizer has neither ChatML (<|im_start|>) nor Llama 3 "
                                      "(<|start_header_id|>) tokens: name a template ({})",
                                      names));
}

}  // namespace kbrl::tokenizer
