// One rank of a data-parallel training run, launched like torchrun launches (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT): LoRA on a checkpoint, a fixed global batch of RL datums
// of which this rank takes every WORLD_SIZE-th, `steps` importance-sampling steps. Writes
// <out>/rank<R>.json with the loss and gradient norm of each step and a checksum of the trained
// parameters, and saves the state to <out>/state (rank 0 only writes it).
//   data_parallel_worker <model dir> <out dir> <cpu|cuda|bf16-cuda> [steps] [global batch] [tokens per datum] [lr]
#include <ATen/ATen.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <cmath>
#include <random>
#include <sstream>
#include <string>

#include "kbrl/model/torch/lora.hpp"
#include "kbrl/train/torch/distributed.hpp"
#include "kbrl/train/torch/training_client.hpp"

using namespace kbrl;

int main(int argc, char** argv) try {
  if (argc < 4) {
    std::cerr << "usage: data_parallel_worker <model dir> <out dir> <cpu|cuda|bf16-cuda> [steps] [batch] [tokens]\n";
    return 2;
  }
  const std::filesystem::path model_dir = argv[1], out = argv[2];
  const std::string mode = argv[3];
  const int steps = argc > 4 ? std::stoi(argv[4]) : 4;
  const int batch = argc > 5 ? std::stoi(argv[5]) : 8;
  const int tokens = argc > 6 ? std::stoi(argv[6]) : 12;
  const double lr = argc > 7 ? std::stod(argv[7]) : 2e-3;
  const bool cuda = mode != "cpu";

  const train::LaunchEnv env = train::launch_env_from_environment();
  std::shared_ptr<train::ProcessGroup> group;
  if (env.distributed()) group = train::ProcessGroup::join(env, cuda);

  model::LoadOptions load;
  load.device = cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank)) : c10::Device(c10::kCPU);
  load.dtype = mode == "bf16-cuda" ? at::kBFloat16 : at::kFloat;
  auto decoder = std::make_shared<model::DecoderModel>(model::DecoderModel::load(model_dir, load));
  model::LoraConfig lora;
  lora.rank = 8;
  lora.alpha = 16;
  lora.seed = 100 + static_cast<std::uint64_t>(env.rank);  // differs per rank: the broadcast must align them
  model::LoraModel::attach(*decoder, lora);

  train::TrainingClientOptions options;
  options.process_group = group;
  options.micro_batch_tokens = 4 * tokens;
  train::TrainingClient client(decoder, train::lora_parameters(*decoder), options);

  // The global batch: lengths and advantages vary, so the sequence-mean normalizer only comes
  // out right when it counts every rank's datums.
  const std::int64_t vocab = decoder->config().vocab_size;
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int64_t> token(0, vocab - 1);
  std::vector<train::Datum> mine;
  for (int i = 0; i < batch; ++i) {
    std::vector<std::int64_t> prompt(4), completion(static_cast<std::size_t>(tokens / 2 + (i * 5) % tokens));
    for (auto& t : prompt) t = token(rng);
    for (auto& t : completion) t = token(rng);
    std::vector<float> lp(completion.size());
    for (std::size_t j = 0; j < lp.size(); ++j) lp[j] = -std::log(static_cast<float>(vocab)) + 0.01F * static_cast<float>(j % 3);
    auto d = train::completion_datum(prompt, completion, lp, (i % 3 == 0 ? 1.0F : -0.5F) * static_cast<float>(i + 1) / batch);
    if (i % env.world_size == env.rank) mine.push_back(std::move(d));
  }
  // On-policy at the start: the sampler's logprobs are the model's own, so the ratios begin at 1
  // and the run stays well-conditioned enough to compare curves step by step.
  const auto current = client.forward(mine);
  for (std::size_t i = 0; i < mine.size(); ++i)
    for (std::size_t t = 0; t < current[i].size(); ++t)
      if (mine[i].weights[t] > 0) mine[i].logprobs[t] = current[i][t];
  train::LossConfig loss;
  loss.normalization = train::Normalization::kSequenceMean;
  train::AdamParams adam;
  adam.lr = lr;
  adam.grad_clip_norm = 1.0;

  std::ostringstream losses, norms;
  for (int s = 0; s < steps; ++s) {
    const auto fb = client.forward_backward(mine, train::LossKind::kImportanceSampling, loss);
    const auto opt = client.optim_step(adam);
    losses << (s ? ", " : "") << fb.metrics.at("loss");
    norms << (s ? ", " : "") << opt.at("grad_norm");
  }
  double checksum = 0;
  for (const auto& [name, t] : client.parameters()) checksum += t.detach().to(at::kDouble).abs().sum().item<double>();
  client.save_state(out / "state");

  std::filesystem::create_directories(out);
  std::ofstream f(out / ("rank" + std::to_string(env.rank) + ".json"));
  f.precision(17);
  f << "{\"rank\": " << env.rank << ", \"world_size\": " << env.world_size << ", \"backend\": \""
    << (group ? group->backend() : std::string("none")) << "\", \"datums\": " << mine.size() << ", \"loss\": ["
    << losses.str() << "], \"grad_norm\": [" << norms.str() << "], \"param_abs_sum\": " << checksum << "}\n";
  return f ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "data_parallel_worker: " << e.what() << "\n";
  return 1;
}
