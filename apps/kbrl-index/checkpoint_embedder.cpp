#include "checkpoint_embedder.hpp"

#include "kbrl/model/torch/embedder.hpp"
#include "kbrl/train/torch/policy.hpp"

namespace kbrl::apps {

bool checkpoint_embeddings_available() { return true; }

std::shared_ptr<rag::Embedder> load_checkpoint_embedder(const CheckpointEmbedderFlags& flags, std::string& description) {
  model::DecoderEmbedderOptions o;
  o.model = flags.checkpoint;
  o.name = flags.name;
  o.max_tokens = flags.max_tokens;
  o.load.device = train::resolve_device(flags.device);
  const std::string dtype = train::resolve_dtype(flags.dtype, o.load.device);
  o.load.dtype = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  description = o.load.device.str() + ", " + dtype;
  return std::make_shared<model::DecoderEmbedder>(o);
}

}  // namespace kbrl::apps
