#include "kbrl/train/sft_data.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <map>
#include <numbers>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "kbrl/core/cpus.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/core/json_reader.hpp"
#include "kbrl/prompt/answer_parser.hpp"
#include "kbrl/rag/corpus.hpp"
#include "kbrl/tokenizer/chat_tokens.hpp"

namespace kbrl::train {

namespace fs = std::filesystem;

prompt::PromptOptions task_prompt_options(const RunConfig& config) {
  prompt::PromptOptions o;
  o.language = core::parse_kernel_language(config.prompt.language);
  o.precision = core::parse_precision(config.prompt.precision);
  o.one_shot = config.prompt.one_shot;
  o.thinking_instruction = config.prompt.thinking;
  o.hardware = config.prompt.hardware;
  return o;
}

std::string kernel_answer(std::string_view program) {
  // A fence longer than any backtick run in the program, so that the program cannot close it.
  std::size_t longest = 0, run = 0;
  for (const char ch : program) {
    run = ch == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(std::max<std::size_t>(3, longest + 1), '`');
  std::string out = "<KERNEL>\n" + fence + "python\n";
  out += program;
  if (!program.empty() && program.back() != '\n') out += '\n';
  out += fence + "\n</KERNEL>";
  return out;
}

SftReadStats& SftReadStats::operator+=(const SftReadStats& o) {
  rows += o.rows;
  kept += o.kept;
  incorrect += o.incorrect;
  other_level += o.other_level;
  empty += o.empty;
  duplicates += o.duplicates;
  other_language += o.other_language;
  no_model_new += o.no_model_new;
  return *this;
}

std::string describe(const SftReadStats& s) {
  std::string out = fmt::format("{} row{}, {} kept", s.rows, s.rows == 1 ? "" : "s", s.kept);
  std::vector<std::string> parts;
  const auto add = [&](std::size_t n, const char* what) {
    if (n > 0) parts.push_back(fmt::format("{} {}", n, what));
  };
  add(s.incorrect, "not marked correct");
  add(s.other_level, "of other levels");
  add(s.empty, "empty");
  add(s.duplicates, "duplicates");
  add(s.other_language, "in another kernel language than prompt.language");
  add(s.no_model_new, "without class ModelNew");
  if (!parts.empty()) {
    out += "; left out: ";
    for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  }
  return out;
}

namespace {

// sft.* as rag's field mapping: the preset's fields, then the keys that are set.
rag::CorpusSpec corpus_spec(const RunConfig& config) {
  const SftSection& s = config.sft;
  rag::CorpusSpec spec = s.preset.empty() ? rag::CorpusSpec{} : rag::corpus_preset(s.preset);
  if (s.preset.empty()) spec.language = config.prompt.language;
  if (!s.source_field.empty()) spec.source_field = s.source_field;
  if (!s.kernel_field.empty()) spec.kernel_field = s.kernel_field;
  if (!s.id_fields.empty()) spec.id_fields = s.id_fields;
  if (!s.language.empty()) spec.language = s.language;
  if (!s.language_field.empty()) spec.language_field = s.language_field;
  if (!s.correct_field.empty()) {
    spec.correct_field = s.correct_field;
    spec.correct_only = true;
  }
  if (!s.level_field.empty()) spec.level_field = s.level_field;
  spec.levels = s.levels;
  // Kernels of any length: sft.max_tokens decides, in tokens.
  spec.max_source_chars = 0;
  spec.max_kernel_chars = 0;
  return spec;
}

std::string without_carriage_returns(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i)
    if (!(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) out += text[i];
  return out;
}

std::string_view trimmed_end(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

void read_corpus_examples(const RunConfig& config, const fs::path& file, std::vector<SftExample>& out,
                          SftReadStats& stats, std::vector<rag::CorpusEntry>& seen_entries, rag::IngestStats& ingest) {
  // Deduplication spans the files: rag appends to one entry list.
  const std::size_t first = seen_entries.size();
  const rag::IngestStats before = ingest;
  rag::read_corpus(file, corpus_spec(config), seen_entries, ingest);
  stats.rows += ingest.rows - before.rows;
  stats.incorrect += ingest.incorrect - before.incorrect;
  stats.other_level += ingest.other_level - before.other_level;
  stats.empty += ingest.empty - before.empty;
  stats.duplicates += ingest.duplicates - before.duplicates;
  const prompt::PromptOptions options = task_prompt_options(config);
  const std::string language = config.prompt.language;
  for (std::size_t i = first; i < seen_entries.size(); ++i) {
    const rag::CorpusEntry& e = seen_entries[i];
    if (e.language != language) {
      ++stats.other_language;
      continue;
    }
    if (!prompt::defines_top_level_class(e.kernel, "ModelNew")) {
      ++stats.no_model_new;
      continue;
    }
    SftExample x;
    x.id = e.id;
    x.origin = e.origin;
    core::Problem problem;
    problem.id = e.id;
    problem.source = e.source;
    problem.origin = e.origin;
    x.conversation = prompt::build_messages(problem, options);
    std::string program = without_carriage_returns(e.kernel);
    x.answer = kernel_answer(program);
    // What RL's format term reads back from this answer must be the program itself.
    const core::Completion parsed = prompt::parse_completion(x.answer);
    if (!parsed.format_ok || trimmed_end(parsed.kernel) != trimmed_end(program))
      throw core::Error(fmt::format("{}: the answer written for this program does not parse back to it (a kbrl bug)",
                                    e.origin));
    x.group = core::normalize_python_source(e.source);
    out.push_back(std::move(x));
    ++stats.kept;
  }
}

void read_prompt_answer_examples(const RunConfig& config, const fs::path& file, std::vector<SftExample>& out,
                                 SftReadStats& stats) {
  rag::CorpusSpec spec;
  spec.source_field = config.sft.prompt_field;
  spec.kernel_field = config.sft.answer_field;
  spec.id_fields = {"id"};
  spec.language = "text";
  spec.correct_only = false;
  spec.deduplicate = false;  // the dedup key reads both sides as code; prose is not
  rag::IngestStats ingest;
  std::vector<rag::CorpusEntry> entries;
  rag::read_corpus(file, spec, entries, ingest);
  stats.rows += ingest.rows;
  stats.empty += ingest.empty;
  for (auto& e : entries) {
    SftExample x;
    x.id = e.id;
    x.origin = e.origin;
    x.group = e.source;
    x.conversation = {{"user", std::move(e.source)}};
    x.answer = std::move(e.kernel);
    out.push_back(std::move(x));
    ++stats.kept;
  }
}

// JSONL {"messages": [{"role": ..., "content": ...}, ...], "id": optional}: the last message is
// the assistant's answer, the ones before it the conversation. Other keys are ignored (exports
// carry more columns).
void read_messages_examples(const fs::path& file, std::vector<SftExample>& out, SftReadStats& stats) {
  if (rag::detect_corpus_format(file) != rag::CorpusFormat::jsonl)
    throw core::ConfigError(file.string(), "sft.format", "messages are read from JSONL files (.jsonl, .ndjson, .json)");
  const std::string text = core::read_file(file);
  const std::string name = file.filename().string();
  std::size_t pos = 0;
  int line = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view row(text.data() + pos, end - pos);
    pos = end + 1;
    ++line;
    if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
    if (row.find_first_not_of(" \t") == std::string_view::npos) continue;
    ++stats.rows;
    const core::JsonReader r(fmt::format("{}:{}", file.string(), line));
    const boost::json::value doc = r.parse(row);
    const auto& o = r.object(doc, "");
    const auto* messages = core::JsonReader::member(o, "messages");
    if (messages == nullptr) r.fail("messages", "missing: each line needs {\"messages\": [{\"role\": ..., \"content\": ...}, ...]}");
    const auto& list = r.array(*messages, "messages");
    SftExample x;
    x.origin = r.where();
    x.id = fmt::format("{}:{}", name, line);
    if (const auto* id = core::JsonReader::member(o, "id"); id != nullptr)
      x.id = id->is_string() ? std::string(id->as_string()) : boost::json::serialize(*id);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string field = fmt::format("messages[{}]", i);
      const auto& m = r.object(list[i], field);
      const auto* role = core::JsonReader::member(m, "role");
      const auto* content = core::JsonReader::member(m, "content");
      if (role == nullptr) r.fail(field + ".role", "missing");
      if (content == nullptr) r.fail(field + ".content", "missing");
      x.conversation.push_back({r.string(*role, field + ".role"), r.string(*content, field + ".content")});
    }
    if (x.conversation.size() < 2 || x.conversation.back().role != "assistant")
      r.fail("messages", "needs the conversation, then the assistant's answer as the last message");
    x.answer = std::move(x.conversation.back().content);
    x.conversation.pop_back();
    if (x.answer.find_first_not_of(" \t\r\n") == std::string::npos) {
      ++stats.empty;
      continue;
    }
    for (const auto& m : x.conversation) x.group += m.role + "\n" + m.content + "\n";
    out.push_back(std::move(x));
    ++stats.kept;
  }
}

}  // namespace

std::vector<SftExample> read_sft_examples(const RunConfig& config, const std::vector<std::string>& files,
                                          SftReadStats& stats) {
  std::vector<SftExample> out;
  std::vector<rag::CorpusEntry> entries;  // corpus: every file's, for deduplication across files
  rag::IngestStats ingest;
  for (const auto& f : files) {
    if (!fs::is_regular_file(f)) throw core::ConfigError(f, "sft", "no such file");
    if (config.sft.format == "corpus") read_corpus_examples(config, f, out, stats, entries, ingest);
    else if (config.sft.format == "prompt_answer") read_prompt_answer_examples(config, f, out, stats);
    else if (config.sft.format == "messages") read_messages_examples(f, out, stats);
    else throw core::ConfigError("config", "sft.format", fmt::format("'{}' is not corpus, prompt_answer or messages", config.sft.format));
  }
  return out;
}

void split_sft_examples(std::vector<SftExample> examples, double fraction, std::uint64_t seed,
                        std::vector<SftExample>& train, std::vector<SftExample>& heldout) {
  if (!(fraction >= 0 && fraction < 1))
    throw core::InvalidArgument(fmt::format("sft: the held-out fraction {} is outside [0, 1)", fraction));
  std::map<std::string, std::string> rank;  // group -> sha256("<seed>\n<group>")
  for (const auto& x : examples)
    if (!rank.count(x.group)) rank.emplace(x.group, core::sha256_hex(fmt::format("{}\n{}", seed, x.group)));
  std::vector<std::pair<std::string, const std::string*>> order;  // (rank, group)
  for (const auto& [group, key] : rank) order.emplace_back(key, &group);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : *a.second < *b.second;
  });
  const auto held = static_cast<std::size_t>(std::llround(fraction * static_cast<double>(order.size())));
  std::map<std::string, bool> is_heldout;
  for (std::size_t i = 0; i < order.size(); ++i) is_heldout[*order[i].second] = i < held;
  for (auto& x : examples) (is_heldout.at(x.group) ? heldout : train).push_back(std::move(x));
}

tokenizer::TokenId answer_end_token(const prompt::ChatRenderer& renderer, const tokenizer::Tokenizer& tokenizer,
                                    const std::vector<std::int64_t>& fallback) {
  const auto ids = tokenizer::stop_sequence_ids(renderer, tokenizer);
  if (!ids.empty()) return ids.front();
  if (!fallback.empty()) return static_cast<tokenizer::TokenId>(fallback.front());
  throw core::InvalidArgument(fmt::format("sft: the chat template {} has no one-token end of turn and the checkpoint no "
                                          "end-of-sequence token: nothing can end an answer",
                                          renderer.name()));
}

namespace {

struct Tokenized {
  std::vector<std::string> ids;
  std::vector<SftSequence> sequences;
};

// Renders and encodes every example on `threads` threads (the tokenizer and the renderers are
// safe to share); over max_tokens: left out or cut, as sft.overlong says.
Tokenized tokenize_all(const std::vector<SftExample>& examples, const RunConfig& config,
                       const prompt::ChatRenderer& renderer, const tokenizer::Tokenizer& tokenizer,
                       tokenizer::TokenId end_of_turn, std::size_t& skipped, std::size_t& truncated) {
  const std::size_t n = examples.size();
  std::vector<SftSequence> seq(n);
  std::vector<char> keep(n, 1);
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto max_tokens = static_cast<std::size_t>(config.sft.max_tokens);
  const bool truncate = config.sft.overlong == "truncate";
  const auto work = [&](std::size_t begin, std::size_t end) {
    try {
      tokenizer::EncodeOptions plain;
      plain.split_special_tokens = true;  // an answer cannot open or close turns
      for (std::size_t i = begin; i < end; ++i) {
        const SftExample& x = examples[i];
        try {
          seq[i].prompt = tokenizer::render_chat_ids(renderer, tokenizer, x.conversation, /*add_generation_prompt=*/true);
        } catch (const core::InvalidArgument& e) {
          throw core::ConfigError(x.origin, "messages", e.what());
        }
        seq[i].answer = tokenizer.encode(x.answer, plain);
        seq[i].answer.push_back(end_of_turn);
        if (seq[i].prompt.size() + seq[i].answer.size() <= max_tokens) continue;
        if (truncate && seq[i].prompt.size() + 1 <= max_tokens) {
          seq[i].answer.resize(max_tokens - seq[i].prompt.size());
          seq[i].truncated = true;
        } else {
          keep[i] = 0;
        }
      }
    } catch (...) {
      const std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  const std::size_t threads = std::max<std::size_t>(1, std::min<std::size_t>(core::available_cpus(), n / 8));
  std::vector<std::thread> pool;
  const std::size_t chunk = (n + threads - 1) / std::max<std::size_t>(1, threads);
  for (std::size_t t = 1; t < threads; ++t)
    pool.emplace_back(work, std::min(n, t * chunk), std::min(n, (t + 1) * chunk));
  work(0, std::min(n, chunk));
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  Tokenized out;
  for (std::size_t i = 0; i < n; ++i) {
    if (!keep[i]) {
      ++skipped;
      continue;
    }
    if (seq[i].truncated) ++truncated;
    out.ids.push_back(examples[i].id);
    out.sequences.push_back(std::move(seq[i]));
  }
  return out;
}

std::string where_of(const std::vector<std::string>& files) {
  std::string out;
  for (const auto& f : files) out += (out.empty() ? "" : ", ") + f;
  return out;
}

}  // namespace

SftData prepare_sft_data(const RunConfig& config, const prompt::ChatRenderer& renderer,
                         const tokenizer::Tokenizer& tokenizer, tokenizer::TokenId end_of_turn) {
  SftData d;
  std::vector<SftExample> train, heldout;
  auto all = read_sft_examples(config, config.sft.data, d.read);
  const std::size_t read = all.size();
  if (config.sft.heldout_data.empty()) {
    split_sft_examples(std::move(all), config.sft.heldout_fraction, config.seed, train, heldout);
  } else {
    train = std::move(all);
    heldout = read_sft_examples(config, config.sft.heldout_data, d.heldout_read);
  }
  auto t = tokenize_all(train, config, renderer, tokenizer, end_of_turn, d.overlong_skipped, d.truncated);
  d.train_ids = std::move(t.ids);
  d.train = std::move(t.sequences);
  auto h = tokenize_all(heldout, config, renderer, tokenizer, end_of_turn, d.overlong_skipped, d.truncated);
  d.heldout_ids = std::move(h.ids);
  d.heldout = std::move(h.sequences);
  if (d.train.empty())
    throw core::ConfigError(where_of(config.sft.data), "sft.data",
                            fmt::format("no training example: {}{}{}", describe(d.read),
                                        train.size() > 0 ? fmt::format("; {} over sft.max_tokens ({}) left out",
                                                                       d.overlong_skipped, config.sft.max_tokens)
                                                         : std::string(),
                                        train.empty() && read > 0 ? "; every one was held out" : ""));
  return d;
}

Datum sft_datum(const SftSequence& s) {
  return completion_datum(std::vector<std::int64_t>(s.prompt.begin(), s.prompt.end()),
                          std::vector<std::int64_t>(s.answer.begin(), s.answer.end()));
}

std::int64_t sft_steps_per_epoch(std::size_t train_examples, int batch_size) {
  if (batch_size < 1) throw core::InvalidArgument("sft: batch_size must be at least 1");
  return static_cast<std::int64_t>((train_examples + static_cast<std::size_t>(batch_size) - 1) /
                                   static_cast<std::size_t>(batch_size));
}

std::int64_t sft_total_steps(const SftSection& sft, std::size_t train_examples) {
  if (sft.max_steps > 0) return sft.max_steps;
  return sft_steps_per_epoch(train_examples, sft.batch_size) * sft.num_epochs;
}

std::vector<std::size_t> sft_batch(const SftSection& sft, std::uint64_t seed, std::size_t n, std::int64_t step) {
  const std::int64_t per_epoch = sft_steps_per_epoch(n, sft.batch_size);
  if (per_epoch < 1) throw core::InvalidArgument("sft: no training examples");
  if (step < 0) throw core::InvalidArgument("sft: negative step");
  const std::int64_t epoch = step / per_epoch, within = step % per_epoch;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (sft.shuffle) {
    // A fresh generator per epoch, seeded by (seed, epoch), as KernelBenchDataset's batches.
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(epoch) + 1);
    for (std::size_t i = order.size(); i > 1; --i) {
      std::uniform_int_distribution<std::size_t> pick(0, i - 1);
      std::swap(order[i - 1], order[pick(rng)]);
    }
  }
  const auto begin = static_cast<std::size_t>(within) * static_cast<std::size_t>(sft.batch_size);
  const auto end = std::min(n, begin + static_cast<std::size_t>(sft.batch_size));
  return {order.begin() + static_cast<std::ptrdiff_t>(begin), order.begin() + static_cast<std::ptrdiff_t>(end)};
}

double sft_learning_rate(const RunConfig& config, std::int64_t step, std::int64_t total_steps) {
  const SftSection& s = config.sft;
  const double base = s.learning_rate > 0 ? s.learning_rate : config.train.learning_rate;
  const std::int64_t warmup = s.warmup_steps;
  if (step < warmup) return base * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (s.lr_schedule == "constant") return base;
  const double span = static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup));
  const double progress = std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0);
  if (s.lr_schedule == "linear") return base * (1.0 - progress);
  if (s.lr_schedule == "cosine") return base * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  throw core::InvalidArgument(fmt::format("sft: lr_schedule '{}' is not constant, linear or cosine", s.lr_schedule));
}

}  // namespace kbrl::train
