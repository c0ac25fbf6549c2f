// The C++ half of model:fresh_peft_parity (peft_parity.py is the other):
//   lora_tool make <model_dir> <out_dir>
//       attaches a rank-4 adapter (seeded A, seeded random non-zero B), writes <out_dir>/adapter
//       (PEFT files) and <out_dir>/merged (a Hugging Face checkpoint with the adapter merged)
//   lora_tool logits <model_dir> <adapter_dir or -> <inputs.safetensors> <out.safetensors> [bf16]
//       logits of input_ids [B, T] (inputs' "input_ids") with the adapter loaded, as "logits":
//       fp32, or a bf16 model (fused attention, as transformers' sdpa) with fp32 adapters
//   lora_tool grads <model_dir> <adapter_dir> <inputs.safetensors> <out.safetensors> [checkpoint]
//       fp32: loss = sum(weights * token_logprobs(input_ids, attention_mask, targets)); writes
//       "loss", "logprobs" and the gradient of every adapter tensor under its PEFT name
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "kbrl/model/torch/lora.hpp"
#include "kbrl/model/torch/torch_tensors.hpp"
#include "kbrl/model/torch/train_forward.hpp"

#include <torch/csrc/autograd/autograd.h>

using namespace kbrl::model;

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "grads" && (argc == 6 || (argc == 7 && std::string(argv[6]) == "checkpoint"))) {
      DecoderModel m = DecoderModel::load(argv[2]);
      const LoraModel lora = LoraModel::load(m, argv[3]);
      const auto in = load_tensors(argv[4]);
      TrainForwardOptions o;
      o.checkpoint_layers = argc == 7;
      o.logprob_chunk_tokens = 5;  // several chunks, one of them partial
      const at::Tensor lp = token_logprobs(m, in.at("input_ids"), in.at("attention_mask"), in.at("targets"), o);
      const at::Tensor loss = (lp * in.at("weights")).sum();
      const auto params = lora.trainable_parameters();
      std::vector<at::Tensor> wrt;
      for (const auto& [name, t] : params) wrt.push_back(t);
      const auto grads = torch::autograd::grad({loss}, wrt);
      std::map<std::string, at::Tensor> out{{"loss", loss.detach()}, {"logprobs", lp.detach()}};
      for (std::size_t i = 0; i < params.size(); ++i) out.emplace(params[i].first, grads[i]);
      save_tensors(argv[5], out);
      return 0;
    }
    const c10::NoGradGuard no_grad;
    if (mode == "make" && argc == 4) {
      DecoderModel m = DecoderModel::load(argv[2]);
      LoraConfig c;
      c.rank = 4;
      c.alpha = 8;
      c.seed = 123;
      LoraModel lora = LoraModel::attach(m, c);
      at::manual_seed(7);
      for (const auto& [name, t] : lora.trainable_parameters())
        if (name.find("lora_B") != std::string::npos) t.copy_(at::randn(t.sizes()) * 0.2);
      const std::string out = argv[3];
      lora.save(out + "/adapter", argv[2]);
      lora.save_merged(out + "/merged", argv[2]);
      return 0;
    }
    if (mode == "logits" && (argc == 6 || (argc == 7 && std::string(argv[6]) == "bf16"))) {
      LoadOptions o;
      if (argc == 7) {
        o.dtype = at::kBFloat16;
        o.attention = AttentionKernel::kFused;
      }
      DecoderModel m = DecoderModel::load(argv[2], o);
      if (std::string(argv[3]) != "-") LoraModel::load(m, argv[3]);
      const auto inputs = load_tensors(argv[4]);
      save_tensors(argv[5], {{"logits", m.forward(inputs.at("input_ids")).contiguous()}});
      return 0;
    }
    std::cerr << "usage: lora_tool make <model_dir> <out_dir>\n"
                 "       lora_tool logits <model_dir> <adapter_dir|-> <inputs.safetensors> <out.safetensors> [bf16]\n"
                 "       lora_tool grads <model_dir> <adapter_dir> <inputs.safetensors> <out.safetensors> [checkpoint]\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "lora_tool: " << e.what() << "\n";
    return 1;
  }
}
