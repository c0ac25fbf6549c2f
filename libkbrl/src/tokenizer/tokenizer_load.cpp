// Reading tokenizer.json into Tokenizer::Impl. Everything that would change ids and is not
// implemented is refused here with the file and the field, rather than silently ignored.
#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include "kbrl/core/file.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"
#include "tokenizer_impl.hpp"
#include "tokenizer_unicode.hpp"

namespace kbrl::tokenizer {
namespace {

namespace json = boost::json;
using detail::PreTokenizerStep;

// GPT-2's split, used by the ByteLevel pre-tokenizer when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's reversible map from bytes to printable characters: printable Latin-1 bytes stand for
// themselves, the others for U+0100 upwards in byte order.
struct ByteLevelAlphabet {
  std::array<std::uint32_t, 256> byte_char{};
  std::array<int, 0x144> char_byte{};
  ByteLevelAlphabet() {
    char_byte.fill(-1);
    std::uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_char[static_cast<std::size_t>(b)] = printable ? static_cast<std::uint32_t>(b) : next++;
      char_byte[byte_char[static_cast<std::size_t>(b)]] = b;
    }
  }
};
const ByteLevelAlphabet& alphabet() {
  static const ByteLevelAlphabet k;
  return k;
}

// The bytes the ByteLevel decoder makes of a token: each character's byte when every character
// is in the alphabet, otherwise the token's own UTF-8 (how special tokens such as "<|im_end|>"
// come back verbatim).
bool byte_level_bytes(std::string_view token, std::string& bytes) {
  bytes.clear();
  for (std::size_t i = 0; i < token.size();) {
    const std::size_t n = detail::utf8_sequence_length(token, i);
    if (n == 0) return false;
    const std::uint32_t cp = detail::utf8_decode(token, i, n);
    if (cp >= alphabet().char_byte.size() || alphabet().char_byte[cp] < 0) return false;
    bytes.push_back(static_cast<char>(alphabet().char_byte[cp]));
    i += n;
  }
  return true;
}

constexpr std::int64_t kMaxId = std::int64_t{1} << 24;

std::string squote(std::string_view s) { return "'" + std::string(s) + "'"; }

class Loader {
 public:
  Loader(std::string origin, Tokenizer::Impl& impl) : origin_(std::move(origin)), impl_(impl) {}

  void load(const json::value& root) {
    const json::object& top = object(root, "");
    if (const auto* v = top.if_contains("version"); v != nullptr && !v->is_null()) {
      if (!v->is_string() || v->as_string() != "1.0")
        fail("version", "unknown tokenizer.json version " + json::serialize(*v) + " (expected \"1.0\")");
    }
    load_normalizer(top.if_contains("normalizer"));
    load_model(member(top, "model", ""));
    load_pre_tokenizer(top.if_contains("pre_tokenizer"));
    load_post_processor(top.if_contains("post_processor"));
    load_decoder(top.if_contains("decoder"));
    if (const auto* a = top.if_contains("added_tokens"); a != nullptr && !a->is_null()) load_added_tokens(*a);
    finish_ids();
    // encode(add_special_tokens) emits these ids, so each must name a token: otherwise it could lie
    // beyond id_limit(), the embedding rows the tokenizer says it needs (found by fuzzing).
    for (const auto& [id, field] : template_ids_) {
      const auto k = static_cast<std::size_t>(id);
      if (k >= impl_.id_known.size() || !impl_.id_known[k])
        fail(field, fmt::format("{} is not a token id of the tokenizer (neither in model.vocab nor in added_tokens)", id));
    }
  }

 private:
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw core::ConfigError(origin_, field, what);
  }

  const json::object& object(const json::value& v, const std::string& field) const {
    if (!v.is_object()) fail(field.empty() ? "(top level)" : field, "expected an object");
    return v.as_object();
  }
  const json::value& member(const json::object& o, std::string_view key, const std::string& parent) const {
    const std::string field = parent.empty() ? std::string(key) : parent + "." + std::string(key);
    const auto* v = o.if_contains(key);
    if (v == nullptr) fail(field, "missing");
    return *v;
  }
  std::string string_member(const json::object& o, std::string_view key, const std::string& parent) const {
    const json::value& v = member(o, key, parent);
    if (!v.is_string()) fail(parent + "." + std::string(key), "expected a string");
    return std::string(v.as_string());
  }
  bool bool_member(const json::object& o, std::string_view key, const std::string& parent, bool fallback) const {
    const auto* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_bool()) fail(parent + "." + std::string(key), "expected true or false");
    return v->as_bool();
  }
  TokenId id_value(const json::value& v, const std::string& field) const {
    if (!v.is_int64() && !v.is_uint64()) fail(field, "expected a non-negative integer id");
    const auto id = v.is_int64() ? v.as_int64() : static_cast<std::int64_t>(std::min<std::uint64_t>(v.as_uint64(), 1ULL << 40));
    // Real vocabularies stay far below 2^24; a larger id is a broken file, not a reason to
    // allocate per-id tables of that size.
    if (id < 0 || id >= kMaxId) fail(field, fmt::format("id {} is out of range (0 to {})", id, kMaxId - 1));
    return static_cast<TokenId>(id);
  }
  std::string type_of(const json::object& o, const std::string& field) const {
    return string_member(o, "type", field);
  }

  void load_normalizer(const json::value* v) {
    if (v == nullptr || v->is_null()) return;
    load_normalizer_at(*v, "normalizer");
  }
  void load_normalizer_at(const json::value& v, const std::string& field) {
    const json::object& o = object(v, field);
    const std::string type = type_of(o, field);
    if (type == "NFC") {
      impl_.nfc = true;
    } else if (type == "Sequence") {
      const json::value& list = member(o, "normalizers", field);
      if (!list.is_array()) fail(field + ".normalizers", "expected an array");
      for (std::size_t i = 0; i < list.as_array().size(); ++i)
        load_normalizer_at(list.as_array()[i], fmt::format("{}.normalizers[{}]", field, i));
    } else {
      fail(field + ".type", squote(type) + " is not supported (supported: NFC, a Sequence of NFC, or null)");
    }
  }

  void load_pre_tokenizer(const json::value* v) {
    if (v == nullptr || v->is_null())
      fail("pre_tokenizer", "missing: byte-level BPE needs a ByteLevel pre-tokenizer");
    load_pre_tokenizer_at(*v, "pre_tokenizer");
    std::size_t byte_levels = 0;
    for (const auto& step : impl_.pre_tokenizer) byte_levels += step.kind == PreTokenizerStep::Kind::byte_level;
    if (byte_levels != 1 || impl_.pre_tokenizer.back().kind != PreTokenizerStep::Kind::byte_level)
      fail("pre_tokenizer", "byte-level BPE needs exactly one ByteLevel pre-tokenizer, as the last step");
  }
  void load_pre_tokenizer_at(const json::value& v, const std::string& field) {
    const json::object& o = object(v, field);
    const std::string type = type_of(o, field);
    if (type == "Sequence") {
      const json::value& list = member(o, "pretokenizers", field);
      if (!list.is_array()) fail(field + ".pretokenizers", "expected an array");
      for (std::size_t i = 0; i < list.as_array().size(); ++i)
        load_pre_tokenizer_at(list.as_array()[i], fmt::format("{}.pretokenizers[{}]", field, i));
    } else if (type == "Split") {
      const std::string behavior = string_member(o, "behavior", field);
      if (behavior != "Isolated")
        fail(field + ".behavior", squote(behavior) + " is not supported (supported: Isolated)");
      if (bool_member(o, "invert", field, false)) fail(field + ".invert", "true is not supported");
      const json::object& pattern = object(member(o, "pattern", field), field + ".pattern");
      PreTokenizerStep step{PreTokenizerStep::Kind::split, nullptr, false};
      if (const auto* r = pattern.if_contains("Regex")) {
        if (!r->is_string()) fail(field + ".pattern.Regex", "expected a string");
        step.regex = compile(r->as_string(), false, field + ".pattern.Regex");
      } else if (const auto* s = pattern.if_contains("String")) {
        if (!s->is_string()) fail(field + ".pattern.String", "expected a string");
        if (s->as_string().empty()) fail(field + ".pattern.String", "an empty pattern is not supported");
        step.regex = compile(s->as_string(), true, field + ".pattern.String");
      } else {
        fail(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
      }
      impl_.pre_tokenizer.push_back(std::move(step));
    } else if (type == "ByteLevel") {
      // The library's defaults for a missing key: add_prefix_space true, use_regex true.
      PreTokenizerStep step{PreTokenizerStep::Kind::byte_level, nullptr, bool_member(o, "add_prefix_space", field, true)};
      if (bool_member(o, "use_regex", field, true)) step.regex = compile(kGpt2Pattern, false, field);
      impl_.pre_tokenizer.push_back(std::move(step));
    } else {
      fail(field + ".type", squote(type) + " is not supported (supported: Sequence, Split, ByteLevel)");
    }
  }
  std::unique_ptr<detail::Regex> compile(std::string_view pattern, bool literal, const std::string& field) const {
    try {
      return std::make_unique<detail::Regex>(pattern, literal);
    } catch (const std::invalid_argument& e) {
      fail(field, std::string("unsupported pattern: ") + e.what());
    }
  }

  void load_post_processor(const json::value* v) {
    if (v == nullptr || v->is_null()) return;
    load_post_processor_at(*v, "post_processor");
  }
  void load_post_processor_at(const json::value& v, const std::string& field) {
    const json::object& o = object(v, field);
    const std::string type = type_of(o, field);
    if (type == "ByteLevel") return;  // only offsets change
    if (type == "Sequence") {
      const json::value& list = member(o, "processors", field);
      if (!list.is_array()) fail(field + ".processors", "expected an array");
      for (std::size_t i = 0; i < list.as_array().size(); ++i)
        load_post_processor_at(list.as_array()[i], fmt::format("{}.processors[{}]", field, i));
      return;
    }
    if (type != "TemplateProcessing")
      fail(field + ".type", squote(type) + " is not supported (supported: ByteLevel, TemplateProcessing, Sequence)");
    // special_tokens: name -> {"id": name, "ids": [...], "tokens": [...]}
    std::unordered_map<std::string, std::vector<TokenId>> specials;
    if (const auto* st = o.if_contains("special_tokens"); st != nullptr && !st->is_null()) {
      const json::object& m = object(*st, field + ".special_tokens");
      for (const auto& [name, entry] : m) {
        const std::string f = field + ".special_tokens." + std::string(name);
        const json::value& ids = member(object(entry, f), "ids", f);
        if (!ids.is_array()) fail(f + ".ids", "expected an array");
        std::vector<TokenId> list;
        for (std::size_t i = 0; i < ids.as_array().size(); ++i) {
          const std::string id_field = fmt::format("{}.ids[{}]", f, i);
          list.push_back(id_value(ids.as_array()[i], id_field));
          template_ids_.emplace_back(list.back(), id_field);
        }
        specials[std::string(name)] = std::move(list);
      }
    }
    const json::value& single = member(o, "single", field);
    if (!single.is_array()) fail(field + ".single", "expected an array");
    std::vector<detail::TemplateItem> items;
    int sequences = 0;
    for (std::size_t i = 0; i < single.as_array().size(); ++i) {
      const std::string f = fmt::format("{}.single[{}]", field, i);
      const json::object& piece = object(single.as_array()[i], f);
      if (const auto* seq = piece.if_contains("Sequence")) {
        const std::string id = string_member(object(*seq, f + ".Sequence"), "id", f + ".Sequence");
        if (id != "A") fail(f + ".Sequence.id", squote(id) + ": a single sequence can only be A");
        items.push_back({true, {}});
        ++sequences;
      } else if (const auto* sp = piece.if_contains("SpecialToken")) {
        const std::string id = string_member(object(*sp, f + ".SpecialToken"), "id", f + ".SpecialToken");
        auto it = specials.find(id);
        if (it == specials.end()) fail(f + ".SpecialToken.id", squote(id) + " is not in special_tokens");
        items.push_back({false, it->second});
      } else {
        fail(f, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (sequences != 1) fail(field + ".single", "the template must contain the sequence A exactly once");
    impl_.templates.push_back(std::move(items));
  }

  void load_decoder(const json::value* v) {
    if (v == nullptr || v->is_null()) fail("decoder", "missing: byte-level BPE needs the ByteLevel decoder");
    const json::object& o = object(*v, "decoder");
    const std::string type = type_of(o, "decoder");
    if (type != "ByteLevel") fail("decoder.type", squote(type) + " is not supported (supported: ByteLevel)");
  }

  void load_model(const json::value& v) {
    const json::object& o = object(v, "model");
    if (const auto* t = o.if_contains("type"); t != nullptr && !(t->is_string() && t->as_string() == "BPE"))
      fail("model.type", json::serialize(*t) + " is not supported (supported: BPE)");
    if (const auto* d = o.if_contains("dropout"); d != nullptr && !d->is_null()) {
      if (!d->is_number()) fail("model.dropout", "expected a number or null");
      if (d->to_number<double>() != 0.0) fail("model.dropout", "BPE dropout is not supported (it makes encoding random)");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (const auto* p = o.if_contains(key); p != nullptr && !p->is_null() && !(p->is_string() && p->as_string().empty()))
        fail(std::string("model.") + key, "is not supported by byte-level BPE (expected null)");
    }
    if (bool_member(o, "byte_fallback", "model", false))
      fail("model.byte_fallback", "true is not supported (byte-level BPE has every byte in its vocabulary)");
    impl_.ignore_merges = bool_member(o, "ignore_merges", "model", false);
    impl_.fuse_unk = bool_member(o, "fuse_unk", "model", false);

    const json::value& vocab = member(o, "vocab", "model");
    if (!vocab.is_object()) fail("model.vocab", "expected an object of token -> id");
    std::unordered_map<TokenId, std::string_view> seen;
    impl_.vocab.reserve(vocab.as_object().size());
    for (const auto& [token, idv] : vocab.as_object()) {
      const TokenId id = id_value(idv, "model.vocab." + std::string(token));
      if (auto [it, fresh] = seen.emplace(id, token); !fresh)
        fail("model.vocab", fmt::format("id {} is given to both {} and {}", id, squote(it->second), squote(token)));
      impl_.vocab.emplace(std::string(token), id);
    }
    if (const auto* u = o.if_contains("unk_token"); u != nullptr && !u->is_null()) {
      if (!u->is_string()) fail("model.unk_token", "expected a string or null");
      auto it = impl_.vocab.find(std::string_view(u->as_string()));
      if (it == impl_.vocab.end()) fail("model.unk_token", squote(u->as_string()) + " is not in model.vocab");
      impl_.unk_id = it->second;
    }
    impl_.byte_ids.fill(-1);
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      detail::utf8_append(ch, alphabet().byte_char[static_cast<std::size_t>(b)]);
      if (auto it = impl_.vocab.find(ch); it != impl_.vocab.end()) impl_.byte_ids[static_cast<std::size_t>(b)] = it->second;
    }
    std::string bytes;
    for (const auto& [token, id] : impl_.vocab)
      if (byte_level_bytes(token, bytes)) impl_.vocab_by_bytes.emplace(bytes, id);

    const json::value& merges = member(o, "merges", "model");
    if (!merges.is_array()) fail("model.merges", "expected an array");
    impl_.merges.reserve(merges.as_array().size());
    std::uint32_t rank = 0;
    std::string joined;
    for (std::size_t i = 0; i < merges.as_array().size(); ++i) {
      const json::value& m = merges.as_array()[i];
      const std::string f = fmt::format("model.merges[{}]", i);
      std::string_view a, b;
      if (m.is_string()) {
        // The older form, "a b": exactly one space; "#version" lines are comments.
        const std::string_view line = m.as_string();
        if (line.starts_with("#version")) continue;
        const auto space = line.find(' ');
        if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
          fail(f, squote(line) + " is not two tokens separated by one space");
        a = line.substr(0, space);
        b = line.substr(space + 1);
      } else if (m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() && m.as_array()[1].is_string()) {
        a = m.as_array()[0].as_string();
        b = m.as_array()[1].as_string();
      } else {
        fail(f, "expected \"a b\" or [\"a\", \"b\"]");
      }
      const auto ia = impl_.vocab.find(a), ib = impl_.vocab.find(b);
      if (ia == impl_.vocab.end()) fail(f, squote(a) + " is not in model.vocab");
      if (ib == impl_.vocab.end()) fail(f, squote(b) + " is not in model.vocab");
      joined.assign(a);
      joined += b;
      const auto ij = impl_.vocab.find(joined);
      if (ij == impl_.vocab.end()) fail(f, "the merged token " + squote(joined) + " is not in model.vocab");
      // A repeated pair keeps its last rank, as in the library's merge map.
      const std::uint64_t key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(ia->second)) << 32) |
                                static_cast<std::uint32_t>(ib->second);
      impl_.merges[key] = {rank++, ij->second};
    }
  }

  void load_added_tokens(const json::value& v) {
    if (!v.is_array()) fail("added_tokens", "expected an array");
    // The library ignores the ids written here and gives each token the vocabulary's id of its
    // content, or else the next id after the vocabulary; a file where the two disagree would
    // encode differently there, so it is refused.
    auto next_id = static_cast<TokenId>(impl_.vocab.size());
    const auto& arr = v.as_array();
    for (std::size_t i = 0; i < arr.size(); ++i) {
      const std::string f = fmt::format("added_tokens[{}]", i);
      const json::object& o = object(arr[i], f);
      AddedToken t;
      t.id = id_value(member(o, "id", f), f + ".id");
      t.content = string_member(o, "content", f);
      t.special = bool_member(o, "special", f, false);
      t.single_word = bool_member(o, "single_word", f, false);
      t.lstrip = bool_member(o, "lstrip", f, false);
      t.rstrip = bool_member(o, "rstrip", f, false);
      t.normalized = bool_member(o, "normalized", f, !t.special);
      if (t.content.empty()) fail(f + ".content", "an added token cannot be empty");
      if (!utf8_valid(t.content)) fail(f + ".content", "not valid UTF-8");
      if (impl_.added_by_content.count(t.content) != 0)
        fail(f + ".content", squote(t.content) + " appears twice in added_tokens");
      TokenId expected = 0;
      if (auto it = impl_.vocab.find(t.content); it != impl_.vocab.end())
        expected = it->second;
      else
        expected = next_id++;
      if (t.id != expected)
        fail(f + ".id", fmt::format("{} has id {}, but the tokenizers library gives it id {} (added tokens that are "
                                    "not in model.vocab take the ids after it, in order)",
                                    squote(t.content), t.id, expected));
      const int index = static_cast<int>(impl_.added.size());
      if (t.normalized)
        impl_.normalized_trie.add(impl_.nfc ? nfc(t.content) : t.content, index);
      else
        impl_.raw_trie.add(t.content, index);
      impl_.added_by_content.emplace(t.content, t.id);
      impl_.added.push_back(std::move(t));
    }
  }

  void finish_ids() {
    TokenId max_id = -1;
    for (const auto& [token, id] : impl_.vocab) max_id = std::max(max_id, id);
    for (const auto& t : impl_.added) max_id = std::max(max_id, t.id);
    const auto n = static_cast<std::size_t>(max_id + 1);
    impl_.id_tokens.assign(n, {});
    impl_.id_bytes.assign(n, {});
    impl_.id_known.assign(n, 0);
    impl_.id_skippable.assign(n, 0);
    std::unordered_set<std::string_view> specials;
    for (const auto& t : impl_.added)
      if (t.special) specials.insert(t.content);
    std::string bytes;
    const auto set = [&](TokenId id, const std::string& token) {
      const auto k = static_cast<std::size_t>(id);
      impl_.id_tokens[k] = token;
      impl_.id_bytes[k] = byte_level_bytes(token, bytes) ? bytes : token;
      impl_.id_known[k] = 1;
      // decode(skip_special_tokens) drops a token by its string, as the library does.
      impl_.id_skippable[k] = specials.count(token) != 0;
    };
    for (const auto& [token, id] : impl_.vocab) set(id, token);
    for (const auto& t : impl_.added) {
      // The library decodes a normalized added token from its normalized form.
      set(t.id, t.normalized && impl_.nfc ? nfc(t.content) : t.content);
    }
    impl_.distinct_ids = 0;
    for (auto k : impl_.id_known) impl_.distinct_ids += k;
  }

  std::string origin_;
  Tokenizer::Impl& impl_;
  std::vector<std::pair<TokenId, std::string>> template_ids_;  // the post-processor's ids, with their fields
};

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string_view origin) {
  auto impl = std::make_unique<Impl>();
  impl->origin = std::string(origin);
  boost::system::error_code ec;
  const json::value root = core::parse_json(json_text, ec);
  if (ec) throw core::ConfigError(std::string(origin), "", "not valid JSON: " + ec.message());
  Loader(std::string(origin), *impl).load(root);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  return from_json(core::read_file(path), path.string());
}

}  // namespace kbrl::tokenizer
