// Reading whole files the one way every module does: configs, problems, checkpoints and tokenizer
// files that cannot be opened or read fail with core::ConfigError naming the file.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace kbrl::core {

// The file's bytes. Throws ConfigError(path, "", "cannot open ..." / "read error").
std::string read_file(const std::filesystem::path& path);
// nullopt when the file does not exist; any other failure throws as read_file does.
std::optional<std::string> read_file_if_exists(const std::filesystem::path& path);

}  // namespace kbrl::core
