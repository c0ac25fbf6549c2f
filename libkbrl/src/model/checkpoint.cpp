#include "kbrl/model/checkpoint.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "kbrl/core/json.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"

namespace kbrl::model {
namespace json = boost::json;
namespace fs = std::filesystem;
using core::ConfigError;

namespace {

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleName = "model.safetensors";

// Shard names are plain file names inside the directory, as save_pretrained writes them;
// anything else (absolute paths, "..") could point outside the checkpoint.
void check_shard_name(const fs::path& index, const std::string& tensor, const std::string& shard) {
  const fs::path p(shard);
  if (shard.empty() || p.is_absolute() || p.has_parent_path() || shard == "." || shard == "..")
    throw ConfigError(index.string(), fmt::format("weight_map.{}", tensor),
                      fmt::format("shard '{}' is not a file name inside the checkpoint directory", shard));
}

}  // namespace

Checkpoint::Checkpoint(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    directory_ = path;
    if (fs::exists(path / kIndexName)) {
      source_ = path / kIndexName;
    } else if (fs::exists(path / kSingleName)) {
      source_ = path / kSingleName;
    } else {
      throw ConfigError(path.string(), "", fmt::format("no {} or {} in this directory", kSingleName, kIndexName));
    }
  } else if (fs::exists(path, ec)) {
    source_ = path;
    directory_ = path.has_parent_path() ? path.parent_path() : fs::path(".");
  } else {
    throw ConfigError(path.string(), "", "no such file or directory");
  }

  if (source_.filename() != kIndexName) {
    files_.emplace_back(source_);
    for (const TensorInfo& t : files_.back().tensors()) where_.emplace(t.name, 0);
    return;
  }

  // Sharded: the index's weight_map must agree exactly with what the shards hold.
  const std::string index = source_.string();
  boost::system::error_code jec;
  const json::value root = core::parse_json(core::read_file(source_), jec);
  if (jec) throw ConfigError(index, "", fmt::format("not valid JSON: {}", jec.message()));
  if (!root.is_object()) throw ConfigError(index, "", "not a JSON object");
  const json::value* map = root.get_object().if_contains("weight_map");
  if (map == nullptr || !map->is_object()) throw ConfigError(index, "weight_map", "missing (an object of tensor -> shard)");

  std::map<std::string, std::size_t> shard_index;
  for (const auto& kv : map->get_object()) {
    const std::string tensor(kv.key());
    if (!kv.value().is_string()) throw ConfigError(index, fmt::format("weight_map.{}", tensor), "is not a string");
    const std::string shard(kv.value().get_string());
    check_shard_name(source_, tensor, shard);
    auto [it, inserted] = shard_index.emplace(shard, files_.size());
    if (inserted) {
      if (!fs::exists(directory_ / shard))
        throw ConfigError(index, fmt::format("weight_map.{}", tensor), fmt::format("shard '{}' does not exist", shard));
      files_.emplace_back(directory_ / shard);
    }
    if (!files_[it->second].contains(tensor))
      throw ConfigError(index, fmt::format("weight_map.{}", tensor),
                        fmt::format("shard '{}' has no such tensor", shard));
    where_.emplace(tensor, it->second);
  }
  for (std::size_t i = 0; i < files_.size(); ++i) {
    for (const TensorInfo& t : files_[i].tensors()) {
      const auto it = where_.find(t.name);
      if (it == where_.end())
        throw ConfigError(files_[i].path().string(), fmt::format("tensor '{}'", t.name),
                          fmt::format("is not listed in {}", kIndexName));
      if (it->second != i)
        throw ConfigError(files_[i].path().string(), fmt::format("tensor '{}'", t.name),
                          fmt::format("is also in shard '{}', which {} names for it",
                                      files_[it->second].path().filename().string(), kIndexName));
    }
  }
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, file] : where_) names.push_back(name);
  return names;
}

bool Checkpoint::contains(std::string_view name) const { return where_.find(name) != where_.end(); }

const SafetensorsFile& Checkpoint::file_of(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) throw ConfigError(source_.string(), fmt::format("tensor '{}'", name), "no such tensor");
  return files_[it->second];
}

const TensorInfo& Checkpoint::info(std::string_view name) const { return file_of(name).info(name); }

std::span<std::byte> Checkpoint::bytes(std::string_view name) const { return file_of(name).bytes(name); }

}  // namespace kbrl::model
