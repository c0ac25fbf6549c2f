#include "text_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>

namespace kbrl::prompt::detail {
namespace {

char lower(char c) noexcept { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

bool is_python_space_ascii(unsigned char c) noexcept {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

// Non-ASCII code points for which Python's str.isspace() is true.
constexpr std::array<std::uint32_t, 18> kUnicodeSpaces{
    0x85,   0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005,
    0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F};
constexpr std::uint32_t kIdeographicSpace = 0x3000;

bool is_unicode_space(std::uint32_t cp) noexcept {
  return cp == kIdeographicSpace ||
         std::find(kUnicodeSpaces.begin(), kUnicodeSpaces.end(), cp) != kUnicodeSpaces.end();
}

// Length of the whitespace character starting at s[i] (0 if none). Only well-formed 2- and
// 3-byte UTF-8 sequences can encode the Unicode spaces above.
std::size_t space_at(std::string_view s, std::size_t i) noexcept {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return is_python_space_ascii(b0) ? 1 : 0;
  if ((b0 & 0xE0) == 0xC0 && i + 1 < s.size()) {
    const auto b1 = static_cast<unsigned char>(s[i + 1]);
    if ((b1 & 0xC0) != 0x80) return 0;
    return is_unicode_space(((b0 & 0x1Fu) << 6) | (b1 & 0x3Fu)) ? 2 : 0;
  }
  if ((b0 & 0xF0) == 0xE0 && i + 2 < s.size()) {
    const auto b1 = static_cast<unsigned char>(s[i + 1]);
    const auto b2 = static_cast<unsigned char>(s[i + 2]);
    if ((b1 & 0xC0) != 0x80 || (b2 & 0xC0) != 0x80) return 0;
    return is_unicode_space(((b0 & 0x0Fu) << 12) | ((b1 & 0x3Fu) << 6) | (b2 & 0x3Fu)) ? 3 : 0;
  }
  return 0;
}

// Length of the whitespace character that ends at s[end - 1] (0 if none).
std::size_t space_before(std::string_view s, std::size_t end) noexcept {
  for (std::size_t len = 1; len <= 3 && len <= end; ++len) {
    const std::size_t start = end - len;
    const auto b = static_cast<unsigned char>(s[start]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: the character starts further back
    return space_at(s, start) == len ? len : 0;
  }
  return 0;
}

}  // namespace

std::size_t find_ci(std::string_view text, std::string_view needle, std::size_t from) noexcept {
  if (needle.empty()) return from <= text.size() ? from : std::string_view::npos;
  if (text.size() < needle.size()) return std::string_view::npos;
  for (std::size_t i = from; i + needle.size() <= text.size(); ++i) {
    if (lower(text[i]) != lower(needle[0])) continue;
    std::size_t k = 1;
    while (k < needle.size() && lower(text[i + k]) == lower(needle[k])) ++k;
    if (k == needle.size()) return i;
  }
  return std::string_view::npos;
}

bool starts_with_ci(std::string_view text, std::string_view prefix) noexcept {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if (lower(text[i]) != lower(prefix[i])) return false;
  return true;
}

std::string_view python_lstrip(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t n = space_at(s, i);
    if (n == 0) break;
    i += n;
  }
  return s.substr(i);
}

std::string_view python_rstrip(std::string_view s) noexcept {
  std::size_t end = s.size();
  while (end > 0) {
    const std::size_t n = space_before(s, end);
    if (n == 0) break;
    end -= n;
  }
  return s.substr(0, end);
}

std::string_view python_strip(std::string_view s) noexcept { return python_rstrip(python_lstrip(s)); }

std::string_view lstrip_chars(std::string_view s, std::string_view chars) noexcept {
  const std::size_t i = s.find_first_not_of(chars);
  return i == std::string_view::npos ? std::string_view{} : s.substr(i);
}

std::string_view rstrip_chars(std::string_view s, std::string_view chars) noexcept {
  const std::size_t i = s.find_last_not_of(chars);
  return i == std::string_view::npos ? std::string_view{} : s.substr(0, i + 1);
}

std::string_view strip_chars(std::string_view s, std::string_view chars) noexcept {
  return rstrip_chars(lstrip_chars(s, chars), chars);
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), lower);
  return out;
}

std::string fence_for(std::string_view code) {
  std::size_t longest = 0;
  for (std::size_t i = 0; i < code.size();) {
    std::size_t n = 0;
    while (i + n < code.size() && code[i + n] == '`') ++n;
    longest = std::max(longest, n);
    i += n == 0 ? 1 : n;
  }
  return std::string(std::max<std::size_t>(3, longest + 1), '`');
}

std::string fenced(std::string_view code, std::string_view language) {
  const std::string fence = fence_for(code);
  std::string out = fence;
  out += language;
  out += '\n';
  out += code;
  if (!code.empty() && code.back() != '\n') out += '\n';
  out += fence;
  out += '\n';
  return out;
}

}  // namespace kbrl::prompt::detail
