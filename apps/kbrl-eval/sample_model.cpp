#include "sample_model.hpp"

#include <boost/json.hpp>

#include <fstream>
#include <iostream>

#include "kbrl/core/error.hpp"
#include "kbrl/log/progress.hpp"
#include "kbrl/train/torch/policy.hpp"

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

  if (o.dtype != "auto" && o.dtype != "bf16" && o.dtype != "fp32")
    throw core::InvalidArgument("--model-dtype must be auto, bf16 or fp32");
  train::PolicyOptions po;
  po.model = o.model;
  po.device = o.device;
  po.dtype = o.dtype;
  po.chat_template = o.chat_template;
  const c10::Device device = train::resolve_device(o.device);
  std::cerr << "loading " << o.model.string() << (o.adapter.empty() ? "" : " + " + o.adapter.string()) << " on "
            << device.str() << " (" << train::resolve_dtype(o.dtype, device) << ")\n";
  train::Policy policy(po);
  if (!o.adapter.empty()) policy.load_lora(o.adapter);

  std::ofstream log(run / "generations.jsonl", std::ios::app);
  log::Progress progress("sampling", static_cast<long>(todo.size()) * o.samples);
  int written = 0;
  {
    // One call per problem (its samples are the batch rows), so each sample's draw is a
    // function of (seed, problem, sample) whatever else is being sampled.
    for (const core::Problem* problem : todo) {
      const core::Problem& p = *problem;
      const auto messages = prompt::build_messages(p, o.prompt);
      const auto ids = policy.prompt_tokens(messages);
      model::SamplingParams sp;  // the policy adds its stop tokens
      sp.max_tokens = o.max_tokens;
      sp.temperature = o.temperature;
      sp.top_p = o.top_p;
      sp.top_k = o.top_k;
      sp.seed = o.seed * 1000003ULL + static_cast<std::uint64_t>(p.number);
      const auto samples = policy.generate({std::vector<std::int64_t>(ids.begin(), ids.end())}, o.samples, sp);
      for (const auto& s : samples) {
        const int index = static_cast<int>(s.sample_index);
        const std::string answer = policy.completion(s).text;
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
