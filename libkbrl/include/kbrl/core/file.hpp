// Reading whole files the one way every module does: configs, problems, checkpoints and tokenizer
// files that cannot be opened or read fail with core::ConfigError naming the file. Writing them
// whole the one way too: readers never see half a file.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace kbrl::core {

// The file's bytes. Throws ConfigError(path, "", "cannot open ..." / "read error").
std::string read_file(const std::filesystem::path& path);
// nullopt when the file does not exist; any other failure throws as read_file does.
std::optional<std::string> read_file_if_exists(const std::filesystem::path& path);
// Replaces `path` with `data` at once: written beside it under a name no other writer uses, then
// renamed over it. A failure at any point (a full disk, a read-only directory) removes what was
// written and throws core::Error("cannot write <path>: <reason>"); `path` is then unchanged.
void write_file_atomically(const std::filesystem::path& path, std::string_view data);

}  // namespace kbrl::core
