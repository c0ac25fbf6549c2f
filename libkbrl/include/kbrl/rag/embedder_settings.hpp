// Where a dense index's embeddings come from, as settings: a served model (an OpenAI-compatible
// /v1/embeddings) or a checkpoint embedded in process. The one place that turns such settings into
// an Embedder: kbrl-index's --embeddings-* flags, kbrl-eval's --retrieval-embeddings-* flags and
// kbrl-train's prompt.retrieval.embeddings_* keys all fill EmbedderSettings.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kbrl/rag/embedder.hpp"

namespace kbrl::rag {

struct EmbedderSettings {
  std::string endpoint;     // an OpenAI-compatible server's API root, /v1 included (POST /embeddings)
  // With endpoint, the served model (required); with checkpoint, the name the identity records
  // (empty: the folder's name, which is also kbrl-serve's default served name).
  std::string model;
  std::string api_key_env;  // endpoint: the environment variable holding the API key (empty: none)
  std::size_t batch = 64;   // endpoint: inputs per request
  int max_in_flight = 4;    // endpoint: requests at once
  std::string checkpoint;   // a Hugging Face checkpoint folder embedded in process (needs libtorch)
  std::string device = "auto";  // checkpoint: auto, cpu, cuda, cuda:N
  std::string dtype = "auto";   // checkpoint: auto (bf16 on a GPU, fp32 on the CPU), bf16, fp32
  int max_tokens = 0;           // checkpoint: a text's first N tokens are embedded (0: the context)
  bool given() const noexcept { return !endpoint.empty() || !checkpoint.empty(); }
};

// Turns a field's name into the key or flag the user wrote, for messages: the fields are named
// "embeddings_endpoint", "embeddings_model", ... (kbrl-index: --embeddings-endpoint; kbrl-train:
// prompt.retrieval.embeddings_endpoint). Empty: the field's name itself.
using SettingName = std::function<std::string(const std::string& field)>;

// What is wrong with some settings: the field (as named above) and why.
struct EmbedderSettingsProblem {
  std::string field;
  std::string message;
};

// Both endpoint and checkpoint; an endpoint without a model; a batch or in-flight limit below 1;
// max_tokens below 0; a dtype other than auto, bf16, fp32; endpoint-only settings (api_key_env)
// without an endpoint, checkpoint-only ones (device, dtype, max_tokens) without a checkpoint.
std::optional<EmbedderSettingsProblem> check_embedder_settings(const EmbedderSettings& settings,
                                                               const SettingName& name_of = {});

// Loads a checkpoint's in-process embedder (model::DecoderEmbedder): train::load_checkpoint_embedder
// (kbrl::torch) is one. Sets `description` to how it runs ("cpu, fp32").
using CheckpointEmbedderLoader =
    std::function<std::shared_ptr<Embedder>(const EmbedderSettings& settings, std::string& description)>;

// The embedder the settings name: an OpenAiEmbedder for an endpoint, else `load_checkpoint`'s for a
// checkpoint. Throws core::ConfigError("embedder settings", the field as name_of names it) for
// settings check_embedder_settings refuses, none given, a checkpoint that is not a folder, or a
// checkpoint with no loader (this program was built without libtorch). `description`, when given,
// says what the embedder is ("NAME at URL", "DIR in process (cpu, fp32)").
std::shared_ptr<Embedder> make_embedder(const EmbedderSettings& settings, const CheckpointEmbedderLoader& load_checkpoint,
                                        const SettingName& name_of = {}, std::string* description = nullptr);

}  // namespace kbrl::rag
