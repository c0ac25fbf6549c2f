// Fuzz target: the tokenizer.json loader (tokenizer::Tokenizer::from_json), which reads the
// tokenizer of any checkpoint a user points kbrl at. A file it cannot use throws
// core::ConfigError; a tokenizer it loads must then encode and decode text without failing.
#include <algorithm>
#include <optional>

#include "fuzz_support.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"

namespace {

// Text that reaches the pre-tokenizer's classes (letters, digits, spaces, punctuation, CJK,
// combining marks, a special token) and a lone invalid UTF-8 byte.
constexpr std::string_view kSample =
    "def f(x):\n    return x ** 2  # caf\xc3\xa9 cafe\xcc\x81 \xe6\x97\xa5\xe6\x9c\xac 123456 <|endoftext|> [R] word\xff";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using kbrl::fuzz::require;
  using kbrl::tokenizer::TokenId;
  std::optional<kbrl::tokenizer::Tokenizer> tok;
  try {
    tok.emplace(kbrl::tokenizer::Tokenizer::from_json(kbrl::fuzz::as_text(data, size), "fuzz/tokenizer.json"));
  } catch (const kbrl::core::Error&) {
    return 0;
  }
  // Loaded: from here on nothing may throw.
  for (const bool split : {false, true}) {
    kbrl::tokenizer::EncodeOptions options;
    options.add_special_tokens = !split;
    options.split_special_tokens = split;
    const std::vector<TokenId> ids = tok->encode(kSample, options);
    for (const TokenId id : ids)
      require(id >= 0 && static_cast<std::size_t>(id) < tok->id_limit(), "encoded ids are below id_limit()");
    (void)tok->decode(ids);
    (void)tok->decode(ids, true);
    kbrl::tokenizer::StreamDecoder stream(*tok);
    for (const TokenId id : ids) (void)stream.step(id);
    (void)stream.flush();
  }
  // Every id's lookups (token_to_id of id_to_token is not checked: a normalized added token's
  // string is its NFC form, which need not be the content the file wrote).
  const std::size_t limit = std::min<std::size_t>(tok->id_limit(), 4096);
  for (std::size_t id = 0; id < limit; ++id) {
    const auto i = static_cast<TokenId>(id);
    if (const auto token = tok->id_to_token(i)) (void)tok->token_to_id(*token);
    (void)tok->token_bytes(i);
    (void)tok->is_special(i);
  }
  (void)tok->template_prefix();
  (void)tok->template_suffix();
  return 0;
}
