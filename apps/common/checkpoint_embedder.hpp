// The programs' loader of in-process checkpoint embedders, for rag::make_embedder: where libtorch
// is part of the build, train::load_checkpoint_embedder (kbrl::torch); else none, and
// rag::make_embedder says that a checkpoint needs libtorch. A library of its own
// (kbrl_apps_embedder) so that the programs' other files never link or see libtorch.
#pragma once

#include "kbrl/rag/embedder_settings.hpp"

namespace kbrl::apps {

// Empty where this build has no libtorch (KBRL_WITH_TORCH=OFF).
rag::CheckpointEmbedderLoader checkpoint_embedder_loader();

}  // namespace kbrl::apps
