#include "kbrl/rag/openai_embedder.hpp"

#include <fmt/format.h>

#include "kbrl/core/error.hpp"

namespace kbrl::rag {

OpenAiEmbedder::OpenAiEmbedder(OpenAiEmbedderConfig config) : config_(std::move(config)) {
  if (config_.model.empty()) throw core::InvalidArgument("OpenAiEmbedder: the model name is empty");
  if (config_.batch_size == 0) throw core::InvalidArgument("OpenAiEmbedder: batch_size must be at least 1");
  client_ = std::make_unique<net::OpenAiClient>(config_.client);
}

EmbedderIdentity OpenAiEmbedder::identity() {
  {
    std::lock_guard lock(mu_);
    if (dimension_ != 0) return {config_.model, dimension_};
  }
  (void)embed({"dimension"});
  std::lock_guard lock(mu_);
  return {config_.model, dimension_};
}

std::vector<float> OpenAiEmbedder::embed(const std::vector<std::string>& texts) {
  if (texts.empty()) return {};
  net::EmbeddingsResponse r = client_->embeddings(config_.model, texts, config_.batch_size);
  {
    std::lock_guard lock(mu_);
    if (dimension_ == 0) dimension_ = r.dimension;
    if (r.dimension != dimension_)
      throw core::Error(fmt::format("{}: the model '{}' answered embeddings of {} dimensions, earlier of {}",
                                    config_.client.base_url, config_.model, r.dimension, dimension_));
  }
  // Servers differ on whether they normalize (OpenAI does; a pooled decoder state is not unit
  // length): normalized here, so every index holds unit vectors.
  normalize_rows(r.vectors, r.dimension);
  return std::move(r.vectors);
}

}  // namespace kbrl::rag
