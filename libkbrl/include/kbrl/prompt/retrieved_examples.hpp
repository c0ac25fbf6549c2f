// Retrieved examples in the task prompt: solved problems (a PyTorch program and a kernel that
// implements it) similar to the one being solved, shown before the task as the seeds' RA-ICL
// prompts show them. The prompt module renders them; who chooses them (kbrl::rag's retrieval,
// with its leakage control and token budget) sits behind ExampleProvider. docs/prompts.md.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/core/types.hpp"

namespace kbrl::prompt {

struct RetrievedExample {
  std::string id;        // the corpus entry's id (shown in the example's heading)
  std::string language;  // the corpus's language tag of the kernel ("triton", "cuda", ...)
  std::string source;    // the PyTorch side, as shown (cut when source_cut_chars > 0)
  std::string kernel;    // the kernel, as shown (cut when kernel_cut_chars > 0)
  std::size_t source_cut_chars = 0;  // characters of the original left out (0: whole)
  std::size_t kernel_cut_chars = 0;
  double score = 0;  // the retriever's score
  bool shortened() const noexcept { return source_cut_chars > 0 || kernel_cut_chars > 0; }
};

// What one problem's prompt shows, and what was left out on the way.
struct RetrievedExamples {
  std::vector<RetrievedExample> examples;  // in the prompt, best first
  std::size_t retrieved = 0;               // hits the retriever returned (at most k)
  // Leaks of the problem the retriever passed over (docs/retrieval.md, "Leakage control").
  std::size_t excluded_exact = 0;
  std::size_t excluded_near = 0;
  std::vector<std::string> excluded_ids;  // their corpus ids, best first
  std::size_t dropped = 0;  // hits left out whole: over the token budget or the per-example limit
  std::size_t tokens = 0;   // of the section as placed in the prompt (0: no section)
  bool tokens_estimated = false;  // true: no tokenizer was given and tokens is an estimate
};

// Chooses a problem's examples. The same problem gets the same examples every time (a problem is
// prompted many times in RL, and its prompts must not drift); implementations may be called from
// several threads at once.
class ExampleProvider {
 public:
  virtual ~ExampleProvider() = default;
  virtual std::shared_ptr<const RetrievedExamples> examples_for(const core::Problem& problem) const = 0;
};

// The fence's info string for a kernel of corpus language `language`: Triton kernels and any
// kernel that is a Python file (its first line that is neither blank nor a `#` line is an import)
// are `python`, CUDA kernels `cuda`, the rest (HIP, C++, ...) `cpp`.
std::string kernel_fence_language(std::string_view language, std::string_view kernel);

// `code` cut to at most max_chars characters (bytes), at the end of a line where one ends in the
// last quarter of the limit (else mid-line, never inside a UTF-8 character), followed by a
// comment line saying how many characters were left out (`# ...` for python, `// ...`
// otherwise). Returns the code unchanged when it fits or max_chars is 0; `cut` gets the number of
// characters left out (0 when whole).
std::string shorten_code(std::string_view code, std::size_t max_chars, std::string_view fence_language,
                         std::size_t& cut);

// One example as the prompt shows it: "## Example <number>: <id>", the PyTorch program and the
// kernel, each in its fence (longer than any backtick run inside).
std::string retrieved_example_text(const RetrievedExample& example, std::size_t number);

// The whole section ("# Similar solved examples", a short introduction, then every example,
// numbered from 1, each followed by a blank line); empty for no examples.
std::string retrieved_examples_section(const std::vector<RetrievedExample>& examples);

}  // namespace kbrl::prompt
