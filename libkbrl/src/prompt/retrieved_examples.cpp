#include "kbrl/prompt/retrieved_examples.hpp"

#include <fmt/format.h>

#include "text_util.hpp"

namespace kbrl::prompt {

namespace {

// The first line that is neither blank nor a `#` line (a Python comment; C's #include and
// friends are skipped alike, which is what we want: no C file has an import after them).
std::string_view first_code_line(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = detail::python_strip(text.substr(pos, end - pos));
    if (!line.empty() && line.front() != '#') return line;
    pos = end + 1;
  }
  return {};
}

std::string language_label(std::string_view language) {
  const std::string l = detail::ascii_lower(language);
  if (l == "triton") return "Triton";
  if (l == "cuda") return "CUDA";
  if (l == "hip") return "HIP";
  if (l == "cpp") return "C++";
  return std::string(language);
}

}  // namespace

std::string kernel_fence_language(std::string_view language, std::string_view kernel) {
  const std::string l = detail::ascii_lower(language);
  if (l == "triton" || l == "python") return "python";
  const std::string_view line = first_code_line(kernel);
  if (line.rfind("import ", 0) == 0 || line.rfind("from ", 0) == 0) return "python";
  if (l == "cuda") return "cuda";
  return "cpp";
}

std::string shorten_code(std::string_view code, std::size_t max_chars, std::string_view fence_language,
                         std::size_t& cut) {
  cut = 0;
  if (max_chars == 0 || code.size() <= max_chars) return std::string(code);
  // Keep whole lines when a line ends late enough: a cut mid-statement reads worse than a few
  // characters fewer.
  std::size_t keep = max_chars;
  const std::size_t newline = code.rfind('\n', max_chars - 1);
  if (newline != std::string_view::npos && newline + 1 >= max_chars - max_chars / 4) {
    keep = newline + 1;
  } else {
    while (keep > 0 && (static_cast<unsigned char>(code[keep]) & 0xC0) == 0x80) --keep;  // not inside a character
  }
  cut = code.size() - keep;
  std::string out(code.substr(0, keep));
  if (!out.empty() && out.back() != '\n') out += '\n';
  out += fmt::format("{} ... ({} more characters not shown)\n", fence_language == "python" ? "#" : "//", cut);
  return out;
}

std::string retrieved_example_text(const RetrievedExample& example, std::size_t number) {
  std::string out = fmt::format("## Example {}: {}\n\nPyTorch program:\n\n", number, example.id);
  out += detail::fenced(example.source, "python");
  out += fmt::format("\n{} implementation:\n\n", language_label(example.language));
  out += detail::fenced(example.kernel, kernel_fence_language(example.language, example.kernel));
  return out;
}

std::string retrieved_examples_section(const std::vector<RetrievedExample>& examples) {
  if (examples.empty()) return {};
  std::string out =
      "# Similar solved examples\n\n"
      "These solved problems come from a corpus of kernels. Their PyTorch programs resemble the program you are "
      "asked to optimize (best match first), and each comes with a kernel that implements it. Reuse their "
      "techniques where they fit; they are not your task, and your answer follows the instructions and the answer "
      "format below, not theirs. Code cut short says so in a comment.\n\n";
  for (std::size_t i = 0; i < examples.size(); ++i) {
    out += retrieved_example_text(examples[i], i + 1);
    out += '\n';
  }
  return out;
}

}  // namespace kbrl::prompt
