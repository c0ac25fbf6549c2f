#include "kbrl/core/json_reader.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kbrl/core/json.hpp"
#include "kbrl/core/file.hpp"

namespace kbrl::core {

namespace json = boost::json;

namespace {

// A short rendering of a value for messages.
std::string describe(const json::value& v) {
  std::string text = json::serialize(v);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

}  // namespace

void JsonReader::fail(std::string_view field, const std::string& what) const {
  throw ConfigError(where_, std::string(field), what);
}

const json::object& JsonReader::object(const json::value& v, std::string_view field) const {
  if (!v.is_object()) fail(field, fmt::format("expected a JSON object, got {}", describe(v)));
  return v.get_object();
}

const json::array& JsonReader::array(const json::value& v, std::string_view field) const {
  if (!v.is_array()) fail(field, fmt::format("expected an array, got {}", describe(v)));
  return v.get_array();
}

std::string JsonReader::string(const json::value& v, std::string_view field) const {
  if (!v.is_string()) fail(field, fmt::format("expected a string, got {}", describe(v)));
  return std::string(v.get_string());
}

bool JsonReader::boolean(const json::value& v, std::string_view field) const {
  if (!v.is_bool()) fail(field, fmt::format("expected true or false, got {}", describe(v)));
  return v.get_bool();
}

double JsonReader::number(const json::value& v, std::string_view field) const {
  double d = 0.0;
  if (v.is_double()) d = v.get_double();
  else if (v.is_int64()) d = static_cast<double>(v.get_int64());
  else if (v.is_uint64()) d = static_cast<double>(v.get_uint64());
  else fail(field, fmt::format("expected a number, got {}", describe(v)));
  if (!std::isfinite(d)) fail(field, fmt::format("expected a finite number, got {}", describe(v)));
  return d;
}

std::int64_t JsonReader::int64(const json::value& v, std::string_view field) const {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return static_cast<std::int64_t>(v.get_uint64());
  fail(field, fmt::format("expected an integer, got {}", describe(v)));
}

int JsonReader::integer(const json::value& v, std::string_view field) const {
  if (!v.is_int64() && !v.is_uint64()) fail(field, fmt::format("expected an integer, got {}", describe(v)));
  constexpr auto lo = std::numeric_limits<int>::min();
  constexpr auto hi = std::numeric_limits<int>::max();
  if (v.is_int64() && v.get_int64() >= lo && v.get_int64() <= hi) return static_cast<int>(v.get_int64());
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(hi)) return static_cast<int>(v.get_uint64());
  fail(field, fmt::format("{} is out of range ({} to {})", describe(v), lo, hi));
}

std::optional<double> JsonReader::optional_number(const json::value& v, std::string_view field) const {
  if (v.is_null()) return std::nullopt;
  return number(v, field);
}

std::optional<int> JsonReader::optional_integer(const json::value& v, std::string_view field) const {
  if (v.is_null()) return std::nullopt;
  return integer(v, field);
}

void JsonReader::only_keys(const json::object& o, std::string_view prefix,
                           std::initializer_list<std::string_view> accepted) const {
  for (const auto& kv : o) {
    const std::string_view key = kv.key();
    if (std::find(accepted.begin(), accepted.end(), key) == accepted.end())
      fail(field_name(prefix, key), fmt::format("unknown key (accepted: {})", fmt::join(accepted, ", ")));
  }
}

const json::value* JsonReader::member(const json::object& o, std::string_view key) noexcept {
  const json::value* v = o.if_contains(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

std::string JsonReader::field_name(std::string_view prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : fmt::format("{}.{}", prefix, key);
}

json::value JsonReader::parse(std::string_view text) const {
  boost::system::error_code ec;
  json::value v = parse_json(text, ec);
  if (ec) fail("", fmt::format("not valid JSON: {}", ec.message()));
  return v;
}

json::value read_json_file(const std::filesystem::path& path) {
  return JsonReader(path.string()).parse(read_file(path));
}

}  // namespace kbrl::core
