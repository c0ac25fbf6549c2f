// A checkpoint's in-process embedder (model::DecoderEmbedder) from rag::EmbedderSettings: the
// rag::CheckpointEmbedderLoader that kbrl-train's retrieval, kbrl-eval and kbrl-index hand to
// rag::make_embedder. Here, not in model/, because devices and dtypes resolve as the policy's do.
// This header includes no libtorch, so programs that link kbrl::torch only through a library of
// their own can name the loader.
#pragma once

#include <memory>
#include <string>

#include "kbrl/rag/embedder_settings.hpp"

namespace kbrl::train {

// Loads settings.checkpoint on settings.device with settings.dtype (auto: as train::resolve_device
// and resolve_dtype), named settings.model (empty: the folder's name), embedding a text's first
// settings.max_tokens tokens. `description` gets "cpu, fp32" and the like. Throws
// core::ConfigError for a bad checkpoint file, core::InvalidArgument for a bad device or dtype.
std::shared_ptr<rag::Embedder> load_checkpoint_embedder(const rag::EmbedderSettings& settings, std::string& description);

}  // namespace kbrl::train
