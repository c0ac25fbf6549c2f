// Retrieval-augmented prompts: for each problem, the k corpus examples closest to it (leaks of the
// problem left out and counted), each cut to a per-example limit, placed before the task while
// they fit a token budget. kbrl-train's `prompt.retrieval.*` keys and kbrl-eval's `--retrieval-*`
// flags both fill RetrievalPromptConfig. docs/retrieval.md, "Prompts".
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "kbrl/core/types.hpp"
#include "kbrl/prompt/retrieved_examples.hpp"
#include "kbrl/rag/embedder_settings.hpp"
#include "kbrl/rag/leakage.hpp"
#include "kbrl/rag/retriever.hpp"

namespace kbrl::rag {

struct RetrievalPromptConfig {
  std::string index;  // an index file written by kbrl-index build; empty: no retrieval
  int k = 3;          // examples asked of the retriever (the seeds' raicl_k)
  // The corpus language of the examples: empty, the kernel language the prompt asks for; "any",
  // every language.
  std::string language;
  // Each side of an example (the PyTorch program, the kernel) is cut to this many characters
  // (0: no limit). The seeds cut each side at 10000 characters.
  int max_example_chars = 10000;
  // An example longer than this many tokens is cut further, both sides to one length, or left
  // out when that would leave less than kMinShownChars of a side (or max_example_chars, when
  // smaller) (0: no limit).
  int max_example_tokens = 0;
  // Tokens of the whole examples section at most: examples that do not fit are left out whole.
  int token_budget = 8192;
  LeakageConfig leakage;  // on by default
  // The embedder of a dense index (the one it was built with): its fields are "embeddings_endpoint",
  // "embeddings_model", ... (embedder_settings.hpp). A BM25 index takes none.
  EmbedderSettings embedder;
  bool enabled() const noexcept { return !index.empty(); }
};

// A side cut shorter than this says too little to be worth its tokens: such an example is left out.
inline constexpr std::size_t kMinShownChars = 256;

// What is wrong with a configuration: the field (as RetrievalPromptConfig names it: "index", "k",
// "token_budget", "near_threshold", "embeddings_endpoint", ...) and why. Negative numbers; with an
// index: k = 0, a budget of 0, a missing index file, embedder settings that do not fit the index
// (check_index_embedder: a dense index without them, a BM25 one with them); a near threshold
// outside (0, 1]; a shingle size below 1; bad embedder settings (check_embedder_settings).
// `name_of` names the other settings a message mentions (empty: the fields' own names).
struct RetrievalConfigProblem {
  std::string field;
  std::string message;
};
std::optional<RetrievalConfigProblem> check_retrieval_config(const RetrievalPromptConfig& config,
                                                             const SettingName& name_of = {});

// The corpus language examples are filtered on when the prompt asks for `asked` kernels: the
// configured one ("any": none, so empty), else asked's name ("cuda", "triton", "hip", "cpp").
std::string retrieval_language(const RetrievalPromptConfig& config, core::KernelLanguage asked);

// Counts a text's tokens as the policy's tokenizer would.
using TokenCounter = std::function<std::size_t(std::string_view)>;
// What is used without a tokenizer: one token per kEstimatedBytesPerToken bytes, rounded up.
inline constexpr std::size_t kEstimatedBytesPerToken = 3;
std::size_t estimate_tokens(std::string_view text);

// One problem's examples: the retriever's top config.k of `language` (empty: any) with leakage
// control as configured; each cut to max_example_chars per side and then to max_example_tokens;
// then, best first, each kept while the section with it (prompt::retrieved_examples_section)
// counts at most token_budget tokens, else left out whole. A pure function of its arguments.
// count_tokens empty: estimate_tokens (and tokens_estimated is set).
prompt::RetrievedExamples select_examples(const Retriever& retriever, std::string_view problem_source,
                                          const RetrievalPromptConfig& config, const std::string& language,
                                          const TokenCounter& count_tokens = {});

// The ExampleProvider of prompts (prompt::PromptOptions::examples): select_examples once per
// problem (by id and source), then the same object for every later prompt of that problem.
// Thread-safe.
class RetrievalExampleProvider final : public prompt::ExampleProvider {
 public:
  RetrievalExampleProvider(std::shared_ptr<const Retriever> retriever, RetrievalPromptConfig config,
                           std::string language, TokenCounter count_tokens = {});
  std::shared_ptr<const prompt::RetrievedExamples> examples_for(const core::Problem& problem) const override;

  const RetrievalPromptConfig& config() const noexcept { return config_; }
  const std::string& language() const noexcept { return language_; }  // empty: any
  bool counts_tokens() const noexcept { return static_cast<bool>(count_tokens_); }

 private:
  std::shared_ptr<const Retriever> retriever_;
  RetrievalPromptConfig config_;
  std::string language_;
  TokenCounter count_tokens_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<const prompt::RetrievedExamples>> cache_;
};

// The provider for prompts asking `asked` kernels: checks the configuration
// (check_retrieval_config; `name_of` turns a field into the key or flag the user wrote, for the
// message), loads config.index (load_retriever: a dense index with config.embedder, a checkpoint
// through `load_checkpoint`) and refuses an index without a single example of the language.
// Throws core::ConfigError.
std::shared_ptr<RetrievalExampleProvider> make_example_provider(
    const RetrievalPromptConfig& config, core::KernelLanguage asked, TokenCounter count_tokens = {},
    const SettingName& name_of = {}, const CheckpointEmbedderLoader& load_checkpoint = {});

// The log line of one problem's examples: "retrieval for <problem>: 2 of 3 examples in the prompt
// (relu, gelu (shortened); 1234 tokens), 1 over the budget; leaks excluded: 1 exact (copy_relu),
// 0 near".
std::string describe_retrieval(const std::string& problem_id, const prompt::RetrievedExamples& examples);

}  // namespace kbrl::rag
