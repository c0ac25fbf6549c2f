// detail::VectorIndex on FAISS: IndexFlatIP, exact. At 50K entries an exact search takes a few
// milliseconds (docs/performance.md), the language filter is an IDSelectorBitmap, and FAISS 1.7.3's
// HNSW cannot take a selector; an approximate index is for corpora far larger than the ones kbrl
// retrieves from.
#include "../vector_index.hpp"

#include <faiss/IndexFlat.h>
#include <faiss/impl/FaissException.h>
#include <faiss/impl/IDSelector.h>
#include <faiss/impl/io.h>
#include <faiss/index_io.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "kbrl/core/error.hpp"

namespace kbrl::rag::detail {
namespace {

class FlatInnerProduct final : public VectorIndex {
 public:
  explicit FlatInnerProduct(std::unique_ptr<faiss::IndexFlat> index) : index_(std::move(index)) {}

  std::size_t dimension() const override { return static_cast<std::size_t>(index_->d); }
  std::size_t size() const override { return static_cast<std::size_t>(index_->ntotal); }

  void add(const float* rows, std::size_t n) override {
    try {
      index_->add(static_cast<std::int64_t>(n), rows);
    } catch (const faiss::FaissException& e) {
      throw core::Error(fmt::format("FAISS: {}", e.what()));
    }
  }

  std::vector<VectorHit> search(const float* query, std::size_t k, const std::vector<std::uint8_t>* allowed) const override {
    k = std::min(k, size());
    if (k == 0) return {};
    std::vector<float> scores(k);
    std::vector<std::int64_t> ids(k);
    try {
      if (allowed != nullptr) {
        faiss::IDSelectorBitmap selector(allowed->size(), allowed->data());
        faiss::SearchParameters params;
        params.sel = &selector;
        index_->search(1, query, static_cast<std::int64_t>(k), scores.data(), ids.data(), &params);
      } else {
        index_->search(1, query, static_cast<std::int64_t>(k), scores.data(), ids.data());
      }
    } catch (const faiss::FaissException& e) {
      throw core::Error(fmt::format("FAISS: {}", e.what()));
    }
    std::vector<VectorHit> hits;
    hits.reserve(k);
    for (std::size_t i = 0; i < k; ++i)
      if (ids[i] >= 0) hits.push_back({ids[i], scores[i]});  // -1: fewer rows passed the selector
    return hits;
  }

  std::vector<float> row(std::size_t i) const override {
    std::vector<float> out(dimension());
    std::memcpy(out.data(), index_->get_xb() + i * dimension(), out.size() * sizeof(float));
    return out;
  }

  std::string serialize() const override {
    faiss::VectorIOWriter writer;
    try {
      faiss::write_index(index_.get(), &writer);
    } catch (const faiss::FaissException& e) {
      throw core::Error(fmt::format("FAISS: {}", e.what()));
    }
    return std::string(reinterpret_cast<const char*>(writer.data.data()), writer.data.size());
  }

 private:
  std::unique_ptr<faiss::IndexFlat> index_;
};

}  // namespace

std::unique_ptr<VectorIndex> make_flat_inner_product_index(std::size_t dimension) {
  return std::make_unique<FlatInnerProduct>(std::make_unique<faiss::IndexFlatIP>(static_cast<std::int64_t>(dimension)));
}

std::unique_ptr<VectorIndex> read_vector_index(std::string_view bytes) {
  faiss::VectorIOReader reader;
  reader.data.assign(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                     reinterpret_cast<const std::uint8_t*>(bytes.data()) + bytes.size());
  std::unique_ptr<faiss::Index> index;
  try {
    index.reset(faiss::read_index(&reader));
  } catch (const faiss::FaissException& e) {
    throw core::Error(fmt::format("FAISS cannot read its index: {}", e.what()));
  }
  auto* flat = dynamic_cast<faiss::IndexFlat*>(index.get());
  if (flat == nullptr || flat->metric_type != faiss::METRIC_INNER_PRODUCT)
    throw core::Error("the FAISS index is not an exact inner-product index (IndexFlatIP)");
  if (reader.rp != reader.data.size()) throw core::Error("bytes after the FAISS index");
  index.release();
  return std::make_unique<FlatInnerProduct>(std::unique_ptr<faiss::IndexFlat>(flat));
}

}  // namespace kbrl::rag::detail
