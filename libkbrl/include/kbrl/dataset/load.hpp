// Loading problems from the three places they live: a KernelBench checkout (levels 1-4), a flat
// directory of `<number>_<Name>.py` files (examples/problems), and JSONL (one problem per line,
// KernelBench's Hugging Face field names or core::Problem's own). See docs/dataset.md.
#pragma once

#include <filesystem>
#include <vector>

#include "kbrl/core/types.hpp"

namespace kbrl::dataset {

// `root` is a KernelBench repository root (holding KernelBench/level1 ...) or the KernelBench/
// directory itself. Reads every `level<N>/<number>_<Name>.py`; ids are "level<N>/<number>_<Name>",
// level 4 is marked needs_weights. Sorted by (level, number).
// Skipped without error: directories other than level<N>, files not ending in .py. A .py whose
// name is not `<number>_<Name>.py` (an __init__.py, a helper) is not a problem either: it is
// skipped and appended to *skipped when given. Throws core::ConfigError naming the file for an
// unreadable file, a source without Model/get_inputs/get_init_inputs, two files with the same
// number in one level, or a checkout without any problem.
std::vector<core::Problem> load_kernelbench(const std::filesystem::path& root,
                                            std::vector<std::filesystem::path>* skipped = nullptr);

// A flat directory of `<number>_<Name>.py` problems: level 0, ids "<dirname>/<number>_<Name>",
// sorted by number. A directory named level<N> (e.g. KernelBench/level1 on its own) loads as
// that KernelBench level instead: level N, ids "level<N>/...", needs_weights for level 4.
// Same skipping and errors as load_kernelbench.
std::vector<core::Problem> load_problem_dir(const std::filesystem::path& dir,
                                            std::vector<std::filesystem::path>* skipped = nullptr);

// One problem file, whatever its name (`kbrl-eval kernel --problem any.py`): number and name come
// from a `<number>_<Name>.py` name, else 0 and the file's stem. id "<id_prefix>/<stem>" (just the
// stem when id_prefix is empty), origin the path, needs_weights for level 4. Throws
// core::ConfigError naming the file when it cannot be read or is not a KernelBench problem.
core::Problem load_problem_file(const std::filesystem::path& file, int level = 0, const std::string& id_prefix = {});

// One JSON object per line (blank lines allowed), in file order. Accepts KernelBench's dataset
// fields (code, level, name, problem_id) and core::Problem's (source, level, number, name, id,
// needs_weights, content_hash, origin); see docs/dataset.md for how missing fields are derived.
// origin becomes "<path>:<line>". Throws core::ConfigError naming "<path>:<line>" and the field
// for malformed JSON, unknown or mistyped fields, a missing source, a content_hash that does not
// match the source, a duplicate id, or a source that is not a KernelBench problem.
std::vector<core::Problem> load_jsonl(const std::filesystem::path& path);

// Writes one core::Problem JSON object per line (what load_jsonl reads back). Writes to a
// temporary file and renames it, so a reader never sees half a file. Throws core::ConfigError.
void write_jsonl(const std::vector<core::Problem>& problems, const std::filesystem::path& path);

enum class ProblemFormat { kernelbench, problem_dir, jsonl };

// Which loader `path` needs: a regular file ending in .jsonl -> jsonl; a directory with
// level<N>/ folders (itself or in KernelBench/) -> kernelbench; a directory with
// `<number>_<Name>.py` files -> problem_dir. Throws core::ConfigError saying what was expected.
ProblemFormat detect_problem_format(const std::filesystem::path& path);

// detect_problem_format, then the matching loader.
std::vector<core::Problem> load_problems(const std::filesystem::path& path,
                                         std::vector<std::filesystem::path>* skipped = nullptr);

// Where the problems are when none are named (kbrl-eval without --problems, kbrl-train without
// dataset.problems), as the Python projects find KernelBench: $KERNELBENCH_ROOT when it is set
// (which must then be a checkout), else the first KernelBench checkout named `KernelBench` or
// `kernelbench` in one of `near` (the working directory, the run's folder...). Throws
// core::InvalidArgument saying where it looked, or what is wrong with $KERNELBENCH_ROOT.
std::filesystem::path find_kernelbench(const std::vector<std::filesystem::path>& near);

}  // namespace kbrl::dataset
