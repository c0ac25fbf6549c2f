#include "run_sampler.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <regex>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/log/progress.hpp"
#include "kbrl/net/openai_client.hpp"
#include "kbrl/rag/retrieval_prompt.hpp"
#include "run_files.hpp"

namespace kbrl::apps {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

std::uint64_t seed_of(std::uint64_t seed, int level, int problem, int turn) {
  return seed * 1000003ULL + static_cast<std::uint64_t>(problem) + 7919ULL * static_cast<std::uint64_t>(level) +
         104729ULL * static_cast<std::uint64_t>(turn - 1);
}

// Chat completions of a served model: one request per row (n = per_row), the rows' requests in
// parallel up to the client's limit on requests in flight.
class ApiSource : public AnswerSource {
 public:
  ApiSource(const ApiSamplingOptions& o, const SamplingSettings& s) : model_(o.model_name), sampling_(s) {
    if (o.model_name.empty()) throw core::InvalidArgument("--model-name: the served model's name is needed");
    if (s.top_k != 0) throw core::InvalidArgument("--top-k: the OpenAI API has no top-k; leave it at 0 with --endpoint");
    net::OpenAiClientConfig c;
    c.base_url = o.endpoint;
    c.api_key_env = o.api_key_env;
    c.max_in_flight = o.max_in_flight;
    c.max_retries = o.max_retries;
    c.attempt_timeout_s = o.timeout_s;
    client_ = std::make_unique<net::OpenAiClient>(c);
    std::cerr << fmt::format("sampling {} from {}\n", model_, o.endpoint);
  }

  Answers answer(const std::vector<AnswerRow>& rows, int per_row, std::uint64_t seed) override {
    std::vector<std::future<net::SamplingResponse>> calls;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      net::SamplingRequest r;
      r.model = model_;
      r.messages = rows[i].messages;
      r.n = per_row;
      r.temperature = sampling_.temperature;
      r.top_p = sampling_.top_p;
      r.max_tokens = sampling_.max_tokens;
      r.seed = static_cast<std::int64_t>((seed + i) & 0x7fffffffffffffffULL);
      calls.push_back(std::async(std::launch::async, [this, r] { return client_->chat(r); }));
    }
    Answers out;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      try {
        const auto response = calls[i].get();
        if (static_cast<int>(response.choices.size()) != per_row)
          throw core::Error(fmt::format("the server answered with {} choices, {} were asked for", response.choices.size(), per_row));
        const double tokens_each = response.usage.completion_tokens > 0 && per_row > 0
                                       ? static_cast<double>(response.usage.completion_tokens) / per_row
                                       : -1;
        for (int k = 0; k < per_row; ++k) {
          const auto& choice = response.choices[static_cast<std::size_t>(k)];
          // Usage is per request: with one choice it is that answer's token count.
          out.answers.push_back({i, k, choice.text, per_row == 1 ? static_cast<std::int64_t>(tokens_each) : -1,
                                 choice.finish_reason});
        }
      } catch (const std::exception& e) {
        if (out.failure.empty()) out.failure = e.what();
      }
    }
    return out;
  }

 private:
  std::string model_;
  SamplingSettings sampling_;
  std::unique_ptr<net::OpenAiClient> client_;
};

// What a prompt's retrieved examples were and what was left out (generations.jsonl's "retrieval").
json::object retrieval_json(const prompt::RetrievedExamples& r) {
  json::array examples, shortened, excluded;
  for (const auto& e : r.examples) {
    examples.push_back(json::string(e.id));
    if (e.shortened()) shortened.push_back(json::string(e.id));
  }
  for (const auto& id : r.excluded_ids) excluded.push_back(json::string(id));
  return {{"examples", std::move(examples)},
          {"shortened", std::move(shortened)},
          {"retrieved", r.retrieved},
          {"dropped", r.dropped},
          {"tokens", r.tokens},
          {"tokens_estimated", r.tokens_estimated},
          {"excluded_exact", r.excluded_exact},
          {"excluded_near", r.excluded_near},
          {"excluded", std::move(excluded)}};
}

}  // namespace

std::unique_ptr<AnswerSource> make_api_source(const ApiSamplingOptions& options, const SamplingSettings& sampling) {
  return std::make_unique<ApiSource>(options, sampling);
}

RunSampler::RunSampler(AnswerSource& source, fs::path run, int samples, std::uint64_t seed, prompt::PromptOptions prompt)
    : source_(source), run_(std::move(run)), samples_(samples), seed_(seed), prompt_(std::move(prompt)) {
  if (samples_ < 1) throw core::InvalidArgument("--samples must be at least 1");
}

int RunSampler::write(const std::vector<AnswerRow>& rows, int per_row, std::uint64_t seed, log::Progress& progress) {
  std::ofstream log(run_ / "generations.jsonl", std::ios::app);
  int written = 0;
  const auto given = source_.answer(rows, per_row, seed);
  for (const auto& a : given.answers) {
    const AnswerRow& r = rows.at(a.row);
    const int sample = r.sample + a.index;
    const fs::path file = kernel_file(run_, r.level, r.problem, sample, r.turn);
    core::write_file_atomically(file, a.text);
    json::object line{{"level", r.level},   {"problem", r.problem},       {"problem_id", r.problem_id},
                      {"sample", sample},   {"turn", r.turn},             {"file", file.filename().string()},
                      {"stop_reason", a.stop_reason}, {"answer", a.text}};
    if (a.num_tokens >= 0) line["num_tokens"] = a.num_tokens;
    if (r.retrieval) line["retrieval"] = retrieval_json(*r.retrieval);
    log << json::serialize(line) << "\n" << std::flush;
    ++written;
    progress.advance(1);
  }
  if (!given.failure.empty())
    throw core::Error(fmt::format("{} answers written, others missing: {} (run again to ask for the rest)", written,
                                  given.failure));
  return written;
}

int RunSampler::sample_problems(const std::vector<std::pair<int, core::Problem>>& problems) {
  std::vector<AnswerRow> todo;
  for (const auto& [level, p] : problems)
    for (int s = 0; s < samples_; ++s)
      if (!fs::exists(kernel_file(run_, level, p.number, s))) {
        std::shared_ptr<const prompt::RetrievedExamples> retrieval;
        auto messages = prompt::build_messages(p, prompt_);
        if (prompt_.examples) {
          retrieval = prompt_.examples->examples_for(p);
          std::cerr << "kbrl-eval: " << rag::describe_retrieval(p.id, *retrieval) << "\n";
          json::array conversation;
          for (const auto& m : messages) conversation.push_back(json::object{{"role", m.role}, {"content", m.content}});
          const json::object file{{"level", level},          {"problem", p.number},
                                  {"problem_id", p.id},      {"turn", 1},
                                  {"messages", conversation}, {"retrieval", retrieval_json(*retrieval)}};
          core::write_file_atomically(first_prompt_file(run_, level, p.number), json::serialize(file) + "\n");
        }
        todo.push_back({level, p.number, 0, 1, p.id, std::move(messages), std::move(retrieval)});
        break;
      }
  if (todo.empty()) return 0;
  log::Progress progress("sampling", static_cast<long>(todo.size()) * samples_);
  int written = 0;
  // One call per problem (its samples are the batch rows), so each sample's draw is a function
  // of (seed, level, problem, sample) whatever else is being sampled.
  for (const AnswerRow& row : todo) written += write({row}, samples_, seed_of(seed_, row.level, row.problem, 1), progress);
  progress.finish();
  return written;
}

int RunSampler::sample_prompts(int turn) {
  const std::regex name(R"(level_(\d{1,9})_problem_(\d{1,9})_sample_(\d{1,9})_turn_(\d{1,9})_prompt\.json)");
  std::map<std::pair<int, int>, std::vector<AnswerRow>> by_problem;  // sample order within a problem
  std::size_t total = 0;
  for (const auto& entry : fs::directory_iterator(run_)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name) || std::stoi(m[4]) != turn) continue;
    AnswerRow r{std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), turn, "", {}, nullptr};
    if (fs::exists(kernel_file(run_, r.level, r.problem, r.sample, turn))) continue;
    try {
      const auto o = core::parse_json(core::read_file(entry.path())).as_object();
      r.problem_id = std::string(o.at("problem_id").as_string());
      for (const auto& message : o.at("messages").as_array())
        r.messages.push_back({std::string(message.at("role").as_string()), std::string(message.at("content").as_string())});
    } catch (const std::exception& e) {
      throw core::Error(fmt::format("{}: not a conversation kbrl-eval wrote ({})", entry.path().string(), e.what()));
    }
    by_problem[{r.level, r.problem}].push_back(std::move(r));
    ++total;
  }
  if (total == 0) return 0;
  log::Progress progress(fmt::format("sampling turn {}", turn), static_cast<long>(total));
  int written = 0;
  for (auto& [key, rows] : by_problem) {
    std::sort(rows.begin(), rows.end(), [](const AnswerRow& a, const AnswerRow& b) { return a.sample < b.sample; });
    // One answer per conversation; each row is its own sample (AnswerRow::sample + 0).
    written += write(rows, 1, seed_of(seed_, key.first, key.second, turn), progress);
  }
  progress.finish();
  return written;
}

}  // namespace kbrl::apps
