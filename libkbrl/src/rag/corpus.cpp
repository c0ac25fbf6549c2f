#include "kbrl/rag/corpus.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <unordered_set>

#include <boost/json.hpp>
#include <fmt/format.h>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/rag/code_tokens.hpp"

namespace fs = std::filesystem;
namespace json = boost::json;

namespace kbrl::rag {
namespace {

using core::ConfigError;

// One mapped field of one record, whatever the file's format.
struct Cell {
  enum Kind { missing, null, text, number, boolean } kind = missing;
  std::string string;  // text, and the spelling of numbers
  double value = 0;
  bool flag = false;
};

using CellGetter = std::function<Cell(const std::string&)>;

std::string kind_name(Cell::Kind k) {
  switch (k) {
    case Cell::missing: return "missing";
    case Cell::null: return "null";
    case Cell::text: return "a string";
    case Cell::number: return "a number";
    case Cell::boolean: return "a boolean";
  }
  return "?";
}

bool is_nan_text(std::string_view s) { return s.empty() || s == "nan" || s == "NaN" || s == "NAN" || s == "None"; }

std::optional<double> parse_double(std::string_view s) {
  const std::string copy(s);
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size()) return std::nullopt;
  return v;
}

struct RowContext {
  const CorpusSpec& spec;
  std::string where;      // "<path>:<line>"
  std::string file_name;  // for default ids
  int line = 0;
};

// A required string field (source, kernel): present, a string (CSV: always).
std::string required_text(const CellGetter& get, const std::string& field, const RowContext& c) {
  const Cell cell = get(field);
  if (cell.kind == Cell::missing) throw ConfigError(c.where, field, "missing (check the field mapping or the preset)");
  if (cell.kind == Cell::null) return {};
  if (cell.kind != Cell::text) throw ConfigError(c.where, field, fmt::format("is {}, expected a string", kind_name(cell.kind)));
  return cell.string;
}

std::optional<double> optional_number(const CellGetter& get, const std::string& field, const RowContext& c) {
  const Cell cell = get(field);
  switch (cell.kind) {
    case Cell::missing:
    case Cell::null:
      return std::nullopt;
    case Cell::number:
      return std::isfinite(cell.value) ? std::optional<double>(cell.value) : std::nullopt;
    case Cell::text: {
      if (is_nan_text(cell.string)) return std::nullopt;
      const auto v = parse_double(cell.string);
      if (!v) throw ConfigError(c.where, field, fmt::format("'{}' is not a number", cell.string));
      return std::isfinite(*v) ? v : std::nullopt;
    }
    case Cell::boolean:
      break;
  }
  throw ConfigError(c.where, field, "is a boolean, expected a number");
}

bool required_bool(const CellGetter& get, const std::string& field, const RowContext& c) {
  const Cell cell = get(field);
  switch (cell.kind) {
    case Cell::missing:
      throw ConfigError(c.where, field, "missing (needed to keep correct entries only)");
    case Cell::null:
      return false;
    case Cell::boolean:
      return cell.flag;
    case Cell::number:
      if (cell.value == 0 || cell.value == 1) return cell.value == 1;
      break;
    case Cell::text: {
      const std::string& s = cell.string;
      if (s == "true" || s == "True" || s == "TRUE" || s == "1" || s == "1.0") return true;
      if (s == "false" || s == "False" || s == "FALSE" || s == "0" || s == "0.0" || s.empty()) return false;
      break;
    }
  }
  throw ConfigError(c.where, field, fmt::format("'{}' is not true or false", cell.string));
}

std::string id_part(const CellGetter& get, const std::string& field) {
  const Cell cell = get(field);
  if (cell.kind == Cell::text || cell.kind == Cell::number) return cell.string;
  if (cell.kind == Cell::boolean) return cell.flag ? "true" : "false";
  return {};
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

struct Ingest {
  std::vector<CorpusEntry>& entries;
  IngestStats& stats;
  std::unordered_set<std::uint64_t> seen;
};

void add_row(const CellGetter& get, const RowContext& c, Ingest& in) {
  const CorpusSpec& spec = c.spec;
  ++in.stats.rows;
  CorpusEntry e;
  e.source = required_text(get, spec.source_field, c);
  e.kernel = required_text(get, spec.kernel_field, c);
  // Every mapped field is read (and so type-checked) before any filter decides.
  bool correct = true;
  if (!spec.correct_field.empty()) correct = required_bool(get, spec.correct_field, c);
  if (!spec.speedup_field.empty()) e.speedup = optional_number(get, spec.speedup_field, c);
  if (!spec.level_field.empty()) {
    const auto level = optional_number(get, spec.level_field, c);
    if (level && (*level != std::floor(*level) || std::abs(*level) > 1e6))
      throw ConfigError(c.where, spec.level_field, fmt::format("{} is not a whole number", *level));
    e.level = level ? static_cast<int>(*level) : 0;
  }
  if (!spec.language_field.empty()) {
    e.language = lower(required_text(get, spec.language_field, c));
    if (e.language.empty()) throw ConfigError(c.where, spec.language_field, "empty language");
  } else {
    e.language = lower(spec.language);
  }
  std::string id;
  for (const std::string& field : spec.id_fields) {
    const std::string part = id_part(get, field);
    if (part.empty()) {
      id.clear();
      break;
    }
    id += (id.empty() ? "" : "/") + part;
  }
  e.id = id.empty() || spec.id_fields.empty() ? fmt::format("{}:{}", c.file_name, c.line) : id;
  e.origin = c.where;

  if (spec.correct_only && !spec.correct_field.empty() && !correct) {
    ++in.stats.incorrect;
    return;
  }
  if (!spec.levels.empty() && std::find(spec.levels.begin(), spec.levels.end(), e.level) == spec.levels.end()) {
    ++in.stats.other_level;
    return;
  }
  if (e.source.find_first_not_of(" \t\r\n") == std::string::npos ||
      e.kernel.find_first_not_of(" \t\r\n") == std::string::npos) {
    ++in.stats.empty;
    return;
  }
  if ((spec.max_source_chars != 0 && e.source.size() > spec.max_source_chars) ||
      (spec.max_kernel_chars != 0 && e.kernel.size() > spec.max_kernel_chars)) {
    ++in.stats.too_long;
    return;
  }
  if (spec.deduplicate && !in.seen.insert(entry_dedup_key(e)).second) {
    ++in.stats.duplicates;
    return;
  }
  ++in.stats.kept;
  in.entries.push_back(std::move(e));
}

Cell cell_of_json(const json::value* v) {
  Cell c;
  if (v == nullptr) return c;
  switch (v->kind()) {
    case json::kind::null:
      c.kind = Cell::null;
      break;
    case json::kind::string:
      c.kind = Cell::text;
      c.string = std::string(v->get_string());
      break;
    case json::kind::bool_:
      c.kind = Cell::boolean;
      c.flag = v->get_bool();
      c.string = c.flag ? "true" : "false";
      break;
    case json::kind::int64:
      c.kind = Cell::number;
      c.value = static_cast<double>(v->get_int64());
      c.string = std::to_string(v->get_int64());
      break;
    case json::kind::uint64:
      c.kind = Cell::number;
      c.value = static_cast<double>(v->get_uint64());
      c.string = std::to_string(v->get_uint64());
      break;
    case json::kind::double_:
      c.kind = Cell::number;
      c.value = v->get_double();
      c.string = fmt::format("{}", v->get_double());
      break;
    case json::kind::array:
    case json::kind::object:
      c.kind = Cell::null;  // the getter reports these before they get here
      break;
  }
  return c;
}

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char ch) { return ch == ' ' || ch == '\t' || ch == '\r'; });
}

void read_jsonl(const fs::path& path, const std::string& text, const CorpusSpec& spec, Ingest& in) {
  const std::string file_name = path.filename().string();
  std::size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (blank(line)) continue;
    RowContext c{spec, fmt::format("{}:{}", path.string(), line_no), file_name, line_no};
    boost::system::error_code ec;
    const json::value v = core::parse_json(line, ec);
    if (ec) throw ConfigError(c.where, "", fmt::format("not valid JSON: {}", ec.message()));
    if (!v.is_object()) throw ConfigError(c.where, "", "expected one JSON object per line");
    const json::object& o = v.get_object();
    const CellGetter get = [&](const std::string& field) {
      const json::value* member = o.if_contains(field);
      if (member != nullptr && (member->is_array() || member->is_object()))
        throw ConfigError(c.where, field, fmt::format("is {}, expected a scalar", member->is_array() ? "an array" : "an object"));
      return cell_of_json(member);
    };
    add_row(get, c, in);
  }
}

void read_csv(const fs::path& path, const std::string& text, const CorpusSpec& spec, Ingest& in) {
  const std::string file_name = path.filename().string();
  std::vector<std::string> header;
  int header_line = 0;
  for_each_csv_record(text, path.string(), [&](CsvRecord& r) {
    if (header.empty() && header_line == 0) {
      header = std::move(r.fields);
      header_line = r.line;
      return;
    }
    RowContext c{spec, fmt::format("{}:{}", path.string(), r.line), file_name, r.line};
    if (r.fields.size() == 1 && r.fields[0].empty()) return;  // a blank line
    if (r.fields.size() != header.size())
      throw ConfigError(c.where, "",
                        fmt::format("{} fields, the header (line {}) has {}", r.fields.size(), header_line, header.size()));
    const CellGetter get = [&](const std::string& field) {
      Cell cell;
      const auto it = std::find(header.begin(), header.end(), field);
      if (it == header.end()) return cell;
      cell.kind = Cell::text;
      cell.string = r.fields[static_cast<std::size_t>(it - header.begin())];
      return cell;
    };
    add_row(get, c, in);
  });
  if (header_line == 0) throw ConfigError(path.string(), "", "empty CSV file (no header line)");
}

}  // namespace

std::vector<std::string> corpus_preset_names() { return {"kernelbook", "sakana"}; }

CorpusSpec corpus_preset(const std::string& name) {
  CorpusSpec s;
  if (name == "kernelbook") {
    s.source_field = "python_code";
    s.kernel_field = "triton_code";
    s.id_fields = {"uuid"};
    s.language = "triton";
    return s;
  }
  if (name == "sakana") {
    s.source_field = "PyTorch_Code_Module";
    s.kernel_field = "CUDA_Code";
    s.id_fields = {"Level_ID", "Task_ID", "Kernel_Name"};
    s.language = "cuda";
    s.correct_field = "Correct";
    s.correct_only = true;
    s.speedup_field = "CUDA_Speedup_Native";
    s.level_field = "Level_ID";
    return s;
  }
  throw core::InvalidArgument(fmt::format("unknown corpus preset '{}' (known: kernelbook, sakana)", name));
}

CorpusFormat detect_corpus_format(const fs::path& path) {
  std::string ext = lower(path.extension().string());
  if (ext == ".jsonl" || ext == ".ndjson" || ext == ".json") return CorpusFormat::jsonl;
  if (ext == ".csv") return CorpusFormat::csv;
  if (ext == ".parquet")
    throw ConfigError(path.string(), "",
                      "Parquet cannot be read (no packaged C++ reader on Debian 12): export it to JSONL, e.g. "
                      "datasets.load_dataset(...).to_json(\"corpus.jsonl\") (docs/retrieval.md)");
  throw ConfigError(path.string(), "", "unknown corpus format: expected a .jsonl (.ndjson, .json) or .csv file");
}

std::uint64_t entry_dedup_key(const CorpusEntry& e) {
  const bool python_kernel = e.language == "triton" || e.language == "python";
  std::uint64_t h = fnv1a64(core::normalize_python_source(e.source));
  h = fnv1a64("\x1f" + e.language, h);
  h = fnv1a64("\x1f", h);
  return fnv1a64(python_kernel ? core::normalize_python_source(e.kernel) : normalize_c_like_source(e.kernel), h);
}

void read_corpus(const fs::path& path, const CorpusSpec& spec, std::vector<CorpusEntry>& entries, IngestStats& stats) {
  const CorpusFormat format = detect_corpus_format(path);
  if (!spec.levels.empty() && spec.level_field.empty())
    throw core::InvalidArgument("a level filter needs a level field (--field-level)");
  std::string text = core::read_file(path);
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);  // a UTF-8 BOM
  Ingest in{entries, stats, {}};
  if (spec.deduplicate)
    for (const CorpusEntry& e : entries) in.seen.insert(entry_dedup_key(e));
  if (format == CorpusFormat::jsonl) {
    read_jsonl(path, text, spec, in);
  } else {
    read_csv(path, text, spec, in);
  }
}

std::vector<CorpusEntry> read_corpus(const fs::path& path, const CorpusSpec& spec, IngestStats* stats) {
  std::vector<CorpusEntry> entries;
  IngestStats local;
  read_corpus(path, spec, entries, stats != nullptr ? *stats : local);
  return entries;
}

void for_each_csv_record(std::string_view s, const std::string& where, const std::function<void(CsvRecord&)>& on_record) {
  std::size_t i = 0;
  int line = 1;
  while (i < s.size()) {
    CsvRecord r;
    r.line = line;
    std::string field;
    bool done = false;
    while (!done) {
      field.clear();
      if (i < s.size() && s[i] == '"') {
        const int quote_line = line;
        ++i;
        for (;;) {
          if (i >= s.size())
            throw ConfigError(fmt::format("{}:{}", where, quote_line), "", "unterminated quoted field");
          const char ch = s[i];
          if (ch == '"') {
            if (i + 1 < s.size() && s[i + 1] == '"') {
              field.push_back('"');
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (ch == '\n') ++line;
          field.push_back(ch);
          ++i;
        }
        if (i < s.size() && s[i] != ',' && s[i] != '\n' && !(s[i] == '\r' && (i + 1 == s.size() || s[i + 1] == '\n')))
          throw ConfigError(fmt::format("{}:{}", where, line), "",
                            "text after a closing quote (a quote inside a field must be doubled)");
      } else {
        while (i < s.size() && s[i] != ',' && s[i] != '\n') {
          if (s[i] == '"')
            throw ConfigError(fmt::format("{}:{}", where, line), "",
                              "a quote inside an unquoted field (quote the field and double the quote)");
          field.push_back(s[i]);
          ++i;
        }
        if (!field.empty() && field.back() == '\r' && (i >= s.size() || s[i] == '\n')) field.pop_back();
      }
      r.fields.push_back(field);
      if (i >= s.size()) {
        done = true;
      } else if (s[i] == ',') {
        ++i;
      } else {  // '\n' or "\r\n"
        if (s[i] == '\r') ++i;
        ++i;
        ++line;
        done = true;
      }
    }
    on_record(r);
  }
}

std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& where) {
  std::vector<CsvRecord> out;
  for_each_csv_record(text, where, [&](CsvRecord& r) { out.push_back(std::move(r)); });
  return out;
}

}  // namespace kbrl::rag
