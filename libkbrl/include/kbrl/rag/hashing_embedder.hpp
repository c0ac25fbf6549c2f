// An embedder without a model: feature hashing of the code search terms (code_search_terms) into
// a fixed number of signed buckets, with sublinear term frequencies. A lexical baseline, and the
// deterministic embedder of the dense retrieval tests and benchmark (so they need no model and
// what they time is the vector index, not a network).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kbrl/rag/embedder.hpp"

namespace kbrl::rag {

class HashingEmbedder final : public Embedder {
 public:
  // Throws core::InvalidArgument for a dimension of 0.
  explicit HashingEmbedder(std::size_t dimension = 256);
  // model "kbrl-hashing-terms-v1": bump the version when the hashing or the terms change.
  EmbedderIdentity identity() override;
  // Each distinct term t of a text adds (1 + ln tf(t)) * sign(t) to bucket(t); both from t's
  // 64-bit FNV-1a hash (the bucket from its low bits modulo the dimension, the sign from its top
  // bit). A text without terms embeds as the zero vector.
  std::vector<float> embed(const std::vector<std::string>& texts) override;

 private:
  std::size_t dimension_;
};

}  // namespace kbrl::rag
