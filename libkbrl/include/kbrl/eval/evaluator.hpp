// The one abstraction every evaluation backend hides behind: submit a request, get a future
// result. The contract, which kbrl/conformance/evaluator_suite.hpp checks for any implementation:
// - every submitted request gets exactly one result, carrying its request_id and problem id;
// - bad candidates (no program, no ModelNew, a syntax error, a build failure, a crash, a hang,
//   wrong outputs) never throw, from submit() or from the future: they are results, with the
//   error category that says what went wrong;
// - submit() may be called from several threads at once;
// - destroying the evaluator answers every request still pending (`internal` where it was not
//   evaluated), so no future is left waiting.
#pragma once

#include <future>
#include <vector>

#include "kbrl/core/types.hpp"

namespace kbrl::eval {

class Evaluator {
 public:
  virtual ~Evaluator() = default;

  // Queues one evaluation. The future is always fulfilled with a result; it holds an exception
  // only when the evaluator itself is broken, never for a bad candidate.
  virtual std::future<core::EvalResult> submit(core::EvalRequest request) = 0;

  // Submits all, waits for all; results in request order.
  std::vector<core::EvalResult> evaluate(std::vector<core::EvalRequest> requests);
};

}  // namespace kbrl::eval
