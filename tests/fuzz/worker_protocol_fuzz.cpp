// Fuzz target: the evaluator's reader of the worker's replies (eval::read_ready,
// read_compile_reply, read_run_reply), the one place that parses what the Python worker writes
// on its pipe. A line that breaks the protocol throws eval::WorkerProtocolError (a core::Error);
// a reply that reads must then apply to a result without failing.
#include "fuzz_support.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/eval/worker_protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line = kbrl::fuzz::as_text(data, size);
  try {
    (void)kbrl::eval::read_ready(line);
  } catch (const kbrl::core::Error&) {
  }
  // An empty job id accepts any; the golden replies' id checks the comparison too.
  for (const std::string_view job_id : {std::string_view{}, std::string_view{"7-5f2b8c1e"}}) {
    try {
      const kbrl::eval::CompileReply reply = kbrl::eval::read_compile_reply(line, job_id);
      kbrl::core::EvalResult result;
      (void)kbrl::eval::apply_compile_reply(reply, result);
      (void)kbrl::eval::write_compile_reply(reply);
    } catch (const kbrl::core::Error&) {
    }
    try {
      const kbrl::eval::RunReply reply = kbrl::eval::read_run_reply(line, job_id);
      kbrl::core::EvalResult result;
      kbrl::eval::apply_run_reply(reply, result);
    } catch (const kbrl::core::Error&) {
    }
  }
  return 0;
}
