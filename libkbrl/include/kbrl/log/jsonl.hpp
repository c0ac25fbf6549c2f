// Append-only JSON Lines files (metrics.jsonl, traces.jsonl, checkpoints.jsonl): one object per
// line, flushed explicitly. A line torn by a crash is cut off when the file is opened again and
// skipped when it is read, so the file stays valid JSON Lines across kills.
#pragma once

#include <boost/json/object.hpp>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <vector>

namespace kbrl::log {

class JsonlWriter {
 public:
  // Opens `path` for appending (creating it and its folder); a last line without its newline
  // (a write cut short by a kill) is removed first. Throws core::Error when it cannot.
  explicit JsonlWriter(std::filesystem::path path);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  void write(const boost::json::object& line);
  // Hands the lines to the operating system (fflush) and, with `sync`, to the disk (fsync).
  void flush(bool sync = false);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// Every complete line that parses as a JSON object; a torn or unparsable line is skipped. A
// missing file reads as no lines.
std::vector<boost::json::object> read_jsonl(const std::filesystem::path& path);

// The last `n` lines read_jsonl would return, in file order, read backwards from the end of the
// file: the cost is the size of those lines, not of the file (a run's status and its last
// checkpoint from files that grow by a line per step). Throws core::Error when the file exists but
// cannot be read.
std::vector<boost::json::object> read_last_jsonl(const std::filesystem::path& path, std::size_t n);

// Rewrites `path` keeping only the lines `keep` accepts, each exactly as it was written (to a
// temporary file, then renamed; torn and unparsable lines go too). Returns how many lines were
// dropped.
std::size_t filter_jsonl(const std::filesystem::path& path, const std::function<bool(const boost::json::object&)>& keep);

}  // namespace kbrl::log
