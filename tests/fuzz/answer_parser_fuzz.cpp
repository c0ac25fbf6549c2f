// Fuzz target: the answer parser (prompt::parse_completion), which reads text a policy sampled.
// It promises never to throw, so no exception is expected; the checks below are its contract.
#include "fuzz_support.hpp"
#include "kbrl/prompt/answer_parser.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using kbrl::fuzz::require;
  const std::string_view text = kbrl::fuzz::as_text(data, size);
  for (const bool starts_in_thinking : {false, true}) {
    kbrl::prompt::ParseOptions options;
    options.starts_in_thinking = starts_in_thinking;
    const kbrl::core::Completion c = kbrl::prompt::parse_completion(text, options);
    require(c.text == text, "the completion keeps the text it was given");
    require(!c.format_ok || kbrl::prompt::defines_top_level_class(c.kernel, "ModelNew"),
            "format_ok means the candidate defines class ModelNew");
    require(c.format_ok || c.kernel.empty() || !kbrl::prompt::defines_top_level_class(c.kernel, "ModelNew"),
            "a candidate that defines ModelNew is format_ok");
    require(c.kernel.size() <= text.size() && c.thinking.size() <= text.size(),
            "the candidate and the thinking are parts of the text");
  }
  return 0;
}
