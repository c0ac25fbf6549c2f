// Strict, typed reading of JSON that users write or hand us (reward configs, config.json,
// tokenizer.json, problem files, adapter configs): every wrong type, unknown key or malformed
// document is a core::ConfigError naming the file (`where`) and the dotted field.
#pragma once

#include <boost/json/fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "kbrl/core/error.hpp"

namespace kbrl::core {

class JsonReader {
 public:
  explicit JsonReader(std::string where) : where_(std::move(where)) {}
  const std::string& where() const noexcept { return where_; }

  [[noreturn]] void fail(std::string_view field, const std::string& what) const;

  // The value (`field` names it in errors).
  const boost::json::object& object(const boost::json::value& v, std::string_view field) const;
  const boost::json::array& array(const boost::json::value& v, std::string_view field) const;
  std::string string(const boost::json::value& v, std::string_view field) const;
  bool boolean(const boost::json::value& v, std::string_view field) const;
  double number(const boost::json::value& v, std::string_view field) const;  // finite
  std::int64_t int64(const boost::json::value& v, std::string_view field) const;
  int integer(const boost::json::value& v, std::string_view field) const;  // within int's range
  // null gives nullopt (so an override can remove a default).
  std::optional<double> optional_number(const boost::json::value& v, std::string_view field) const;
  std::optional<int> optional_integer(const boost::json::value& v, std::string_view field) const;

  // A name parsed by `parse` (an enum's parse_* function); its InvalidArgument becomes a
  // ConfigError on `field`.
  template <class Parse>
  auto name(const boost::json::value& v, std::string_view field, Parse parse_name) const {
    const std::string text = string(v, field);
    try {
      return parse_name(text);
    } catch (const InvalidArgument& e) {
      fail(field, e.what());
    }
  }

  // Rejects keys of `o` outside `accepted`, naming them as "<prefix>.<key>".
  void only_keys(const boost::json::object& o, std::string_view prefix,
                 std::initializer_list<std::string_view> accepted) const;

  // The member `key` of `o`, or nullptr when it is missing or null.
  static const boost::json::value* member(const boost::json::object& o, std::string_view key) noexcept;
  // "<prefix>.<key>", or "<key>" for an empty prefix.
  static std::string field_name(std::string_view prefix, std::string_view key);

  // Parses a whole document; malformed text is ConfigError(where, "", "not valid JSON: ...").
  boost::json::value parse(std::string_view text) const;

 private:
  std::string where_;
};

// read_file + JsonReader(path).parse.
boost::json::value read_json_file(const std::filesystem::path& path);

}  // namespace kbrl::core
