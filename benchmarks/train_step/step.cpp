// kbrl_bench_train_step <checkpoint dir> <work dir> [--device cuda] [--seq 4096] [--rank 32]
//                       [--steps 5] [--no-checkpoint]
// The kbrl half of benchmarks/train_step/run.sh, on a bf16 model with fp32 LoRA adapters on
// every projection (alpha = 2 x rank):
// 1. PEFT parity inputs: with <work>/peft_adapter (written by PEFT) loaded, the logits of
//    <work>/ids.safetensors ("input_ids") go to <work>/kbrl_logits_peft_adapter.safetensors;
//    then a fresh adapter of its own (seeded A, random B) is saved to <work>/kbrl_adapter and
//    its logits to <work>/kbrl_logits_kbrl_adapter.safetensors, for PEFT to check.
// 2. Forward + backward (B reset to zero) of one sequence of --seq random tokens (mean -log p of each next token,
//    layers checkpointed), --steps timed after one warm-up; <work>/kbrl_time.json.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "kbrl/model/torch/lora.hpp"
#include "kbrl/model/torch/torch_tensors.hpp"
#include "kbrl/model/torch/train_forward.hpp"

using namespace kbrl::model;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app("The kbrl half of benchmarks/train_step/run.sh: PEFT adapter parity inputs, then the time of a "
               "LoRA forward + backward step on one sequence of random tokens.",
               "kbrl_bench_train_step");
  app.set_version_flag("--version", kbrl::apps::version_text("kbrl_bench_train_step"));
  fs::path model_dir, work;
  std::string device = "cuda";
  std::int64_t seq = 4096, rank = 32;
  int steps = 5;
  bool no_checkpoint = false;
  app.add_option("checkpoint", model_dir, "bf16 Hugging Face checkpoint folder")->required()->check(CLI::ExistingDirectory);
  app.add_option("work", work, "folder with train_step_bench.py prepare's inputs; the outputs go there too")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--device", device, "torch device")->capture_default_str();
  app.add_option("--seq", seq, "tokens in the timed sequence")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--rank", rank, "LoRA rank (alpha = 2 x rank)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps", steps, "timed steps after one warm-up (the median is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--no-checkpoint", no_checkpoint, "keep every layer's activations instead of recomputing them");
  return kbrl::apps::run_program(app, argc, argv, [&] {
    const bool checkpoint_layers = !no_checkpoint;
    LoadOptions options;
    options.device = c10::Device(device);
    options.dtype = c10::ScalarType::BFloat16;
    DecoderModel model = DecoderModel::load(model_dir, options);

    // 1. Parity inputs.
    const auto ids_file = load_tensors(work / "ids.safetensors");
    const at::Tensor ids = ids_file.at("input_ids");
    const auto logits_of = [&]() {
      const at::NoGradGuard no_grad;
      return model.forward(ids).to(at::kCPU).contiguous();
    };
    if (fs::exists(work / "peft_adapter")) {
      LoraModel peft = LoraModel::load(model, work / "peft_adapter");
      save_tensors(work / "kbrl_logits_peft_adapter.safetensors", {{"logits", logits_of()}});
      peft.detach();
    }
    LoraConfig config;
    config.rank = rank;
    config.alpha = 2.0 * static_cast<double>(rank);
    config.seed = 1;
    LoraModel lora = LoraModel::attach(model, config);
    {
      const at::NoGradGuard no_grad;
      at::manual_seed(2);
      for (const auto& [name, t] : lora.trainable_parameters())
        if (name.find("lora_B") != std::string::npos) t.normal_(0, 0.02);
    }
    lora.save(work / "kbrl_adapter", model_dir.string());
    save_tensors(work / "kbrl_logits_kbrl_adapter.safetensors", {{"logits", logits_of()}});

    // 2. Forward + backward, from B = 0 as a fresh adapter (the loss is the base model's, as PEFT's).
    {
      const at::NoGradGuard no_grad;
      for (const auto& [name, t] : lora.trainable_parameters())
        if (name.find("lora_B") != std::string::npos) t.zero_();
    }
    lora.set_training(true);
    const std::vector<at::Tensor> params = lora.parameters();
    at::manual_seed(3);
    const at::Tensor tokens = at::randint(model.config().vocab_size, {1, seq + 1}, at::kLong).to(options.device);
    const at::Tensor input = tokens.narrow(1, 0, seq), targets = tokens.narrow(1, 1, seq);
    TrainForwardOptions train;
    train.checkpoint_layers = checkpoint_layers;
    const auto step = [&]() {
      for (const auto& p : params)
        if (p.grad().defined()) p.mutable_grad().zero_();
      const at::Tensor lp = token_logprobs(model, input, {}, targets, train);
      const at::Tensor loss = -lp.mean();
      loss.backward();
      // Reading a gradient waits for the whole backward pass.
      return std::make_pair(loss.item<double>(), params.back().grad().abs().sum().item<double>());
    };
    step();
    std::vector<double> times;
    double loss = 0;
    for (int s = 0; s < steps; ++s) {
      const auto start = std::chrono::steady_clock::now();
      loss = step().first;
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    std::int64_t trainable = 0;
    for (const auto& p : params) trainable += p.numel();
    std::printf("kbrl: seq %lld, LoRA r=%lld on %zu modules (%lld trainable), checkpointing %s: %.3f s per step, %.0f tokens/s, loss %.4f\n",
                static_cast<long long>(seq), static_cast<long long>(rank), lora.modules().size(),
                static_cast<long long>(trainable), checkpoint_layers ? "on" : "off", median,
                static_cast<double>(seq) / median, loss);
    std::ofstream f(work / "kbrl_time.json");
    f << "{\"implementation\": \"kbrl\", \"seq\": " << seq << ", \"rank\": " << rank << ", \"checkpointing\": "
      << (checkpoint_layers ? "true" : "false") << ", \"steps\": " << steps << ", \"step_s\": " << median
      << ", \"tokens_per_s\": " << static_cast<double>(seq) / median << ", \"trainable\": " << trainable
      << ", \"loss\": " << loss << "}\n";
    if (!f) throw std::runtime_error("cannot write " + (work / "kbrl_time.json").string());
    return 0;
  });
}
