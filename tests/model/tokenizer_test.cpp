// The tokenizer against the committed fixtures in tests/data/tokenizer, no Python needed. The
// fixtures were written by tests/model/tokenizer_parity.py --write-fixtures: tokenizers trained
// with Hugging Face `tokenizers` like Qwen2 (NFC, Qwen2's split, ChatML special tokens), like
// Llama 3 (its split, ignore_merges, the <|begin_of_text|> template) and one with the other
// options (GPT-2's split with add_prefix_space, added tokens with lstrip / rstrip / single_word /
// normalized), each with the library's ids for a few hundred strings.
#include <kbrl/core/error.hpp>
#include <kbrl/tokenizer/chat_tokens.hpp>
#include <kbrl/tokenizer/tokenizer.hpp>
#include <kbrl/prompt/chat_renderer.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"

namespace fs = std::filesystem;
namespace json = boost::json;
using kbrl::tokenizer::EncodeOptions;
using kbrl::tokenizer::StreamDecoder;
using kbrl::tokenizer::TokenId;
using kbrl::tokenizer::Tokenizer;

namespace {

const fs::path kData = fs::path(KBRL_SOURCE_DIR) / "tests" / "data" / "tokenizer";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string from_hex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

struct Row {
  std::string text;  // bytes, possibly invalid UTF-8
  bool valid = true;
  std::vector<TokenId> ids, ids_with_template;
  std::string decoded;
};

std::vector<TokenId> to_ids(const json::value& v) {
  std::vector<TokenId> ids;
  for (const auto& x : v.as_array()) ids.push_back(static_cast<TokenId>(x.as_int64()));
  return ids;
}

std::vector<Row> expected_rows(const std::string& kind) {
  std::vector<Row> rows;
  std::ifstream in(kData / (kind + "_expected.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    const json::object o = json::parse(line).as_object();
    Row r;
    if (const auto* t = o.if_contains("text")) {
      r.text = std::string(t->as_string());
    } else {
      r.text = from_hex(o.at("hex").as_string());
      r.valid = false;
    }
    r.ids = to_ids(o.at("ids"));
    r.ids_with_template = o.contains("ids_with_template") ? to_ids(o.at("ids_with_template")) : r.ids;
    r.decoded = o.contains("decoded") ? std::string(o.at("decoded").as_string()) : r.text;
    rows.push_back(std::move(r));
  }
  return rows;
}

const Tokenizer& fixture(const std::string& kind) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(kind);
  if (it == cache.end()) it = cache.emplace(kind, Tokenizer::from_file(kData / (kind + ".json"))).first;
  return it->second;
}

TokenId id_of(const Tokenizer& tok, std::string_view token) {
  const auto id = tok.token_to_id(token);
  REQUIRE(id.has_value());
  return *id;
}

// The message of the ConfigError that loading `text` throws ("" if it loads).
std::string load_error(const std::string& text) {
  try {
    Tokenizer::from_json(text, "bad/tokenizer.json");
  } catch (const kbrl::core::ConfigError& e) {
    return e.what();
  }
  return "";
}

// The Qwen2-style fixture with one change applied to its JSON.
std::string qwen2_with(const std::function<void(json::object&)>& change) {
  json::value v = json::parse(read_text(kData / "qwen2.json"));
  change(v.as_object());
  return json::serialize(v);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("tokenizer encodes and decodes the fixture strings as the tokenizers library does") {
  for (const std::string kind : {"qwen2", "llama3", "options"}) {
    INFO(kind);
    const Tokenizer& tok = fixture(kind);
    const auto rows = expected_rows(kind);
    REQUIRE(rows.size() >= 300);
    std::size_t invalid = 0;
    for (const Row& r : rows) {
      INFO(r.text);
      CHECK(tok.encode(r.text) == r.ids);
      CHECK(tok.encode(r.text, EncodeOptions{.add_special_tokens = true}) == r.ids_with_template);
      if (r.valid) CHECK(tok.decode(r.ids) == r.decoded);
      invalid += !r.valid;
    }
    CHECK(invalid > 0);  // the fixtures carry invalid UTF-8 too
  }
}

TEST_CASE("tokenizer reads merges written as strings the same as merges written as pairs") {
  json::value v = json::parse(read_text(kData / "llama3.json"));
  json::array& merges = v.at("model").at("merges").as_array();
  REQUIRE(merges.size() > 1000);
  REQUIRE(merges[0].is_array());
  json::array legacy;
  legacy.emplace_back("#version: 0.2");  // a comment line in the older files; not a merge
  for (const auto& m : merges)
    legacy.emplace_back(std::string(m.as_array()[0].as_string()) + " " + std::string(m.as_array()[1].as_string()));
  v.at("model").at("merges") = legacy;
  const Tokenizer from_strings = Tokenizer::from_json(json::serialize(v));
  for (const Row& r : expected_rows("llama3")) CHECK(from_strings.encode(r.text) == r.ids);
}

TEST_CASE("tokenizer splits special tokens out of the text unless told not to") {
  const Tokenizer& tok = fixture("qwen2");
  const TokenId start = id_of(tok, "<|im_start|>"), end = id_of(tok, "<|im_end|>"), think = id_of(tok, "<think>");
  const auto ids = tok.encode("<|im_start|>user\nhi<|im_end|>\n<think>x</think>");
  REQUIRE(ids.size() > 4);
  CHECK(ids.front() == start);
  CHECK(std::count(ids.begin(), ids.end(), end) == 1);
  CHECK(std::count(ids.begin(), ids.end(), think) == 1);
  CHECK(tok.is_special(end));
  CHECK_FALSE(tok.is_special(think));  // Qwen3's think tags are added tokens, not special ones

  // split_special_tokens: special tokens become text, non-special added tokens still match.
  const auto plain = tok.encode("<|im_start|>user\nhi<|im_end|>\n<think>x</think>",
                                EncodeOptions{.split_special_tokens = true});
  CHECK(std::count(plain.begin(), plain.end(), start) == 0);
  CHECK(std::count(plain.begin(), plain.end(), end) == 0);
  CHECK(std::count(plain.begin(), plain.end(), think) == 1);
  CHECK(tok.decode(plain) == "<|im_start|>user\nhi<|im_end|>\n<think>x</think>");

  CHECK(tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<think>x</think>");
  CHECK(tok.decode(ids, /*skip_special_tokens=*/true) == "user\nhi\n<think>x</think>");
}

TEST_CASE("tokenizer looks tokens up both ways") {
  const Tokenizer& tok = fixture("qwen2");
  const TokenId space = id_of(tok, "\xC4\xA0");  // "Ġ", the byte-level character of ' '
  CHECK(tok.token_bytes(space) == " ");
  CHECK(tok.id_to_token(space) == "\xC4\xA0");
  CHECK(tok.id_to_token(id_of(tok, "<|endoftext|>")) == "<|endoftext|>");
  CHECK_FALSE(tok.token_to_id("no such token").has_value());
  CHECK_FALSE(tok.id_to_token(-1).has_value());
  CHECK_FALSE(tok.id_to_token(static_cast<TokenId>(tok.id_limit())).has_value());
  CHECK(tok.token_bytes(1 << 30).empty());
  // Ids beyond the tokenizer are skipped by decode, as the library does (models have more rows).
  CHECK(tok.decode(std::vector<TokenId>{static_cast<TokenId>(tok.id_limit() + 7), space, -3}) == " ");
  CHECK(tok.vocab_size() == tok.id_limit());  // no holes in these ids
  CHECK(tok.added_tokens().size() == 5);
  CHECK(tok.template_prefix().empty());
}

TEST_CASE("tokenizer applies the Llama 3 BOS template only when asked") {
  const Tokenizer& tok = fixture("llama3");
  const TokenId bos = id_of(tok, "<|begin_of_text|>");
  CHECK(tok.template_prefix() == std::vector<TokenId>{bos});
  CHECK(tok.template_suffix().empty());
  const auto without = tok.encode("Hello world");
  const auto with = tok.encode("Hello world", EncodeOptions{.add_special_tokens = true});
  REQUIRE(with.size() == without.size() + 1);
  CHECK(with.front() == bos);
  CHECK(std::equal(without.begin(), without.end(), with.begin() + 1));
  CHECK(tok.encode("", EncodeOptions{.add_special_tokens = true}) == std::vector<TokenId>{bos});
  CHECK(tok.encode("").empty());
}

TEST_CASE("tokenizer reads invalid UTF-8 as U+FFFD per maximal invalid subsequence") {
  using kbrl::tokenizer::utf8_lossy;
  using kbrl::tokenizer::utf8_valid;
  const std::string r = "\xEF\xBF\xBD";
  CHECK(utf8_lossy("a\xF0\x9F\x98") == "a" + r);                // a 4-byte character cut short: one
  CHECK(utf8_lossy("\xED\xA0\x80") == r + r + r);               // an encoded surrogate: one per byte
  CHECK(utf8_lossy("\xC0\xAF") == r + r);                       // an overlong form
  CHECK(utf8_lossy("\xF4\x90\x80\x80") == r + r + r + r);       // beyond U+10FFFF
  CHECK(utf8_lossy("\xE2\x82\xAC\xE2\x82") == "\xE2\x82\xAC" + r);
  CHECK(utf8_valid("\xE2\x82\xAC"));
  CHECK_FALSE(utf8_valid("\xE2\x82"));
  const Tokenizer& tok = fixture("qwen2");
  CHECK(tok.encode("x\xFF\xFEy") == tok.encode("x" + r + r + "y"));
  CHECK(tok.encode("\xED\xA0\x80") == tok.encode(r + r + r));
}

TEST_CASE("tokenizer NFC composes, reorders and keeps exclusions as Unicode says") {
  using kbrl::tokenizer::nfc;
  CHECK(nfc("e\xCC\x81") == "\xC3\xA9");                            // e + acute -> é
  CHECK(nfc("s\xCC\x87\xCC\xA3") == "\xE1\xB9\xA9");                // dot above, dot below reordered -> ṩ
  CHECK(nfc("\xE2\x84\xAB") == "\xC3\x85");                         // ANGSTROM SIGN -> Å (a singleton)
  CHECK(nfc("\xE0\xA5\x98") == "\xE0\xA4\x95\xE0\xA4\xBC");         // क़ is excluded from composition
  CHECK(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8") == "\xEA\xB0\x81");  // Hangul jamo -> 각
  CHECK(nfc("\xCC\x81" "a") == "\xCC\x81" "a");                     // a leading mark stays
  CHECK(nfc("plain ascii") == "plain ascii");
  CHECK(kbrl::tokenizer::nfc_unicode_version() == "14.0.0");
  // The Qwen2 fixture normalizes: decomposed and precomposed text encode alike.
  const Tokenizer& tok = fixture("qwen2");
  CHECK(tok.encode("caf\x65\xCC\x81") == tok.encode("caf\xC3\xA9"));
  CHECK(fixture("llama3").encode("caf\x65\xCC\x81") != fixture("llama3").encode("caf\xC3\xA9"));
}

TEST_CASE("stream decoder holds a character split across tokens until it is complete") {
  const Tokenizer& tok = fixture("qwen2");
  const std::string text = "k\xE4\xB8\xAD\xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD!";  // k中👋🏽!
  const auto ids = tok.encode(text);
  REQUIRE(ids.size() > 4);  // the emoji are not single tokens in this small vocabulary
  StreamDecoder stream(tok);
  std::string joined;
  bool held = false;
  for (TokenId id : ids) {
    const std::string chunk = stream.step(id);
    CHECK(kbrl::tokenizer::utf8_valid(chunk));
    CHECK(chunk.find("\xEF\xBF\xBD") == std::string::npos);
    held = held || (chunk.empty() && stream.pending_bytes() > 0);
    joined += chunk;
  }
  CHECK(held);
  CHECK(stream.flush().empty());
  CHECK(joined == text);

  // Cut off mid-character: flush gives what is left as U+FFFD.
  StreamDecoder cut(tok);
  std::string partial;
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) partial += cut.step(ids[i]);
  partial += cut.flush();
  CHECK(partial == tok.decode(std::vector<TokenId>(ids.begin(), ids.end() - 1)));

  // Special tokens skipped in the stream as in decode.
  StreamDecoder skipping(tok, /*skip_special_tokens=*/true);
  std::string out;
  for (TokenId id : tok.encode("<|im_start|>hi<|im_end|>")) out += skipping.step(id);
  CHECK(out + skipping.flush() == "hi");
}

TEST_CASE("tokenizer encodes from many threads at once") {
  const Tokenizer& tok = fixture("llama3");
  const auto rows = expected_rows("llama3");
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (const Row& r : rows) mismatches[static_cast<std::size_t>(t)] += tok.encode(r.text) != r.ids;
    });
  }
  for (auto& th : threads) th.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("tokenizer renders chats to ids and reads stop tokens") {
  const Tokenizer& qwen = fixture("qwen2");
  const std::vector<kbrl::core::Message> chat{{"system", "Be fast."}, {"user", "Write a kernel."}};
  const auto renderer = kbrl::prompt::make_renderer("qwen2.5");
  const auto ids = kbrl::tokenizer::render_chat_ids(*renderer, qwen, chat, true);
  CHECK(ids == qwen.encode(renderer->render(chat, true)));
  CHECK(ids.front() == id_of(qwen, "<|im_start|>"));
  CHECK(std::count(ids.begin(), ids.end(), id_of(qwen, "<|im_end|>")) == 2);
  CHECK(qwen.decode(ids) == renderer->render(chat, true));
  CHECK(kbrl::tokenizer::stop_sequence_ids(*kbrl::prompt::make_renderer("qwen3"), qwen) ==
        std::vector<TokenId>{id_of(qwen, "<|im_end|>"), id_of(qwen, "<|endoftext|>")});

  const Tokenizer& llama = fixture("llama3");
  const auto llama_renderer = kbrl::prompt::make_renderer("llama3");
  const auto llama_ids = kbrl::tokenizer::render_chat_ids(*llama_renderer, llama, chat, true);
  CHECK(llama_ids.front() == id_of(llama, "<|begin_of_text|>"));
  CHECK(std::count(llama_ids.begin(), llama_ids.end(), id_of(llama, "<|begin_of_text|>")) == 1);
  CHECK(kbrl::tokenizer::stop_sequence_ids(*llama_renderer, llama) ==
        std::vector<TokenId>{id_of(llama, "<|eot_id|>"), id_of(llama, "<|end_of_text|>")});

  const fs::path dir = fs::path(KBRL_TEST_TMP) / "tokenizer" / "checkpoint";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
  const TokenId eot = id_of(llama, "<|eot_id|>"), eos = id_of(llama, "<|end_of_text|>");
  CHECK_THROWS_AS(kbrl::tokenizer::checkpoint_stop_ids(dir, llama), kbrl::core::ConfigError);  // nothing there
  write("generation_config.json", "{\"eos_token_id\": [" + std::to_string(eos) + ", " + std::to_string(eot) + "]}");
  CHECK(kbrl::tokenizer::checkpoint_stop_ids(dir, llama) == std::vector<TokenId>{eos, eot});
  write("generation_config.json", "{\"eos_token_id\": " + std::to_string(eos) + "}");
  write("tokenizer_config.json", R"({"eos_token": {"__type": "AddedToken", "content": "<|eot_id|>"}})");
  CHECK(kbrl::tokenizer::checkpoint_stop_ids(dir, llama) == std::vector<TokenId>{eos, eot});
  write("tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  try {
    kbrl::tokenizer::checkpoint_stop_ids(dir, llama);
    FAIL("an unknown eos_token must throw");
  } catch (const kbrl::core::ConfigError& e) {
    CHECK(contains(e.what(), "tokenizer_config.json"));
    CHECK(e.field() == "eos_token");
  }
  write("tokenizer_config.json", "{}");
  write("generation_config.json", R"({"eos_token_id": 99999999})");
  CHECK_THROWS_AS(kbrl::tokenizer::checkpoint_stop_ids(dir, llama), kbrl::core::ConfigError);
}

TEST_CASE("tokenizer refuses broken or unsupported files naming the file and the field") {
  struct Case {
    std::string name;
    std::function<void(json::object&)> change;
    std::string field;
    std::string reason;
  };
  const auto& set = [](const char* path, json::value v) {
    return [path = std::string(path), v](json::object& o) {
      json::object* at = &o;
      std::string rest = path;
      for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
        at = &at->at(rest.substr(0, dot)).as_object();
        rest = rest.substr(dot + 1);
      }
      (*at)[rest] = v;
    };
  };
  const auto split = [](json::object& o) -> json::object& {
    return o.at("pre_tokenizer").at("pretokenizers").as_array()[0].as_object();
  };
  const std::vector<Case> cases{
      {"version", set("version", "2.0"), "version", "unknown tokenizer.json version"},
      {"model type", set("model.type", "WordPiece"), "model.type", "not supported"},
      {"no merges", [](json::object& o) { o.at("model").as_object().erase("merges"); }, "model.merges", "missing"},
      {"merge of an unknown token", [](json::object& o) { o.at("model").at("merges").as_array()[3] = json::array{"zzzz", "q"}; },
       "model.merges[3]", "'zzzz' is not in model.vocab"},
      {"merge not two tokens", [](json::object& o) { o.at("model").at("merges").as_array()[5] = "a b c"; },
       "model.merges[5]", "not two tokens"},
      {"merged token missing", [](json::object& o) { o.at("model").at("merges").as_array()[0] = json::array{"x", "\xC4\xA0"}; },
       "model.merges[0]", "the merged token"},
      {"id used twice", [](json::object& o) { o.at("model").at("vocab").as_object()["zzz"] = 5; }, "model.vocab",
       "is given to both"},
      {"negative id", [](json::object& o) { o.at("model").at("vocab").as_object()["zzz"] = -4; }, "model.vocab.zzz",
       "out of range"},
      {"byte fallback", set("model.byte_fallback", true), "model.byte_fallback", "not supported"},
      {"dropout", set("model.dropout", 0.1), "model.dropout", "dropout is not supported"},
      {"dropout type", set("model.dropout", "0.1"), "model.dropout", "expected a number"},
      {"huge id", [](json::object& o) { o.at("model").at("vocab").as_object()["zzz"] = 1LL << 40; }, "model.vocab.zzz",
       "out of range"},
      {"subword prefix", set("model.continuing_subword_prefix", "##"), "model.continuing_subword_prefix", "not supported"},
      {"unknown unk", set("model.unk_token", "<unk>"), "model.unk_token", "not in model.vocab"},
      {"normalizer", [](json::object& o) { o["normalizer"] = json::object{{"type", "NFKC"}}; }, "normalizer.type",
       "'NFKC' is not supported"},
      {"no pre-tokenizer", [](json::object& o) { o["pre_tokenizer"] = nullptr; }, "pre_tokenizer", "ByteLevel"},
      {"split behavior", [&](json::object& o) { split(o)["behavior"] = "Removed"; }, "pre_tokenizer.pretokenizers[0].behavior",
       "'Removed' is not supported"},
      {"split invert", [&](json::object& o) { split(o)["invert"] = true; }, "pre_tokenizer.pretokenizers[0].invert",
       "not supported"},
      {"word boundary", [&](json::object& o) { split(o)["pattern"] = json::object{{"Regex", "\\bx"}}; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex", "word boundaries"},
      {"bad regex", [&](json::object& o) { split(o)["pattern"] = json::object{{"Regex", "(ab"}}; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex", "PCRE2 cannot compile"},
      {"ByteLevel first",
       [](json::object& o) {
         auto& list = o.at("pre_tokenizer").at("pretokenizers").as_array();
         std::swap(list[0], list[1]);
       },
       "pre_tokenizer", "as the last step"},
      {"post-processor", [](json::object& o) { o["post_processor"] = json::object{{"type", "BertProcessing"}}; },
       "post_processor.type", "'BertProcessing' is not supported"},
      {"template special token",
       [](json::object& o) {
         o["post_processor"] = json::parse(
             R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {}})");
       },
       "post_processor.single[0].SpecialToken.id", "'<s>' is not in special_tokens"},
      {"template id naming no token",  // found by fuzzing: encode emitted an id beyond id_limit()
       [](json::object& o) {
         o["post_processor"] = json::parse(
             R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
                 "special_tokens": {"<s>": {"id": "<s>", "ids": [123456], "tokens": ["<s>"]}}})");
       },
       "post_processor.special_tokens.<s>.ids[0]", "123456 is not a token id of the tokenizer"},
      {"template sequence B",
       [](json::object& o) {
         o["post_processor"] = json::parse(
             R"({"type": "TemplateProcessing", "single": [{"Sequence": {"id": "B", "type_id": 0}}], "special_tokens": {}})");
       },
       "post_processor.single[0].Sequence.id", "only be A"},
      {"no decoder", [](json::object& o) { o["decoder"] = nullptr; }, "decoder", "ByteLevel decoder"},
      {"decoder type", [](json::object& o) { o["decoder"] = json::object{{"type", "WordPiece"}}; }, "decoder.type",
       "not supported"},
      {"added token id", [](json::object& o) { o.at("added_tokens").as_array()[1].as_object()["id"] = 7; },
       "added_tokens[1].id", "the tokenizers library gives it id"},
      {"added token twice",
       [](json::object& o) {
         auto& list = o.at("added_tokens").as_array();
         list[1].as_object()["content"] = list[0].as_object()["content"];
       },
       "added_tokens[1].content", "appears twice"},
      {"empty added token", [](json::object& o) { o.at("added_tokens").as_array()[0].as_object()["content"] = ""; },
       "added_tokens[0].content", "cannot be empty"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const std::string message = load_error(qwen2_with(c.change));
    CHECK(contains(message, "bad/tokenizer.json"));
    CHECK(contains(message, "'" + c.field + "'"));
    CHECK(contains(message, c.reason));
  }
  const std::string not_json = load_error("{\"model\": ");
  CHECK(contains(not_json, "bad/tokenizer.json"));
  CHECK(contains(not_json, "not valid JSON"));
  try {
    Tokenizer::from_file(kData / "no_such_tokenizer.json");
    FAIL("a missing file must throw");
  } catch (const kbrl::core::ConfigError& e) {
    CHECK(contains(e.what(), "no_such_tokenizer.json"));
  }
  // The unmodified fixture loads: the failures above come from the changes alone.
  CHECK(load_error(qwen2_with([](json::object&) {})).empty());
}
