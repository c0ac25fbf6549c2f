// Fuzz target: encoding text with a loaded tokenizer (tokenizer::Tokenizer::encode, decode,
// StreamDecoder), which every prompt, problem and sampled answer goes through. The tokenizers are
// the Qwen2-style (NFC) and Llama 3-style goldens of tests/data/tokenizer/. Byte-level BPE
// loses nothing: decoding the ids gives the text back, after the normalizer and with invalid
// UTF-8 replaced, whichever way special tokens are read.
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"

namespace {

using kbrl::tokenizer::TokenId;
using kbrl::tokenizer::Tokenizer;

void check(const Tokenizer& tok, bool nfc, std::string_view text) {
  using kbrl::fuzz::require;
  const std::string lossy = kbrl::tokenizer::utf8_lossy(text);
  const std::string expected = nfc ? kbrl::tokenizer::nfc(lossy) : lossy;
  for (const bool split : {false, true}) {
    kbrl::tokenizer::EncodeOptions options;
    options.split_special_tokens = split;
    const std::vector<TokenId> ids = tok.encode(text, options);
    for (const TokenId id : ids)
      require(id >= 0 && static_cast<std::size_t>(id) < tok.id_limit(), "encoded ids are below id_limit()");
    const std::string decoded = tok.decode(ids);
    require(decoded == expected, "decode(encode(text)) is the normalized text");
    kbrl::tokenizer::StreamDecoder stream(tok);
    std::string streamed;
    for (const TokenId id : ids) streamed += stream.step(id);
    streamed += stream.flush();
    require(streamed == decoded, "streamed decoding equals decode");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Tokenizer qwen2 = Tokenizer::from_file(KBRL_SOURCE_DIR "/tests/data/tokenizer/qwen2.json");
  static const Tokenizer llama3 = Tokenizer::from_file(KBRL_SOURCE_DIR "/tests/data/tokenizer/llama3.json");
  const std::string_view text = kbrl::fuzz::as_text(data, size);
  check(qwen2, true, text);
  check(llama3, false, text);
  return 0;
}
