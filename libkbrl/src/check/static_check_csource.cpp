#include "static_check_csource.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace kbrl::check::detail {
namespace {

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

constexpr std::array<std::string_view, 10> kMultiPunct{"<<<", ">>>", "::", "->", "<<", ">>", "##", "&&", "||", "=="};

constexpr std::array<std::string_view, 12> kNotFunctionNames{
    "if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "alignof", "static_assert", "do", "else"};

}  // namespace

void decode_python_string(const core::PyToken& tok, std::string& text, std::vector<int>& lines) {
  text.clear();
  lines.clear();
  const std::string_view body = tok.string_body;
  const bool raw = tok.string_prefix.find_first_of("rR") != std::string_view::npos;
  int line = tok.line;
  auto put = [&](char c) {
    text += c;
    lines.push_back(line);
  };
  for (std::size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '\n') {
      put('\n');
      ++line;
      continue;
    }
    if (raw || c != '\\' || i + 1 >= body.size()) {
      put(c);
      continue;
    }
    const char d = body[++i];
    switch (d) {
      case 'n': put('\n'); break;
      case 't': put('\t'); break;
      case 'r': put('\r'); break;
      case '\\': put('\\'); break;
      case '\'': put('\''); break;
      case '"': put('"'); break;
      case '\n': ++line; break;  // escaped newline: a line continuation inside the literal
      default:
        put('\\');
        put(d);
    }
  }
}

std::vector<CToken> lex_c(std::string_view s, const std::vector<int>& lines) {
  std::vector<CToken> out;
  auto line_at = [&](std::size_t i) { return lines.empty() ? 0 : lines[std::min(i, lines.size() - 1)]; };
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '\\' && i + 1 < s.size() && s[i + 1] == '\n') {
      i += 2;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const std::size_t e = s.find("*/", i + 2);
      i = e == std::string_view::npos ? s.size() : e + 2;
      continue;
    }
    CToken t;
    t.line = line_at(i);
    if (c == '"' || c == '\'') {
      std::size_t j = i + 1;
      while (j < s.size() && s[j] != c && s[j] != '\n') j += s[j] == '\\' ? 2 : 1;
      j = std::min(j, s.size());
      t.kind = c == '"' ? CToken::Kind::string : CToken::Kind::chr;
      t.text = std::string(s.substr(i + 1, j - i - 1));
      out.push_back(std::move(t));
      i = j + 1;
      continue;
    }
    if (ident_start(c)) {
      std::size_t j = i;
      while (j < s.size() && ident_char(s[j])) ++j;
      t.kind = CToken::Kind::ident;
      t.text = std::string(s.substr(i, j - i));
      out.push_back(std::move(t));
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < s.size() && (ident_char(s[j]) || s[j] == '.' ||
                              ((s[j] == '+' || s[j] == '-') && (s[j - 1] == 'e' || s[j - 1] == 'E'))))
        ++j;
      t.kind = CToken::Kind::number;
      t.text = std::string(s.substr(i, j - i));
      out.push_back(std::move(t));
      i = j;
      continue;
    }
    std::size_t len = 1;
    for (std::string_view p : kMultiPunct) {
      if (s.substr(i, p.size()) == p) {
        len = p.size();
        break;
      }
    }
    t.kind = CToken::Kind::punct;
    t.text = std::string(s.substr(i, len));
    out.push_back(std::move(t));
    i += len;
  }
  return out;
}

bool CSource::from(const std::vector<std::size_t>& strings) const {
  return std::any_of(py_tokens.begin(), py_tokens.end(), [&](std::size_t t) {
    return std::find(strings.begin(), strings.end(), t) != strings.end();
  });
}

std::vector<CSource> embedded_sources(const PythonModule& py, bool hidden_too) {
  std::vector<bool> docstring(py.toks.size(), false);
  for (const Stmt& s : py.stmts) {
    bool only_strings = true;
    for (std::size_t k = s.begin; k < s.end && only_strings; ++k) {
      const auto& t = py.toks[k];
      only_strings = t.kind == core::PyTokenKind::string || t.is_op("(") || t.is_op(")");
    }
    if (!only_strings || hidden_too) continue;
    for (std::size_t k = s.begin; k < s.end; ++k) docstring[k] = true;
  }
  auto finish = [](CSource& src) {
    for (std::size_t i = 0; i + 2 < src.toks.size(); ++i) {
      if (src.toks[i].is_ident("using") && src.toks[i + 1].is_ident("namespace") && src.toks[i + 2].is_ident("std"))
        src.using_namespace_std = true;
    }
  };
  std::vector<CSource> out;
  std::string text, piece;
  std::vector<int> lines, piece_lines;
  for (std::size_t k = 0; k < py.toks.size(); ++k) {
    if (py.toks[k].kind != core::PyTokenKind::string || docstring[k]) continue;
    CSource src;
    text.clear();
    lines.clear();
    // "a" "b" and "a" + "b" are one source: a kernel split across literals is still one kernel.
    for (std::size_t j = k;;) {
      decode_python_string(py.toks[j], piece, piece_lines);
      text += piece;
      lines.insert(lines.end(), piece_lines.begin(), piece_lines.end());
      src.py_tokens.push_back(j);
      k = j;
      if (j + 1 < py.toks.size() && py.toks[j + 1].kind == core::PyTokenKind::string) {
        j += 1;
      } else if (j + 2 < py.toks.size() && py.toks[j + 1].is_op("+") &&
                 py.toks[j + 2].kind == core::PyTokenKind::string) {
        j += 2;
      } else {
        break;
      }
    }
    src.toks = lex_c(text, lines);
    finish(src);
    if (!src.toks.empty()) out.push_back(std::move(src));
  }
  if (hidden_too) {
    for (const auto& c : py.comments) {
      const std::string body(c.text.substr(1));
      CSource src;
      src.toks = lex_c(body, std::vector<int>(body.size(), c.line));
      finish(src);
      if (!src.toks.empty()) out.push_back(std::move(src));
    }
  }
  return out;
}

std::size_t c_match(const std::vector<CToken>& toks, std::size_t open) {
  if (open >= toks.size()) return toks.size();
  const std::string& o = toks[open].text;
  const std::string c = o == "(" ? ")" : o == "[" ? "]" : o == "{" ? "}" : o == "<" ? ">" : "";
  if (c.empty()) return toks.size();
  int d = 0;
  for (std::size_t i = open; i < toks.size(); ++i) {
    if (toks[i].is(o)) ++d;
    if (toks[i].is(c) && --d == 0) return i;
    if (o == "<" && (toks[i].is(";") || toks[i].is("{") || toks[i].is("}"))) break;
  }
  return toks.size();
}

std::vector<CName> c_names(const std::vector<CToken>& toks) {
  std::vector<CName> out;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    if (toks[i].kind != CToken::Kind::ident) continue;
    if (i > 0 && toks[i - 1].is("::") && i > 1 && toks[i - 2].kind == CToken::Kind::ident) continue;  // inside a chain
    CName n;
    n.first = i;
    n.line = toks[i].line;
    if (i > 0 && toks[i - 1].is("::")) n.qualifier = "::";
    n.member = i > 0 && (toks[i - 1].is(".") || toks[i - 1].is("->"));
    std::string qual = toks[i].text;
    std::size_t j = i;
    while (j + 2 < toks.size() && toks[j + 1].is("::") && toks[j + 2].kind == CToken::Kind::ident) {
      qual += "::" + toks[j + 2].text;
      j += 2;
    }
    n.index = j;
    n.last = toks[j].text;
    n.qual = qual;
    if (n.qualifier.empty() && j > i) n.qualifier = qual.substr(0, qual.size() - n.last.size() - 2);
    std::size_t after = j + 1;
    if (after < toks.size() && toks[after].is("<")) {  // template arguments: data_ptr<float>()
      const std::size_t close = c_match(toks, after);
      if (close < toks.size()) after = close + 1;
    }
    n.called = after < toks.size() && toks[after].is("(");
    out.push_back(std::move(n));
  }
  return out;
}

bool c_is_definition(const std::vector<CToken>& toks, std::size_t first, std::size_t index) {
  if (first >= 2 && toks[first - 1].is_ident("define") && toks[first - 2].is("#")) return true;
  for (std::string_view kw : kNotFunctionNames) {
    if (toks[index].text == kw) return false;
  }
  if (index + 1 >= toks.size() || !toks[index + 1].is("(")) return false;
  if (first == 0) return false;
  const CToken& prev = toks[first - 1];
  const bool type_before = (prev.kind == CToken::Kind::ident && prev.text != "return" && prev.text != "else" &&
                            prev.text != "case" && prev.text != "new") ||
                           prev.is("*") || prev.is("&") || prev.is(">") || prev.is("&&");
  if (!type_before) return false;
  std::size_t k = c_match(toks, index + 1);
  if (k >= toks.size()) return false;
  ++k;
  while (k < toks.size()) {
    const CToken& t = toks[k];
    if (t.is("{")) return true;
    if (t.is_ident("const") || t.is_ident("noexcept") || t.is_ident("override") || t.is_ident("final") ||
        t.is_ident("volatile")) {
      ++k;
      continue;
    }
    if ((t.is_ident("__attribute__") || t.is_ident("throw")) && k + 1 < toks.size() && toks[k + 1].is("(")) {
      k = c_match(toks, k + 1) + 1;
      continue;
    }
    return false;
  }
  return false;
}

std::vector<std::pair<std::string, int>> c_global_kernels(const std::vector<CToken>& toks) {
  std::vector<std::pair<std::string, int>> out;
  for (std::size_t g = 0; g < toks.size(); ++g) {
    if (!toks[g].is_ident("__global__")) continue;
    for (std::size_t j = g + 1; j < toks.size(); ++j) {
      const CToken& t = toks[j];
      if (t.is(";") || t.is("{")) break;
      if (t.kind != CToken::Kind::ident || j + 1 >= toks.size() || !toks[j + 1].is("(")) continue;
      if (t.text == "__launch_bounds__" || t.text == "__attribute__" || t.text == "__align__" || t.text == "alignas") {
        j = c_match(toks, j + 1);
        continue;
      }
      out.emplace_back(t.text, t.line);
      break;
    }
  }
  return out;
}

}  // namespace kbrl::check::detail
