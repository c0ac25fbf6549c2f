// No fmt here: torch's include directories carry another fmt (kbrl/core/text.hpp).
#include "kbrl/model/torch/embedder.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"

namespace kbrl::model {

at::Tensor mean_pooled_embeddings(const DecoderModel& decoder, const std::vector<std::vector<std::int64_t>>& ids,
                                  std::int64_t max_batch_tokens) {
  if (max_batch_tokens < 1) throw core::InvalidArgument("mean_pooled_embeddings: max_batch_tokens must be at least 1");
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  const std::int64_t hidden = decoder.config().hidden_size;
  at::Tensor out = at::empty({n, hidden}, at::TensorOptions().dtype(at::kFloat));
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i].empty()) throw core::InvalidArgument(core::cat("mean_pooled_embeddings: text ", i, " has no tokens"));
  // Longest first: each batch is padded to its first row's length, and neighbours in length
  // waste the least padding.
  std::vector<std::size_t> order(ids.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ids[a].size() > ids[b].size(); });
  const c10::NoGradGuard no_grad;
  for (std::size_t start = 0; start < order.size();) {
    const auto longest = static_cast<std::int64_t>(ids[order[start]].size());
    const std::size_t rows = std::min<std::size_t>(order.size() - start,
                                                   static_cast<std::size_t>(std::max<std::int64_t>(1, max_batch_tokens / longest)));
    at::Tensor batch = at::zeros({static_cast<std::int64_t>(rows), longest}, at::TensorOptions().dtype(at::kLong));  // [B, T]
    at::Tensor mask = at::zeros({static_cast<std::int64_t>(rows), longest}, at::TensorOptions().dtype(at::kLong));   // [B, T]
    at::Tensor where = at::empty({static_cast<std::int64_t>(rows)}, at::TensorOptions().dtype(at::kLong));           // [B]
    auto* b = batch.data_ptr<std::int64_t>();
    auto* m = mask.data_ptr<std::int64_t>();
    auto* w = where.data_ptr<std::int64_t>();
    for (std::size_t r = 0; r < rows; ++r) {
      const auto& row = ids[order[start + r]];
      std::memcpy(b + static_cast<std::int64_t>(r) * longest, row.data(), row.size() * sizeof(std::int64_t));
      std::fill(m + static_cast<std::int64_t>(r) * longest, m + static_cast<std::int64_t>(r) * longest + static_cast<std::int64_t>(row.size()), 1);
      w[r] = static_cast<std::int64_t>(order[start + r]);
    }
    const at::Tensor h = decoder.hidden_states(batch, mask).to(at::kFloat);      // [B, T, hidden]
    const at::Tensor real = mask.to(h.device()).to(at::kFloat).unsqueeze(-1);    // [B, T, 1]
    at::Tensor pooled = (h * real).sum(1) / real.sum(1);                          // [B, hidden]
    pooled = pooled / pooled.norm(2, -1, /*keepdim=*/true).clamp_min(1e-12);       // F.normalize's eps
    out.index_copy_(0, where, pooled.cpu());
    start += rows;
  }
  return out;
}

DecoderEmbedder::DecoderEmbedder(const DecoderEmbedderOptions& options)
    : DecoderEmbedder(std::make_shared<const DecoderModel>(DecoderModel::load(options.model, options.load)),
                      std::make_shared<const tokenizer::Tokenizer>(
                          tokenizer::Tokenizer::from_file(options.model / "tokenizer.json")),
                      options.name, options.max_tokens, options.max_batch_tokens) {
  if (name_.empty()) {
    std::filesystem::path p = options.model.lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    name_ = p.filename().string();
  }
}

DecoderEmbedder::DecoderEmbedder(std::shared_ptr<const DecoderModel> decoder,
                                 std::shared_ptr<const tokenizer::Tokenizer> tokenizer, std::string name,
                                 std::int64_t max_tokens, std::int64_t max_batch_tokens)
    : decoder_(std::move(decoder)),
      tokenizer_(std::move(tokenizer)),
      name_(std::move(name)),
      max_tokens_(max_tokens > 0 ? max_tokens : 0),
      max_batch_tokens_(max_batch_tokens) {
  if (!decoder_ || !tokenizer_) throw core::InvalidArgument("DecoderEmbedder: no decoder or tokenizer");
  if (max_tokens < 0) throw core::InvalidArgument("DecoderEmbedder: max_tokens must be at least 0");
  if (max_batch_tokens < 1) throw core::InvalidArgument("DecoderEmbedder: max_batch_tokens must be at least 1");
  if (max_tokens_ == 0) max_tokens_ = decoder_->config().max_position_embeddings;
}

rag::EmbedderIdentity DecoderEmbedder::identity() {
  return {name_, static_cast<std::size_t>(decoder_->config().hidden_size)};
}

std::vector<std::int64_t> DecoderEmbedder::tokens(std::string_view text) const {
  const auto ids = tokenizer_->encode(text, {.add_special_tokens = true});
  const std::size_t n = std::min<std::size_t>(ids.size(), static_cast<std::size_t>(max_tokens_));
  return {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n)};
}

std::vector<float> DecoderEmbedder::embed(const std::vector<std::string>& texts) {
  const std::size_t dim = static_cast<std::size_t>(decoder_->config().hidden_size);
  std::vector<float> out(texts.size() * dim, 0.0f);
  std::vector<std::vector<std::int64_t>> ids;
  std::vector<std::size_t> rows;  // which text each id list is
  for (std::size_t i = 0; i < texts.size(); ++i) {
    auto t = tokens(texts[i]);
    if (t.empty()) continue;  // stays the zero vector
    ids.push_back(std::move(t));
    rows.push_back(i);
  }
  if (ids.empty()) return out;
  const at::Tensor pooled = mean_pooled_embeddings(*decoder_, ids, max_batch_tokens_).contiguous();  // [N, dim]
  const float* p = pooled.data_ptr<float>();
  for (std::size_t r = 0; r < rows.size(); ++r) std::memcpy(out.data() + rows[r] * dim, p + r * dim, dim * sizeof(float));
  return out;
}

}  // namespace kbrl::model
