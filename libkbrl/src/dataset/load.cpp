#include "kbrl/dataset/load.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <unistd.h>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/json_reader.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/dataset/problem_source.hpp"

namespace kbrl::dataset {
namespace fs = std::filesystem;
namespace json = boost::json;
using core::ConfigError;
using core::Problem;

namespace {

constexpr int kWeightsLevel = 4;  // KernelBench level 4 builds Hugging Face models from weights

// The N of a directory named level<N> (no leading zeros, N >= 1), else nullopt.
std::optional<int> level_of_dir_name(const std::string& name) {
  constexpr std::string_view kPrefix = "level";
  if (name.size() <= kPrefix.size() || !name.starts_with(kPrefix)) return std::nullopt;
  const std::string_view digits = std::string_view(name).substr(kPrefix.size());
  if (digits.front() < '1' || digits.front() > '9') return std::nullopt;
  int level = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), level);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return level;
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::vector<std::pair<int, fs::path>> level_dirs(const fs::path& base) {
  std::vector<std::pair<int, fs::path>> out;
  std::error_code ec;
  fs::directory_iterator it(base, ec);
  if (ec) throw ConfigError(base.string(), "", fmt::format("cannot list directory: {}", ec.message()));
  for (const fs::directory_entry& e : it) {
    if (!is_dir(e.path())) continue;
    if (auto level = level_of_dir_name(e.path().filename().string())) out.emplace_back(*level, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void require_directory(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw ConfigError(dir.string(), "", "does not exist");
  if (!fs::is_directory(dir, ec)) throw ConfigError(dir.string(), "", "is not a directory");
}

// Reads the `<number>_<Name>.py` files of one directory (not recursive), sorted by number.
// `id_prefix` is the part of the id before the '/'.
std::vector<Problem> load_flat_dir(const fs::path& dir, int level, const std::string& id_prefix,
                                   std::vector<fs::path>* skipped) {
  require_directory(dir);
  std::vector<fs::path> files;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw ConfigError(dir.string(), "", fmt::format("cannot list directory: {}", ec.message()));
  for (const fs::directory_entry& e : it) {
    std::error_code type_ec;
    if (!fs::is_regular_file(e.path(), type_ec)) continue;
    if (e.path().extension() != ".py") continue;
    files.push_back(e.path());
  }
  // Directory order is arbitrary; sorting by file name first makes the skipped list and the
  // choice of "first" file in a duplicate message deterministic.
  std::sort(files.begin(), files.end());

  std::vector<Problem> problems;
  std::map<int, fs::path> by_number;
  for (const fs::path& file : files) {
    const std::string file_name = file.filename().string();
    const std::optional<ProblemFileName> parsed = parse_problem_file_name(file_name);
    if (!parsed) {
      if (skipped != nullptr) skipped->push_back(file);
      continue;
    }
    if (auto [pos, inserted] = by_number.emplace(parsed->number, file); !inserted) {
      throw ConfigError(file.string(), "",
                        fmt::format("problem number {} is used twice in {}: by {} and by {}",
                                    parsed->number, dir.string(), pos->second.filename().string(),
                                    file_name));
    }
    problems.push_back(load_problem_file(file, level, id_prefix));
  }
  std::sort(problems.begin(), problems.end(),
            [](const Problem& a, const Problem& b) { return a.number < b.number; });
  return problems;
}

// The KernelBench/ directory for a repository root or for itself; nullopt when neither has
// level<N> folders.
std::optional<fs::path> kernelbench_base(const fs::path& root) {
  if (const fs::path nested = root / "KernelBench"; is_dir(nested) && !level_dirs(nested).empty())
    return nested;
  if (!level_dirs(root).empty()) return root;
  return std::nullopt;
}

bool has_problem_files(const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::error_code type_ec;
    if (fs::is_regular_file(e.path(), type_ec) &&
        parse_problem_file_name(e.path().filename().string()).has_value())
      return true;
  }
  return false;
}

// ---- JSONL ----

constexpr std::string_view kJsonlFields[] = {"id",     "level",        "number", "problem_id",
                                             "name",   "source",       "code",   "content_hash",
                                             "origin", "needs_weights"};

struct LineContext {
  std::string where;  // "<path>:<line>"
};

std::optional<std::string> get_string(const json::object& o, std::string_view key, const LineContext& c) {
  const json::value* v = core::JsonReader::member(o, key);
  if (v == nullptr) return std::nullopt;
  return core::JsonReader(c.where).string(*v, key);
}

std::optional<int> get_int(const json::object& o, std::string_view key, int min, const LineContext& c) {
  const json::value* v = core::JsonReader::member(o, key);
  if (v == nullptr) return std::nullopt;
  const core::JsonReader r(c.where);
  const int n = r.integer(*v, key);
  if (n < min) r.fail(key, fmt::format("{} is out of range (at least {})", n, min));
  return n;
}

std::optional<bool> get_bool(const json::object& o, std::string_view key, const LineContext& c) {
  const json::value* v = core::JsonReader::member(o, key);
  if (v == nullptr) return std::nullopt;
  return core::JsonReader(c.where).boolean(*v, key);
}

// One of two synonymous keys (ours, KernelBench's); both at once is ambiguous.
template <class T, class Get>
std::optional<T> get_either(std::string_view ours, std::string_view theirs, const LineContext& c, Get get) {
  std::optional<T> a = get(ours);
  std::optional<T> b = get(theirs);
  if (a && b)
    throw ConfigError(c.where, std::string(theirs),
                      fmt::format("give either '{}' or '{}', not both", ours, theirs));
  return a ? a : b;
}

Problem problem_from_line(const json::object& o, const LineContext& c, const std::string& default_prefix) {
  for (const auto& kv : o) {
    if (std::find(std::begin(kJsonlFields), std::end(kJsonlFields), kv.key()) == std::end(kJsonlFields))
      throw ConfigError(c.where, std::string(kv.key()),
                        fmt::format("unknown field (accepted: {})", fmt::join(kJsonlFields, ", ")));
  }
  const auto str = [&](std::string_view k) { return get_string(o, k, c); };
  const auto num = [&](std::string_view k) { return get_int(o, k, 0, c); };

  Problem p;
  const bool has_source = core::JsonReader::member(o, "source") != nullptr;
  std::optional<std::string> source = get_either<std::string>("source", "code", c, str);
  const std::string source_field = has_source ? "source" : "code";
  if (!source || source->empty())
    throw ConfigError(c.where, source ? source_field : "source", "missing the problem's source ('source' or 'code')");
  validate_problem_source(*source, c.where, source_field);
  p.source = std::move(*source);

  p.level = get_int(o, "level", 0, c).value_or(0);
  std::optional<int> number = get_either<int>("number", "problem_id", c, num);
  std::optional<std::string> name = str("name");
  std::optional<std::string> id = str("id");
  if (id && id->empty()) throw ConfigError(c.where, "id", "must not be empty");

  // KernelBench's rows name problems by file stem ("19_ReLU"); ours by the bare name ("ReLU").
  // A "<number>_" prefix is stripped when it agrees with the number (or gives the number).
  const auto split_numbered = [&](std::string_view text) -> std::optional<ProblemFileName> {
    std::string candidate(text);
    if (!candidate.ends_with(".py")) candidate += ".py";
    std::optional<ProblemFileName> parsed = parse_problem_file_name(candidate);
    if (parsed && number && parsed->number != *number) return std::nullopt;
    return parsed;
  };
  if (name) {
    if (name->ends_with(".py")) name->resize(name->size() - 3);
    if (auto parsed = split_numbered(*name)) {
      number = parsed->number;
      name = parsed->name;
    }
  } else if (id) {
    const std::string_view last = std::string_view(*id).substr(id->rfind('/') + 1);
    if (auto parsed = split_numbered(last)) {
      number = parsed->number;
      name = parsed->name;
    } else {
      name = std::string(last);
    }
  }
  if (!name || name->empty())
    throw ConfigError(c.where, "name", "missing: give 'name' (or an 'id' to take it from)");
  p.name = std::move(*name);
  p.number = number.value_or(0);
  if (id) {
    p.id = std::move(*id);
  } else {
    const std::string prefix = p.level > 0 ? fmt::format("level{}", p.level) : default_prefix;
    p.id = number ? fmt::format("{}/{}_{}", prefix, p.number, p.name) : fmt::format("{}/{}", prefix, p.name);
  }

  p.needs_weights = get_bool(o, "needs_weights", c).value_or(p.level == kWeightsLevel);
  p.content_hash = core::python_content_hash(p.source);
  if (std::optional<std::string> given = str("content_hash"); given && *given != p.content_hash)
    throw ConfigError(c.where, "content_hash",
                      fmt::format("'{}' does not match the source (its hash is '{}')", *given, p.content_hash));
  (void)str("origin");  // type-checked; replaced by where this line was read
  p.origin = c.where;
  return p;
}

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char ch) { return ch == ' ' || ch == '\t' || ch == '\r'; });
}

std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext;
}

std::string dir_name(const fs::path& dir) {
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(dir, ec);
  if (ec) canon = fs::absolute(dir);
  std::string name = canon.filename().string();
  if (name.empty()) name = canon.parent_path().filename().string();  // "problems/" -> "problems"
  return name;
}

}  // namespace

Problem load_problem_file(const fs::path& file, int level, const std::string& id_prefix) {
  Problem p;
  p.source = core::read_file(file);
  validate_problem_source(p.source, file.string());
  const std::string stem = file.stem().string();
  if (const auto parsed = parse_problem_file_name(file.filename().string())) {
    p.number = parsed->number;
    p.name = parsed->name;
  } else {
    p.name = stem;
  }
  p.level = level;
  p.id = id_prefix.empty() ? stem : fmt::format("{}/{}", id_prefix, stem);
  p.content_hash = core::python_content_hash(p.source);
  p.origin = file.string();
  p.needs_weights = level == kWeightsLevel;
  return p;
}

std::vector<Problem> load_kernelbench(const fs::path& root, std::vector<fs::path>* skipped) {
  require_directory(root);
  const std::optional<fs::path> base = kernelbench_base(root);
  if (!base)
    throw ConfigError(root.string(), "",
                      "not a KernelBench checkout: no level<N> directories in it or in its KernelBench/ folder");
  std::vector<Problem> all;
  for (const auto& [level, dir] : level_dirs(*base)) {
    std::vector<Problem> ps = load_flat_dir(dir, level, fmt::format("level{}", level), skipped);
    all.insert(all.end(), std::make_move_iterator(ps.begin()), std::make_move_iterator(ps.end()));
  }
  if (all.empty())
    throw ConfigError(base->string(), "", "no problem files (<number>_<Name>.py) in any level<N> directory");
  return all;  // level_dirs is sorted by level and each level by number
}

std::vector<Problem> load_problem_dir(const fs::path& dir, std::vector<fs::path>* skipped) {
  require_directory(dir);
  const std::string name = dir_name(dir);
  const std::optional<int> level = level_of_dir_name(name);
  std::vector<Problem> problems = load_flat_dir(dir, level.value_or(0), name, skipped);
  if (problems.empty()) throw ConfigError(dir.string(), "", "no problem files (<number>_<Name>.py)");
  return problems;
}

std::vector<Problem> load_jsonl(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ConfigError(path.string(), "", "is a directory, expected a JSONL file");
  if (!in) throw ConfigError(path.string(), "", "cannot open file for reading");
  const std::string default_prefix = path.stem().string();
  std::vector<Problem> problems;
  std::map<std::string, int> line_of_id;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (is_blank(line)) continue;
    const LineContext c{fmt::format("{}:{}", path.string(), line_no)};
    boost::system::error_code jec;
    json::value v = core::parse_json(line, jec);
    if (jec) throw ConfigError(c.where, "", fmt::format("malformed JSON: {}", jec.message()));
    if (!v.is_object()) throw ConfigError(c.where, "", "expected a JSON object describing one problem");
    Problem p = problem_from_line(v.get_object(), c, default_prefix);
    if (auto [pos, inserted] = line_of_id.emplace(p.id, line_no); !inserted)
      throw ConfigError(c.where, "id", fmt::format("duplicate id '{}' (first on line {})", p.id, pos->second));
    problems.push_back(std::move(p));
  }
  if (in.bad()) throw ConfigError(path.string(), "", "read error");
  if (problems.empty()) throw ConfigError(path.string(), "", "no problems (the file is empty)");
  return problems;
}

void write_jsonl(const std::vector<Problem>& problems, const fs::path& path) {
  fs::path tmp = path;
  tmp += fmt::format(".tmp{}", static_cast<long>(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ConfigError(path.string(), "", "cannot open file for writing");
    for (const Problem& p : problems) out << core::to_json(p) << '\n';
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw ConfigError(path.string(), "", "write error");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp, ignore);
    throw ConfigError(path.string(), "", fmt::format("cannot replace file: {}", ec.message()));
  }
}

ProblemFormat detect_problem_format(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ConfigError(path.string(), "", "does not exist");
  if (fs::is_regular_file(path, ec)) {
    const std::string ext = lower_extension(path);
    if (ext == ".jsonl" || ext == ".ndjson") return ProblemFormat::jsonl;
    throw ConfigError(path.string(), "",
                      "not a problem source: expected a .jsonl file, a KernelBench checkout, or a "
                      "directory of <number>_<Name>.py files");
  }
  if (fs::is_directory(path, ec)) {
    if (kernelbench_base(path)) return ProblemFormat::kernelbench;
    if (has_problem_files(path)) return ProblemFormat::problem_dir;
    throw ConfigError(path.string(), "",
                      "no problems here: expected level<N>/ folders (a KernelBench checkout) or "
                      "<number>_<Name>.py files");
  }
  throw ConfigError(path.string(), "", "neither a regular file nor a directory");
}

std::vector<Problem> load_problems(const fs::path& path, std::vector<fs::path>* skipped) {
  switch (detect_problem_format(path)) {
    case ProblemFormat::kernelbench:
      return load_kernelbench(path, skipped);
    case ProblemFormat::problem_dir:
      return load_problem_dir(path, skipped);
    case ProblemFormat::jsonl:
      return load_jsonl(path);
  }
  throw core::InvalidArgument("unknown ProblemFormat");
}

fs::path find_kernelbench(const std::vector<fs::path>& near) {
  const auto is_checkout = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_directory(p, ec) && kernelbench_base(p).has_value();
  };
  if (const char* root = std::getenv("KERNELBENCH_ROOT"); root != nullptr && *root != '\0') {
    if (!is_checkout(root))
      throw core::InvalidArgument(fmt::format(
          "KERNELBENCH_ROOT is {}, which is not a KernelBench checkout (no level<N>/ folders in it or in its "
          "KernelBench/)",
          root));
    return root;
  }
  std::vector<std::string> looked;
  for (const auto& dir : near) {
    for (const char* name : {"KernelBench", "kernelbench"}) {
      const fs::path candidate = dir / name;
      if (is_checkout(candidate)) return candidate;
      looked.push_back(candidate.string());
    }
  }
  throw core::InvalidArgument(fmt::format(
      "no problems named, and no KernelBench checkout found: KERNELBENCH_ROOT is not set, and none of {} is a "
      "checkout. Name the problems (a KernelBench checkout, a folder of problems or a JSONL file), or set "
      "KERNELBENCH_ROOT",
      fmt::join(looked, ", ")));
}

}  // namespace kbrl::dataset
