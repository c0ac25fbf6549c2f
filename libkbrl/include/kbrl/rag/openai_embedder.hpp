// Embeddings from an OpenAI-compatible server (OpenAI, vLLM, kbrl-serve): POST /v1/embeddings
// through net::OpenAiClient, so its retries, in-flight limit and API key handling apply.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kbrl/net/openai_client.hpp"
#include "kbrl/rag/embedder.hpp"

namespace kbrl::rag {

struct OpenAiEmbedderConfig {
  net::OpenAiClientConfig client;  // base_url ("http://host:port/v1"), api_key_env, retries, ...
  std::string model;               // the served model's name; also the identity's model name
  std::size_t batch_size = 64;     // inputs per request (requests run in parallel up to max_in_flight)
};

class OpenAiEmbedder final : public Embedder {
 public:
  // Throws core::InvalidArgument for an empty model, a batch size of 0, or a bad client config.
  explicit OpenAiEmbedder(OpenAiEmbedderConfig config);
  // The dimension is the server's: learnt from the first answer, or asked for with a one-word
  // request when identity() comes first.
  EmbedderIdentity identity() override;
  // Throws net::OpenAiError when the server fails for good, core::Error when its answers differ
  // in dimension.
  std::vector<float> embed(const std::vector<std::string>& texts) override;

  net::OpenAiClient& client() { return *client_; }

 private:
  OpenAiEmbedderConfig config_;
  std::unique_ptr<net::OpenAiClient> client_;
  std::mutex mu_;
  std::size_t dimension_ = 0;  // 0: not known yet
};

}  // namespace kbrl::rag
