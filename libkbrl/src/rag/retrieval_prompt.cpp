#include "kbrl/rag/retrieval_prompt.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "kbrl/core/error.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/rag/corpus_index.hpp"

namespace kbrl::rag {

namespace {

prompt::RetrievedExample cut_example(const CorpusEntry& entry, double score, std::size_t max_chars) {
  prompt::RetrievedExample ex;
  ex.id = entry.id;
  ex.language = entry.language;
  ex.score = score;
  ex.source = prompt::shorten_code(entry.source, max_chars, "python", ex.source_cut_chars);
  ex.kernel = prompt::shorten_code(entry.kernel, max_chars, prompt::kernel_fence_language(entry.language, entry.kernel),
                                   ex.kernel_cut_chars);
  return ex;
}

// The example with both sides cut to the longest one length (at least kMinShownChars, or
// max_example_chars when that is smaller; at most what max_example_chars allows) whose text fits
// `limit` tokens; none when even the shortest does not.
std::optional<prompt::RetrievedExample> fit_tokens(const CorpusEntry& entry, double score, std::size_t max_chars,
                                                   std::size_t limit, std::size_t number, const TokenCounter& count) {
  const auto fits = [&](const prompt::RetrievedExample& ex) {
    return count(prompt::retrieved_example_text(ex, number)) <= limit;
  };
  const std::size_t floor = max_chars > 0 ? std::min(kMinShownChars, max_chars) : kMinShownChars;
  std::size_t hi = std::max(entry.source.size(), entry.kernel.size());
  if (max_chars > 0) hi = std::min(hi, max_chars);
  if (hi <= floor) return std::nullopt;  // as short as it may get, and still over the limit
  auto shortest = cut_example(entry, score, floor);
  if (!fits(shortest)) return std::nullopt;
  // The largest length that fits: token counts grow with the length (up to a line end's snap).
  std::size_t lo = floor;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo + 1) / 2;
    if (fits(cut_example(entry, score, mid))) lo = mid;
    else hi = mid - 1;
  }
  auto ex = cut_example(entry, score, lo);
  if (fits(ex)) return ex;
  return shortest;
}

std::string join_ids(const std::vector<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : ", ") + id;
  return out;
}

}  // namespace

std::optional<RetrievalConfigProblem> check_retrieval_config(const RetrievalPromptConfig& c, const SettingName& name_of) {
  const auto problem = [](std::string field, std::string message) {
    return std::optional<RetrievalConfigProblem>(RetrievalConfigProblem{std::move(field), std::move(message)});
  };
  if (c.k < 0) return problem("k", fmt::format("{} is below 0", c.k));
  if (c.max_example_chars < 0) return problem("max_example_chars", fmt::format("{} is below 0 (0: no limit)", c.max_example_chars));
  if (c.max_example_tokens < 0)
    return problem("max_example_tokens", fmt::format("{} is below 0 (0: no limit)", c.max_example_tokens));
  if (c.token_budget < 0) return problem("token_budget", fmt::format("{} is below 0", c.token_budget));
  if (!(c.leakage.near_threshold > 0 && c.leakage.near_threshold <= 1))
    return problem("near_threshold", fmt::format("{} is outside (0, 1]", c.leakage.near_threshold));
  if (c.leakage.shingle_size < 1) return problem("shingle_size", fmt::format("{} is below 1", c.leakage.shingle_size));
  if (const auto p = check_embedder_settings(c.embedder, name_of)) return problem(p->field, p->message);
  if (!c.enabled()) return std::nullopt;
  if (c.k == 0)
    return problem("k", "0 examples with an index: give k >= 1, or no index to turn retrieval off");
  if (c.token_budget == 0)
    return problem("token_budget", "0 leaves no room for an example: give a budget, or no index to turn retrieval off");
  std::error_code ec;
  if (!std::filesystem::exists(c.index, ec))
    return problem("index", fmt::format("{}: no such file (build one with kbrl-index build)", c.index));
  if (const auto p = check_index_embedder(c.index, c.embedder, name_of)) return problem(p->field, p->message);
  return std::nullopt;
}

std::string retrieval_language(const RetrievalPromptConfig& config, core::KernelLanguage asked) {
  if (config.language == "any") return {};
  if (!config.language.empty()) return config.language;
  return std::string(core::to_string(asked));
}

std::size_t estimate_tokens(std::string_view text) {
  return (text.size() + kEstimatedBytesPerToken - 1) / kEstimatedBytesPerToken;
}

prompt::RetrievedExamples select_examples(const Retriever& retriever, std::string_view problem_source,
                                          const RetrievalPromptConfig& config, const std::string& language,
                                          const TokenCounter& count_tokens) {
  const TokenCounter count = count_tokens ? count_tokens : TokenCounter(estimate_tokens);
  prompt::RetrievedExamples out;
  out.tokens_estimated = !count_tokens;
  SearchOptions options;
  options.k = static_cast<std::size_t>(std::max(0, config.k));
  options.language = language;
  options.leakage = config.leakage;
  const SearchResult found = retriever.search(problem_source, options);
  const auto& entries = retriever.entries();
  out.retrieved = found.hits.size();
  for (const auto& e : found.excluded) {
    (e.kind == LeakKind::exact ? out.excluded_exact : out.excluded_near) += 1;
    out.excluded_ids.push_back(entries.at(e.entry).id);
  }
  const auto max_chars = static_cast<std::size_t>(std::max(0, config.max_example_chars));
  const auto max_tokens = static_cast<std::size_t>(std::max(0, config.max_example_tokens));
  const auto budget = static_cast<std::size_t>(std::max(0, config.token_budget));
  for (const auto& hit : found.hits) {
    const CorpusEntry& entry = entries.at(hit.entry);
    const std::size_t number = out.examples.size() + 1;
    std::optional<prompt::RetrievedExample> ex = cut_example(entry, hit.score, max_chars);
    if (max_tokens > 0 && count(prompt::retrieved_example_text(*ex, number)) > max_tokens)
      ex = fit_tokens(entry, hit.score, max_chars, max_tokens, number, count);
    if (!ex) {
      ++out.dropped;
      continue;
    }
    out.examples.push_back(std::move(*ex));
    // The section as the prompt will hold it, counted whole: token counts of concatenated texts
    // need not add up.
    const std::size_t tokens = count(prompt::retrieved_examples_section(out.examples));
    if (tokens > budget) {
      out.examples.pop_back();
      ++out.dropped;
      continue;
    }
    out.tokens = tokens;
  }
  return out;
}

RetrievalExampleProvider::RetrievalExampleProvider(std::shared_ptr<const Retriever> retriever,
                                                   RetrievalPromptConfig config, std::string language,
                                                   TokenCounter count_tokens)
    : retriever_(std::move(retriever)),
      config_(std::move(config)),
      language_(std::move(language)),
      count_tokens_(std::move(count_tokens)) {
  if (!retriever_) throw core::InvalidArgument("RetrievalExampleProvider: no retriever");
}

std::shared_ptr<const prompt::RetrievedExamples> RetrievalExampleProvider::examples_for(const core::Problem& problem) const {
  const std::string key = problem.id + '\n' + core::sha256_hex(problem.source);
  std::lock_guard lock(mutex_);  // one selection per problem, even when its first prompts are built at once
  auto& slot = cache_[key];
  if (!slot)
    slot = std::make_shared<const prompt::RetrievedExamples>(
        select_examples(*retriever_, problem.source, config_, language_, count_tokens_));
  return slot;
}

std::shared_ptr<RetrievalExampleProvider> make_example_provider(
    const RetrievalPromptConfig& config, core::KernelLanguage asked, TokenCounter count_tokens,
    const SettingName& name_of, const CheckpointEmbedderLoader& load_checkpoint) {
  const auto name = [&](const std::string& field) { return name_of ? name_of(field) : field; };
  if (const auto problem = check_retrieval_config(config, name_of))
    throw core::ConfigError("retrieval settings", name(problem->field), problem->message);
  if (!config.enabled()) throw core::InvalidArgument("make_example_provider: no index given (retrieval is off)");
  std::shared_ptr<const Retriever> retriever = load_retriever(config.index, config.embedder, load_checkpoint, name_of);
  const std::string language = retrieval_language(config, asked);
  if (!language.empty()) {
    std::map<std::string, std::size_t> languages;
    for (const auto& e : retriever->entries()) ++languages[e.language];
    if (languages.count(language) == 0) {
      std::string held;
      for (const auto& [l, n] : languages) held += fmt::format("{}{} {}", held.empty() ? "" : ", ", l, n);
      throw core::ConfigError(config.index, name("language"),
                              fmt::format("the index holds no {} examples (it holds: {}); set the retrieval language "
                                          "to one of those, or any",
                                          language, held.empty() ? "none" : held));
    }
  }
  return std::make_shared<RetrievalExampleProvider>(std::move(retriever), config, language, std::move(count_tokens));
}

std::string describe_retrieval(const std::string& problem_id, const prompt::RetrievedExamples& r) {
  std::vector<std::string> shown;
  for (const auto& e : r.examples) shown.push_back(e.shortened() ? e.id + " (shortened)" : e.id);
  std::string out = fmt::format("retrieval for {}: {} of {} examples in the prompt", problem_id, r.examples.size(),
                                r.retrieved);
  if (!r.examples.empty())
    out += fmt::format(" ({}; {} tokens{})", join_ids(shown), r.tokens, r.tokens_estimated ? ", estimated" : "");
  if (r.dropped > 0) out += fmt::format(", {} left out over the token limits", r.dropped);
  out += fmt::format("; leaks excluded: {} exact, {} near", r.excluded_exact, r.excluded_near);
  if (!r.excluded_ids.empty()) out += fmt::format(" ({})", join_ids(r.excluded_ids));
  return out;
}

}  // namespace kbrl::rag
