// The reward of one evaluation: a pure function of what happened (the EvalResult and the
// Completion that produced it) and a RewardConfig, returned with its per-term breakdown so that
// every term can be logged and the total explained.
#pragma once

#include "kbrl/core/json.hpp"  // boost::json::value_from(breakdown)
#include "kbrl/core/types.hpp"
#include "kbrl/reward/config.hpp"
#include "kbrl/reward/registry.hpp"

namespace kbrl::reward {

// The value type lives in core (a Transition carries one); its name here is the one the
// reward API has always used.
using RewardBreakdown = core::RewardBreakdown;

// Sums weight * term for every term with a nonzero weight (in name order, so the sum is
// reproducible), then clips. A static-check failure (see is_static_check_failure) short-cuts to
// config.static_check_value without computing any term. Throws core::InvalidArgument for a term
// name the registry does not know and core::Error when a term returns a non-finite value.
RewardBreakdown compute_reward(const core::EvalResult& eval, const core::Completion& completion,
                               const RewardConfig& config,
                               const RewardRegistry& registry = default_registry());

// compute_reward(...).total: the `double(EvalResult, Completion, RewardConfig)` shape.
double reward_total(const core::EvalResult& eval, const core::Completion& completion,
                    const RewardConfig& config,
                    const RewardRegistry& registry = default_registry());

}  // namespace kbrl::reward
