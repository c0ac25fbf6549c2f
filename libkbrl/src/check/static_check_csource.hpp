// Internal to the static checker: the C/C++/CUDA/HIP source a candidate carries in its Python
// string literals (load_inline sources), unescaped and tokenized with C comments dropped, each
// token mapped back to its line in the candidate.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "static_check_python.hpp"

namespace kbrl::check::detail {

struct CToken {
  enum class Kind { ident, number, string, chr, punct };
  Kind kind = Kind::punct;
  std::string text;  // for string and char literals: the body without quotes
  int line = 0;      // line in the candidate program
  bool is(std::string_view s) const { return kind == Kind::punct && text == s; }
  bool is_ident(std::string_view s) const { return kind == Kind::ident && text == s; }
};

// One string literal of the candidate, or several joined by implicit concatenation or `+`, read
// as C/C++ (or a comment, for programs that read their own text).
struct CSource {
  std::vector<std::size_t> py_tokens;  // indices in PythonModule::toks (empty for a comment)
  std::vector<CToken> toks;
  bool using_namespace_std = false;
  bool from(const std::vector<std::size_t>& strings) const;  // built from any of these string tokens
};

// An identifier with its qualification: `std::thread`, `::system`, `x.half`, `at::cuda::getCurrentCUDAStream`.
struct CName {
  std::string qual;       // "std::thread" (a leading "::" dropped)
  std::string last;       // "thread"
  std::string qualifier;  // "std", "" for none, "::" for the global namespace
  bool member = false;    // after '.' or '->'
  bool called = false;    // followed by '(' (or by a template argument list and '(')
  std::size_t first = 0;  // token index of the first identifier
  std::size_t index = 0;  // token index of the last identifier
  int line = 0;
};

// C tokens of `text`; `lines[i]` is the candidate line of text[i].
std::vector<CToken> lex_c(std::string_view text, const std::vector<int>& lines);
// A Python string token's value (escapes decoded unless raw) with the candidate line of each char.
void decode_python_string(const core::PyToken& tok, std::string& text, std::vector<int>& lines);
// Every string literal of `py`, adjacent and `+`-joined literals as one source. Docstrings
// (string-only statements) and comments are left out unless `hidden_too`: a program that reads
// its own text (`__doc__`, `__file__`, inspect.getsource) can compile code hidden there.
std::vector<CSource> embedded_sources(const PythonModule& py, bool hidden_too);
std::vector<CName> c_names(const std::vector<CToken>& toks);
// Index of the token closing the bracket at `open` (same kind), or toks.size().
std::size_t c_match(const std::vector<CToken>& toks, std::size_t open);
// Whether the identifier at `index` starts a function definition (`name(...) [quals] {`) or a
// macro definition (`#define name`).
bool c_is_definition(const std::vector<CToken>& toks, std::size_t first, std::size_t index);
// Names of the __global__ functions defined in `toks`.
std::vector<std::pair<std::string, int>> c_global_kernels(const std::vector<CToken>& toks);

}  // namespace kbrl::check::detail
