// UTF-8 and NFC internals of the tokenizer (not installed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kbrl::tokenizer::detail {

struct CccRange {
  std::uint32_t first, last;
  std::uint8_t ccc;
};
struct Decomposition {
  std::uint32_t cp, a, b;  // b == 0: a singleton
};
struct Composition {
  std::uint32_t a, b, composite;
};

extern const char* const kNfcUnicodeVersion;
extern const CccRange kCccRanges[];
extern const std::size_t kCccRangeCount;
extern const Decomposition kDecompositions[];
extern const std::size_t kDecompositionCount;
extern const Composition kCompositions[];
extern const std::size_t kCompositionCount;

// Length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);
// Length of the maximal invalid subsequence at s[i] (what one U+FFFD replaces), given that no
// valid sequence starts there: a lead byte and the continuation bytes that still fit it.
std::size_t utf8_invalid_length(std::string_view s, std::size_t i);
// Decodes the valid sequence of length n at s[i].
std::uint32_t utf8_decode(std::string_view s, std::size_t i, std::size_t n);
void utf8_append(std::string& out, std::uint32_t cp);
// Bytes at the end of s that begin a character whose remaining bytes have not arrived yet
// (0 to 3): what a stream decoder holds back.
std::size_t utf8_incomplete_tail(std::string_view s);

// Whether NFC could change s (a quick check; false means s is already NFC). s must be valid UTF-8.
bool nfc_may_change(std::string_view s);
// NFC of valid UTF-8.
std::string nfc_valid(std::string_view s);

// Unicode White_Space (what Rust's \s and the tokenizers library's lstrip/rstrip use).
bool is_white_space(std::uint32_t cp);

}  // namespace kbrl::tokenizer::detail
