// Building messages without fmt, for the translation units that include libtorch: torch's include
// directory carries its own fmt (12.x) ahead of the system's fmt 9 that libkbrl links, so a fmt
// call there would need a fmt 12 library. Header-only.
#pragma once

#include <sstream>
#include <string>

namespace kbrl::core {

template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// "[2, 3]" for any range of integers (std::vector, at::IntArrayRef).
template <class Range>
std::string shape_string(const Range& shape) {
  std::ostringstream out;
  out << '[';
  bool first = true;
  for (const auto d : shape) {
    out << (first ? "" : ", ") << d;
    first = false;
  }
  out << ']';
  return out.str();
}

}  // namespace kbrl::core
