// With libtorch: the library's loader. This file includes no torch header (the loader's does
// not), so fmt and friends stay usable here; only the link brings kbrl::torch in.
#include "checkpoint_embedder.hpp"

#include "kbrl/train/torch/checkpoint_embedder.hpp"

namespace kbrl::apps {

rag::CheckpointEmbedderLoader checkpoint_embedder_loader() { return train::load_checkpoint_embedder; }

}  // namespace kbrl::apps
