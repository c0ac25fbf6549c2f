// Internal to the static checker: a light structural model of a Python program built on
// core::lex_python — statements, def/class scopes, imports and aliases, and every dotted-name
// use resolved through them. Not a parser: it assumes syntactically plausible code and never throws.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/core/python_lexer.hpp"

namespace kbrl::check::detail {

inline constexpr std::size_t kNone = static_cast<std::size_t>(-1);

// One simple statement or compound-statement header (a logical line, or a part of one split at ';').
struct Stmt {
  std::size_t begin = 0, end = 0;  // token range in PythonModule::toks, newline excluded
  int indent = 0;
  int line = 0;
  std::size_t colon = kNone;  // the header ':' of a compound statement
  std::size_t body_end = 0;   // first statement after the indented body (index + 1 when none)
  int owner = -1;             // innermost enclosing def/class scope, -1 at module level
};

// A def or a class.
struct Scope {
  bool is_class = false;
  std::string name;
  std::size_t stmt = 0;                  // the header statement
  std::size_t stmt_end = 0;              // first statement after the body
  std::size_t tok_begin = 0, tok_end = 0;  // tokens of the header and the body
  int parent = -1;
  std::vector<std::size_t> decorators;   // statement indices of the '@' lines
  std::vector<std::vector<std::string>> bases;  // class bases as written (dotted parts)
};

// A use of a dotted name, e.g. `torch.cuda.synchronize`, `F.relu(`, `getattr(os, "system")`,
// `x.relu(` (head "x") or `(a + b).sum(` (empty head: the receiver is an expression).
struct Ref {
  enum class Via { plain, getattr_call, setattr_call, dict_item };
  std::vector<std::string> parts;  // as written; getattr/setattr/__dict__ forms folded in
  std::string qual;                // parts joined with the head resolved through imports/aliases
  std::vector<std::string> alt_quals;  // the same through `from m import *` modules
  bool head_is_module = false;     // the head is an import, an alias of one, or a well-known module
  bool call = false;               // called: `a.b(`
  bool subscript_call = false;     // subscripted then called: `kernel[grid](`
  bool assign = false;             // assigned, augmented, deleted or setattr'd
  bool is_import = false;          // produced by an import statement
  Via via = Via::plain;
  std::size_t tok_begin = 0, tok_end = 0;
  int line = 0;
  std::string text() const;        // parts joined with '.'
};

// `getattr(mod, expr)` / `setattr(mod, expr, v)` with an attribute name that is not a literal.
struct DynamicAttr {
  std::string qual;  // the object
  bool is_set = false;
  bool on_module = false;
  int line = 0;
};

class PythonModule {
 public:
  // `source` must outlive the module: tokens are views into it.
  explicit PythonModule(std::string_view source);

  std::vector<core::PyToken> toks;  // code tokens (comments dropped), newline tokens kept
  std::vector<core::PyToken> comments;  // the dropped comments, for programs that read their own text
  std::vector<int> depth;           // bracket depth before each token
  std::vector<std::size_t> stmt_of; // statement index of each token (kNone for newlines)
  std::vector<Stmt> stmts;
  std::vector<Scope> scopes;
  std::map<std::string, std::string> aliases;  // local name -> qualified name
  std::vector<std::string> star_modules;
  std::set<std::string> user_names;  // names the program binds itself (defs, classes, module-level assignments)
  std::vector<Ref> refs;
  std::vector<DynamicAttr> dynamic_attrs;
  std::map<std::size_t, std::size_t> ref_at;  // first token -> index in refs

  const core::PyToken& tok(std::size_t i) const { return toks[i]; }
  bool is_name(std::size_t i, std::string_view s) const { return i < toks.size() && toks[i].is_name(s); }
  bool is_op(std::size_t i, std::string_view s) const { return i < toks.size() && toks[i].is_op(s); }
  std::string_view first_word(const Stmt& s) const;
  // Index of the bracket closing the one at `open`, or toks.size().
  std::size_t match_close(std::size_t open) const;
  // The qualified name of dotted `parts` resolved through imports and aliases.
  std::string resolve(const std::vector<std::string>& parts, bool* is_module = nullptr) const;
  // Module-level def or class by name, or -1.
  int top_scope(std::string_view name) const;
  // Method `name` directly inside class scope `cls`, or -1.
  int method(int cls, std::string_view name) const;
  // Statements directly in a compound statement's body (inline body: none; use inline_body()).
  std::vector<std::size_t> body_stmts(std::size_t header) const;
  // Token range after the header ':' when the body is on the same line, else empty.
  std::pair<std::size_t, std::size_t> inline_body(std::size_t header) const;
  // Names assigned (targets) by statement `s`: `a = ...`, `a, b = ...`, `a: int = ...`, `a += ...`.
  std::vector<std::string> assigned_names(const Stmt& s) const;
  // Token range of the value of the last '=' of an assignment statement (empty if none).
  std::pair<std::size_t, std::size_t> assigned_value(const Stmt& s) const;
  // Tokens [b, e) joined with single spaces (newlines dropped): a comparable normal form.
  std::string normalized(std::size_t b, std::size_t e) const;
  // Positional and keyword arguments of the call whose '(' is at `open`.
  struct Args {
    std::vector<std::pair<std::size_t, std::size_t>> positional;
    std::map<std::string, std::pair<std::size_t, std::size_t>, std::less<>> keyword;
  };
  Args call_args(std::size_t open) const;

 private:
  void split_statements();
  void build_scopes();
  void read_imports();
  void read_aliases();
  void collect_refs();
  std::size_t add_chain_ref(std::size_t k);
};

// Python keywords that can never head a dotted name.
bool is_python_keyword(std::string_view s);

}  // namespace kbrl::check::detail
