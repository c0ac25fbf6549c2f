#include "kbrl/core/file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

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

}  // namespace kbrl::core
