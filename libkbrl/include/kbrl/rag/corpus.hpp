// Kernel corpora: solved examples (a PyTorch program and a kernel that implements it) read from
// local JSONL or CSV exports of KernelBook, the Sakana AI CUDA Engineer archive, or any table with
// a field mapping (CorpusSpec). See docs/retrieval.md for the presets and how to export each set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kbrl::rag {

struct CorpusEntry {
  std::string id;        // from the spec's id fields, else "<file name>:<line>"
  std::string source;    // the PyTorch side (what a query problem is compared with)
  std::string kernel;    // the answer: Triton, CUDA, ... source
  std::string language;  // "triton", "cuda", ... (lowercase)
  std::optional<double> speedup;  // over the PyTorch reference, where the corpus measured it
  int level = 0;                  // KernelBench level where the corpus has one, else 0
  std::string origin;             // "<path>:<line>" of the record it was read from
};

// How the rows of one file become entries. Field names are the file's column or key names.
struct CorpusSpec {
  std::string source_field = "source";
  std::string kernel_field = "kernel";
  // Joined with '/' into the id; a row missing any of them gets "<file name>:<line>".
  std::vector<std::string> id_fields;
  // The language tag: read from `language_field` when set, else `language` for every entry.
  std::string language = "cuda";
  std::string language_field;
  std::string speedup_field;  // optional; empty, null or NaN values mean "not measured"
  std::string level_field;    // optional
  std::string correct_field;  // optional; true/false, "True"/"False", 1/0
  bool correct_only = true;   // with correct_field: keep only rows marked correct
  std::vector<int> levels;    // keep only these levels (empty: all); needs level_field
  std::size_t max_source_chars = 0;  // longer sources are skipped (0: no limit)
  std::size_t max_kernel_chars = 0;  // longer kernels are skipped (0: no limit)
  bool deduplicate = true;           // drop repeats of (source, kernel) after normalization
};

// "kernelbook": python_code -> triton_code, language triton, id uuid.
// "sakana": PyTorch_Code_Module -> CUDA_Code, language cuda, correct entries only (Correct),
// speedup CUDA_Speedup_Native, level Level_ID, id Level_ID/Task_ID/Kernel_Name.
// Throws core::InvalidArgument for another name.
CorpusSpec corpus_preset(const std::string& name);
std::vector<std::string> corpus_preset_names();

// What reading kept and why it dropped the rest.
struct IngestStats {
  std::size_t rows = 0;  // records read (blank JSONL lines not counted)
  std::size_t kept = 0;
  std::size_t incorrect = 0;      // correct_only and not marked correct
  std::size_t other_level = 0;    // level not in `levels`
  std::size_t too_long = 0;       // over max_source_chars / max_kernel_chars
  std::size_t empty = 0;          // an empty source or kernel
  std::size_t duplicates = 0;     // same normalized (source, kernel, language) as a kept entry
};

enum class CorpusFormat { jsonl, csv };

// From the file name: .jsonl / .ndjson / .json -> jsonl, .csv -> csv. Parquet and anything else:
// core::ConfigError saying how to export (docs/retrieval.md).
CorpusFormat detect_corpus_format(const std::filesystem::path& path);

// Reads `path` (format from its name) with `spec`, appending to `entries` and adding to `stats`
// (so several files can make one corpus; deduplication spans them all when `entries` came from
// this function). Throws core::ConfigError naming "<path>:<line>" and the field for malformed
// records, a missing or mistyped mapped field, or an unreadable file.
void read_corpus(const std::filesystem::path& path, const CorpusSpec& spec, std::vector<CorpusEntry>& entries,
                 IngestStats& stats);

// The same, for one file.
std::vector<CorpusEntry> read_corpus(const std::filesystem::path& path, const CorpusSpec& spec,
                                     IngestStats* stats = nullptr);

// The deduplication key of an entry: comment- and layout-blind on both sides (Python through
// core::normalize_python_source; CUDA and other C-like kernels through normalize_c_like_source).
std::uint64_t entry_dedup_key(const CorpusEntry& entry);

// RFC 4180 CSV (what pandas' to_csv writes): quoted fields may hold commas, doubled quotes and
// line breaks; CRLF or LF. Each record with the 1-based line it starts on. Throws
// core::ConfigError("<where>:<line>") for an unterminated quote or text after a closing quote.
struct CsvRecord {
  std::vector<std::string> fields;
  int line = 0;
};
std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& where);
// The same, one record at a time (a large export is not held twice).
void for_each_csv_record(std::string_view text, const std::string& where,
                         const std::function<void(CsvRecord&)>& on_record);

}  // namespace kbrl::rag
