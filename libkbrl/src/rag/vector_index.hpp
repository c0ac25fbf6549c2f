// The vector search under DenseIndex (private to the rag module), so that only src/rag/faiss/
// includes FAISS headers: an exact inner-product index over rows of one dimension.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kbrl::rag::detail {

struct VectorHit {
  std::int64_t id = 0;  // the row's number, in the order added
  float score = 0;      // inner product with the query
};

class VectorIndex {
 public:
  virtual ~VectorIndex() = default;
  virtual std::size_t dimension() const = 0;
  virtual std::size_t size() const = 0;
  // Appends n rows of dimension() floats.
  virtual void add(const float* rows, std::size_t n) = 0;
  // The k rows of highest inner product with `query` (dimension() floats), best first; only rows
  // whose bit is set in `allowed` (bit i of byte i / 8, as faiss::IDSelectorBitmap reads it) when
  // it is not null.
  virtual std::vector<VectorHit> search(const float* query, std::size_t k, const std::vector<std::uint8_t>* allowed) const = 0;
  // Row i, dimension() floats.
  virtual std::vector<float> row(std::size_t i) const = 0;
  // faiss::write_index's bytes.
  virtual std::string serialize() const = 0;
};

// An empty exact inner-product index (faiss::IndexFlatIP).
std::unique_ptr<VectorIndex> make_flat_inner_product_index(std::size_t dimension);
// From serialize()'s bytes; throws core::Error saying what is wrong (not an inner-product flat
// index, unreadable bytes).
std::unique_ptr<VectorIndex> read_vector_index(std::string_view bytes);

}  // namespace kbrl::rag::detail
