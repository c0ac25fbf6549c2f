// kbrl-index built without libtorch: endpoints only (--embeddings-endpoint).
#include "checkpoint_embedder.hpp"

#include "kbrl/core/error.hpp"

namespace kbrl::apps {

bool checkpoint_embeddings_available() { return false; }

std::shared_ptr<rag::Embedder> load_checkpoint_embedder(const CheckpointEmbedderFlags&, std::string&) {
  throw core::Error(
      "--embeddings-checkpoint needs libtorch, and this kbrl-index was built without it (KBRL_WITH_TORCH=OFF): "
      "serve the model (kbrl-serve) and use --embeddings-endpoint");
}

}  // namespace kbrl::apps
