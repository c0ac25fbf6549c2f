#include "kbrl/core/file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "kbrl/core/error.hpp"

namespace kbrl::core {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ConfigError(path.string(), "", "is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path.string(), "", std::string("cannot open for reading: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path.string(), "", "read error");
  return std::move(text).str();
}

std::optional<std::string> read_file_if_exists(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  return read_file(path);
}

void write_file_atomically(const fs::path& path, std::string_view data) {
  // Unique across threads, processes and PID namespaces (a sandboxed worker's pid is not).
  static std::atomic<unsigned long long> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const fs::path tmp = fmt::format("{}.tmp-{:x}-{:x}", path.string(), rng(), ++counter);
  const auto fail = [&](const std::string& reason) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw Error(fmt::format("cannot write {}: {}", path.string(), reason));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      fail(std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) fail(std::strerror(errno));  // NFS and some file systems report here
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fail(ec.message());
}

}  // namespace kbrl::core
