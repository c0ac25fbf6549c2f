// kbrl_bench_rollout <model dir> [--random-weights] [--prompts 64] [--samples 8] [--prompt-tokens 256]
//                    [--median 600] [--max 4096] [--max-batch 128] [--modes continuous,fixed] [--json file]
// An RL rollout's shape: P prompts x S samples whose completion lengths follow a long-tailed
// distribution (log-normal with the given median, sigma --sigma, clipped to [1, --max]); each
// sample ends at its drawn length, as a stop token would end it (the weights are random, so real
// stop tokens would come at random: the token callback ends the row instead). Reports tokens/s
// of the continuous-batching sampler and of the same sampler run as fixed batches (a batch is
// filled, then runs until its longest row ends), the peak GPU memory, and the scheduler's
// counters. --random-weights builds random bf16 weights from <model dir>/config.json alone (the
// 7B shapes without a 15 GB checkpoint on disk).
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "kbrl/model/config.hpp"
#include "kbrl/model/torch/decoder.hpp"
#include "kbrl/model/torch/sampler.hpp"

namespace {

using kbrl::model::DecoderModel;

// Random weights of the config's shapes on the device: N(0, 0.02) projections and embeddings,
// norms of 1, as transformers initialises them.
DecoderModel random_model(const kbrl::model::ModelConfig& c, const kbrl::model::LoadOptions& options) {
  const auto on = at::TensorOptions().dtype(options.dtype).device(options.device);
  const auto normal = [&](std::vector<std::int64_t> shape) { return at::randn(shape, on) * 0.02; };
  const auto linear = [&](std::int64_t out, std::int64_t in, bool bias) {
    kbrl::model::Linear l;
    l.weight = normal({out, in});
    if (bias) l.bias = normal({out});
    return l;
  };
  const std::int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const std::int64_t q = c.num_attention_heads * D, kv = c.num_key_value_heads * D;
  kbrl::model::DecoderWeights w;
  w.embed_tokens = normal({c.vocab_size, H});
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    kbrl::model::DecoderLayer l;
    l.input_norm = at::ones({H}, on);
    l.post_attention_norm = at::ones({H}, on);
    // q, k, v (and gate, up) side by side, as DecoderModel::load lays them out.
    const at::Tensor qkv = normal({q + 2 * kv, H});
    l.q_proj.weight = qkv.narrow(0, 0, q);
    l.k_proj.weight = qkv.narrow(0, q, kv);
    l.v_proj.weight = qkv.narrow(0, q + kv, kv);
    if (c.qkv_bias) {
      const at::Tensor b = normal({q + 2 * kv});
      l.q_proj.bias = b.narrow(0, 0, q);
      l.k_proj.bias = b.narrow(0, q, kv);
      l.v_proj.bias = b.narrow(0, q + kv, kv);
    }
    l.o_proj = linear(H, q, c.o_bias);
    if (c.qk_norm) {
      l.q_norm = at::ones({D}, on);
      l.k_norm = at::ones({D}, on);
    }
    const at::Tensor gate_up = normal({2 * I, H});
    l.gate_proj.weight = gate_up.narrow(0, 0, I);
    l.up_proj.weight = gate_up.narrow(0, I, I);
    l.down_proj = linear(H, I, c.mlp_bias);
    w.layers.push_back(std::move(l));
  }
  w.norm = at::ones({H}, on);
  w.lm_head.weight = c.tie_word_embeddings ? w.embed_tokens : normal({c.vocab_size, H});
  return DecoderModel(c, std::move(w), options);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Rollout-shaped sampling: P prompts x S samples with long-tailed completion lengths, continuous "
               "batching next to fixed batches of the same sampler.",
               "kbrl_bench_rollout");
  app.set_version_flag("--version", kbrl::apps::version_text("kbrl_bench_rollout"));
  std::string dir, device = "cuda", modes = "continuous,fixed", json;
  bool random_weights = false;
  std::int64_t prompts = 64, samples = 8, prompt_tokens = 256, median = 600, max_tokens = 4096, max_batch = 128;
  double sigma = 0.8;
  app.add_option("model", dir, "Hugging Face checkpoint folder (config.json alone with --random-weights)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_flag("--random-weights", random_weights, "random bf16 weights of config.json's shapes, built on the device");
  app.add_option("--device", device, "torch device")->capture_default_str();
  app.add_option("--prompts", prompts, "prompts")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--samples", samples, "samples per prompt")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens, "tokens per prompt")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--median", median, "median completion length")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--sigma", sigma, "log-normal sigma of the completion lengths")->capture_default_str();
  app.add_option("--max", max_tokens, "longest completion (max_tokens)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--max-batch", max_batch, "rows decoded together at most (both modes)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--modes", modes, "comma-separated: continuous, fixed")->capture_default_str();
  app.add_option("--json", json, "also write the results to this JSON file");
  return kbrl::apps::run_program(app, argc, argv, [&] {
    kbrl::model::LoadOptions options;
    options.device = c10::Device(device);
    options.dtype = c10::ScalarType::BFloat16;
    const auto t0 = std::chrono::steady_clock::now();
    const DecoderModel model = random_weights ? random_model(kbrl::model::load_model_config(dir), options)
                                              : DecoderModel::load(dir, options);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::mt19937_64 rng(11);
    std::uniform_int_distribution<std::int64_t> token(0, model.config().vocab_size - 1);
    std::lognormal_distribution<double> length(std::log(static_cast<double>(median)), sigma);
    std::vector<std::vector<std::int64_t>> prompt_ids(static_cast<std::size_t>(prompts));
    for (auto& p : prompt_ids)
      for (std::int64_t k = 0; k < prompt_tokens; ++k) p.push_back(token(rng));
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(prompts * samples));
    std::int64_t total = 0;
    for (auto& l : lengths) {
      l = std::clamp<std::int64_t>(std::llround(length(rng)), 1, max_tokens);
      total += l;
    }
    std::vector<std::int64_t> sorted = lengths;
    std::sort(sorted.begin(), sorted.end());
    std::printf("kbrl rollout: %lld prompts x %lld samples, prompt %lld tokens, completions median %lld, mean %.0f, "
                "max %lld (%lld tokens), max_batch %lld, load %.1f s\n",
                static_cast<long long>(prompts), static_cast<long long>(samples), static_cast<long long>(prompt_tokens),
                static_cast<long long>(sorted[sorted.size() / 2]), static_cast<double>(total) / static_cast<double>(sorted.size()),
                static_cast<long long>(sorted.back()), static_cast<long long>(total), static_cast<long long>(max_batch), load_s);

    kbrl::model::SamplingParams params;
    params.max_tokens = max_tokens;
    params.temperature = 1.0;
    params.seed = 3;
    std::ostringstream rows;
    std::stringstream list(modes);
    for (std::string mode; std::getline(list, mode, ',');) {
      if (mode != "continuous" && mode != "fixed") throw std::invalid_argument("--modes: unknown mode " + mode);
      kbrl::model::SamplerOptions o;
      o.continuous = mode == "continuous";
      o.max_batch = max_batch;
      const kbrl::model::Sampler sampler(model, {}, o);
      if (options.device.is_cuda()) {
        c10::cuda::CUDACachingAllocator::emptyCache();
        c10::cuda::CUDACachingAllocator::resetPeakStats(options.device.index() < 0 ? 0 : options.device.index());
      }
      const auto start = std::chrono::steady_clock::now();
      std::int64_t generated = 0;
      sampler.generate(prompt_ids, samples, params, {},
                       [&](std::size_t index, const kbrl::model::Sample& s, bool) {
                         ++generated;
                         return static_cast<std::int64_t>(s.tokens.size()) < lengths[index];
                       });
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double peak_gb = 0;
      if (options.device.is_cuda()) {
        const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(options.device.index() < 0 ? 0 : options.device.index());
        peak_gb = static_cast<double>(stats.allocated_bytes[0].peak) / 1e9;
      }
      if (generated != total) throw std::runtime_error("generated " + std::to_string(generated) + " tokens, expected " + std::to_string(total));
      const auto& st = sampler.stats();
      const double per_token = static_cast<double>(kbrl::model::PagedKvCache::bytes_per_token(model.config(), model.dtype()));
      std::printf("%-10s %8.1f s %10.0f tok/s  peak GPU memory %.1f GB  steps %lld  prefills %lld  preemptions %lld  "
                  "KV cache %.1f GB (peak use %.1f GB)  graphs %lld\n",
                  mode.c_str(), secs, static_cast<double>(total) / secs, peak_gb, static_cast<long long>(st.steps),
                  static_cast<long long>(st.prefills), static_cast<long long>(st.preemptions),
                  static_cast<double>(st.cache_blocks * o.block_size) * per_token / 1e9,
                  static_cast<double>(st.peak_blocks * o.block_size) * per_token / 1e9, static_cast<long long>(st.graphs_captured));
      std::fflush(stdout);
      if (rows.tellp() > 0) rows << ",\n";
      rows << "    {\"mode\": \"" << mode << "\", \"seconds\": " << secs << ", \"tokens\": " << total
           << ", \"tokens_per_s\": " << static_cast<double>(total) / secs << ", \"peak_gpu_gb\": " << peak_gb
           << ", \"steps\": " << st.steps << ", \"prefills\": " << st.prefills << ", \"preemptions\": " << st.preemptions
           << ", \"cache_blocks\": " << st.cache_blocks << ", \"peak_blocks\": " << st.peak_blocks
           << ", \"graphs\": " << st.graphs_captured << "}";
    }
    if (!json.empty()) {
      std::ofstream f(json);
      f << "{\n  \"prompts\": " << prompts << ", \"samples\": " << samples << ", \"prompt_tokens\": " << prompt_tokens
        << ", \"median\": " << median << ", \"sigma\": " << sigma << ", \"max_tokens\": " << max_tokens
        << ", \"max_batch\": " << max_batch << ", \"completion_tokens\": " << total << ", \"load_s\": " << load_s
        << ",\n  \"rows\": [\n" << rows.str() << "\n  ]\n}\n";
      if (!f) throw std::runtime_error("cannot write " + json);
    }
    return 0;
  });
}
