// Discounted returns for multi-turn episodes: each refinement turn is credited with the rewards
// of the turns after it, so a turn that sets up a later fast kernel is reinforced too (Kevin-32B
// trains with the sum form and gamma = 0.4). Worked examples are in docs/rewards.md.
#pragma once

#include <string_view>
#include <vector>

namespace kbrl::reward {

enum class ReturnForm {
  sum,  // R_t = r_t + gamma * R_{t+1}
  max,  // R_t = max_{j >= t} gamma^(j-t) * r_j: a turn is worth the best result it leads to
};
std::string_view to_string(ReturnForm form) noexcept;
// Throws core::InvalidArgument listing the accepted names.
ReturnForm parse_return_form(std::string_view name);

// One return per turn, same length as `rewards` (empty in, empty out). Throws
// core::InvalidArgument when gamma is not in [0, 1] or a reward is not finite.
std::vector<double> discounted_returns(const std::vector<double>& rewards, double gamma,
                                       ReturnForm form = ReturnForm::sum);

struct MultiTurnOptions;
// An episode's returns as training uses them (kernel_rl's compute_multiturn_rewards):
// discounted_returns with options.gamma and options.form; then options.success_bonus added to
// the last turn's return when the episode `solved` its problem, options.failure_penalty when it
// did not; then, with options.normalize_returns and two turns or more, the returns z-scored
// within the episode (population standard deviation; left as they are when it is below 1e-8).
std::vector<double> episode_returns(const std::vector<double>& rewards, bool solved, const MultiTurnOptions& options);

}  // namespace kbrl::reward
