#include "static_check_python.hpp"

#include <algorithm>
#include <array>

namespace kbrl::check::detail {
namespace {

using core::PyTokenKind;

constexpr std::array<std::string_view, 35> kKeywords{
    "False", "None",   "True",    "and",      "as",     "assert", "async", "await",  "break",
    "class", "continue", "def",   "del",      "elif",   "else",   "except", "finally", "for",
    "from",  "global", "if",      "import",   "in",     "is",     "lambda", "nonlocal", "not",
    "or",    "pass",   "raise",   "return",   "try",    "while",  "with",   "yield"};

constexpr std::array<std::string_view, 13> kCompoundKeywords{
    "if", "elif", "else", "for", "while", "try", "except", "finally", "with", "def", "class", "async", "case"};

constexpr std::array<std::string_view, 14> kAssignOps{"=",  "+=", "-=",  "*=",  "/=", "//=", "%=",
                                                      "**=", ">>=", "<<=", "&=", "|=", "^=", "@="};

// Module names that resolve to themselves even when the program never imported them: the
// evaluator's namespace may already hold them, and a stray `os.system` is suspicious either way.
constexpr std::array<std::string_view, 50> kKnownModules{
    "torch",     "os",        "sys",       "time",    "builtins",  "subprocess", "socket",
    "ctypes",    "cffi",      "threading", "_thread", "multiprocessing", "concurrent", "asyncio",
    "numpy",     "importlib", "inspect",   "gc",      "shutil",    "pathlib",   "signal",
    "pty",       "urllib",    "urllib3",   "requests", "http",     "httpx",     "aiohttp",
    "ftplib",    "smtplib",   "telnetlib", "xmlrpc",  "timeit",    "triton",    "math",
    "__main__",  "pickle",    "marshal",   "atexit",  "contextlib", "io",       "tempfile",
    "types",     "codecs",    "runpy",     "unittest", "faulthandler", "__builtins__", "cupy",
    "dill"};

// Builtins whose use the rules care about; mapped to "builtins.<name>" unless the program rebinds them.
constexpr std::array<std::string_view, 14> kTrackedBuiltins{
    "open", "exec", "eval", "compile", "__import__", "exit", "quit", "globals",
    "vars", "getattr", "setattr", "delattr", "breakpoint", "locals"};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& a, std::string_view s) {
  return std::find(a.begin(), a.end(), s) != a.end();
}

bool is_opener(const core::PyToken& t) { return t.is_op("(") || t.is_op("[") || t.is_op("{"); }
bool is_closer(const core::PyToken& t) { return t.is_op(")") || t.is_op("]") || t.is_op("}"); }
bool is_assign_op(const core::PyToken& t) { return t.kind == PyTokenKind::op && contains(kAssignOps, t.text); }

std::string join(const std::vector<std::string>& parts, std::size_t from = 0) {
  std::string out;
  for (std::size_t i = from; i < parts.size(); ++i) {
    if (i > from) out += '.';
    out += parts[i];
  }
  return out;
}

std::vector<std::string> split_dots(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '.') {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// A plain string literal (not an f-string) and nothing else in [b, e): its body.
bool literal_in(const PythonModule& m, std::size_t b, std::size_t e, std::string& body) {
  if (e != b + 1 || m.toks[b].kind != PyTokenKind::string) return false;
  const auto prefix = m.toks[b].string_prefix;
  if (prefix.find_first_of("fF") != std::string_view::npos) return false;
  body = std::string(m.toks[b].string_body);
  return true;
}

// [b, e) is a dotted name: name (. name)*.
bool chain_in(const PythonModule& m, std::size_t b, std::size_t e, std::vector<std::string>& parts) {
  parts.clear();
  if (b >= e || m.toks[b].kind != PyTokenKind::name || is_python_keyword(m.toks[b].text)) return false;
  parts.emplace_back(m.toks[b].text);
  std::size_t k = b + 1;
  while (k < e) {
    if (!m.is_op(k, ".") || k + 1 >= e || m.toks[k + 1].kind != PyTokenKind::name) return false;
    parts.emplace_back(m.toks[k + 1].text);
    k += 2;
  }
  return k == e;
}

}  // namespace

bool is_python_keyword(std::string_view s) { return contains(kKeywords, s); }

std::string Ref::text() const { return join(parts); }

PythonModule::PythonModule(std::string_view source) {
  for (const auto& t : core::lex_python(source)) {
    (t.kind == PyTokenKind::comment ? comments : toks).push_back(t);
  }
  depth.resize(toks.size());
  int d = 0;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    depth[i] = d;
    if (is_opener(toks[i])) ++d;
    if (is_closer(toks[i]) && d > 0) --d;
  }
  split_statements();
  build_scopes();
  read_imports();
  for (const auto& sc : scopes) user_names.insert(sc.name);
  for (const auto& s : stmts) {
    if (s.owner != -1) continue;
    for (auto& n : assigned_names(s)) user_names.insert(n);
  }
  read_aliases();
  collect_refs();
}

std::string_view PythonModule::first_word(const Stmt& s) const {
  if (s.begin >= s.end) return {};
  const auto& t = toks[s.begin];
  if (t.kind == PyTokenKind::name || t.is_op("@")) return t.text;
  return {};
}

void PythonModule::split_statements() {
  stmt_of.assign(toks.size(), kNone);
  std::size_t start = 0;
  for (std::size_t k = 0; k <= toks.size(); ++k) {
    const bool end = k == toks.size() || toks[k].kind == PyTokenKind::newline ||
                     (toks[k].is_op(";") && depth[k] == 0);
    if (!end) continue;
    if (k > start) {
      Stmt s;
      s.begin = start;
      s.end = k;
      s.indent = toks[start].indent;
      s.line = toks[start].line;
      for (std::size_t i = start; i < k; ++i) stmt_of[i] = stmts.size();
      stmts.push_back(s);
    }
    start = k + 1;
  }
  for (std::size_t i = 0; i < stmts.size(); ++i) {
    Stmt& s = stmts[i];
    s.body_end = i + 1;
    const std::string_view w = first_word(s);
    if (!contains(kCompoundKeywords, w)) continue;
    if (w == "async" && !(is_name(s.begin + 1, "def") || is_name(s.begin + 1, "for") || is_name(s.begin + 1, "with")))
      continue;
    const int base = depth[s.begin];
    int lambdas = 0;
    for (std::size_t k = s.begin + 1; k < s.end; ++k) {
      if (depth[k] != base) continue;
      if (toks[k].is_name("lambda")) ++lambdas;
      if (toks[k].is_op(":")) {
        if (lambdas > 0) {
          --lambdas;
          continue;
        }
        s.colon = k;
        break;
      }
    }
    if (s.colon == kNone || s.colon + 1 < s.end) continue;  // not a header, or an inline body
    std::size_t j = i + 1;
    while (j < stmts.size() && stmts[j].indent > s.indent) ++j;
    s.body_end = j;
  }
}

void PythonModule::build_scopes() {
  std::vector<int> open;
  for (std::size_t i = 0; i < stmts.size(); ++i) {
    while (!open.empty() && scopes[static_cast<std::size_t>(open.back())].stmt_end <= i) open.pop_back();
    Stmt& s = stmts[i];
    s.owner = open.empty() ? -1 : open.back();
    std::size_t k = s.begin;
    if (is_name(k, "async")) ++k;
    const bool is_def = is_name(k, "def");
    const bool is_class = is_name(k, "class");
    if (!(is_def || is_class) || k + 1 >= s.end || toks[k + 1].kind != PyTokenKind::name) continue;
    Scope sc;
    sc.is_class = is_class;
    sc.name = std::string(toks[k + 1].text);
    sc.stmt = i;
    sc.stmt_end = s.body_end;
    sc.tok_begin = s.begin;
    sc.tok_end = stmts[s.body_end - 1].end;
    sc.parent = s.owner;
    for (std::size_t j = i; j-- > 0;) {
      if (stmts[j].indent != s.indent || !toks[stmts[j].begin].is_op("@")) break;
      sc.decorators.push_back(j);
    }
    if (is_class && is_op(k + 2, "(")) {
      const Args args = call_args(k + 2);
      for (const auto& [b, e] : args.positional) {
        std::vector<std::string> parts;
        if (chain_in(*this, b, e, parts)) sc.bases.push_back(parts);
      }
    }
    open.push_back(static_cast<int>(scopes.size()));
    scopes.push_back(std::move(sc));
  }
}

std::size_t PythonModule::match_close(std::size_t open) const {
  if (open >= toks.size()) return toks.size();
  const int d = depth[open];
  for (std::size_t k = open + 1; k < toks.size(); ++k) {
    if (is_closer(toks[k]) && depth[k] == d + 1) return k;
    if (depth[k] <= d && !is_closer(toks[k])) return k;  // unbalanced: stop at the first token outside
  }
  return toks.size();
}

PythonModule::Args PythonModule::call_args(std::size_t open) const {
  Args out;
  const std::size_t close = match_close(open);
  const int inner = depth[open] + 1;
  std::size_t seg = open + 1;
  for (std::size_t k = open + 1; k <= close && k <= toks.size(); ++k) {
    const bool boundary = k == close || k == toks.size() || (toks[k].is_op(",") && depth[k] == inner);
    if (!boundary) continue;
    if (k > seg) {
      if (toks[seg].kind == PyTokenKind::name && is_op(seg + 1, "=") && depth[seg] == inner) {
        out.keyword[std::string(toks[seg].text)] = {seg + 2, k};
      } else {
        out.positional.emplace_back(seg, k);
      }
    }
    seg = k + 1;
  }
  return out;
}

std::vector<std::size_t> PythonModule::body_stmts(std::size_t header) const {
  std::vector<std::size_t> out;
  const Stmt& h = stmts[header];
  if (h.body_end <= header + 1) return out;
  const int indent = stmts[header + 1].indent;
  for (std::size_t j = header + 1; j < h.body_end; ++j) {
    if (stmts[j].indent == indent) out.push_back(j);
  }
  return out;
}

std::pair<std::size_t, std::size_t> PythonModule::inline_body(std::size_t header) const {
  const Stmt& h = stmts[header];
  if (h.colon == kNone || h.colon + 1 >= h.end) return {0, 0};
  return {h.colon + 1, h.end};
}

std::vector<std::string> PythonModule::assigned_names(const Stmt& s) const {
  std::vector<std::string> out;
  if (s.begin >= s.end) return out;
  const int base = depth[s.begin];
  if (toks[s.begin].kind == PyTokenKind::name && is_op(s.begin + 1, ":") && !is_python_keyword(toks[s.begin].text)) {
    out.emplace_back(toks[s.begin].text);  // annotated assignment
    return out;
  }
  std::size_t last = kNone;
  for (std::size_t k = s.begin; k < s.end; ++k) {
    if (depth[k] == base && is_assign_op(toks[k])) last = k;
  }
  if (last == kNone) return out;
  for (std::size_t k = s.begin; k < last; ++k) {
    if (depth[k] != base || toks[k].kind != PyTokenKind::name || is_python_keyword(toks[k].text)) continue;
    if (k > s.begin && is_op(k - 1, ".")) continue;
    if (is_op(k + 1, ".") || is_op(k + 1, "[") || is_op(k + 1, "(")) continue;
    out.emplace_back(toks[k].text);
  }
  return out;
}

std::pair<std::size_t, std::size_t> PythonModule::assigned_value(const Stmt& s) const {
  if (s.begin >= s.end) return {0, 0};
  const int base = depth[s.begin];
  std::size_t last = kNone;
  for (std::size_t k = s.begin; k < s.end; ++k) {
    if (depth[k] == base && is_assign_op(toks[k])) last = k;
  }
  if (last == kNone) return {0, 0};
  return {last + 1, s.end};
}

std::string PythonModule::normalized(std::size_t b, std::size_t e) const {
  std::string out;
  for (std::size_t k = b; k < e && k < toks.size(); ++k) {
    if (toks[k].kind == PyTokenKind::newline) continue;
    if (!out.empty()) out += ' ';
    out += toks[k].text;
  }
  return out;
}

int PythonModule::top_scope(std::string_view name) const {
  int found = -1;
  for (std::size_t i = 0; i < scopes.size(); ++i) {
    if (scopes[i].parent == -1 && scopes[i].name == name) found = static_cast<int>(i);
  }
  return found;
}

int PythonModule::method(int cls, std::string_view name) const {
  int found = -1;
  for (std::size_t i = 0; i < scopes.size(); ++i) {
    if (scopes[i].parent == cls && !scopes[i].is_class && scopes[i].name == name) found = static_cast<int>(i);
  }
  return found;
}

std::string PythonModule::resolve(const std::vector<std::string>& parts, bool* is_module) const {
  if (is_module != nullptr) *is_module = false;
  if (parts.empty()) return {};
  const std::string& head = parts[0];
  std::string base = head;
  if (auto it = aliases.find(head); it != aliases.end()) {
    base = it->second;
    if (is_module != nullptr) *is_module = true;
  } else if (contains(kKnownModules, head)) {
    if (is_module != nullptr) *is_module = true;
  } else if (contains(kTrackedBuiltins, head) && user_names.count(head) == 0) {
    base = "builtins." + head;
    if (is_module != nullptr) *is_module = true;
  }
  if (parts.size() == 1) return base;
  return base + "." + join(parts, 1);
}

void PythonModule::read_imports() {
  for (std::size_t si = 0; si < stmts.size(); ++si) {
    const Stmt& s = stmts[si];
    const std::string_view w = first_word(s);
    auto add_import_ref = [&](const std::string& qual, std::size_t b, std::size_t e) {
      if (qual.empty() || qual[0] == '.') return;
      Ref r;
      r.parts = split_dots(qual);
      r.qual = qual;
      r.head_is_module = true;
      r.is_import = true;
      r.tok_begin = b;
      r.tok_end = e;
      r.line = toks[b].line;
      refs.push_back(std::move(r));
    };
    // dotted name at k: returns the end index and fills `name`.
    auto dotted = [&](std::size_t k, std::string& name) {
      name.clear();
      while (k < s.end) {
        if (toks[k].kind == PyTokenKind::name && toks[k].text != "import" && toks[k].text != "as") {
          name += toks[k].text;
          ++k;
          if (is_op(k, ".") && k + 1 < s.end && toks[k + 1].kind == PyTokenKind::name) {
            name += '.';
            ++k;
            continue;
          }
          break;
        }
        if (is_op(k, ".") || is_op(k, "...")) {  // relative import dots
          name += toks[k].text;
          ++k;
          continue;
        }
        break;
      }
      return k;
    };
    if (w == "import") {
      std::size_t k = s.begin + 1;
      while (k < s.end) {
        std::string name;
        const std::size_t b = k;
        k = dotted(k, name);
        if (name.empty()) {
          ++k;
          continue;
        }
        std::string local = name.substr(0, name.find('.'));
        std::string target = local;
        if (is_name(k, "as") && k + 1 < s.end) {
          local = std::string(toks[k + 1].text);
          target = name;
          k += 2;
        }
        aliases[local] = target;
        add_import_ref(name, b, k);
        if (is_op(k, ",")) ++k;
      }
    } else if (w == "from") {
      std::string module;
      std::size_t k = dotted(s.begin + 1, module);
      if (!is_name(k, "import")) continue;
      ++k;
      while (k < s.end) {
        if (is_op(k, "(") || is_op(k, ")") || is_op(k, ",")) {
          ++k;
          continue;
        }
        if (is_op(k, "*")) {
          star_modules.push_back(module);
          add_import_ref(module, s.begin, s.end);
          ++k;
          continue;
        }
        if (toks[k].kind != PyTokenKind::name) {
          ++k;
          continue;
        }
        const std::size_t b = k;
        const std::string name(toks[k].text);
        std::string local = name;
        ++k;
        if (is_name(k, "as") && k + 1 < s.end) {
          local = std::string(toks[k + 1].text);
          k += 2;
        }
        const std::string qual = module + "." + name;
        if (module.empty() || module[0] != '.') aliases[local] = qual;
        add_import_ref(qual, b, k);
      }
    }
  }
}

void PythonModule::read_aliases() {
  // `sp = subprocess`, `run = subprocess.run`, `g = getattr(os, "system")`, `o = __import__("os")`.
  for (int pass = 0; pass < 2; ++pass) {
    for (const Stmt& s : stmts) {
      if (s.end < s.begin + 3 || toks[s.begin].kind != PyTokenKind::name || !is_op(s.begin + 1, "=")) continue;
      const std::string local(toks[s.begin].text);
      if (is_python_keyword(local)) continue;
      const std::size_t b = s.begin + 2;
      if (toks[b].kind != PyTokenKind::name || is_python_keyword(toks[b].text)) continue;
      std::vector<std::string> parts{std::string(toks[b].text)};
      std::size_t k = b + 1;
      while (is_op(k, ".") && k + 1 < s.end && toks[k + 1].kind == PyTokenKind::name) {
        parts.emplace_back(toks[k + 1].text);
        k += 2;
      }
      if (k == s.end) {
        bool module = false;
        const std::string q = resolve(parts, &module);
        if (module && q.rfind("builtins.", 0) != 0) aliases[local] = q;
        continue;
      }
      const std::size_t open = k;
      if (!is_op(open, "(") || match_close(open) + 1 != s.end) continue;
      const std::string callee = resolve(parts);
      const Args args = call_args(open);
      std::string lit;
      if ((callee == "builtins.__import__" || callee == "importlib.import_module") && !args.positional.empty() &&
          literal_in(*this, args.positional[0].first, args.positional[0].second, lit)) {
        aliases[local] = lit;
      } else if (callee == "builtins.getattr" && args.positional.size() >= 2) {
        std::vector<std::string> obj;
        bool module = false;
        if (chain_in(*this, args.positional[0].first, args.positional[0].second, obj) &&
            literal_in(*this, args.positional[1].first, args.positional[1].second, lit)) {
          const std::string q = resolve(obj, &module);
          if (module) aliases[local] = q + "." + lit;
        }
      }
    }
  }
}

void PythonModule::collect_refs() {
  for (std::size_t k = 0; k < toks.size(); ++k) {
    if (stmt_of[k] == kNone) continue;
    const std::string_view w = first_word(stmts[stmt_of[k]]);
    if (w == "import" || w == "from") continue;
    const auto& t = toks[k];
    if (t.kind == PyTokenKind::name && !is_python_keyword(t.text) && (k == 0 || !is_op(k - 1, "."))) {
      add_chain_ref(k);
    } else if (t.is_op(".") && k > 0 && k + 1 < toks.size() && toks[k + 1].kind == PyTokenKind::name &&
               (is_closer(toks[k - 1]) || toks[k - 1].kind == PyTokenKind::string ||
                toks[k - 1].kind == PyTokenKind::number)) {
      add_chain_ref(k);  // method on an expression: `(a + b).sum(`, `x.view(-1).relu(`
    }
  }
}

std::size_t PythonModule::add_chain_ref(std::size_t k) {
  Ref r;
  std::size_t j = k;
  if (toks[k].is_op(".")) {
    r.parts.emplace_back();
  } else {
    r.parts.emplace_back(toks[k].text);
    j = k + 1;
  }
  while (is_op(j, ".") && j + 1 < toks.size() && toks[j + 1].kind == PyTokenKind::name) {
    r.parts.emplace_back(toks[j + 1].text);
    j += 2;
  }
  std::size_t end = j;
  const std::string head = r.parts[0];  // a copy: the getattr/vars forms below replace r.parts
  const bool builtin_head = !head.empty() && user_names.count(head) == 0 && aliases.count(head) == 0;

  // getattr(obj, "name") / setattr(obj, "name", v) / delattr(obj, "name")
  if (builtin_head && r.parts.size() == 1 && (head == "getattr" || head == "setattr" || head == "delattr") &&
      is_op(j, "(")) {
    const std::size_t close = match_close(j);
    const Args args = call_args(j);
    std::vector<std::string> obj;
    std::string lit;
    if (args.positional.size() >= 2 && chain_in(*this, args.positional[0].first, args.positional[0].second, obj)) {
      if (literal_in(*this, args.positional[1].first, args.positional[1].second, lit)) {
        obj.push_back(lit);
        r.parts = obj;
        r.via = head == "getattr" ? Ref::Via::getattr_call : Ref::Via::setattr_call;
        r.assign = head != "getattr";
        r.call = head == "getattr" && is_op(close + 1, "(");
        end = close + 1;
      } else {
        DynamicAttr d;
        d.qual = resolve(obj, &d.on_module);
        d.is_set = head != "getattr";
        d.line = toks[k].line;
        dynamic_attrs.push_back(d);
      }
    }
  }
  // vars(obj)["name"]
  if (builtin_head && r.parts.size() == 1 && head == "vars" && is_op(j, "(")) {
    const std::size_t close = match_close(j);
    std::vector<std::string> obj;
    std::string lit;
    if (chain_in(*this, j + 1, close, obj) && is_op(close + 1, "[") && close + 2 < toks.size() &&
        literal_in(*this, close + 2, close + 3, lit) && is_op(close + 3, "]")) {
      obj.push_back(lit);
      r.parts = obj;
      r.via = Ref::Via::dict_item;
      end = close + 4;
    }
  }
  // obj.__dict__["name"], __builtins__["name"]
  if ((r.parts.back() == "__dict__" || (r.parts.size() == 1 && head == "__builtins__")) && is_op(end, "[")) {
    std::string lit;
    if (literal_in(*this, end + 1, end + 2, lit) && is_op(end + 2, "]")) {
      if (r.parts.back() == "__dict__") r.parts.back() = lit;
      else r.parts.push_back(lit);
      r.via = Ref::Via::dict_item;
      end += 3;
    }
  }
  if (r.via != Ref::Via::getattr_call && r.via != Ref::Via::setattr_call) {
    r.call = is_op(end, "(");
    if (is_op(end, "[")) {
      const std::size_t close = match_close(end);
      r.subscript_call = is_op(close + 1, "(");
    }
    // Assignment target: before the statement's last top-level assignment operator, at the top
    // level, and starting a target segment; or the operand of `del`.
    const std::size_t si = stmt_of[k];
    if (si != kNone) {
      const Stmt& s = stmts[si];
      const int base = depth[s.begin];
      const bool starts_segment = k == s.begin || is_assign_op(toks[k - 1]) || is_op(k - 1, ",") ||
                                  k - 1 == s.colon || is_name(k - 1, "del");
      if (depth[k] == base && starts_segment) {
        if (is_name(s.begin, "del")) {
          r.assign = true;
        } else if (end < s.end && (is_assign_op(toks[end]) || is_op(end, ","))) {
          for (std::size_t q = end; q < s.end; ++q) {
            if (depth[q] == base && is_assign_op(toks[q])) {
              r.assign = true;
              break;
            }
          }
        }
      }
    }
  }
  bool module = false;
  if (r.parts[0].empty()) {
    r.qual = "." + join(r.parts, 1);
  } else {
    r.qual = resolve(r.parts, &module);
    if (!module && aliases.count(head) == 0) {
      for (const auto& m : star_modules) r.alt_quals.push_back(m + "." + join(r.parts));
    }
  }
  r.head_is_module = module;
  r.tok_begin = k;
  r.tok_end = end;
  r.line = toks[k].line;
  ref_at[k] = refs.size();
  refs.push_back(std::move(r));
  return end;
}

}  // namespace kbrl::check::detail
