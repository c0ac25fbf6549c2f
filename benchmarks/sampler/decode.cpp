// kbrl_bench_sampler <checkpoint dir> [--device cuda] [--dtype bf16|fp32] [--batches 1,16,64]
//                    [--prompt-tokens 128] [--new-tokens 256] [--repeats 3] [--json file] [--profile]
//                    [--trace file]
// Decode speed of kbrl::model::Sampler: for each batch size B, B random prompts of the same
// length, sampled at temperature 1 with no stop tokens, so every row runs to --new-tokens. The
// time of a 1-token generate (prefill and one step) is subtracted from the full one, so
// decode tokens/s = B * (N - 1) / (t(N) - t(1)), medians over --repeats after a warm-up.
// benchmarks/sampler/run.sh runs it next to transformers' generate on the same checkpoint.
// --profile: for each batch, where a decode step's GPU time goes, by kernel group, from libtorch's
// profiler over eager steps (a CUDA graph replays the same kernels without the host's launch gaps):
// the kernel times of generate(N) minus those of generate(1), divided by N - 1.
// --trace: the GPU timeline of a graphed generate of 17 tokens per batch (CSV: batch, kernel, start
// and duration in ns), from which sampler_bench.py reads the gaps between kernels and steps.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "cli.hpp"
#include "kbrl/model/torch/decoder.hpp"
#include "kbrl/model/torch/sampler.hpp"

namespace {

double seconds_of(const kbrl::model::Sampler& sampler, const std::vector<std::vector<std::int64_t>>& prompts,
                  std::int64_t new_tokens) {
  kbrl::model::SamplingParams params;
  params.max_tokens = new_tokens;
  params.temperature = 1.0;
  params.seed = 1;
  const auto start = std::chrono::steady_clock::now();
  // generate copies every step's tokens to the host, so the GPU is done when it returns.
  const auto samples = sampler.generate(prompts, 1, params);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& x : samples)
    if (static_cast<std::int64_t>(x.tokens.size()) != new_tokens) {
      std::fprintf(stderr, "a sample stopped after %zu of %lld tokens\n", x.tokens.size(), static_cast<long long>(new_tokens));
      std::exit(1);
    }
  return s;
}

// The group a kernel belongs to, by its name.
std::string kernel_group(const std::string& name) {
  const auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (name.rfind("Memcpy", 0) == 0 || name.rfind("Memset", 0) == 0) return "copies (host <-> device)";
  if (has("paged_attention")) return "attention (paged)";
  if (has("rms_norm")) return "rms norm (+ residual)";
  if (has("rope")) return "rotary + cache write";
  if (has("silu")) return "silu * up";
  if (has("sample_rows")) return "draw (softmax, inverse CDF)";
  if (has("gemm") || has("gemv") || has("nvjet") || has("cutlass") || has("xmma") || has("Kernel2")) return "GEMM (cuBLAS)";
  return "other torch ops";
}

struct GpuEvent {
  std::string name;
  std::int64_t start_ns, duration_ns;
};

// The GPU's kernels and copies while `run` runs, in start order.
std::vector<GpuEvent> gpu_events(const std::function<void()>& run) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<ActivityType> activities = {ActivityType::CPU, ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  run();
  const auto result = prof::disableProfiler();
  std::vector<GpuEvent> out;
  for (const auto& e : result->events())
    if (e.deviceType() == c10::DeviceType::CUDA)
      out.push_back({e.name(), static_cast<std::int64_t>(e.startNs()), static_cast<std::int64_t>(e.durationNs())});
  std::sort(out.begin(), out.end(), [](const GpuEvent& a, const GpuEvent& b) { return a.start_ns < b.start_ns; });
  return out;
}

// Kernel microseconds by group while `run` runs.
std::map<std::string, double> kernel_times(const std::function<void()>& run) {
  std::map<std::string, double> us;
  for (const auto& e : gpu_events(run)) us[kernel_group(e.name)] += static_cast<double>(e.duration_ns) / 1e3;
  return us;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Decode tokens/s of kbrl's sampler: for each batch size B, B random prompts of the same length "
               "sampled at temperature 1 to --new-tokens (benchmarks/sampler/run.sh runs it next to "
               "transformers' generate).",
               "kbrl_bench_sampler");
  app.set_version_flag("--version", kbrl::apps::version_text("kbrl_bench_sampler"));
  std::string checkpoint, device = "cuda", dtype = "bf16", batches = "1,16,64", json, trace;
  std::int64_t prompt_tokens = 128, new_tokens = 256;
  int repeats = 3;
  bool profile = false;
  app.add_option("checkpoint", checkpoint, "Hugging Face checkpoint folder")->required()->check(CLI::ExistingDirectory);
  app.add_option("--device", device, "torch device")->capture_default_str();
  app.add_option("--dtype", dtype, "weights' type")->check(CLI::IsMember({"bf16", "fp32"}))->capture_default_str();
  app.add_option("--batches", batches, "comma-separated batch sizes")->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens, "tokens per prompt")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--new-tokens", new_tokens, "tokens sampled per row (at least 2)")
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--repeats", repeats, "timed repeats (medians are reported)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--json", json, "also write the rows to this JSON file");
  app.add_flag("--profile", profile, "also print where a decode step's GPU time goes, by kernel group");
  app.add_option("--trace", trace, "also write the GPU timeline of a graphed 17-token generate per batch to this CSV");
  return kbrl::apps::run_program(app, argc, argv, [&] {
    kbrl::model::LoadOptions options;
    options.device = c10::Device(device);
    options.dtype = dtype == "fp32" ? c10::ScalarType::Float : c10::ScalarType::BFloat16;
    const auto load_start = std::chrono::steady_clock::now();
    const auto model = kbrl::model::DecoderModel::load(checkpoint, options);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    const kbrl::model::Sampler sampler(model);

    std::mt19937_64 rng(7);
    std::uniform_int_distribution<std::int64_t> token(0, model.config().vocab_size - 1);
    std::ostringstream rows;
    std::ofstream trace_file;
    if (!trace.empty()) {
      trace_file.open(trace);
      if (!trace_file) throw std::runtime_error("cannot write " + trace);
      trace_file << "batch,kernel,start_ns,duration_ns\n";
    }
    std::printf("kbrl sampler, %s %s, load %.1f s, prompt %lld, new %lld tokens\n", device.c_str(), dtype.c_str(), load_s,
                static_cast<long long>(prompt_tokens), static_cast<long long>(new_tokens));
    std::printf("%6s %10s %10s %14s %14s\n", "batch", "t(1) s", "t(N) s", "decode tok/s", "total tok/s");
    std::stringstream list(batches);
    for (std::string item; std::getline(list, item, ',');) {
      const std::int64_t B = std::stoll(item);
      std::vector<std::vector<std::int64_t>> prompts(static_cast<std::size_t>(B));
      for (auto& p : prompts)
        for (std::int64_t k = 0; k < prompt_tokens; ++k) p.push_back(token(rng));
      seconds_of(sampler, prompts, 8);  // warm-up: allocator, kernels chosen
      std::vector<double> one, full;
      for (int r = 0; r < repeats; ++r) {
        one.push_back(seconds_of(sampler, prompts, 1));
        full.push_back(seconds_of(sampler, prompts, new_tokens));
      }
      const double t1 = median(one), tn = median(full);
      const double decode = static_cast<double>(B * (new_tokens - 1)) / (tn - t1);
      const double total = static_cast<double>(B * new_tokens) / tn;
      std::printf("%6lld %10.3f %10.3f %14.1f %14.1f\n", static_cast<long long>(B), t1, tn, decode, total);
      std::fflush(stdout);
      std::string groups;
      if (profile) {
        kbrl::model::SamplerOptions eager_options;
        eager_options.cuda_graphs = false;
        const kbrl::model::Sampler eager(model, {}, eager_options);
        const std::int64_t N = 33;
        seconds_of(eager, prompts, N);
        const auto base = kernel_times([&] { seconds_of(eager, prompts, 1); });
        const auto all = kernel_times([&] { seconds_of(eager, prompts, N); });
        const double step_us = (tn - t1) / static_cast<double>(new_tokens - 1) * 1e6;
        double busy = 0;
        std::printf("  batch %lld: graph step %.0f us; GPU kernel time per eager step by group:\n", static_cast<long long>(B), step_us);
        for (const auto& [group, us] : all) {
          const double per_step = (us - (base.count(group) ? base.at(group) : 0.0)) / static_cast<double>(N - 1);
          busy += per_step;
          std::printf("    %-30s %8.1f us  %5.1f%% of the graph step\n", group.c_str(), per_step, 100 * per_step / step_us);
          groups += (groups.empty() ? "" : ", ") + ("\"" + group + "\": " + std::to_string(per_step));
        }
        std::printf("    %-30s %8.1f us  %5.1f%%\n", "kernels in all", busy, 100 * busy / step_us);
        groups = ", \"step_us\": " + std::to_string(step_us) + ", \"kernel_us\": {" + groups + "}";
      }
      if (trace_file.is_open()) {
        const auto events = gpu_events([&] { seconds_of(sampler, prompts, 17); });
        for (const auto& e : events) {
          std::string name = e.name;  // CSV: a quoted field, its quotes doubled
          for (std::size_t at = name.find('"'); at != std::string::npos; at = name.find('"', at + 2)) name.insert(at, "\"");
          trace_file << B << ",\"" << name << "\"," << e.start_ns << "," << e.duration_ns << "\n";
        }
        if (!trace_file) throw std::runtime_error("cannot write " + trace);
      }
      if (rows.tellp() > 0) rows << ",\n";
      rows << "    {\"batch\": " << B << ", \"t1_s\": " << t1 << ", \"tn_s\": " << tn << ", \"decode_tokens_per_s\": " << decode
           << ", \"total_tokens_per_s\": " << total << groups << "}";
    }
    if (!json.empty()) {
      std::ofstream f(json);
      f << "{\n  \"implementation\": \"kbrl\", \"device\": \"" << device << "\", \"dtype\": \"" << dtype
        << "\", \"prompt_tokens\": " << prompt_tokens << ", \"new_tokens\": " << new_tokens << ", \"repeats\": " << repeats
        << ", \"load_s\": " << load_s << ",\n  \"rows\": [\n" << rows.str() << "\n  ]\n}\n";
      if (!f) throw std::runtime_error("cannot write " + json);
    }
    return 0;
  });
}
