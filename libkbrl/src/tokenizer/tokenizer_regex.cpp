// Pre-tokenizer patterns on PCRE2. The tokenizers library compiles them with Oniguruma; both are
// backtracking engines with the same leftmost-first alternation, so the same pattern splits text
// the same way once the escapes whose Unicode meaning differs are spelled out:
//   \s  Oniguruma: \t \n \v \f \r U+0085 and \p{Z};  PCRE2 (UCP) adds U+180E
//   \w  Oniguruma: \p{L} \p{M} \p{Nd} \p{Pc};         PCRE2 (10.42): \p{L} \p{N} and _
//   \h  Oniguruma: a hexadecimal digit;               PCRE2: horizontal white space
//   \uHHHH is Oniguruma's code point escape; PCRE2 spells it \x{HHHH}.
// Constructs whose translation would change the pattern's structure are refused.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tokenizer_impl.hpp"

namespace kbrl::tokenizer::detail {
namespace {

constexpr std::string_view kSpaceItems = "\\t-\\r\\x{85}\\p{Z}";
constexpr std::string_view kWordItems = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
constexpr std::string_view kHexItems = "0-9a-fA-F";

std::string translate(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) throw std::invalid_argument("the pattern ends with a lone backslash");
      const char e = p[++i];
      std::string_view items;
      bool negated = false;
      switch (e) {
        case 's': items = kSpaceItems; break;
        case 'S': items = kSpaceItems; negated = true; break;
        case 'w': items = kWordItems; break;
        case 'W': items = kWordItems; negated = true; break;
        case 'h': items = kHexItems; break;
        case 'H': items = kHexItems; negated = true; break;
        case 'b':
        case 'B':
          throw std::invalid_argument(std::string("\\") + e + " (word boundaries) is not supported");
        case 'u': {
          if (i + 4 >= p.size() ||
              !std::all_of(p.begin() + static_cast<std::ptrdiff_t>(i) + 1, p.begin() + static_cast<std::ptrdiff_t>(i) + 5,
                           [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; }))
            throw std::invalid_argument("\\u needs four hexadecimal digits");
          out += "\\x{";
          out += p.substr(i + 1, 4);
          out += '}';
          i += 4;
          continue;
        }
        default:
          out += '\\';
          out += e;
          continue;
      }
      if (in_class) {
        if (negated)
          throw std::invalid_argument(std::string("\\") + e + " inside a character class is not supported");
        out += items;
      } else {
        out += negated ? "[^" : "[";
        out += items;
        out += ']';
      }
      continue;
    }
    if (in_class) {
      if (c == '[') throw std::invalid_argument("nested character classes are not supported");
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&')
        throw std::invalid_argument("class intersection (&&) is not supported");
      if (c == ']') in_class = false;
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == '(' && i + 2 < p.size() && p[i + 1] == '?') {
      // Inline options: Oniguruma's (?m) is PCRE2's (?s); refuse rather than guess.
      std::size_t j = i + 2;
      while (j < p.size() && (std::isalpha(static_cast<unsigned char>(p[j])) || p[j] == '-')) {
        if (p[j] != 'i' && p[j] != 'x' && p[j] != '-')
          throw std::invalid_argument(std::string("the inline option (?") + p[j] + ") is not supported");
        ++j;
      }
    }
    out += c;
  }
  if (in_class) throw std::invalid_argument("a character class is not closed");
  return out;
}

struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    // Long runs of one character class (spaces, digits) backtrack through \s+(?!\S): give the JIT
    // room beyond its 32 KiB default.
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal) {
  const std::string translated = literal ? std::string(pattern) : translate(pattern);
  pcre2_compile_context* ctx = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(ctx, PCRE2_NEWLINE_LF);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2 refuses UCP next to LITERAL; a literal needs no character classes anyway.
  const std::uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                                   &error, &offset, ctx);
  pcre2_compile_context_free(ctx);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw std::invalid_argument("PCRE2 cannot compile it (as '" + translated + "'): " +
                                reinterpret_cast<const char*>(message) + " at offset " + std::to_string(offset));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable the interpreter runs
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::find(std::string_view s, std::size_t from, std::size_t& begin, std::size_t& end) const {
  MatchState& st = match_state();
  const int rc = pcre2_match(static_cast<const pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(),
                             from, PCRE2_NO_UTF_CHECK, st.data, st.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof message);
    throw std::runtime_error(std::string("pre-tokenizer regex failed: ") + reinterpret_cast<const char*>(message));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  begin = ov[0];
  end = ov[1];
  return true;
}

void TokenTrie::add(std::string_view text, int token_index) {
  int node = 0;
  for (char ch : text) {
    const auto b = static_cast<unsigned char>(ch);
    auto& children = nodes_[static_cast<std::size_t>(node)].children;
    auto it = std::lower_bound(children.begin(), children.end(), b,
                               [](const auto& child, unsigned char key) { return child.first < key; });
    if (it != children.end() && it->first == b) {
      node = it->second;
    } else {
      const int next = static_cast<int>(nodes_.size());
      children.insert(it, {b, next});
      nodes_.emplace_back();
      node = next;
    }
  }
  nodes_[static_cast<std::size_t>(node)].token = token_index;
  if (!text.empty()) first_bytes_[static_cast<unsigned char>(text[0])] = true;
}

std::size_t TokenTrie::longest_at(std::string_view s, std::size_t i, int& token_index) const {
  std::size_t best = 0;
  int node = 0;
  for (std::size_t k = i; k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[k]);
    const auto& children = nodes_[static_cast<std::size_t>(node)].children;
    auto it = std::lower_bound(children.begin(), children.end(), b,
                               [](const auto& child, unsigned char key) { return child.first < key; });
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes_[static_cast<std::size_t>(node)].token >= 0) {
      best = k + 1 - i;
      token_index = nodes_[static_cast<std::size_t>(node)].token;
    }
  }
  return best;
}

}  // namespace kbrl::tokenizer::detail
