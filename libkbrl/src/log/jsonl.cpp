#include "kbrl/log/jsonl.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "kbrl/core/json.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/error.hpp"

namespace kbrl::log {

namespace fs = std::filesystem;

JsonlWriter::JsonlWriter(fs::path path) : path_(std::move(path)) {
  if (path_.has_parent_path()) fs::create_directories(path_.parent_path());
  if (fs::exists(path_)) {
    // Cut a torn last line: keep everything up to the last newline.
    const std::string text = core::read_file(path_);
    if (!text.empty() && text.back() != '\n') {
      const auto keep = text.rfind('\n');
      fs::resize_file(path_, keep == std::string::npos ? 0 : keep + 1);
    }
  }
  file_ = std::fopen(path_.c_str(), "ab");
  if (file_ == nullptr)
    throw core::Error(fmt::format("cannot open {} for appending: {}", path_.string(), std::strerror(errno)));
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

namespace {

// The object on one complete line, if it is one.
std::optional<boost::json::object> parse_line(std::string_view line) {
  boost::system::error_code ec;
  auto v = core::parse_json(line, ec);
  if (ec || !v.is_object()) return std::nullopt;
  return std::move(v.as_object());
}

}  // namespace

std::vector<boost::json::object> read_jsonl(const fs::path& path) {
  std::vector<boost::json::object> out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline after it: torn by a kill
    if (auto o = parse_line(line)) out.push_back(std::move(*o));
  }
  return out;
}

std::vector<boost::json::object> read_last_jsonl(const fs::path& path, std::size_t n) {
  std::vector<boost::json::object> out;
  if (n == 0) return out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return out;
    throw core::Error(fmt::format("cannot read {}", path.string()));
  }
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } closer{fd};
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0) throw core::Error(fmt::format("cannot read {}", path.string()));

  // Blocks from the end, prepended to `buf` until it holds the wanted lines. `buf` starts at file
  // offset `pos`; its first line may be cut by the block boundary, so it is used only at offset 0.
  // Blocks double in size, so a line far longer than one block costs linear time, not quadratic.
  std::size_t block_size = 64 * 1024;
  std::string buf;
  off_t pos = size;
  bool torn_checked = false;
  while (out.size() < n) {
    if (pos == 0 && buf.empty()) break;
    if (pos > 0) {
      const auto len = static_cast<std::size_t>(std::min<off_t>(pos, static_cast<off_t>(block_size)));
      block_size *= 2;
      std::string block(len, '\0');
      std::size_t got = 0;
      while (got < len) {
        const ssize_t r = ::pread(fd, block.data() + got, len - got, pos - static_cast<off_t>(len) + static_cast<off_t>(got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) throw core::Error(fmt::format("cannot read {}", path.string()));
        got += static_cast<std::size_t>(r);
      }
      pos -= static_cast<off_t>(len);
      buf.insert(0, block);
    }
    if (!torn_checked) {
      // Text after the last newline is a line torn by a kill: not a line yet.
      torn_checked = true;
      const auto last_nl = buf.rfind('\n');
      if (last_nl == std::string::npos) {
        if (pos > 0) {
          torn_checked = false;  // the newline, if any, is further back
          continue;
        }
        break;
      }
      buf.resize(last_nl + 1);
    }
    // Whole lines at the end of buf (each ends with '\n'); the first one only when pos is 0.
    std::size_t end = buf.size();  // one past the newline of the line being taken
    while (out.size() < n && end > 0) {
      const auto prev_nl = end >= 2 ? buf.rfind('\n', end - 2) : std::string::npos;
      if (prev_nl == std::string::npos && pos > 0) break;  // may be cut: read further back
      const std::size_t start = prev_nl == std::string::npos ? 0 : prev_nl + 1;
      if (auto o = parse_line(std::string_view(buf).substr(start, end - 1 - start))) out.push_back(std::move(*o));
      end = start;
    }
    buf.resize(end);
    if (pos == 0 && end == 0) break;
  }
  std::reverse(out.begin(), out.end());
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
    const auto object = parse_line(line);
    if (!object) continue;
    ++objects;
    if (keep(*object)) kept.push_back(std::move(line));
  }
  in.close();
  if (kept.size() == objects) return 0;
  std::string text;
  for (const auto& l : kept) text += l + '\n';
  core::write_file_atomically(path, text);
  return objects - kept.size();
}

}  // namespace kbrl::log
