#include "kbrl/rag/embedder.hpp"

#include <cmath>

#include <fmt/format.h>

#include "kbrl/core/error.hpp"

namespace kbrl::rag {

std::string to_string(const EmbedderIdentity& identity) {
  return fmt::format("'{}' ({} dimensions)", identity.model, identity.dimension);
}

void normalize_rows(std::span<float> rows, std::size_t dimension) {
  if (dimension == 0 || rows.size() % dimension != 0)
    throw core::InvalidArgument(
        fmt::format("normalize_rows: {} floats are not rows of {} dimensions", rows.size(), dimension));
  for (std::size_t start = 0; start < rows.size(); start += dimension) {
    const std::span<float> row = rows.subspan(start, dimension);
    double sum = 0;
    for (const float x : row) sum += static_cast<double>(x) * static_cast<double>(x);
    if (sum == 0) continue;
    const double scale = 1.0 / std::sqrt(sum);
    for (float& x : row) x = static_cast<float>(static_cast<double>(x) * scale);
  }
}

}  // namespace kbrl::rag
