// What the programs share on the command line (CLI11): the exit codes, --version, running a
// parsed command with every outcome mapped to its exit code, the servers' --listen and
// --port-file, and the evaluator's
// settings (kbrl/eval/settings.hpp) as flags, generated from the same table as kbrl-train's
// `evaluator.*` keys.
#pragma once

#include <deque>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "kbrl/eval/settings.hpp"

namespace kbrl::apps {

// The exit codes of every kbrl program (README.md, "Exit codes").
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;          // a file is missing or malformed, or the work failed
inline constexpr int kExitUsage = 2;          // the command line is wrong (unknown option, missing or bad value)
inline constexpr int kExitInterrupted = 130;  // stopped by SIGINT or SIGTERM (128 + SIGINT); what was done is kept

// A command-line problem found after parsing (a flag's value out of range, say): exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "kbrl-eval 0.1.0 (git 0ecbb67-dirty)": the project version, and `git describe` of the
// checkout it was built from where there was one (kbrl/version.hpp).
std::string version_text(const std::string& program);

// Parses the command line into `app`, then runs `body`; returns the exit code: 0 after --help or
// --version; 2 for CLI11's parse errors and UsageError; 1 for any other exception (its message
// on stderr); otherwise what `body` returns.
int run_program(CLI::App& app, int argc, const char* const* argv, const std::function<int()>& body);

// The servers' --listen HOST:PORT ("[::1]:0" too; port 0 picks a free one); UsageError otherwise.
std::pair<std::string, int> parse_listen(const std::string& text);
// The bound port, for whoever started a server on port 0: written whole or not at all.
void write_port_file(const std::filesystem::path& path, int port);

// Every evaluator setting as a flag of `app` (a boolean as --x and --no-x), in option groups,
// with `profile`'s defaults in the help.
class EvaluatorFlags {
 public:
  EvaluatorFlags(CLI::App& app, eval::SettingsProfile profile);
  EvaluatorFlags(const EvaluatorFlags&) = delete;
  EvaluatorFlags& operator=(const EvaluatorFlags&) = delete;

  // `profile`'s defaults with what the command line set; throws UsageError naming the flag.
  eval::EvaluatorSettings settings() const;

 private:
  struct Slot {
    const eval::Setting* setting = nullptr;
    CLI::Option* option = nullptr;
    bool flag = false;                // booleans
    std::string value;                // scalars
    std::vector<std::string> values;  // lists and maps
  };
  eval::SettingsProfile profile_;
  std::deque<Slot> slots_;  // CLI11 writes into the slots: their addresses must not move
};

}  // namespace kbrl::apps
