#include "kbrl/env/feedback.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <vector>

#include "kbrl/env/kernelbench_env.hpp"

// Error texts are cleaned by hand, line by line, rather than with std::regex: they can be long
// (a build log's tail), and every rule below is a prefix, a marker or a character class.

namespace kbrl::env {

namespace {

using core::ErrorCategory;

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }
bool contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }
bool alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool hex_digit(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
std::size_t indent(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return i;
}

// ESC [ parameters final-byte (colours, cursor moves), ESC ] ... BEL or ESC \ (titles,
// hyperlinks), and ESC followed by one character.
std::string strip_ansi(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\x1b') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 1 >= in.size()) break;
    if (in[i + 1] == '[') {
      std::size_t j = i + 2;
      while (j < in.size() && !(in[j] >= 0x40 && in[j] <= 0x7e)) ++j;
      i = j;
    } else if (in[i + 1] == ']') {
      std::size_t j = i + 2;
      while (j < in.size() && in[j] != '\a' && !(in[j] == '\x1b' && j + 1 < in.size() && in[j + 1] == '\\')) ++j;
      i = j < in.size() && in[j] == '\x1b' ? j + 1 : j;
    } else {
      ++i;
    }
  }
  return out;
}

// Lines without trailing blanks; of a line redrawn with carriage returns (progress bars) only
// what was drawn last.
std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t nl = text.find('\n', start);
    std::string_view line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    if (const auto cr = line.rfind('\r'); cr != std::string_view::npos) line = line.substr(cr + 1);
    lines.emplace_back(line);
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return lines;
}

bool path_char(char c) { return alnum(c) || (c != '\0' && std::strchr("._-+~@/", c) != nullptr); }

// Runs of 16 or more hexadecimal digits with a digit among them, standing alone or joined to a
// word by '_', '-' or '.' (build directories, extension names, content hashes, pointers) go,
// with what joins them.
std::string remove_hashes(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    if (hex_digit(s[i]) && (i == 0 || !alnum(s[i - 1]) || (i >= 2 && s[i - 1] == 'x' && s[i - 2] == '0'))) {
      std::size_t j = i;
      bool digit = false;
      while (j < s.size() && hex_digit(s[j])) digit |= std::isdigit(static_cast<unsigned char>(s[j++])) != 0;
      if (j - i >= 16 && digit && (j == s.size() || !alnum(s[j]))) {
        if (i >= 2 && s[i - 1] == 'x' && s[i - 2] == '0') out.resize(out.size() - 2);  // 0x...
        else if (!out.empty() && (out.back() == '_' || out.back() == '-' || out.back() == '.') && out.size() >= 2 &&
                 alnum(out[out.size() - 2]))
          out.pop_back();
        i = j;
        continue;
      }
      out.append(s, i, j - i);
      i = j;
      continue;
    }
    out.push_back(s[i++]);
  }
  return out;
}

// Absolute paths (two components or more) become their file name: "/tmp/w/builds/ab12/cuda.cu"
// is "cuda.cu". The worker's own placeholder for build directories goes too.
std::string clean_paths(std::string_view line) {
  std::string s(line);
  for (std::size_t p; (p = s.find("<build>/")) != std::string::npos;) s.erase(p, 8);
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const bool url = i > 0 && s[i - 1] == ':' && i + 1 < s.size() && s[i + 1] == '/';
    if (s[i] == '/' && (i == 0 || !path_char(s[i - 1])) && !url) {
      std::size_t j = i;
      while (j < s.size() && path_char(s[j])) ++j;
      const std::string_view run(s.data() + i, j - i);
      if (std::count(run.begin(), run.end(), '/') >= 2) {
        out += run.substr(run.rfind('/') + 1);
        i = j;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  return remove_hashes(out);
}

// "c++ ... -c main.cpp -o main.o", "nvcc ... -o cuda.cuda.o" (paths already cut to names).
bool is_compiler_command(std::string_view t) {
  const std::string_view program = t.substr(0, t.find(' '));
  static constexpr std::string_view kCompilers[] = {"c++", "g++", "gcc", "cc", "clang", "clang++", "nvcc", "hipcc", "ld"};
  const bool compiler = std::any_of(std::begin(kCompilers), std::end(kCompilers), [&](std::string_view c) {
    return program == c || (ends_with(program, c) && program.size() > c.size() && program[program.size() - c.size() - 1] == '-');
  });
  return compiler && (contains(t, " -c ") || contains(t, " -o ") || contains(t, " -shared"));
}

// Lines that tell a kernel engineer nothing about the program: the build tool's, torch's C++
// stack, CUDA's advice about environment variables, Python's warnings machinery.
bool is_noise(std::string_view line) {
  const std::string_view t = trim(line);
  if (t.empty()) return true;
  static constexpr std::string_view kPrefixes[] = {
      "Error building extension", "FAILED: ", "ninja: ", "In file included from", "Exception raised from ",
      "CUDA kernel errors might be asynchronously reported", "For debugging consider passing CUDA_LAUNCH_BLOCKING",
      "Compile with `TORCH_USE_CUDA_DSA`", "compilation terminated.", "collect2: error: ld returned",
      "error: ld returned", "warnings.warn(", "In function ", "In member function ", "In instantiation of ",
      "At global scope:", "At top level:", "Detected CUDA files, patching ldflags", "Emitting ninja build file",
      "Building extension module", "Allowing ninja to set a default number of workers", "Loading extension module",
      "Using envvar MAX_JOBS"};
  if (std::any_of(std::begin(kPrefixes), std::end(kPrefixes), [&](std::string_view p) { return starts_with(t, p); }))
    return true;
  // Continuations of an include chain: "                 from x.h:3,".
  if (starts_with(t, "from ") && (ends_with(t, ",") || ends_with(t, ":")) && contains(t, ":")) return true;
  // "In function 'f':" after a file name: "main.cpp: In function 'at::Tensor f(at::Tensor)':".
  if (contains(t, ": In function ") || contains(t, ": In member function ") || contains(t, ": In instantiation of ") ||
      contains(t, ": At global scope:"))
    return true;
  // ninja's steps, "[3/5] ...".
  if (t.front() == '[') {
    std::size_t i = 1;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
    if (i > 1 && i < t.size() && t[i] == '/') return true;
  }
  if (starts_with(t, "frame #") && t.size() > 7 && std::isdigit(static_cast<unsigned char>(t[7]))) return true;
  if (contains(t, "detected in the compilation of")) return true;
  if (contains(t, "UserWarning: ") || contains(t, "DeprecationWarning: ") || contains(t, "FutureWarning: ")) return true;
  return is_compiler_command(t);
}

enum class Diagnostic { none, error, warning, note };

// gcc and clang "file:line:col: error: ...", nvcc "file(line): error: ...", the linker's
// undefined references, and bare "error: ..." lines.
Diagnostic diagnostic_of(std::string_view t) {
  auto marked = [&](std::string_view word) {
    for (const std::string_view sep : {": ", "): "}) {
      if (contains(t, fmt::format("{}{}:", sep, word))) return true;
    }
    return starts_with(t, fmt::format("{}:", word));
  };
  if (marked("error") || marked("fatal error") || marked("catastrophic error") || contains(t, "undefined reference to"))
    return Diagnostic::error;
  if (marked("warning")) return Diagnostic::warning;
  if (marked("note")) return Diagnostic::note;
  return Diagnostic::none;
}

struct CompilerError {
  std::string text;  // the error line, the source line and caret printed under it, its notes
  std::size_t notes = 0;
};

struct Cleaned {
  std::string text;
  bool compiler_errors = false;
};

// The errors of a compiler's output, each once, in the order reported.
std::vector<CompilerError> compiler_errors(const std::vector<std::string>& lines) {
  std::vector<CompilerError> errors;
  std::set<std::string> seen;
  CompilerError current;
  bool in_error = false, skipping = false;  // skipping: a warning's or a repeated error's lines
  std::size_t context = 0;                  // lines under the current error or note
  auto finish = [&] {
    if (in_error && seen.insert(current.text).second) errors.push_back(current);
    in_error = false;
  };
  for (const auto& raw : lines) {
    const std::string line = clean_paths(raw);
    if (is_noise(line)) continue;
    const Diagnostic d = diagnostic_of(trim(line));
    if (d == Diagnostic::error) {
      finish();
      current = {std::string(trim(line)), 0};
      in_error = true;
      skipping = false;
      context = 0;
    } else if (d == Diagnostic::note) {
      skipping = !in_error || current.notes >= 2;
      if (!skipping) {
        current.text += "\n" + std::string(trim(line));
        ++current.notes;
        context = 0;
      }
    } else if (d == Diagnostic::warning) {
      finish();
      skipping = true;
    } else if (indent(line) > 0 && in_error && !skipping) {
      if (context++ < 3) current.text += "\n" + line;  // the source line, the caret, a label
    } else if (indent(line) == 0) {
      finish();
      skipping = true;  // text outside any error: the build's chatter
    }
  }
  finish();
  return errors;
}

bool is_frame_line(std::string_view t) { return starts_with(t, "File \"") && contains(t, "\", line "); }

std::string_view frame_file(std::string_view t) {
  const std::string_view rest = t.substr(6);
  const std::string_view path = rest.substr(0, rest.find('"'));
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Python tracebacks reduced to the candidate's frames; the rest cleaned line by line, each line
// shown once (indented lines, code of different frames, may repeat).
std::string general_text(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  bool dropping_frame = false;
  std::size_t frame_indent = 0;
  for (const auto& raw : lines) {
    const std::string_view t = trim(raw);
    if (is_frame_line(t)) {
      dropping_frame = frame_file(t) != kCandidateFileName;
      frame_indent = indent(raw);
      if (!dropping_frame) out.push_back(clean_paths(raw));
      continue;
    }
    if (dropping_frame) {
      if (!t.empty() && indent(raw) > frame_indent) continue;  // the dropped frame's code and carets
      dropping_frame = false;
    }
    const std::string line = clean_paths(raw);
    if (is_noise(line)) continue;
    if (indent(line) == 0 && !seen.insert(line).second) continue;
    if (!out.empty() && out.back() == line) continue;
    out.push_back(line);
  }
  // A traceback header whose frames were all dropped says nothing.
  std::string text;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == "Traceback (most recent call last):" && (i + 1 == out.size() || !is_frame_line(trim(out[i + 1]))))
      continue;
    text += (text.empty() ? "" : "\n") + out[i];
  }
  return text;
}

Cleaned clean(std::string_view text, ErrorCategory category, int max_chars) {
  const auto lines = split_lines(strip_ansi(text));
  if (category == ErrorCategory::compile) {
    const auto errors = compiler_errors(lines);
    if (!errors.empty()) {
      std::string out;
      std::size_t shown = 0;
      for (const auto& e : errors) {
        // The first error always (cut if it must be), the others while they fit with room for
        // the count of those left out.
        const std::size_t need = out.size() + (out.empty() ? 0 : 1) + e.text.size();
        if (shown > 0 && max_chars > 0 && need + 40 > static_cast<std::size_t>(max_chars)) break;
        out += (out.empty() ? "" : "\n") + e.text;
        ++shown;
      }
      if (shown < errors.size())
        out += fmt::format("\n[... {} more error{}]", errors.size() - shown, errors.size() - shown == 1 ? "" : "s");
      return {excerpt(out, max_chars), true};
    }
  }
  return {excerpt(general_text(lines), max_chars), false};
}

// One wording per outcome: the line that names it, the heading of its error text, the advice.
struct Words {
  const char* outcome;
  const char* heading;
  const char* advice;
};

Words words_for(ErrorCategory c) {
  switch (c) {
    case ErrorCategory::none:
      return {"correct", "", ""};
    case ErrorCategory::format:
      return {"no program found (format)", "Problem",
              "Answer with one complete Python program that defines class ModelNew, inside <KERNEL> and </KERNEL> "
              "after your reasoning."};
    case ErrorCategory::static_check:
      return {"rejected by the static checker", "Checker",
              "The checker rejected the program. Compute the result in your own kernel: no fallback to the "
              "reference's PyTorch operators, no exception handlers that hide failures, no tampering with timing, "
              "streams or inputs."};
    case ErrorCategory::compile:
      return {"did not compile", "Error",
              "Fix the build first: read the first compiler error, check the kernel's signatures, types and includes, "
              "and that the extension's functions match how forward calls them."};
    case ErrorCategory::runtime:
      return {"raised an error while running", "Error",
              "It built but raised while running: check launch configurations, tensor shapes, dtypes, devices "
              "and contiguity of what you pass to the kernel."};
    case ErrorCategory::correctness:
      return {"wrong outputs", "Mismatch",
              "It ran but the outputs are wrong: check indexing and bounds, reductions across blocks, the "
              "handling of the last partial tile, and the dtype of accumulators."};
    case ErrorCategory::timeout:
      return {"timed out", "Limit",
              "It ran past the time limit: look for loops that do not terminate, missing synchronization or "
              "far too little parallelism."};
    case ErrorCategory::crash:
      return {"crashed", "Error",
              "The process crashed (an illegal memory access or abort): check every index against the tensor "
              "sizes and the grid against the data."};
    case ErrorCategory::out_of_memory:
      return {"out of memory", "Error", "It ran out of memory: avoid large temporary buffers and allocate outputs once."};
    case ErrorCategory::reward_hack:
      return {"caught manipulating the evaluation", "Caught",
              "A runtime defense caught the program interfering with the evaluation. Compute the result in your own "
              "kernel on the inputs given: no patched timers or synchronization, no side streams, no writes to the "
              "inputs, no reuse of the reference's outputs."};
    case ErrorCategory::internal:
      // What failed inside the evaluator is no business of the policy's: no error text.
      return {"evaluator error", "", "The evaluator failed for reasons not tied to your program; submit the program again."};
  }
  return {"failed", "Error", ""};
}

}  // namespace

std::string clean_error_text(std::string_view text, core::ErrorCategory category, int max_chars) {
  return clean(text, category, max_chars).text;
}

std::string excerpt(const std::string& text, int max_chars) {
  if (max_chars <= 0 || text.size() <= static_cast<std::size_t>(max_chars)) return text;
  const std::size_t keep = static_cast<std::size_t>(max_chars);
  std::size_t head = keep * 2 / 3, tail = keep - head;
  // Whole lines where possible.
  if (const auto nl = text.rfind('\n', head); nl != std::string::npos && nl > head / 2) head = nl + 1;
  std::size_t tail_start = text.size() - tail;
  if (const auto nl = text.find('\n', tail_start); nl != std::string::npos && nl < text.size() - tail / 2)
    tail_start = nl + 1;
  return text.substr(0, head) + fmt::format("[... {} characters left out ...]\n", tail_start - head) +
         text.substr(tail_start);
}

std::string earlier_answer(const core::Completion& c, int max_chars, int thinking_chars) {
  const std::string thinking = thinking_chars >= 0 && c.has_thinking && !c.thinking.empty()
                                   ? "<think>\n" + excerpt(c.thinking, thinking_chars) + "\n</think>\n"
                                   : std::string();
  if (c.format_ok) return thinking + "<KERNEL>\n" + excerpt(c.kernel, max_chars) + "\n</KERNEL>";
  // No program: what was said after the thinking (kept above when asked for).
  std::string text = c.text;
  const auto open = text.find("<think>");
  const auto close = text.find("</think>");
  if (close != std::string::npos) text = text.substr(close + 8);
  else if (open != std::string::npos) text = text.substr(0, open);
  return thinking + excerpt(text, max_chars);
}

std::string feedback_message(const core::EvalResult& e, int attempt, int max_turns, const EnvOptions& o) {
  const Words w = words_for(e.error_category);
  std::string m = fmt::format("Attempt {} of {}: {}.\n", attempt, max_turns, w.outcome);
  if (e.trials_total > 0) m += fmt::format("Correctness trials passed: {}/{}.\n", e.trials_passed, e.trials_total);
  if (!e.input_families.failed.empty()) {
    std::string families;
    for (const auto& f : e.input_families.failed) families += (families.empty() ? "" : ", ") + f;
    m += "Wrong on transformed inputs: " + families + ".\n";
  }
  if (e.max_abs_error && !e.correct) m += fmt::format("Largest absolute error: {:.3g}.\n", *e.max_abs_error);
  if (e.correct && e.runtime && e.ref_runtime)
    m += fmt::format("Runtime {:.4g} ms against the reference's {:.4g} ms: speedup {:.3f}x.\n", e.runtime->mean_ms,
                     e.ref_runtime->mean_ms, e.speedup.value_or(0.0));
  // The checker's findings are its error text: listed once, the first few.
  constexpr std::size_t kMaxFindings = 5;
  std::size_t findings = 0, more_findings = 0;
  for (const auto& f : e.static_findings) {
    if (f.severity != core::Severity::error) continue;
    if (findings++ >= kMaxFindings) {
      ++more_findings;
      continue;
    }
    m += f.line > 0 ? fmt::format("Static check '{}' (line {}): {}\n", f.rule, f.line, clean_paths(f.message))
                    : fmt::format("Static check '{}': {}\n", f.rule, clean_paths(f.message));
  }
  if (more_findings > 0) m += fmt::format("[... {} more static check findings]\n", more_findings);
  const bool findings_are_the_error = e.error_category == ErrorCategory::static_check && findings > 0;
  if (!e.correct && *w.heading != '\0' && !findings_are_the_error && !e.error_message.empty()) {
    const Cleaned c = clean(e.error_message, e.error_category, o.error_excerpt_chars);
    if (!c.text.empty()) m += fmt::format("\n{}:\n```\n{}\n```\n", c.compiler_errors ? "Compiler errors" : w.heading, c.text);
  }
  std::string advice = w.advice;
  if (e.error_category == ErrorCategory::none)
    advice = o.early_stop_min_speedup > 0
                 ? fmt::format("It is correct but not yet {:.2f}x faster than the reference. Find the bottleneck "
                               "(memory traffic, launches, occupancy) and fuse or restructure the work.",
                               o.early_stop_min_speedup)
                 : "It is correct. Make it faster: fuse operations, cut memory traffic and kernel launches.";
  m += "\n" + advice + "\n\nWrite the complete improved program defining ModelNew, in the same answer format.";
  return m;
}

}  // namespace kbrl::env
