// The search terms and fingerprints of code (code_tokens.hpp). Written here rather than taken from
// a library: no packaged tokenizer knows Python's structure (dotted torch names, docstrings,
// keyword arguments), and the Python lexer of kbrl::core already gives us the tokens.
#include "kbrl/rag/code_tokens.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <unordered_map>
#include <unordered_set>

#include "kbrl/core/python_lexer.hpp"

namespace kbrl::rag {
namespace {

using core::PyToken;
using core::PyTokenKind;

bool in_list(std::string_view word, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), word) != list.end();
}

bool is_keyword(std::string_view w) {
  return in_list(w, {"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
                     "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
                     "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with",
                     "yield"});
}

bool is_builtin(std::string_view w) {
  return in_list(w, {"print", "len", "range", "super", "int", "float", "bool", "str", "list", "tuple", "dict", "set",
                     "min", "max", "sum", "abs", "isinstance", "getattr", "setattr", "hasattr", "enumerate", "zip",
                     "map", "filter", "sorted", "reversed", "round", "pow", "divmod", "any", "all", "type", "object",
                     "slice", "ValueError", "RuntimeError", "TypeError", "Exception", "NotImplementedError"});
}

// Names every KernelBench-format program uses with one meaning: never renamed.
bool is_api_name(std::string_view w) {
  return in_list(w, {"self", "cls", "Model", "ModelNew", "forward", "get_inputs", "get_init_inputs", "torch", "nn", "F",
                     "np", "numpy", "math", "triton", "tl"}) ||
         (w.size() > 4 && w.substr(0, 2) == "__" && w.substr(w.size() - 2) == "__");
}

// Words that carry nothing in prose (comments, docstrings).
bool is_prose_stop_word(std::string_view w) {
  return in_list(w, {"the", "of", "to", "and", "or", "in", "on", "for", "with", "is", "are", "be", "by", "an", "as",
                     "at", "this", "that", "it", "its", "from", "into", "each", "we", "returns", "return", "args",
                     "tensor", "shape", "input", "output", "self", "none", "true", "false", "not", "if", "else"});
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// `identifier` whole (lowercased) and its parts split on '_', lower->Upper, Upper->Upper+lower
// ("HTTPServer": http, server) and letter<->digit; parts of one character and numbers dropped.
void append_identifier_terms(std::string_view id, std::vector<std::string>& out) {
  if (id.size() >= 2 && !all_digits(id)) out.push_back(lower(id));
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  auto cut = [&](std::size_t end) {
    if (end > start) parts.push_back(id.substr(start, end - start));
    start = end;
  };
  for (std::size_t i = 0; i < id.size(); ++i) {
    const auto c = static_cast<unsigned char>(id[i]);
    if (c == '_') {
      cut(i);
      start = i + 1;
      continue;
    }
    if (i == 0 || i == start) continue;
    const auto p = static_cast<unsigned char>(id[i - 1]);
    const bool boundary =
        (std::islower(p) && std::isupper(c)) || (std::isalpha(p) && std::isdigit(c)) ||
        (std::isdigit(p) && std::isalpha(c)) ||
        (std::isupper(p) && std::isupper(c) && i + 1 < id.size() && std::islower(static_cast<unsigned char>(id[i + 1])));
    if (boundary) cut(i);
  }
  cut(id.size());
  if (parts.size() < 2) return;
  for (std::string_view part : parts)
    if (part.size() >= 2 && !all_digits(part)) out.push_back(lower(part));
}

bool is_import_line_start(const std::vector<PyToken>& t, std::size_t i) {
  return t[i].is_name("import") || t[i].is_name("from");
}

// Index one past the logical line starting at i (its newline included).
std::size_t end_of_line(const std::vector<PyToken>& t, std::size_t i) {
  while (i < t.size() && t[i].kind != PyTokenKind::newline) ++i;
  return i < t.size() ? i + 1 : i;
}

// A logical line made only of string literals: a docstring or a string used as a comment.
bool is_string_statement(const std::vector<PyToken>& t, std::size_t i, std::size_t end) {
  bool any = false;
  for (std::size_t j = i; j < end; ++j) {
    if (t[j].kind == PyTokenKind::newline || t[j].kind == PyTokenKind::comment) continue;
    if (t[j].kind != PyTokenKind::string) return false;
    any = true;
  }
  return any;
}

// Names an import statement binds: `import a.b` binds a, `import a.b as c` c, `from m import x as
// y, z` y and z.
void collect_imported_names(const std::vector<PyToken>& t, std::size_t i, std::size_t end,
                            std::unordered_set<std::string_view>& names) {
  const bool from = t[i].is_name("from");
  std::size_t j = i + 1;
  if (from) {
    while (j < end && !t[j].is_name("import")) ++j;
    ++j;
  }
  bool expect_name = true;  // at the start of one imported item
  for (; j < end; ++j) {
    const PyToken& tok = t[j];
    if (tok.kind != PyTokenKind::name) {
      if (tok.is_op(",")) expect_name = true;
      continue;
    }
    if (tok.is_name("as") && j + 1 < end) {
      names.insert(t[j + 1].text);
      ++j;
      continue;
    }
    if (expect_name) {
      // `import a.b.c` binds `a`; `from m import x` binds `x` (unless renamed by a following `as`).
      const bool renamed = [&] {
        std::size_t k = j + 1;
        while (k + 1 < end && t[k].is_op(".")) k += 2;
        return k < end && t[k].is_name("as");
      }();
      if (!renamed) names.insert(tok.text);
      expect_name = false;
    }
  }
}

bool is_operator_op(std::string_view op) {
  return in_list(op, {"+", "-", "*", "/", "//", "%", "**", "@", "<", ">", "<=", ">=", "==", "!=", "&", "|", "^", "~",
                      "<<", ">>", "+=", "-=", "*=", "/=", "//=", "%=", "**=", "@=", "&=", "|=", "^=", "<<=", ">>="});
}

std::string_view base_operator(std::string_view op) {
  if (op.size() >= 2 && op.back() == '=' && op != "==" && op != "!=" && op != "<=" && op != ">=")
    return op.substr(0, op.size() - 1);
  return op;
}

// The two canonical streams and the operation multiset, in one pass.
struct CanonicalStreams {
  std::vector<std::string> exact;     // locals renamed $0, $1, ... by first appearance
  std::vector<std::string> blinded;   // locals as $id, numbers as $num
  std::vector<std::string> operations;
};

CanonicalStreams canonical_streams(std::string_view source) {
  const std::vector<PyToken> t = core::lex_python(source);
  CanonicalStreams s;
  std::unordered_set<std::string_view> imported;
  // Lines to skip: imports (bound names kept, the statement itself is not the computation) and
  // string-only statements (docstrings).
  std::vector<char> skip(t.size(), 0);
  for (std::size_t i = 0; i < t.size();) {
    const std::size_t end = end_of_line(t, i);
    // Comment lines carry no newline token of their own: they open the logical line after them.
    std::size_t first = i;
    while (first < end && t[first].kind == PyTokenKind::comment) ++first;
    if (first < end && is_import_line_start(t, first)) {
      collect_imported_names(t, first, end, imported);
      std::fill(skip.begin() + static_cast<std::ptrdiff_t>(i), skip.begin() + static_cast<std::ptrdiff_t>(end), 1);
    } else if (is_string_statement(t, i, end)) {
      std::fill(skip.begin() + static_cast<std::ptrdiff_t>(i), skip.begin() + static_cast<std::ptrdiff_t>(end), 1);
    }
    i = end;
  }

  std::unordered_map<std::string_view, std::size_t> local_numbers;
  std::unordered_map<std::string_view, std::size_t> attribute_numbers;
  // Open brackets: the character, and whether a '(' is a `def`'s parameter list.
  std::vector<std::pair<char, bool>> brackets;
  const PyToken* previous = nullptr;  // last token kept (comments and skipped lines excluded)
  for (std::size_t i = 0; i < t.size(); ++i) {
    const PyToken& tok = t[i];
    if (skip[i] || tok.kind == PyTokenKind::comment) continue;
    // Names are numbered per top-level statement (a function, a class, an assignment): a copy
    // that renames `x` in forward and in get_inputs differently is still the same program.
    if (tok.indent == 0 && tok.kind != PyTokenKind::newline && (s.exact.empty() || s.exact.back() == "\n")) {
      local_numbers.clear();
      attribute_numbers.clear();
    }
    switch (tok.kind) {
      case PyTokenKind::newline:
        if (!s.exact.empty() && s.exact.back() != "\n") {
          s.exact.emplace_back("\n");
          s.blinded.emplace_back("\n");
        }
        break;
      case PyTokenKind::number:
        s.exact.emplace_back(tok.text);
        s.blinded.emplace_back("$num");
        break;
      case PyTokenKind::string:
        s.exact.emplace_back(tok.text);
        s.blinded.emplace_back(tok.text);
        break;
      case PyTokenKind::op: {
        const std::string_view op = tok.text;
        if (op == "(" || op == "[" || op == "{") {
          const bool def_params = op == "(" && i >= 2 && t[i - 2].is_name("def");
          brackets.emplace_back(op[0], def_params);
        } else if ((op == ")" || op == "]" || op == "}") && !brackets.empty()) {
          brackets.pop_back();
        }
        if (is_operator_op(op)) s.operations.emplace_back(base_operator(op));
        s.exact.emplace_back(op);
        s.blinded.emplace_back(op);
        break;
      }
      case PyTokenKind::name: {
        const std::string_view name = tok.text;
        const bool after_dot = previous != nullptr && previous->is_op(".");
        const bool next_is_dot = i + 1 < t.size() && t[i + 1].is_op(".");
        const bool called = i + 1 < t.size() && t[i + 1].is_op("(");
        const bool keyword_argument = i + 1 < t.size() && t[i + 1].is_op("=") && !brackets.empty() &&
                                      brackets.back().first == '(' && !brackets.back().second;
        bool keep = is_keyword(name) || is_builtin(name) || is_api_name(name) || after_dot || keyword_argument ||
                    imported.count(name) != 0;
        // The attribute right after `self` names a submodule or parameter of the model: local,
        // numbered apart from plain names (`self.slope = slope` and `self.a = b` are alike).
        const bool of_self = after_dot && i >= 2 && t[i - 2].is_name("self");
        if (after_dot) {
          if (!of_self) s.operations.emplace_back(name);
          if (of_self) keep = false;
        } else if (imported.count(name) != 0 && !next_is_dot) {
          s.operations.emplace_back(name);
        } else if (is_builtin(name) && called) {
          s.operations.emplace_back(name);
        } else if (keyword_argument) {  // `groups=`, `keepdim=`, `approximate=`: they change the computation
          s.operations.emplace_back(name);
        }
        if (keep) {
          s.exact.emplace_back(name);
          s.blinded.emplace_back(name);
        } else {
          auto& numbers = of_self ? attribute_numbers : local_numbers;
          const auto [it, inserted] = numbers.emplace(name, numbers.size());
          s.exact.push_back((of_self ? "$a" : "$") + std::to_string(it->second));
          s.blinded.emplace_back("$id");
        }
        break;
      }
      case PyTokenKind::comment:
        break;
    }
    previous = &tok;
  }
  if (!s.exact.empty() && s.exact.back() == "\n") {
    s.exact.pop_back();
    s.blinded.pop_back();
  }
  std::sort(s.operations.begin(), s.operations.end());
  return s;
}

std::string join(const std::vector<std::string>& tokens) {
  std::string out;
  for (const std::string& tok : tokens) {
    if (!out.empty() && out.back() != '\n' && tok != "\n") out.push_back(' ');
    out += tok;
  }
  return out;
}

}  // namespace

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

void append_word_terms(std::string_view text, std::vector<std::string>& out) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (!(std::isalnum(c) || c == '_')) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
    const std::string_view word = text.substr(i, j - i);
    if (!is_keyword(word) && !is_prose_stop_word(lower(word))) append_identifier_terms(word, out);
    i = j;
  }
}

std::vector<std::string> code_search_terms(std::string_view python_source) {
  const std::vector<PyToken> t = core::lex_python(python_source);
  std::vector<std::string> out;
  out.reserve(t.size() * 2);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const PyToken& tok = t[i];
    switch (tok.kind) {
      case PyTokenKind::comment:
        append_word_terms(tok.text.substr(1), out);
        break;
      case PyTokenKind::string:
        append_word_terms(tok.string_body, out);
        break;
      case PyTokenKind::op:
        if (tok.text == "@" || tok.text == "@=") {
          out.emplace_back("torch.matmul");
          out.emplace_back("matmul");
        }
        break;
      case PyTokenKind::name: {
        if (i > 0 && t[i - 1].is_op(".")) break;  // inside a chain that started earlier
        // The dotted chain name(.name)* starting here.
        std::size_t end = i + 1;
        while (end + 1 < t.size() && t[end].is_op(".") && t[end + 1].kind == PyTokenKind::name) end += 2;
        const bool of_self = tok.is_name("self");
        if (end - i >= 3 && !of_self) {
          std::string dotted;
          for (std::size_t j = i; j < end; j += 2) {
            if (!dotted.empty()) dotted.push_back('.');
            dotted += lower(t[j].text);
          }
          out.push_back(std::move(dotted));
        }
        for (std::size_t j = i; j < end; j += 2) {
          const std::string_view part = t[j].text;
          if (part == "self" || is_keyword(part)) continue;
          append_identifier_terms(part, out);
        }
        i = end - 1;
        break;
      }
      case PyTokenKind::number:
      case PyTokenKind::newline:
        break;
    }
  }
  return out;
}

SourceFingerprint fingerprint_python_source(std::string_view python_source, int shingle_size) {
  const CanonicalStreams s = canonical_streams(python_source);
  SourceFingerprint f;
  f.exact_hash = fnv1a64(join(s.exact));
  std::vector<std::uint64_t> token_hashes;
  token_hashes.reserve(s.blinded.size());
  for (const std::string& tok : s.blinded) token_hashes.push_back(fnv1a64(tok));
  const std::size_t k = static_cast<std::size_t>(std::max(1, shingle_size));
  auto shingle = [&](std::size_t begin, std::size_t end) {
    std::uint64_t h = 14695981039346656037ull;
    for (std::size_t j = begin; j < end; ++j) {
      h ^= token_hashes[j];
      h *= 1099511628211ull;
      h ^= h >> 29;
    }
    return h;
  };
  if (!token_hashes.empty() && token_hashes.size() < k) {
    f.shingles.push_back(shingle(0, token_hashes.size()));
  } else if (!token_hashes.empty()) {
    f.shingles.reserve(token_hashes.size() - k + 1);
    for (std::size_t i = 0; i + k <= token_hashes.size(); ++i) f.shingles.push_back(shingle(i, i + k));
  }
  std::sort(f.shingles.begin(), f.shingles.end());
  f.shingles.erase(std::unique(f.shingles.begin(), f.shingles.end()), f.shingles.end());
  f.operations = s.operations;
  return f;
}

double jaccard(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b) {
  if (a.empty() && b.empty()) return 1.0;
  std::size_t common = 0;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      ++common;
      ++i;
      ++j;
    }
  }
  return static_cast<double>(common) / static_cast<double>(a.size() + b.size() - common);
}

std::string canonical_python_source(std::string_view python_source) { return join(canonical_streams(python_source).exact); }

std::string normalize_c_like_source(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool pending_space = false;
  auto put = [&](char c) {
    if (pending_space && !out.empty()) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') ++i;
      pending_space = true;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      const std::size_t close = s.find("*/", i + 2);
      i = close == std::string_view::npos ? s.size() : close + 1;
      pending_space = true;
      continue;
    }
    if (c == '"' || c == '\'') {  // literals verbatim (a "//" inside one is not a comment)
      put(c);
      for (++i; i < s.size() && s[i] != c; ++i) {
        out.push_back(s[i]);
        if (s[i] == '\\' && i + 1 < s.size()) out.push_back(s[++i]);
      }
      if (i < s.size()) out.push_back(c);
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      pending_space = true;
      continue;
    }
    put(c);
  }
  return out;
}

}  // namespace kbrl::rag
