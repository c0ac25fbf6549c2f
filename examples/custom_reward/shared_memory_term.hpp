// The shared_memory reward term of examples/custom_reward: a bonus for correct CUDA kernels that
// stage data in shared memory, with its params check. Used by main.cpp (rewards by hand) and
// train.cpp (a training run that weights it).
#pragma once

#include <kbrl/core/types.hpp>
#include <kbrl/reward/config.hpp>

#include <boost/json/object.hpp>
#include <stdexcept>
#include <string>

namespace custom {

namespace core = kbrl::core;
namespace reward = kbrl::reward;

// 1 when a correct kernel declares a __shared__ buffer, else 0. Only correct kernels qualify:
// paying for the technique in a wrong kernel would teach the technique, not the solution. With
// params.shared_memory.require_sync (default true) the kernel must also call __syncthreads(),
// because shared memory without a barrier is usually a race that a few trials can miss.
inline double shared_memory_term(const core::EvalResult& eval, const core::Completion& completion,
                          const reward::RewardConfig& config) {
  if (!eval.correct) return 0.0;
  const std::string& source = completion.kernel;
  const bool uses_shared = source.find("__shared__") != std::string::npos;
  const bool synchronizes = source.find("__syncthreads()") != std::string::npos;
  const bool require_sync = config.param_bool("shared_memory", "require_sync", true);
  return uses_shared && (synchronizes || !require_sync) ? 1.0 : 0.0;
}

// Runs when a config is validated, so a typo in params fails at start-up, not mid-training.
inline void check_shared_memory_params(const boost::json::object& params) {
  for (const auto& kv : params)
    if (kv.key() != "require_sync")
      throw std::invalid_argument("unknown option '" + std::string(kv.key()) +
                                  "' (accepted: require_sync)");
  if (const auto* v = params.if_contains("require_sync"); v != nullptr && !v->is_bool())
    throw std::invalid_argument("require_sync must be true or false");
}

}  // namespace custom
