#include "kbrl/log/jsonl.hpp"

#include <unistd.h>

#include <boost/json.hpp>
#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <string>

#include "kbrl/core/error.hpp"

namespace kbrl::log {

namespace fs = std::filesystem;

JsonlWriter::JsonlWriter(fs::path path) : path_(std::move(path)) {
  if (path_.has_parent_path()) fs::create_directories(path_.parent_path());
  if (fs::exists(path_)) {
    // Cut a torn last line: keep everything up to the last newline.
    std::ifstream in(path_, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    if (!text.empty() && text.back() != '\n') {
      const auto keep = text.rfind('\n');
      fs::resize_file(path_, keep == std::string::npos ? 0 : keep + 1);
    }
  }
  file_ = std::fopen(path_.c_str(), "ab");
  if (file_ == nullptr) throw core::Error(fmt::format("cannot open {} for appending", path_.string()));
}

JsonlWriter::~JsonlWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void JsonlWriter::write(const boost::json::object& line) {
  std::string text = boost::json::serialize(line);
  text += '\n';
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size())
    throw core::Error(fmt::format("cannot write {}", path_.string()));
}

void JsonlWriter::flush(bool sync) {
  if (std::fflush(file_) != 0) throw core::Error(fmt::format("cannot write {}", path_.string()));
  if (sync) ::fsync(::fileno(file_));
}

std::vector<boost::json::object> read_jsonl(const fs::path& path) {
  std::vector<boost::json::object> out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline after it: torn by a kill
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (!ec && v.is_object()) out.push_back(std::move(v.as_object()));
  }
  return out;
}

std::size_t filter_jsonl(const fs::path& path, const std::function<bool(const boost::json::object&)>& keep) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  // Kept lines are copied as they were written: parsing a number and serializing it again can
  // change its last digit, and a resumed run's earlier steps must read back as they were.
  std::vector<std::string> kept;
  std::size_t objects = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline after it: torn by a kill
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (ec || !v.is_object()) continue;
    ++objects;
    if (keep(v.as_object())) kept.push_back(std::move(line));
  }
  in.close();
  if (kept.size() == objects) return 0;
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    for (const auto& l : kept) out << l << '\n';
    if (!out) throw core::Error(fmt::format("cannot write {}", tmp.string()));
  }
  fs::rename(tmp, path);
  return objects - kept.size();
}

}  // namespace kbrl::log
