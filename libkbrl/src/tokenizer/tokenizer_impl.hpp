// The tokenizer's internal state (not installed): what tokenizer_load.cpp builds from
// tokenizer.json and tokenizer.cpp runs.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kbrl/tokenizer/tokenizer.hpp"

namespace kbrl::tokenizer::detail {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// A PCRE2 pattern with Oniguruma's meaning (the engine the tokenizers library uses): the
// translation in tokenizer_regex.cpp rewrites the escapes whose Unicode meaning differs.
class Regex {
 public:
  // Throws std::invalid_argument with the reason when the pattern cannot be used.
  Regex(std::string_view pattern, bool literal);
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();
  // Calls on_piece(begin, end, matched) for each non-empty gap and match of s in order
  // (the tokenizers library's Split with behavior Isolated). s must be valid UTF-8.
  template <class F>
  void split(std::string_view s, F&& on_piece) const;
  // The next match at or after `from`: false when there is none.
  bool find(std::string_view s, std::size_t from, std::size_t& begin, std::size_t& end) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

template <class F>
void Regex::split(std::string_view s, F&& on_piece) const {
  std::size_t prev = 0, pos = 0, b = 0, e = 0;
  while (pos <= s.size() && find(s, pos, b, e)) {
    if (e == b) {  // an empty match: like Oniguruma, search again from the next character
      if (b >= s.size()) break;
      pos = b + 1;
      while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (b > prev) on_piece(prev, b, false);
    on_piece(b, e, true);
    prev = pos = e;
  }
  if (prev < s.size()) on_piece(prev, s.size(), false);
}

// A byte trie of added tokens that finds, at each position, the longest token starting there.
class TokenTrie {
 public:
  void add(std::string_view text, int token_index);
  bool empty() const { return nodes_.size() <= 1; }
  // Longest token at s[i]: its length (0 if none) and index.
  std::size_t longest_at(std::string_view s, std::size_t i, int& token_index) const;
  bool may_start(unsigned char b) const { return first_bytes_[b]; }

 private:
  struct Node {
    int token = -1;
    std::vector<std::pair<unsigned char, int>> children;  // sorted by byte
  };
  std::vector<Node> nodes_{1};
  std::array<bool, 256> first_bytes_{};
};

struct PreTokenizerStep {
  enum class Kind { split, byte_level } kind;
  std::unique_ptr<Regex> regex;  // split: its pattern; byte_level: the GPT-2 regex if use_regex
  bool add_prefix_space = false;
};

// A post-processor template: the text's ids (sequence) and fixed ids, in order.
struct TemplateItem {
  bool sequence = false;
  std::vector<TokenId> ids;
};

struct MergeValue {
  std::uint32_t rank;
  TokenId new_id;
};

struct MergeCache {
  static constexpr std::size_t kShards = 16;
  struct Shard {
    std::mutex mutex;
    StringMap<std::vector<TokenId>> map;
  };
  std::array<Shard, kShards> shards;
  std::size_t shard_capacity = 4096;
};

}  // namespace kbrl::tokenizer::detail

namespace kbrl::tokenizer {

struct Tokenizer::Impl {
  std::string origin;
  // Model: vocabulary by token string, by raw bytes (for ignore_merges), ids of single bytes.
  detail::StringMap<TokenId> vocab;
  detail::StringMap<TokenId> vocab_by_bytes;
  std::array<TokenId, 256> byte_ids{};  // -1: the byte's character is not in the vocabulary
  std::unordered_map<std::uint64_t, detail::MergeValue> merges;
  bool ignore_merges = false;
  TokenId unk_id = -1;
  bool fuse_unk = false;

  std::vector<AddedToken> added;
  detail::StringMap<TokenId> added_by_content;
  detail::TokenTrie raw_trie;         // added tokens with normalized = false
  detail::TokenTrie normalized_trie;  // added tokens with normalized = true (normalized content)
  bool any_single_word = false;

  bool nfc = false;
  std::vector<detail::PreTokenizerStep> pre_tokenizer;
  std::vector<std::vector<detail::TemplateItem>> templates;

  // Per id: the string form, the bytes decoding gives, whether skip_special_tokens drops it.
  std::vector<std::string> id_tokens;
  std::vector<std::string> id_bytes;
  std::vector<std::uint8_t> id_known;
  std::vector<std::uint8_t> id_skippable;
  std::size_t distinct_ids = 0;

  mutable detail::MergeCache cache;

  void encode_into(std::string_view text, const EncodeOptions& options, std::vector<TokenId>& out) const;
  void encode_text(std::string_view normalized, std::vector<TokenId>& out) const;
  void pre_tokenize(std::string_view piece, std::size_t step, std::vector<TokenId>& out) const;
  void bpe(std::string_view piece, std::vector<TokenId>& out) const;
  void merge_word(std::string_view piece, std::vector<TokenId>& out) const;
  template <class F>
  void split_added(std::string_view s, const detail::TokenTrie& trie, bool split_special, F&& on_piece) const;
};

}  // namespace kbrl::tokenizer
