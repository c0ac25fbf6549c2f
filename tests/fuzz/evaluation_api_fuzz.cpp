// Fuzz target: the evaluation API's JSON (docs/services.md): eval::parse_evaluation_batch, which
// kbrl-evald runs on every POST /v1/evaluations body from the network, and the EvalResult
// mapping (core::from_json), which RemoteEvaluator runs on every line kbrl-evald streams back.
// Bad text throws a core::Error (ConfigError, InvalidArgument) naming the field.
#include <optional>
#include <vector>

#include "fuzz_support.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/eval/evaluation_service.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using kbrl::fuzz::require;
  const std::string_view text = kbrl::fuzz::as_text(data, size);
  const kbrl::core::EvalOptions defaults;
  std::vector<kbrl::core::EvalRequest> requests;
  try {
    requests = kbrl::eval::parse_evaluation_batch(text, defaults).requests;
  } catch (const kbrl::core::Error&) {
  }
  for (const kbrl::core::EvalRequest& request : requests) {
    // What RemoteEvaluator sends for a request kbrl-evald accepted must be accepted again, as
    // the same request (a re-dispatch to another server sends it once more).
    (void)kbrl::eval::request_sha256(request);
    const auto again = kbrl::eval::parse_evaluation_batch(
        "{\"requests\": [" + kbrl::core::to_json(request) + "]}", defaults);
    require(again.requests.size() == 1 && again.requests[0] == request, "a request reads back as itself");
  }
  std::optional<kbrl::core::EvalResult> result;
  try {
    result = kbrl::core::from_json<kbrl::core::EvalResult>(text);
  } catch (const kbrl::core::Error&) {
  }
  if (result) {
    // kbrl-evald's journal stores results as text and serves them again after a restart.
    require(kbrl::core::from_json<kbrl::core::EvalResult>(kbrl::core::to_json(*result)) == *result,
            "a result reads back as itself");
  }
  return 0;
}
