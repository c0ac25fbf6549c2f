// JSON mapping of the core value types (Boost.JSON tag_invoke), so that
// boost::json::value_from(x) / value_to<T>(v) work for each of them. Reading is lenient about
// missing keys (they keep their defaults) and strict about wrong types: a wrong type throws
// InvalidArgument naming the key.
#pragma once

#include <boost/json.hpp>
#include <string>
#include <string_view>

#include "kbrl/core/types.hpp"

namespace kbrl::core {

#define KBRL_JSON_DECLARE(T)                                                          \
  void tag_invoke(boost::json::value_from_tag, boost::json::value& jv, const T& v); \
  T tag_invoke(boost::json::value_to_tag<T>, const boost::json::value& jv);

KBRL_JSON_DECLARE(KernelLanguage)
KBRL_JSON_DECLARE(Precision)
KBRL_JSON_DECLARE(DevicePlatform)
KBRL_JSON_DECLARE(Severity)
KBRL_JSON_DECLARE(ErrorCategory)
KBRL_JSON_DECLARE(Problem)
KBRL_JSON_DECLARE(Message)
KBRL_JSON_DECLARE(Completion)
KBRL_JSON_DECLARE(EvalOptions)
KBRL_JSON_DECLARE(EvalRequest)
KBRL_JSON_DECLARE(StaticFinding)
KBRL_JSON_DECLARE(TimingStats)
KBRL_JSON_DECLARE(InputFamilies)
KBRL_JSON_DECLARE(EvalResult)
KBRL_JSON_DECLARE(RewardBreakdown)
KBRL_JSON_DECLARE(Transition)
KBRL_JSON_DECLARE(Trajectory)
KBRL_JSON_DECLARE(TrajectoryGroup)

#undef KBRL_JSON_DECLARE

// Compact JSON text of any mapped value.
template <class T>
std::string to_json(const T& v) {
  return boost::json::serialize(boost::json::value_from(v));
}

// Parses JSON text; throws InvalidArgument when it is malformed. Numbers read back exactly as
// to_json wrote them (correctly rounded, which Boost.JSON's own parser is not before 1.83), and a
// number beyond the range of a double is malformed (Boost.JSON reads it as infinity, which
// to_json could not write back): use these, not boost::json::parse.
boost::json::value parse_json(std::string_view text);
// The same, reporting malformed text through ec (the value is then null).
boost::json::value parse_json(std::string_view text, boost::system::error_code& ec);
// Parse JSON text into T; throws InvalidArgument on malformed text or wrong types.
template <class T>
T from_json(std::string_view text) {
  return boost::json::value_to<T>(parse_json(text));
}

}  // namespace kbrl::core
