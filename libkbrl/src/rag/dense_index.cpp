// DenseIndex: the corpus, the embedder's identity and a vector index (vector_index.hpp, on FAISS
// in src/rag/faiss/). KBRL_WITH_FAISS is defined for this file alone where FAISS was found
// (libkbrl/CMakeLists.txt); without it the index cannot be made, and says why.
#include "kbrl/rag/dense_index.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <unordered_set>

#include <fmt/format.h>

#include "index_file.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/rag/leakage.hpp"
#include "vector_index.hpp"

namespace kbrl::rag {
namespace {

// What the payload calls the vector index, so that another kind can be added without a new format.
constexpr std::string_view kFlatInnerProduct = "faiss-flat-ip";

[[noreturn]] [[maybe_unused]] void no_faiss() {
  throw core::Error(
      "dense retrieval needs FAISS, and this kbrl was built without it: install libfaiss-dev (scripts/deps.sh) "
      "and configure again (KBRL_WITH_FAISS, docs/retrieval.md)");
}

std::unique_ptr<detail::VectorIndex> new_vector_index([[maybe_unused]] std::size_t dimension) {
#if defined(KBRL_WITH_FAISS)
  return detail::make_flat_inner_product_index(dimension);
#else
  no_faiss();
#endif
}

std::unique_ptr<detail::VectorIndex> read_vector_index([[maybe_unused]] std::string_view bytes) {
#if defined(KBRL_WITH_FAISS)
  return detail::read_vector_index(bytes);
#else
  no_faiss();
#endif
}

void check_finite(const std::vector<float>& v, const std::string& who) {
  if (!std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }))
    throw core::Error(fmt::format("{} produced an embedding that is not finite (NaN or infinity)", who));
}

}  // namespace

bool dense_retrieval_available() noexcept {
#if defined(KBRL_WITH_FAISS)
  return true;
#else
  return false;
#endif
}

struct DenseIndex::Vectors {
  std::unique_ptr<detail::VectorIndex> index;
  // Per language: a bitmap over the entries (faiss::IDSelectorBitmap's layout) and its count.
  std::map<std::string, std::pair<std::vector<std::uint8_t>, std::size_t>> languages;
};

DenseIndex::DenseIndex() = default;
DenseIndex::~DenseIndex() = default;
DenseIndex::DenseIndex(DenseIndex&&) noexcept = default;
DenseIndex& DenseIndex::operator=(DenseIndex&&) noexcept = default;

void DenseIndex::index_languages() {
  vectors_->languages.clear();
  const std::size_t bytes = (entries_.size() + 7) / 8;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    auto& [bitmap, count] = vectors_->languages[entries_[i].language];
    if (bitmap.empty()) bitmap.assign(bytes, 0);
    bitmap[i / 8] = static_cast<std::uint8_t>(bitmap[i / 8] | (1u << (i % 8)));
    ++count;
  }
}

DenseIndex DenseIndex::build(std::vector<CorpusEntry> entries, std::shared_ptr<Embedder> embedder,
                             const DenseBuildOptions& options) {
  if (!embedder) throw core::InvalidArgument("DenseIndex::build: no embedder");
  if (options.batch_size == 0) throw core::InvalidArgument("DenseIndex::build: batch_size must be at least 1");
  DenseIndex index;
  index.vectors_ = std::make_unique<Vectors>();
  index.identity_ = embedder->identity();
  const std::size_t dim = index.identity_.dimension;
  if (dim == 0) throw core::Error(fmt::format("the embedder {} has no dimension", to_string(index.identity_)));
  index.vectors_->index = new_vector_index(dim);
  const std::string who = fmt::format("the embedder {}", to_string(index.identity_));
  std::vector<std::string> batch;
  for (std::size_t start = 0; start < entries.size(); start += options.batch_size) {
    const std::size_t end = std::min(entries.size(), start + options.batch_size);
    batch.clear();
    for (std::size_t i = start; i < end; ++i) batch.push_back(entries[i].source);
    std::vector<float> rows = embedder->embed(batch);
    if (rows.size() != batch.size() * dim)
      throw core::Error(fmt::format("{} returned {} floats for {} texts", who, rows.size(), batch.size()));
    check_finite(rows, who);
    normalize_rows(rows, dim);
    index.vectors_->index->add(rows.data(), batch.size());
    if (options.progress) options.progress(end, entries.size());
  }
  index.entries_ = std::move(entries);
  index.embedder_ = std::move(embedder);
  index.index_languages();
  return index;
}

DenseIndex DenseIndex::from_embeddings(std::vector<CorpusEntry> entries, const EmbedderIdentity& identity,
                                       std::vector<float> vectors) {
  if (identity.dimension == 0) throw core::InvalidArgument("DenseIndex::from_embeddings: dimension 0");
  if (vectors.size() != entries.size() * identity.dimension)
    throw core::InvalidArgument(fmt::format("DenseIndex::from_embeddings: {} floats for {} entries of {} dimensions",
                                            vectors.size(), entries.size(), identity.dimension));
  DenseIndex index;
  index.vectors_ = std::make_unique<Vectors>();
  index.vectors_->index = new_vector_index(identity.dimension);
  check_finite(vectors, fmt::format("the embedder {}", to_string(identity)));
  normalize_rows(vectors, identity.dimension);
  index.vectors_->index->add(vectors.data(), entries.size());
  index.identity_ = identity;
  index.entries_ = std::move(entries);
  index.index_languages();
  return index;
}

void DenseIndex::attach(std::shared_ptr<Embedder> embedder) {
  if (!embedder) {
    embedder_.reset();
    return;
  }
  const EmbedderIdentity id = embedder->identity();
  if (id != identity_)
    throw core::InvalidArgument(fmt::format("the index holds embeddings of {}, the embedder makes {}",
                                            to_string(identity_), to_string(id)));
  embedder_ = std::move(embedder);
}

std::vector<float> DenseIndex::vector(std::size_t entry) const {
  if (!vectors_ || entry >= entries_.size())
    throw core::InvalidArgument(fmt::format("DenseIndex::vector: no entry {}", entry));
  return vectors_->index->row(entry);
}

SearchResult DenseIndex::search(std::string_view problem_source, const SearchOptions& options) const {
  if (!embedder_)
    throw core::Error(fmt::format("this dense index needs the embedder it was built with, {}, to embed a problem",
                                  to_string(identity_)));
  if (options.k == 0 || entries_.empty()) return {};
  std::vector<float> query = embedder_->embed({std::string(problem_source)});
  if (query.size() != identity_.dimension)
    throw core::Error(fmt::format("the embedder {} returned {} floats for one text", to_string(identity_), query.size()));
  check_finite(query, fmt::format("the embedder {}", to_string(identity_)));
  return search_embedding(query, problem_source, options);
}

SearchResult DenseIndex::search_embedding(std::span<const float> query, std::string_view problem_source,
                                          const SearchOptions& options) const {
  SearchResult result;
  if (!vectors_) return result;
  if (query.size() != identity_.dimension)
    throw core::InvalidArgument(fmt::format("DenseIndex: a query of {} floats for an index of {} dimensions",
                                            query.size(), identity_.dimension));
  if (options.k == 0 || entries_.empty()) return result;
  std::vector<float> q(query.begin(), query.end());
  normalize_rows(q, identity_.dimension);
  const std::vector<std::uint8_t>* allowed = nullptr;
  std::size_t available = entries_.size();
  if (!options.language.empty()) {
    const auto it = vectors_->languages.find(options.language);
    if (it == vectors_->languages.end()) return result;
    allowed = &it->second.first;
    available = it->second.second;
  }
  std::optional<LeakageFilter> filter;
  if (options.leakage.enabled) filter.emplace(problem_source, options.leakage);
  // A few candidates beyond k cover the usual leaks; when they do not, search twice as deep (an
  // exact search costs the same at any depth, so re-searching beats keeping a deep ranking).
  std::size_t depth = std::min(available, filter ? options.k + 16 : options.k);
  std::unordered_set<std::int64_t> walked;
  for (;;) {
    std::vector<detail::VectorHit> ranked = vectors_->index->search(q.data(), depth, allowed);
    // Ties by entry order, as the BM25 index breaks them.
    std::stable_sort(ranked.begin(), ranked.end(), [](const detail::VectorHit& a, const detail::VectorHit& b) {
      return a.score > b.score || (a.score == b.score && a.id < b.id);
    });
    for (const detail::VectorHit& h : ranked) {
      if (result.hits.size() == options.k) break;
      if (!walked.insert(h.id).second) continue;
      const auto entry = static_cast<std::size_t>(h.id);
      const LeakKind kind = filter ? filter->check(entries_[entry].source) : LeakKind::none;
      if (kind == LeakKind::none) {
        result.hits.push_back({entry, h.score});
      } else {
        result.excluded.push_back({entry, h.score, kind});
      }
    }
    if (result.hits.size() == options.k || depth >= available || ranked.size() < depth) break;
    depth = std::min(available, 2 * depth);
  }
  return result;
}

std::string DenseIndex::serialize() const {
  if (!vectors_) throw core::InvalidArgument("DenseIndex::serialize: an empty index (build or load one)");
  detail::Writer p;
  p.str(identity_.model);
  p.u64(identity_.dimension);
  detail::write_entries(p, entries_);
  p.str(kFlatInnerProduct);
  p.str(vectors_->index->serialize());
  return detail::frame_index_file(detail::kDenseMagic, kFormatVersion, p.bytes());
}

void DenseIndex::save(const std::filesystem::path& path) const { core::write_file_atomically(path, serialize()); }

DenseIndex DenseIndex::deserialize(std::string_view bytes, const std::string& where, std::shared_ptr<Embedder> embedder) {
  const std::string_view payload = detail::unframe_index_file(bytes, detail::kDenseMagic, kFormatVersion, where);
  detail::Reader r(payload, where);
  DenseIndex index;
  index.identity_.model = r.str();
  index.identity_.dimension = static_cast<std::size_t>(r.u64());
  index.entries_ = detail::read_entries(r);
  const std::string kind = r.str();
  if (kind != kFlatInnerProduct)
    throw core::ConfigError(where, "",
                            fmt::format("a dense retrieval index of kind '{}', which this kbrl does not read: rebuild "
                                        "it with kbrl-index build --dense",
                                        kind));
  const std::string vector_bytes = r.str();
  if (!r.done()) r.fail("bytes after the end");
  if (embedder) {
    const EmbedderIdentity id = embedder->identity();
    if (id != index.identity_)
      throw core::ConfigError(where, "",
                              fmt::format("built with embeddings of {}, and the embedder given is {}: query it with "
                                          "the model it was built with, or rebuild it with this one",
                                          to_string(index.identity_), to_string(id)));
  }
  index.vectors_ = std::make_unique<Vectors>();
  try {
    index.vectors_->index = read_vector_index(vector_bytes);
  } catch (const core::ConfigError&) {
    throw;
  } catch (const core::Error& e) {
    if (!dense_retrieval_available()) throw;
    r.fail(e.what());
  }
  if (index.vectors_->index->dimension() != index.identity_.dimension)
    r.fail(fmt::format("vectors of {} dimensions, the embedder's are {}", index.vectors_->index->dimension(),
                       index.identity_.dimension));
  if (index.vectors_->index->size() != index.entries_.size())
    r.fail(fmt::format("{} entries but {} vectors", index.entries_.size(), index.vectors_->index->size()));
  index.embedder_ = std::move(embedder);
  index.index_languages();
  return index;
}

DenseIndex DenseIndex::load(const std::filesystem::path& path, std::shared_ptr<Embedder> embedder) {
  return deserialize(core::read_file(path), path.string(), std::move(embedder));
}

EmbedderIdentity DenseIndex::read_identity(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::ConfigError(path.string(), "", "cannot open the file");
  // The header, then the model name's length, the name (a name longer than this is no name) and
  // the dimension.
  constexpr std::size_t kMaxName = 4096;
  std::string head(detail::kIndexHeaderSize + 8 + kMaxName + 8, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  const std::string where = path.string();
  (void)detail::read_index_frame(head, detail::kDenseMagic, kFormatVersion, where);
  detail::Reader h(std::string_view(head).substr(detail::kIndexHeaderSize), where);
  EmbedderIdentity identity;
  identity.model = h.str();
  identity.dimension = static_cast<std::size_t>(h.u64());
  return identity;
}

IndexKind index_kind(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::ConfigError(path.string(), "", "cannot open the file");
  char magic[8] = {};
  in.read(magic, sizeof magic);
  const std::string_view found(magic, static_cast<std::size_t>(in.gcount()));
  if (found == detail::kBm25Magic) return IndexKind::bm25;
  if (found == detail::kDenseMagic) return IndexKind::dense;
  throw core::ConfigError(path.string(), "",
                          "not a kbrl retrieval index (no KBRLRIX1 or KBRLDIX1 header): build one with kbrl-index build");
}

}  // namespace kbrl::rag
