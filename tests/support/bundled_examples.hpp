// What the tests that evaluate for real start from: a bundled problem (examples/problems) with a
// correct and a wrong C++ answer from examples/solutions, and answers as a policy writes them.
#pragma once

#include <kbrl/core/error.hpp>
#include <kbrl/core/types.hpp>
#include <kbrl/dataset/load.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kbrl::testing {

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::InvalidArgument("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::filesystem::path source_dir() { return KBRL_SOURCE_DIR; }

// 13_ExclusiveCumsum: small, and its solutions build without torch/extension.h (quick to compile).
inline core::Problem cumsum_problem() {
  return dataset::load_problem_file(source_dir() / "examples/problems/13_ExclusiveCumsum.py", 1);
}
inline std::string cumsum_correct() {
  return read_text(source_dir() / "examples/solutions/level_1_problem_13_sample_0_kernel.py");
}
// Builds and runs, but the scan is inclusive: correctness.
inline std::string cumsum_wrong() {
  return read_text(source_dir() / "examples/solutions/level_1_problem_13_sample_1_kernel.py");
}

// A policy's answer holding `program`, in the format the prompts ask for.
inline core::Completion answer_with(const std::string& program, const std::string& thinking = "A row per task.") {
  core::Completion c;
  c.text = "<think>" + thinking + "</think>\n<KERNEL>\n" + program + "\n</KERNEL>";
  c.num_tokens = 100;
  return c;
}

}  // namespace kbrl::testing
