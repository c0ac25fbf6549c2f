// The files of a kbrl-eval run folder, by KernelBench's naming: the answer of sample S to problem P
// of level L is level_L_problem_P_sample_S_kernel.py; in a multi-turn run (--turns), its answer
// at turn T >= 2 is level_L_problem_P_sample_S_turn_T_kernel.py, sampled from the conversation in
// level_L_problem_P_sample_S_turn_T_prompt.json (written by kbrl-eval when turn T - 1 is
// evaluated and the episode goes on). With retrieved examples, level_L_problem_P_prompt.json holds
// the first turn's conversation of problem P.
#pragma once

#include <filesystem>
#include <string>


namespace kbrl::apps {

// (Without fmt: sample_model.cpp sees torch's include directories, which carry another fmt.)
inline std::string run_file_stem(int level, int problem, int sample, int turn) {
  std::string stem = "level_" + std::to_string(level) + "_problem_" + std::to_string(problem) + "_sample_" +
                     std::to_string(sample);
  return turn > 1 ? stem + "_turn_" + std::to_string(turn) : stem;
}

inline std::filesystem::path kernel_file(const std::filesystem::path& run, int level, int problem, int sample,
                                         int turn = 1) {
  return run / (run_file_stem(level, problem, sample, turn) + "_kernel.py");
}

inline std::filesystem::path prompt_file(const std::filesystem::path& run, int level, int problem, int sample,
                                         int turn) {
  return run / (run_file_stem(level, problem, sample, turn) + "_prompt.json");
}

// With retrieved examples (--retrieval-index) the first turn's conversation depends on the index
// too: it is kept for every problem sampled, with what retrieval showed and left out.
inline std::filesystem::path first_prompt_file(const std::filesystem::path& run, int level, int problem) {
  return run / ("level_" + std::to_string(level) + "_problem_" + std::to_string(problem) + "_prompt.json");
}

}  // namespace kbrl::apps
