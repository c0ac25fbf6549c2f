// Without libtorch: no loader, so rag::make_embedder refuses a checkpoint and names the endpoint
// setting instead.
#include "checkpoint_embedder.hpp"

namespace kbrl::apps {

rag::CheckpointEmbedderLoader checkpoint_embedder_loader() { return {}; }

}  // namespace kbrl::apps
