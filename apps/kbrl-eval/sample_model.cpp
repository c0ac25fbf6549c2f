#include "sample_model.hpp"

#include <boost/json.hpp>

#include <fstream>
#include <iostream>
#include <map>
#include <regex>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/log/progress.hpp"
#include "kbrl/train/torch/policy.hpp"
#include "run_files.hpp"

namespace kbrl::apps {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

// One conversation to answer: where its answer goes and what it is.
struct Row {
  int level = 0, problem = 0, sample = 0, turn = 1;
  std::string problem_id;
  std::vector<core::Message> messages;
};

}  // namespace

struct ModelSampler::Impl {
  ModelSamplingOptions o;
  fs::path run;
  std::unique_ptr<train::Policy> policy;

  train::Policy& loaded() {
    if (policy) return *policy;
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
    policy = std::make_unique<train::Policy>(po);
    if (!o.adapter.empty()) policy->load_lora(o.adapter);
    return *policy;
  }

  std::uint64_t seed_of(int level, int problem, int turn) const {
    return o.seed * 1000003ULL + static_cast<std::uint64_t>(problem) + 7919ULL * static_cast<std::uint64_t>(level) +
           104729ULL * static_cast<std::uint64_t>(turn - 1);
  }

  // One generate call per batch (rows of one problem and turn): `per_row` answers to each row, the
  // k-th answer of row r written as sample `rows[r].sample + k`.
  int answer(const std::vector<Row>& rows, int per_row, log::Progress& progress, std::ofstream& log) {
    train::Policy& p = loaded();
    std::vector<std::vector<std::int64_t>> prompts;
    for (const auto& r : rows) {
      const auto ids = p.prompt_tokens(r.messages);
      prompts.emplace_back(ids.begin(), ids.end());
    }
    model::SamplingParams sp;  // the policy adds its stop tokens
    sp.max_tokens = o.max_tokens;
    sp.temperature = o.temperature;
    sp.top_p = o.top_p;
    sp.top_k = o.top_k;
    sp.seed = seed_of(rows.front().level, rows.front().problem, rows.front().turn);
    int written = 0;
    for (const auto& s : p.generate(prompts, per_row, sp)) {
      const Row& r = rows.at(s.prompt_index);
      const int sample = r.sample + static_cast<int>(s.sample_index);
      const std::string text = p.completion(s).text;
      core::write_file_atomically(kernel_file(run, r.level, r.problem, sample, r.turn), text);
      const json::object line{{"level", r.level},
                              {"problem", r.problem},
                              {"problem_id", r.problem_id},
                              {"sample", sample},
                              {"turn", r.turn},
                              {"file", kernel_file(run, r.level, r.problem, sample, r.turn).filename().string()},
                              {"num_tokens", s.tokens.size()},
                              {"stop_reason", model::stop_reason_name(s.stop_reason)},
                              {"answer", text}};
      log << json::serialize(line) << "\n" << std::flush;
      ++written;
      progress.advance(1);
    }
    return written;
  }
};

ModelSampler::ModelSampler(ModelSamplingOptions options, fs::path run) : impl_(std::make_unique<Impl>()) {
  if (options.samples < 1) throw core::InvalidArgument("--samples must be at least 1");
  impl_->o = std::move(options);
  impl_->run = std::move(run);
}

ModelSampler::~ModelSampler() = default;

int ModelSampler::sample_problems(const std::vector<std::pair<int, core::Problem>>& problems) {
  const auto& o = impl_->o;
  std::vector<Row> todo;
  for (const auto& [level, p] : problems)
    for (int s = 0; s < o.samples; ++s)
      if (!fs::exists(kernel_file(impl_->run, level, p.number, s))) {
        todo.push_back({level, p.number, 0, 1, p.id, prompt::build_messages(p, o.prompt)});
        break;
      }
  if (todo.empty()) return 0;
  std::ofstream log(impl_->run / "generations.jsonl", std::ios::app);
  log::Progress progress("sampling", static_cast<long>(todo.size()) * o.samples);
  int written = 0;
  // One call per problem (its samples are the batch rows), so each sample's draw is a function
  // of (seed, level, problem, sample) whatever else is being sampled.
  for (const Row& row : todo) written += impl_->answer({row}, o.samples, progress, log);
  progress.finish();
  return written;
}

int ModelSampler::sample_prompts(int turn) {
  const std::regex name(R"(level_(\d{1,9})_problem_(\d{1,9})_sample_(\d{1,9})_turn_(\d{1,9})_prompt\.json)");
  std::map<std::pair<int, int>, std::vector<Row>> by_problem;  // sample order within a problem
  std::size_t total = 0;
  for (const auto& entry : fs::directory_iterator(impl_->run)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name) || std::stoi(m[4]) != turn) continue;
    Row r{std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), turn, "", {}};
    if (fs::exists(kernel_file(impl_->run, r.level, r.problem, r.sample, turn))) continue;
    try {
      const auto o = core::parse_json(core::read_file(entry.path())).as_object();
      r.problem_id = std::string(o.at("problem_id").as_string());
      for (const auto& message : o.at("messages").as_array())
        r.messages.push_back({std::string(message.at("role").as_string()), std::string(message.at("content").as_string())});
    } catch (const std::exception& e) {
      throw core::Error(entry.path().string() + ": not a conversation kbrl-eval wrote (" + e.what() + ")");
    }
    by_problem[{r.level, r.problem}].push_back(std::move(r));
    ++total;
  }
  if (total == 0) return 0;
  std::ofstream log(impl_->run / "generations.jsonl", std::ios::app);
  log::Progress progress("sampling turn " + std::to_string(turn), static_cast<long>(total));
  int written = 0;
  for (auto& [key, rows] : by_problem) {
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.sample < b.sample; });
    // One answer per conversation; each row is its own sample (Row::sample + 0).
    written += impl_->answer(rows, 1, progress, log);
  }
  progress.finish();
  return written;
}

}  // namespace kbrl::apps
