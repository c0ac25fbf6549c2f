// Small string helpers shared by the prompt module's sources (private header).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kbrl::prompt::detail {

// Position of `needle` in `text` at or after `from`, ASCII case-insensitively; npos if absent.
std::size_t find_ci(std::string_view text, std::string_view needle, std::size_t from = 0) noexcept;
bool starts_with_ci(std::string_view text, std::string_view prefix) noexcept;

// Python's str.strip() / lstrip() / rstrip() without arguments: removes characters for which
// str.isspace() is true (ASCII whitespace, \x1c-\x1f, and the Unicode spaces such as U+00A0 and
// U+3000, read as UTF-8). Jinja's `trim` filter is str.strip(), so chat templates that trim
// contents need exactly this set.
std::string_view python_strip(std::string_view s) noexcept;
std::string_view python_lstrip(std::string_view s) noexcept;
std::string_view python_rstrip(std::string_view s) noexcept;

// str.strip(chars) / lstrip(chars) / rstrip(chars) with an explicit character set (bytes).
std::string_view strip_chars(std::string_view s, std::string_view chars) noexcept;
std::string_view lstrip_chars(std::string_view s, std::string_view chars) noexcept;
std::string_view rstrip_chars(std::string_view s, std::string_view chars) noexcept;

// A JSON string literal of `s` as Python's json.dumps(s, ensure_ascii=False) writes it.
std::string json_quote(std::string_view s);

std::string ascii_lower(std::string_view s);

// A Markdown code fence longer than any backtick run in `code` (at least three backticks), so
// that the code cannot close it early.
std::string fence_for(std::string_view code);
// `code` in such a fence with the info string `language`, ending in a line break.
std::string fenced(std::string_view code, std::string_view language);

}  // namespace kbrl::prompt::detail
