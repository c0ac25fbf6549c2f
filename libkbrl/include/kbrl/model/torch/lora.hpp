// LoRA adapters on the libtorch decoder (part of kbrl::torch): every targeted projection gets
// y = x W^T + b + scale * dropout(x) A^T B^T with the base frozen, saved and loaded in PEFT's
// format (what vLLM serves), and mergeable into a plain checkpoint. docs/model.md, "LoRA".
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "kbrl/model/torch/decoder.hpp"

namespace kbrl::model {

struct LoraConfig {
  std::int64_t rank = 8;
  double alpha = 16;
  bool use_rslora = false;  // scale alpha / sqrt(rank) instead of alpha / rank
  double dropout = 0.0;     // on the adapter input, while training
  // Module names, matched as PEFT matches a list: a module whose name equals a target or ends
  // with "." + target. target_regex, when not empty, replaces the list: the whole module name
  // must match (PEFT's target_modules given as one string).
  std::vector<std::string> target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"};
  std::string target_regex;
  std::uint64_t seed = 0;  // lora_A's initialisation

  // Throws core::InvalidArgument naming the field: rank <= 0, alpha not finite, dropout
  // outside [0, 1), no targets, an empty target name.
  void validate() const;
  double scale() const;
  bool targets(const std::string& module_name) const;
};

// The adapters attached to one DecoderModel. The model must outlive this object; adapters
// live in the model's Linear::lora, so forward, hidden_states and token_logprobs use them.
class LoraModel {
 public:
  // Fresh adapters: lora_A kaiming-uniform (PEFT's default: U(-1/sqrt(in), 1/sqrt(in)), drawn
  // from config.seed), lora_B zero, so the model computes what it computed. Adapters are in
  // `adapter_dtype` (float32 unless asked) on the model's device and require grad; every base
  // tensor is frozen (requires_grad false). Throws when no module matches or when a model
  // already has adapters.
  static LoraModel attach(DecoderModel& model, const LoraConfig& config,
                          c10::ScalarType adapter_dtype = c10::ScalarType::Float);

  // Reads <dir>/adapter_config.json and <dir>/adapter_model.safetensors (PEFT's layout). Refused
  // with core::ConfigError naming the file and field: peft_type other than LORA, options this
  // implementation does not compute (modules_to_save, DoRA, bias other than none, lora_bias,
  // rank or alpha patterns, fan_in_fan_out, layers_to_transform, ...), and in one error every
  // missing key, unexpected key and wrong shape.
  static LoraModel load(DecoderModel& model, const std::filesystem::path& dir,
                        c10::ScalarType adapter_dtype = c10::ScalarType::Float);

  // Writes adapter_config.json and adapter_model.safetensors as PEFT 0.21 writes them (tensors
  // in the adapter dtype, keys base_model.model.<module>.lora_{A,B}.weight).
  void save(const std::filesystem::path& dir, const std::string& base_model_name_or_path = "") const;

  const LoraConfig& config() const { return config_; }
  // (PEFT key, tensor) in module order; the tensors are the ones the model computes with.
  std::vector<std::pair<std::string, at::Tensor>> trainable_parameters() const;
  std::vector<at::Tensor> parameters() const;
  std::vector<std::string> modules() const { return modules_; }

  // Dropout on (training) or off (evaluation, sampling). Starts off.
  void set_training(bool training);
  bool training() const { return training_; }

  // A copy of the model without adapters whose weights are W + scale * B A, computed in the
  // wider of the two dtypes and rounded once to the base dtype. Shares untouched tensors.
  DecoderModel merged() const;
  // merged() as a Hugging Face checkpoint: every file of base_model_dir except its safetensors
  // (config.json, generation and tokenizer files) copied, and one model.safetensors.
  void save_merged(const std::filesystem::path& dir, const std::filesystem::path& base_model_dir) const;
  // Removes the adapters from the model (it computes the base model again).
  void detach();

 private:
  LoraModel(DecoderModel& model, LoraConfig config) : model_(&model), config_(std::move(config)) {}
  DecoderModel* model_;
  LoraConfig config_;
  std::vector<std::string> modules_;
  bool training_ = false;
};

// Every tensor of a model by its Hugging Face name (what model.safetensors holds); with tied
// embeddings lm_head.weight is left out, as transformers saves it.
std::vector<std::pair<std::string, at::Tensor>> named_tensors(const DecoderModel& model);

}  // namespace kbrl::model
