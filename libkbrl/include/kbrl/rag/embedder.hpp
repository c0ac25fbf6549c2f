// Embedders turn texts into vectors of one fixed size whose inner products rank examples for dense
// retrieval. Rows come back L2-normalized, so an inner product is the cosine similarity. An index
// records its embedder's identity (model name, dimension) and refuses to be searched with another.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace kbrl::rag {

struct EmbedderIdentity {
  std::string model;          // the model's name: a served model's id, a checkpoint folder's name, ...
  std::size_t dimension = 0;  // floats per embedding
  bool operator==(const EmbedderIdentity&) const = default;
};

// "'demo' (64 dimensions)", for messages.
std::string to_string(const EmbedderIdentity& identity);

class Embedder {
 public:
  virtual ~Embedder() = default;
  // Not const: an embedder may have to ask its server once to learn the dimension.
  virtual EmbedderIdentity identity() = 0;
  // texts.size() rows of identity().dimension floats, row-major: row i embeds texts[i], with unit
  // L2 norm (a zero vector stays zero). Throws core::Error when the model or its server fails.
  virtual std::vector<float> embed(const std::vector<std::string>& texts) = 0;
};

// Scales each row of `dimension` floats to unit L2 norm in place (computed in double); rows of
// norm 0 stay as they are. Throws core::InvalidArgument when the size is not a multiple.
void normalize_rows(std::span<float> rows, std::size_t dimension);

}  // namespace kbrl::rag
