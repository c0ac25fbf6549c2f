// Hugging Face tokenizer.json files of byte-level BPE models (Qwen2/2.5/3, Llama 3, GPT-2 style),
// encoded and decoded with the ids of the `tokenizers` library; StreamDecoder decodes token by
// token without cutting a character in two. docs/tokenizer.md: the steps and what is supported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kbrl::tokenizer {

using TokenId = std::int32_t;

struct EncodeOptions {
  // Apply the post-processor's template (Llama 3: prepend <|begin_of_text|>), as the tokenizers
  // library's encode(text, add_special_tokens=True) does. Off by default, unlike there: chat
  // renderers already write the BOS token, and a doubled BOS is a silent bug.
  bool add_special_tokens = false;
  // Read special tokens in the text as plain text ("<|im_end|>" becomes several ordinary tokens),
  // as the library's `encode_special_tokens = True` does. Non-special added tokens still match.
  // Use it for text that must not be able to open or close turns.
  bool split_special_tokens = false;
};

// One entry of tokenizer.json's `added_tokens`.
struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// Immutable after loading; every const member may be called from many threads at once (the merge
// cache inside is synchronized). Move-only.
class Tokenizer {
 public:
  // Reads a tokenizer.json. A file that is not valid JSON, lacks a field or uses a component or
  // option this implementation does not support throws core::ConfigError naming the file and the
  // field (for example "model.merges[17]" or "pre_tokenizer.pretokenizers[0].behavior").
  static Tokenizer from_file(const std::filesystem::path& path);
  // The same from JSON text; `origin` names it in errors.
  static Tokenizer from_json(std::string_view json_text, std::string_view origin = "<tokenizer.json>");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text to ids. Bytes that are not valid UTF-8 are read as U+FFFD, one per maximal invalid
  // subsequence (as Python's bytes.decode("utf-8", "replace") does), so encode(bytes) equals the
  // library's encode of that decoded string.
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Ids to text, as the library's decode(ids, skip_special_tokens): each token's bytes
  // concatenated, invalid UTF-8 replaced by U+FFFD per maximal invalid subsequence. Ids that name
  // no token are skipped, as there (models often have more embedding rows than tokens).
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  // The bytes one token stands for (an added token: its content); empty for an unknown id.
  std::string_view token_bytes(TokenId id) const;
  // The token string as tokenizer.json writes it ("Ġhello" for " hello"; added tokens: content).
  std::optional<std::string> id_to_token(TokenId id) const;
  std::optional<TokenId> token_to_id(std::string_view token) const;
  // Whether the id is an added token marked special (skipped by decode(..., true)).
  bool is_special(TokenId id) const;

  // Number of distinct ids: model vocabulary plus added tokens that are not in it.
  std::size_t vocab_size() const;
  // One more than the largest id (the embedding rows the tokenizer needs at least).
  std::size_t id_limit() const;
  std::vector<AddedToken> added_tokens() const;
  // Ids the post-processor's template adds around the text (empty without a template).
  std::vector<TokenId> template_prefix() const;
  std::vector<TokenId> template_suffix() const;

  struct Impl;

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Decodes one token at a time for streaming output, chunk for chunk as the library's
// DecodeStream: step() returns the text since the last chunk once it no longer ends in U+FFFD
// (a character split across tokens is held back until its last byte arrives; so is text that
// ends in an invalid byte or a literal U+FFFD, until more text follows). The concatenation of
// every step() and a final flush() equals decode() of all the ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}
  std::string step(TokenId id);
  // Whatever is held back, incomplete characters as U+FFFD; the decoder is empty afterwards.
  std::string flush();
  // Bytes held back.
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

// UTF-8 helpers the tokenizer is built from, exposed for callers that handle model output.
// `text` with every maximal invalid subsequence replaced by U+FFFD.
std::string utf8_lossy(std::string_view text);
bool utf8_valid(std::string_view text);
// Canonical composition (Unicode NFC), tables from the Unicode version nfc_unicode_version() names.
std::string nfc(std::string_view text);
std::string_view nfc_unicode_version();

}  // namespace kbrl::tokenizer
