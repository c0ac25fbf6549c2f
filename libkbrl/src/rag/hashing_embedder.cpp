#include "kbrl/rag/hashing_embedder.hpp"

#include <algorithm>
#include <cmath>

#include "kbrl/core/error.hpp"
#include "kbrl/rag/code_tokens.hpp"

namespace kbrl::rag {

HashingEmbedder::HashingEmbedder(std::size_t dimension) : dimension_(dimension) {
  if (dimension == 0) throw core::InvalidArgument("HashingEmbedder: the dimension must be at least 1");
}

EmbedderIdentity HashingEmbedder::identity() { return {"kbrl-hashing-terms-v1", dimension_}; }

std::vector<float> HashingEmbedder::embed(const std::vector<std::string>& texts) {
  std::vector<float> out(texts.size() * dimension_, 0.0f);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    std::vector<std::string> terms = code_search_terms(texts[i]);
    // Sorted, so that the sums in a bucket are made in one order on every machine.
    std::sort(terms.begin(), terms.end());
    float* row = out.data() + i * dimension_;
    for (std::size_t a = 0; a < terms.size();) {
      std::size_t b = a;
      while (b < terms.size() && terms[b] == terms[a]) ++b;
      const std::uint64_t h = fnv1a64(terms[a]);
      const float weight = 1.0f + std::log(static_cast<float>(b - a));
      row[h % dimension_] += (h >> 63) != 0 ? -weight : weight;
      a = b;
    }
  }
  normalize_rows(out, dimension_);
  return out;
}

}  // namespace kbrl::rag
