// kbrl-index's in-process embedder (model::DecoderEmbedder over a checkpoint), behind a header
// without libtorch: checkpoint_embedder.cpp is the one translation unit of the program that
// includes torch (and so no fmt: torch's include directories carry another fmt).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kbrl/rag/embedder.hpp"

namespace kbrl::apps {

struct CheckpointEmbedderFlags {
  std::string checkpoint;  // Hugging Face checkpoint folder
  std::string name;        // the identity's model name; empty: the folder's name
  std::string device = "auto";
  std::string dtype = "auto";
  std::int64_t max_tokens = 0;  // 0: the model's context
};

// Whether this kbrl-index was built with libtorch (KBRL_WITH_TORCH).
bool checkpoint_embeddings_available();
// Loads the checkpoint; `description` gets "cpu, fp32" and the like. Throws core::Error for a bad
// checkpoint, or when built without libtorch.
std::shared_ptr<rag::Embedder> load_checkpoint_embedder(const CheckpointEmbedderFlags& flags, std::string& description);

}  // namespace kbrl::apps
