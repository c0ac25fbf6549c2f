// A torch translation unit: no fmt here (torch's include directories carry another).
#include "kbrl/train/torch/checkpoint_embedder.hpp"

#include "kbrl/model/torch/embedder.hpp"
#include "kbrl/train/torch/policy.hpp"

namespace kbrl::train {

std::shared_ptr<rag::Embedder> load_checkpoint_embedder(const rag::EmbedderSettings& settings, std::string& description) {
  model::DecoderEmbedderOptions o;
  o.model = settings.checkpoint;
  o.name = settings.model;
  o.max_tokens = settings.max_tokens;
  o.load.device = resolve_device(settings.device);
  const std::string dtype = resolve_dtype(settings.dtype, o.load.device);
  o.load.dtype = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  description = o.load.device.str() + ", " + dtype;
  return std::make_shared<model::DecoderEmbedder>(o);
}

}  // namespace kbrl::train
