// Fuzz target: the problem loaders (dataset::load_problem_file for a <number>_<Name>.py file,
// dataset::load_jsonl for a JSONL file), which read problem sets users point kbrl at. The input
// is written to a scratch file and read as both. Bad files throw core::ConfigError.
#include <algorithm>

#include "fuzz_support.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/dataset/load.hpp"
#include "kbrl/dataset/problem_source.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using kbrl::fuzz::require;
  const std::string_view text = kbrl::fuzz::as_text(data, size);
  try {
    const kbrl::core::Problem p = kbrl::dataset::load_problem_file(kbrl::fuzz::scratch().write("19_ReLU.py", text), 1, "level1");
    require(p.source == text && p.number == 19 && p.name == "ReLU", "a problem file keeps its source and name");
    require(kbrl::dataset::problem_source_issues(p.source).empty(), "a loaded problem has no source issue");
  } catch (const kbrl::core::Error&) {
  }
  try {
    for (const kbrl::core::Problem& p : kbrl::dataset::load_jsonl(kbrl::fuzz::scratch().write("problems.jsonl", text))) {
      require(!p.id.empty() && !p.name.empty() && !p.source.empty(), "a loaded problem has an id, a name and a source");
      require(kbrl::dataset::problem_source_issues(p.source).empty(), "a loaded problem has no source issue");
    }
  } catch (const kbrl::core::Error&) {
  }
  // The file-name rule, on the input's first line.
  const std::string_view first_line = text.substr(0, std::min(text.find('\n'), std::size_t{256}));
  if (const auto parsed = kbrl::dataset::parse_problem_file_name(first_line))
    require(!parsed->name.empty() && parsed->number >= 0, "a parsed problem file name has a name and a number");
  return 0;
}
