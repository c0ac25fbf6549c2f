// Running named checks into a Report, and waiting on futures with a deadline, for both suites.
// An exception that escapes a check is one of its failures, never the suite's end: the point is
// to report a broken implementation, whatever it does.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "kbrl/conformance/report.hpp"

namespace kbrl::conformance::detail {

using Clock = std::chrono::steady_clock;

inline std::string describe(std::exception_ptr e) {
  try {
    std::rethrow_exception(std::move(e));
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

class Checks {
 public:
  explicit Checks(Report& report) : report_(report) {}

  // Runs `body` as the check `name`; it passes when body recorded no failure and did not throw.
  template <class Body>
  void run(std::string_view name, Body&& body) {
    name_ = name;
    failures_ = 0;
    skipped_ = false;
    try {
      body();
    } catch (...) {
      fail(fmt::format("the check stopped on an exception: {}", describe(std::current_exception())));
    }
    if (skipped_) return;
    if (failures_ == 0) report_.passed.emplace_back(name);
  }

  void fail(std::string message) {
    ++failures_;
    report_.failures.push_back({std::string(name_), std::move(message)});
  }
  bool expect(bool condition, std::string_view message) {
    if (!condition) fail(std::string(message));
    return condition;
  }
  void skip(std::string reason) {
    skipped_ = true;
    report_.skipped.push_back({std::string(name_), std::move(reason)});
  }
  int failures() const noexcept { return failures_; }

 private:
  Report& report_;
  std::string_view name_;
  int failures_ = 0;
  bool skipped_ = false;
};

// What became of one future.
template <class T>
struct Outcome {
  std::optional<T> value;
  std::string error;  // set when there is no value: what happened instead
  bool timed_out = false;
};

// Waits for `f` until `deadline`. A deferred future (std::async's deferred launch) is read at
// once: that is when it runs.
template <class T>
Outcome<T> wait_for_value(std::future<T>& f, Clock::time_point deadline) {
  Outcome<T> out;
  if (!f.valid()) {
    out.error = "the future has no shared state";
    return out;
  }
  if (f.wait_until(deadline) == std::future_status::timeout) {
    out.error = "no result before the suite's result_timeout";
    out.timed_out = true;
    return out;
  }
  try {
    out.value = f.get();
  } catch (...) {
    out.error = "the future holds an exception: " + describe(std::current_exception());
  }
  return out;
}

}  // namespace kbrl::conformance::detail
