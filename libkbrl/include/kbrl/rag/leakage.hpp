// Leakage control: a retrieved example whose PyTorch side is the problem being solved (a copy, a
// reformatted copy, the same program with other names or shapes) hands the policy the answer. The
// Sakana archive holds solutions to KernelBench's own problems, so this filter is on by default.
#pragma once

#include <string_view>

#include "kbrl/rag/code_tokens.hpp"

namespace kbrl::rag {

struct LeakageConfig {
  bool enabled = true;
  // Near copies: the same operations (SourceFingerprint::operations, as multisets) and a Jaccard
  // similarity of shingles at or above this. docs/retrieval.md says why 0.8 of 5-token shingles.
  double near_threshold = 0.8;
  int shingle_size = 5;
};

enum class LeakKind { none, exact, near };
const char* to_string(LeakKind kind) noexcept;

// Built once per problem, asked about each candidate example.
class LeakageFilter {
 public:
  explicit LeakageFilter(std::string_view problem_source, LeakageConfig config = {});

  LeakKind check(std::string_view candidate_source) const;
  LeakKind check(const SourceFingerprint& candidate) const;

  const LeakageConfig& config() const noexcept { return config_; }
  const SourceFingerprint& problem() const noexcept { return problem_; }

 private:
  LeakageConfig config_;
  SourceFingerprint problem_;
};

}  // namespace kbrl::rag
