// Encoding and decoding, step for step as the tokenizers library does it (tokenizer/mod.rs,
// added_vocabulary.rs, models/bpe): added tokens split out of the raw text, the rest normalized
// piece by piece, added tokens with normalized = true split out of that, the pre-tokenizer's
// splits, then BPE on each piece's bytes.
#include <algorithm>
#include <queue>

#include "kbrl/tokenizer/tokenizer.hpp"
#include "tokenizer_impl.hpp"
#include "tokenizer_unicode.hpp"

namespace kbrl::tokenizer {
namespace {

// The library's `\w` for single_word tokens is the Rust regex crate's Unicode word class.
bool is_word_char(std::uint32_t cp) {
  static const detail::Regex word("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]", false);
  std::string s;
  detail::utf8_append(s, cp);
  std::size_t b = 0, e = 0;
  return word.find(s, 0, b, e) && b == 0;
}

std::uint32_t last_char(std::string_view s, std::size_t end, std::size_t& begin) {
  begin = end - 1;
  while (begin > 0 && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) --begin;
  return detail::utf8_decode(s, begin, end - begin);
}

std::uint32_t first_char(std::string_view s, std::size_t begin, std::size_t& length) {
  length = detail::utf8_sequence_length(s, begin);
  return detail::utf8_decode(s, begin, length);
}

// Start of the white space that ends s[0, end).
std::size_t trailing_space_start(std::string_view s, std::size_t end) {
  while (end > 0) {
    std::size_t b = 0;
    if (!detail::is_white_space(last_char(s, end, b))) break;
    end = b;
  }
  return end;
}

std::size_t leading_space_length(std::string_view s, std::size_t begin) {
  std::size_t i = begin;
  while (i < s.size()) {
    std::size_t n = 0;
    if (!detail::is_white_space(first_char(s, i, n))) break;
    i += n;
  }
  return i - begin;
}

struct Merge {
  std::uint32_t rank;
  std::uint32_t pos;
  TokenId new_id;
  // std::priority_queue pops the largest: make that the lowest rank, then the leftmost position.
  bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

std::uint64_t pair_key(TokenId a, TokenId b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

// The post-processors' templates around the text's ids, innermost first.
std::vector<TokenId> apply_templates(const Tokenizer::Impl& impl, std::vector<TokenId> ids) {
  for (const auto& tmpl : impl.templates) {
    std::vector<TokenId> wrapped;
    wrapped.reserve(ids.size() + 4);
    for (const auto& item : tmpl) {
      const auto& part = item.sequence ? ids : item.ids;
      wrapped.insert(wrapped.end(), part.begin(), part.end());
    }
    ids = std::move(wrapped);
  }
  return ids;
}

}  // namespace

template <class F>
void Tokenizer::Impl::split_added(std::string_view s, const detail::TokenTrie& trie, bool split_special,
                                  F&& on_piece) const {
  if (trie.empty()) {
    if (!s.empty()) on_piece(s, -1);
    return;
  }
  std::size_t start_offset = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (!trie.may_start(static_cast<unsigned char>(s[i]))) {
      ++i;
      continue;
    }
    int index = -1;
    const std::size_t length = trie.longest_at(s, i, index);
    if (length == 0) {
      ++i;
      continue;
    }
    // Matches are found without overlap first and only then filtered, so a discarded match still
    // hides any shorter token inside it (as the library's Aho-Corasick iteration does).
    std::size_t start = i, stop = i + length;
    i = stop;
    const AddedToken& token = added[static_cast<std::size_t>(index)];
    if (split_special && token.special) continue;
    if (token.single_word) {
      std::size_t b = 0, n = 0;
      const bool space_before = start == 0 || !is_word_char(last_char(s, start, b));
      const bool space_after = stop == s.size() || !is_word_char(first_char(s, stop, n));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(s, start), start_offset);
    if (token.rstrip) stop += leading_space_length(s, stop);
    if (start_offset < start) on_piece(s.substr(start_offset, start - start_offset), -1);
    on_piece(s.substr(start, stop - start), index);
    start_offset = stop;
  }
  if (start_offset < s.size()) on_piece(s.substr(start_offset), -1);
}

void Tokenizer::Impl::encode_into(std::string_view text, const EncodeOptions& options,
                                  std::vector<TokenId>& out) const {
  std::string valid;
  if (!utf8_valid(text)) {
    valid = utf8_lossy(text);
    text = valid;
  }
  split_added(text, raw_trie, options.split_special_tokens, [&](std::string_view piece, int index) {
    if (index >= 0) {
      out.push_back(added[static_cast<std::size_t>(index)].id);
      return;
    }
    std::string normalized;
    if (nfc && detail::nfc_may_change(piece)) {
      normalized = detail::nfc_valid(piece);
      piece = normalized;
    }
    split_added(piece, normalized_trie, options.split_special_tokens, [&](std::string_view part, int idx) {
      if (idx >= 0)
        out.push_back(added[static_cast<std::size_t>(idx)].id);
      else
        pre_tokenize(part, 0, out);
    });
  });
}

void Tokenizer::Impl::pre_tokenize(std::string_view piece, std::size_t step, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  if (step == pre_tokenizer.size()) {
    bpe(piece, out);
    return;
  }
  const detail::PreTokenizerStep& st = pre_tokenizer[step];
  std::string prefixed;
  if (st.kind == detail::PreTokenizerStep::Kind::byte_level && st.add_prefix_space && piece[0] != ' ') {
    prefixed.reserve(piece.size() + 1);
    prefixed += ' ';
    prefixed += piece;
    piece = prefixed;
  }
  if (st.regex) {
    st.regex->split(piece, [&](std::size_t b, std::size_t e, bool) { pre_tokenize(piece.substr(b, e - b), step + 1, out); });
  } else {
    pre_tokenize(piece, step + 1, out);
  }
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<TokenId>& out) const {
  if (ignore_merges) {
    if (auto it = vocab_by_bytes.find(piece); it != vocab_by_bytes.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Long pieces (a run of spaces or of one letter) are rare and would crowd the cache out.
  constexpr std::size_t kMaxCachedLength = 256;
  if (piece.size() > kMaxCachedLength) {
    merge_word(piece, out);
    return;
  }
  const std::size_t hash = detail::StringHash{}(piece);
  auto& shard = cache.shards[hash % detail::MergeCache::kShards];
  {
    std::lock_guard lock(shard.mutex);
    if (auto it = shard.map.find(piece); it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t before = out.size();
  merge_word(piece, out);
  std::lock_guard lock(shard.mutex);
  if (shard.map.size() < cache.shard_capacity)
    shard.map.emplace(std::string(piece), std::vector<TokenId>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
}

void Tokenizer::Impl::merge_word(std::string_view piece, std::vector<TokenId>& out) const {
  struct Symbol {
    TokenId id;
    std::int32_t prev, next;
    bool removed;
  };
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  // One symbol per byte (one byte-level character each). Bytes whose character is not in the
  // vocabulary become the unknown token, fused if asked, or are dropped, as the library does.
  bool pending_unk = false;
  const auto push = [&](TokenId id) {
    const auto n = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, false});
  };
  for (char ch : piece) {
    const TokenId id = byte_ids[static_cast<unsigned char>(ch)];
    if (id >= 0) {
      if (pending_unk) push(unk_id);
      pending_unk = false;
      push(id);
    } else if (unk_id >= 0) {
      if (pending_unk && !fuse_unk) push(unk_id);
      pending_unk = true;
    }
  }
  if (pending_unk) push(unk_id);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Merge> queue;
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (auto it = merges.find(pair_key(symbols[i].id, symbols[i + 1].id)); it != merges.end())
      queue.push({it->second.rank, static_cast<std::uint32_t>(i), it->second.new_id});
  }
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    const Symbol right = symbols[static_cast<std::size_t>(left.next)];
    // Entries go stale when a neighbour merged first: act only if the pair still makes new_id.
    auto it = merges.find(pair_key(left.id, right.id));
    if (it == merges.end() || it->second.new_id != top.new_id) continue;
    symbols[static_cast<std::size_t>(left.next)].removed = true;
    left.id = top.new_id;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = static_cast<std::int32_t>(top.pos);
    if (left.prev >= 0) {
      const Symbol& prev = symbols[static_cast<std::size_t>(left.prev)];
      if (auto m = merges.find(pair_key(prev.id, left.id)); m != merges.end())
        queue.push({m->second.rank, static_cast<std::uint32_t>(left.prev), m->second.new_id});
    }
    if (left.next >= 0) {
      const Symbol& next = symbols[static_cast<std::size_t>(left.next)];
      if (auto m = merges.find(pair_key(left.id, next.id)); m != merges.end())
        queue.push({m->second.rank, top.pos, m->second.new_id});
    }
  }
  for (const Symbol& s : symbols)
    if (!s.removed) out.push_back(s.id);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->encode_into(text, options, ids);
  return options.add_special_tokens ? apply_templates(*impl_, std::move(ids)) : ids;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (TokenId id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_known.size() || !impl_->id_known[static_cast<std::size_t>(id)])
      continue;
    if (skip_special_tokens && impl_->id_skippable[static_cast<std::size_t>(id)]) continue;
    bytes += impl_->id_bytes[static_cast<std::size_t>(id)];
  }
  return utf8_valid(bytes) ? bytes : utf8_lossy(bytes);
}

std::string_view Tokenizer::token_bytes(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_known.size()) return {};
  return impl_->id_bytes[static_cast<std::size_t>(id)];
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_known.size() || !impl_->id_known[static_cast<std::size_t>(id)])
    return std::nullopt;
  return impl_->id_tokens[static_cast<std::size_t>(id)];
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  if (auto it = impl_->vocab.find(token); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->id_skippable.size() &&
         impl_->id_skippable[static_cast<std::size_t>(id)];
}

std::size_t Tokenizer::vocab_size() const { return impl_->distinct_ids; }
std::size_t Tokenizer::id_limit() const { return impl_->id_known.size(); }
std::vector<AddedToken> Tokenizer::added_tokens() const { return impl_->added; }

std::vector<TokenId> Tokenizer::template_prefix() const {
  const std::vector<TokenId> ids = apply_templates(*impl_, {-1});  // -1 marks where the text goes
  return {ids.begin(), std::find(ids.begin(), ids.end(), -1)};
}

std::vector<TokenId> Tokenizer::template_suffix() const {
  const std::vector<TokenId> ids = apply_templates(*impl_, {-1});
  return {std::find(ids.begin(), ids.end(), -1) + 1, ids.end()};
}

std::string StreamDecoder::step(TokenId id) {
  const auto& impl = *tokenizer_->impl_;
  if (id < 0 || static_cast<std::size_t>(id) >= impl.id_known.size() || !impl.id_known[static_cast<std::size_t>(id)])
    return {};
  if (skip_special_tokens_ && impl.id_skippable[static_cast<std::size_t>(id)]) return {};
  pending_ += impl.id_bytes[static_cast<std::size_t>(id)];
  // Like the library's DecodeStream: nothing comes out while the text since the last chunk ends
  // in U+FFFD, whether that is a character still incomplete or an invalid (or literal) one.
  std::string text = utf8_lossy(pending_);
  if (std::string_view(text).ends_with("\xEF\xBF\xBD")) return {};
  pending_.clear();
  return text;
}

std::string StreamDecoder::flush() {
  std::string rest = utf8_lossy(pending_);
  pending_.clear();
  return rest;
}

}  // namespace kbrl::tokenizer
