#include "sample_model.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <boost/json.hpp>

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "kbrl/core/error.hpp"
#include "kbrl/log/progress.hpp"
#include "kbrl/tokenizer/chat_tokens.hpp"
#include "kbrl/model/torch/decoder.hpp"
#include "kbrl/model/torch/lora.hpp"
#include "kbrl/model/torch/sampler.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"

namespace kbrl::apps {

namespace fs = std::filesystem;

namespace {

fs::path candidate_path(const fs::path& run, int level, int problem, int sample) {
  return run / ("level_" + std::to_string(level) + "_problem_" + std::to_string(problem) + "_sample_" +
                std::to_string(sample) + "_kernel.py");
}

}  // namespace

int sample_generations(const std::vector<core::Problem>& problems, int level, const fs::path& run,
                       const ModelSamplingOptions& o) {
  if (o.samples < 1) throw core::InvalidArgument("--samples must be at least 1");
  std::vector<const core::Problem*> todo;
  for (const auto& p : problems)
    for (int s = 0; s < o.samples; ++s)
      if (!fs::exists(candidate_path(run, level, p.number, s))) {
        todo.push_back(&p);
        break;
      }
  if (todo.empty()) return 0;

  const auto tokenizer = tokenizer::Tokenizer::from_file(o.model / "tokenizer.json");
  const auto renderer = tokenizer::chat_renderer_for(o.chat_template, tokenizer, o.model);
  std::vector<std::int64_t> stops;
  for (const auto id : tokenizer::checkpoint_stop_ids(o.model, tokenizer)) stops.push_back(id);
  for (const auto id : tokenizer::stop_sequence_ids(*renderer, tokenizer))
    if (std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
  model::LoadOptions load;
  load.device = o.device == "auto" ? (at::hasCUDA() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU))
                                   : c10::Device(o.device);
  const std::string dtype = o.dtype == "auto" ? (load.device.is_cuda() ? "bf16" : "fp32") : o.dtype;
  if (dtype != "bf16" && dtype != "fp32") throw core::InvalidArgument("--model-dtype must be auto, bf16 or fp32");
  load.dtype = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  std::cerr << "loading " << o.model.string() << (o.adapter.empty() ? "" : " + " + o.adapter.string()) << " on "
            << load.device.str() << " (" << dtype << ")\n";
  model::DecoderModel decoder = model::DecoderModel::load(o.model, load);
  std::optional<model::LoraModel> lora;
  if (!o.adapter.empty()) lora.emplace(model::LoraModel::load(decoder, o.adapter));
  const model::Sampler sampler(decoder, model::token_bytes_of(tokenizer));

  std::ofstream log(run / "generations.jsonl", std::ios::app);
  log::Progress progress("sampling", static_cast<long>(todo.size()) * o.samples);
  int written = 0;
  const c10::NoGradGuard no_grad;
  {
    // One call per problem (its samples are the batch rows), so each sample's draw is a
    // function of (seed, problem, sample) whatever else is being sampled.
    for (const core::Problem* problem : todo) {
      const core::Problem& p = *problem;
      const auto messages = prompt::build_messages(p, o.prompt);
      const auto ids = tokenizer::render_chat_ids(*renderer, tokenizer, messages, true);
      model::SamplingParams sp;
      sp.max_tokens = o.max_tokens;
      sp.temperature = o.temperature;
      sp.top_p = o.top_p;
      sp.top_k = o.top_k;
      sp.stop_token_ids = stops;
      sp.seed = o.seed * 1000003ULL + static_cast<std::uint64_t>(p.number);
      const auto samples = sampler.generate({std::vector<std::int64_t>(ids.begin(), ids.end())}, o.samples, sp);
      for (const auto& s : samples) {
        const int index = static_cast<int>(s.sample_index);
        std::vector<tokenizer::TokenId> text_ids(s.tokens.begin(), s.tokens.end());
        if (s.stop_reason != model::StopReason::kMaxTokens && !text_ids.empty()) text_ids.pop_back();
        const std::string answer = tokenizer.decode(text_ids, true);
        const fs::path file = candidate_path(run, level, p.number, index);
        {
          const fs::path tmp = file.string() + ".tmp";
          std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
          out << answer;
          if (!out) throw core::Error("cannot write " + tmp.string());
          out.close();
          fs::rename(tmp, file);
        }
        boost::json::object line{{"problem", p.number},
                                 {"problem_id", p.id},
                                 {"sample", index},
                                 {"file", file.filename().string()},
                                 {"num_tokens", s.tokens.size()},
                                 {"stop_reason", model::stop_reason_name(s.stop_reason)},
                                 {"answer", answer}};
        log << boost::json::serialize(line) << "\n" << std::flush;
        ++written;
        progress.advance(1);
      }
    }
  }
  progress.finish();
  return written;
}

}  // namespace kbrl::apps
