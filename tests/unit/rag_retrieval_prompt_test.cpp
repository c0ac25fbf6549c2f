// Retrieved examples in prompts (kbrl/rag/retrieval_prompt.hpp, kbrl/prompt/retrieved_examples.hpp)
// on the bundled corpus, with a real byte-level BPE tokenizer counting the budget: the section
// never exceeds its budget and leaves examples out whole, the task is always there, each example
// is cut to its own limits first, a problem gets the same examples every time, leaks are left out
// and their counts reach the env's metrics, the step's metrics and the run log's lines, and bad
// settings are refused with the field named.
#include <kbrl/core/error.hpp>
#include <kbrl/eval/scripted_evaluator.hpp>
#include <kbrl/env/kernelbench_env.hpp>
#include <kbrl/prompt/retrieved_examples.hpp>
#include <kbrl/prompt/task_prompt.hpp>
#include <kbrl/rag/corpus_index.hpp>
#include <kbrl/rag/retrieval_prompt.hpp>
#include <kbrl/tokenizer/tokenizer.hpp>
#include <kbrl/train/metrics.hpp>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "catch.hpp"
#include "rag_fixtures.hpp"

using namespace kbrl;
using namespace kbrl::rag;
using kbrl_rag_test::contains;

namespace {

const tokenizer::Tokenizer& test_tokenizer() {
  static const auto tok =
      tokenizer::Tokenizer::from_file(std::filesystem::path(KBRL_SOURCE_DIR) / "tests/data/tokenizer/qwen2.json");
  return tok;
}

TokenCounter counter() {
  return [](std::string_view text) { return test_tokenizer().encode(text).size(); };
}

std::shared_ptr<const CorpusIndex> bundled_index() {
  static const auto index = std::make_shared<const CorpusIndex>(CorpusIndex::build(kbrl_rag_test::bundled_corpus()));
  return index;
}

// A labeled file's record (queries.jsonl, leakage.jsonl) by id.
std::string source_of(const std::string& file, const std::string& id) {
  for (const auto& o : kbrl_rag_test::read_jsonl_objects(kbrl_rag_test::data_dir() / file))
    if (o.at("id").as_string() == id) return std::string(o.at("source").as_string());
  throw std::runtime_error("no record " + id + " in " + file);
}

core::Problem problem_of(const std::string& id, const std::string& source) {
  core::Problem p;
  p.id = id;
  p.name = id;
  p.source = source;
  return p;
}

const CorpusEntry& entry_named(const std::string& id) {
  for (const auto& e : bundled_index()->entries())
    if (e.id == id) return e;
  throw std::runtime_error("no entry " + id);
}

RetrievalPromptConfig config(int k, int budget) {
  RetrievalPromptConfig c;
  c.index = "bundled";  // select_examples and the provider take the retriever itself
  c.k = k;
  c.token_budget = budget;
  c.max_example_chars = 0;
  return c;
}

std::vector<std::string> ids_of(const prompt::RetrievedExamples& r) {
  std::vector<std::string> out;
  for (const auto& e : r.examples) out.push_back(e.id);
  return out;
}

}  // namespace

TEST_CASE("the examples section fits its token budget, leaving examples out whole and never the task") {
  const auto index = bundled_index();
  const std::string source = source_of("queries.jsonl", "softmax_temperature");
  SearchOptions search;
  search.k = 5;
  const auto hits = index->search(source, search).hits;
  REQUIRE(hits.size() == 5);
  std::vector<std::string> ranked;
  std::vector<prompt::RetrievedExample> whole;
  std::vector<std::size_t> prefix_tokens;  // the section of the n best, whole
  for (const auto& h : hits) {
    const auto& e = index->entries()[h.entry];
    ranked.push_back(e.id);
    whole.push_back({e.id, e.language, e.source, e.kernel, 0, 0, h.score});
    prefix_tokens.push_back(test_tokenizer().encode(prompt::retrieved_examples_section(whole)).size());
  }
  const auto count = counter();
  std::size_t smallest_one = SIZE_MAX;  // the section of the single example that costs least
  for (const auto& ex : whole) smallest_one = std::min(smallest_one, count(prompt::retrieved_examples_section({ex})));

  const core::Problem problem = problem_of("queries/softmax_temperature", source);
  prompt::PromptOptions plain;
  const std::string without = prompt::user_prompt(problem, plain);
  const std::vector<std::size_t> budgets = {1,
                                            smallest_one - 1,
                                            smallest_one,
                                            prefix_tokens[0],
                                            prefix_tokens[1] - 1,
                                            prefix_tokens[1],
                                            prefix_tokens[2],
                                            prefix_tokens[3] + 1,
                                            prefix_tokens[4],
                                            1000000};
  for (const std::size_t budget : budgets) {
    INFO("budget " << budget);
    const auto c = config(5, static_cast<int>(budget));
    const auto r = select_examples(*index, source, c, "", count);
    CHECK(r.retrieved == 5);
    CHECK(r.examples.size() + r.dropped == 5);
    CHECK_FALSE(r.tokens_estimated);
    const std::string section = prompt::retrieved_examples_section(r.examples);
    CHECK(r.tokens == count(section));
    CHECK(r.tokens <= budget);
    // Whole examples only, in the retriever's order.
    std::size_t at = 0;
    for (const auto& e : r.examples) {
      CHECK_FALSE(e.shortened());
      CHECK(e.source == entry_named(e.id).source);
      CHECK(e.kernel == entry_named(e.id).kernel);
      const auto pos = std::find(ranked.begin(), ranked.end(), e.id) - ranked.begin();
      CHECK(static_cast<std::size_t>(pos) >= at);
      at = static_cast<std::size_t>(pos) + 1;
    }
    if (budget < smallest_one) CHECK(r.examples.empty());
    if (budget < smallest_one) CHECK(r.tokens == 0);
    for (std::size_t n = 1; n <= 5; ++n)
      if (budget == prefix_tokens[n - 1]) CHECK(ids_of(r) == std::vector<std::string>(ranked.begin(), ranked.begin() + n));
    if (budget >= prefix_tokens[4]) CHECK(ids_of(r) == ranked);

    // The prompt: the section first, then the task, the program and the answer format, all there.
    prompt::PromptOptions with;
    with.examples = std::make_shared<RetrievalExampleProvider>(index, c, "", count);
    const std::string user = prompt::user_prompt(problem, with);
    CHECK(user == section + without);
    CHECK(contains(user, "# Task\n"));
    CHECK(contains(user, problem.source));
    CHECK(contains(user, "# Answer format"));
    if (!r.examples.empty()) CHECK(user.rfind("# Similar solved examples\n", 0) == 0);
  }
}

TEST_CASE("without a tokenizer the budget is counted with the estimate") {
  const std::string source = source_of("queries.jsonl", "conv_relu");
  const auto r = select_examples(*bundled_index(), source, config(3, 700), "");
  CHECK(r.tokens_estimated);
  CHECK(r.tokens == estimate_tokens(prompt::retrieved_examples_section(r.examples)));
  CHECK(r.tokens <= 700);
  CHECK(estimate_tokens("") == 0);
  CHECK(estimate_tokens("abc") == 1);
  CHECK(estimate_tokens("abcd") == 2);
  CHECK(contains(describe_retrieval("q", r), "tokens, estimated"));
}

TEST_CASE("each example is cut to its own limits first, and says so") {
  const auto index = bundled_index();
  const std::string source = source_of("queries.jsonl", "mae_loss");  // long CUDA kernels rank high
  auto c = config(5, 1000000);
  c.max_example_chars = 300;
  const auto r = select_examples(*index, source, c, "", counter());
  REQUIRE(r.examples.size() == 5);
  bool cut_kernel = false;
  for (const auto& e : r.examples) {
    INFO(e.id);
    const auto& entry = entry_named(e.id);
    const std::string fence = prompt::kernel_fence_language(e.language, entry.kernel);
    const std::string comment = fence == "python" ? "# ..." : "// ...";
    if (entry.kernel.size() > 300) {
      cut_kernel = true;
      CHECK(e.kernel_cut_chars > 0);
      const std::size_t kept = entry.kernel.size() - e.kernel_cut_chars;
      CHECK(kept <= 300);
      CHECK(kept >= 300 - 300 / 4);  // a line end late enough, or the limit itself
      CHECK(e.kernel.rfind(entry.kernel.substr(0, kept), 0) == 0);
      CHECK(contains(e.kernel, comment + " (" + std::to_string(e.kernel_cut_chars) + " more characters not shown)"));
    } else {
      CHECK(e.kernel == entry.kernel);
    }
    if (entry.source.size() > 300) CHECK(contains(e.source, "# ... ("));
    CHECK(e.shortened() == (entry.source.size() > 300 || entry.kernel.size() > 300));
  }
  CHECK(cut_kernel);
  CHECK(contains(describe_retrieval("q", r), "(shortened)"));

  // A token limit per example: each kept example's text is within it, or it is left out.
  c.max_example_chars = 0;
  for (const int limit : {120, 250, 400}) {
    INFO("max_example_tokens " << limit);
    c.max_example_tokens = limit;
    const auto t = select_examples(*index, source, c, "", counter());
    CHECK(t.examples.size() + t.dropped == 5);
    for (std::size_t i = 0; i < t.examples.size(); ++i) {
      CHECK(counter()(prompt::retrieved_example_text(t.examples[i], i + 1)) <= static_cast<std::size_t>(limit));
      // A side is never cut below kMinShownChars (less the line-end snap of shorten_code).
      const auto& entry = entry_named(t.examples[i].id);
      if (t.examples[i].source_cut_chars > 0)
        CHECK(entry.source.size() - t.examples[i].source_cut_chars >= kMinShownChars - kMinShownChars / 4);
      if (t.examples[i].kernel_cut_chars > 0)
        CHECK(entry.kernel.size() - t.examples[i].kernel_cut_chars >= kMinShownChars - kMinShownChars / 4);
    }
  }
  c.max_example_tokens = 10;  // shorter than any example's heading and fences
  const auto none = select_examples(*index, source, c, "", counter());
  CHECK(none.examples.empty());
  CHECK(none.dropped == 5);
}

TEST_CASE("shorten_code cuts at a line end, else mid-line on a character boundary, and counts what it cut") {
  std::size_t cut = 0;
  CHECK(prompt::shorten_code("abc\ndef\n", 0, "python", cut) == "abc\ndef\n");
  CHECK(cut == 0);
  CHECK(prompt::shorten_code("abc\ndef\n", 8, "python", cut) == "abc\ndef\n");
  CHECK(cut == 0);
  // A line end in the last quarter of the limit: whole lines.
  CHECK(prompt::shorten_code("0123456\n89abcdef\n", 10, "python", cut) ==
        "0123456\n# ... (9 more characters not shown)\n");
  CHECK(cut == 9);
  // None there: mid-line, at the limit.
  CHECK(prompt::shorten_code("0\n23456789abcdef", 10, "cuda", cut) == "0\n23456789\n// ... (6 more characters not shown)\n");
  CHECK(cut == 6);
  // Never inside a UTF-8 character: "é" is two bytes, the limit falls between them.
  CHECK(prompt::shorten_code("abcdefghi\xC3\xA9xyz", 10, "cuda", cut) == "abcdefghi\n// ... (5 more characters not shown)\n");
  CHECK(cut == 5);
  CHECK(prompt::kernel_fence_language("triton", "import triton\n") == "python");
  CHECK(prompt::kernel_fence_language("cuda", "# a comment\nimport torch\n") == "python");
  CHECK(prompt::kernel_fence_language("cuda", "#include <torch/extension.h>\n__global__ void k() {}\n") == "cuda");
  CHECK(prompt::kernel_fence_language("hip", "#include <hip/hip_runtime.h>\n") == "cpp");
}

TEST_CASE("a problem gets the same examples every time, chosen once") {
  const auto index = bundled_index();
  const auto c = config(3, 2000);
  const auto count = counter();
  std::size_t counted = 0;
  const TokenCounter counting = [&](std::string_view text) {
    ++counted;
    return count(text);
  };
  RetrievalExampleProvider provider(index, c, "", counting);
  const core::Problem p = problem_of("q/linear_gelu", source_of("queries.jsonl", "linear_gelu"));
  const auto first = provider.examples_for(p);
  const std::size_t after_first = counted;
  CHECK(after_first > 0);
  CHECK(provider.examples_for(p) == first);  // the cached object
  CHECK(counted == after_first);
  prompt::PromptOptions o;
  o.examples = std::make_shared<RetrievalExampleProvider>(index, c, "", count);
  const std::string prompt = prompt::user_prompt(p, o);
  CHECK(prompt::user_prompt(p, o) == prompt);
  // Another provider over the same index and settings (another process, say) chooses the same.
  RetrievalExampleProvider again(index, c, "", count);
  CHECK(ids_of(*again.examples_for(p)) == ids_of(*first));
  CHECK(again.examples_for(p)->tokens == first->tokens);
  // Another problem is another selection; another source under the same id too.
  const core::Problem q = problem_of("q/cumprod", source_of("queries.jsonl", "cumprod"));
  CHECK(ids_of(*provider.examples_for(q)) != ids_of(*first));
  const core::Problem renamed = problem_of("q/linear_gelu", source_of("queries.jsonl", "cumprod"));
  CHECK(ids_of(*provider.examples_for(renamed)) == ids_of(*provider.examples_for(q)));
  // The language filter.
  RetrievalExampleProvider triton(index, c, "triton", count);
  for (const auto& e : triton.examples_for(p)->examples) CHECK(e.language == "triton");
}

TEST_CASE("leaks of the problem are left out of its prompt and counted up to the step's metrics and log") {
  const auto index = bundled_index();
  const auto c = config(3, 100000);
  const auto provider = std::make_shared<RetrievalExampleProvider>(index, c, "", counter());
  const core::Problem copy = problem_of("leaks/copy_relu", source_of("leakage.jsonl", "copy_relu"));
  const auto r = provider->examples_for(copy);
  CHECK(r->excluded_exact == 1);
  CHECK(r->excluded_near == 0);
  CHECK(r->excluded_ids == std::vector<std::string>{"relu"});
  CHECK(r->examples.size() == 3);
  for (const auto& e : r->examples) CHECK(e.id != "relu");
  prompt::PromptOptions o;
  o.examples = provider;
  const std::string user = prompt::user_prompt(copy, o);
  CHECK_FALSE(contains(user, ": relu\n"));
  CHECK_FALSE(contains(user, entry_named("relu").kernel));
  CHECK(contains(describe_retrieval(copy.id, *r), "leaks excluded: 1 exact, 0 near (relu)"));

  const core::Problem near = problem_of("leaks/functional_softmax", source_of("leakage.jsonl", "functional_softmax"));
  CHECK(provider->examples_for(near)->excluded_near == 1);
  CHECK(provider->examples_for(near)->excluded_ids == std::vector<std::string>{"softmax"});

  // Off (for inspection only): the copy is the best match.
  auto off = c;
  off.leakage.enabled = false;
  const auto shown = select_examples(*index, copy.source, off, "", counter());
  CHECK(shown.examples.at(0).id == "relu");
  CHECK(shown.excluded_exact == 0);

  // The env reports the first prompt's counts; the step's metrics and the run log's line follow.
  eval::ScriptedEvaluator evaluator;
  env::EnvOptions eo;
  eo.prompt.examples = provider;
  env::KernelBenchEnv e(copy, eo, evaluator, "t");
  const auto obs = e.initial_observation();
  CHECK(obs.messages.at(1).content == user);
  const auto step = e.step(core::Completion{}).get();  // no program: a format failure, nothing evaluated
  CHECK(step.metrics.at("retrieval/examples") == 3);
  CHECK(step.metrics.at("retrieval/excluded_exact") == 1);
  CHECK(step.metrics.at("retrieval/excluded_near") == 0);
  CHECK(step.metrics.at("retrieval/dropped") == 0);
  CHECK(step.metrics.at("retrieval/tokens") == static_cast<double>(r->tokens));

  core::TrajectoryGroup group;
  group.problem_id = copy.id;
  for (int i = 0; i < 2; ++i) {
    core::Trajectory t;
    t.problem_id = copy.id;
    core::Transition tr;
    tr.metrics = step.metrics;
    t.transitions.push_back(tr);
    group.trajectories.push_back(t);
  }
  core::TrajectoryGroup plain;  // a group whose prompt had no examples
  plain.problem_id = "other";
  plain.trajectories.push_back({"other", {core::Transition{}}});
  boost::json::object m;
  train::add_rollout_metrics(m, {group, plain}, false);
  CHECK(m.at("retrieval/examples").as_double() == 3);
  CHECK(m.at("retrieval/excluded_exact").as_double() == 1);
  CHECK(m.at("retrieval/excluded_near").as_double() == 0);
  CHECK(m.contains("retrieval/tokens"));
  boost::json::object none;
  train::add_rollout_metrics(none, {plain}, false);
  CHECK_FALSE(none.contains("retrieval/examples"));
  std::set<std::string> noted;
  const auto lines = train::retrieval_notes({group, plain}, noted);
  REQUIRE(lines.size() == 1);
  CHECK(contains(lines[0], "retrieval for leaks/copy_relu: 3 examples in the prompt"));
  CHECK(contains(lines[0], "leaks excluded: 1 exact, 0 near"));
  CHECK(train::retrieval_notes({group}, noted).empty());  // once per problem
}

TEST_CASE("bad retrieval settings are refused with the field named") {
  const auto problem = [](RetrievalPromptConfig c) {
    const auto p = check_retrieval_config(c);
    return p ? p->field + ": " + p->message : std::string("fine");
  };
  RetrievalPromptConfig off;
  CHECK(problem(off) == "fine");
  off.k = 0;
  CHECK(problem(off) == "fine");  // no index: retrieval is off, k is not read
  RetrievalPromptConfig c;
  c.index = (kbrl_rag_test::data_dir() / "no_such.kbrlidx").string();
  CHECK(contains(problem(c), "index: "));
  CHECK(contains(problem(c), "no such file"));
  const auto dir = kbrl_rag_test::fresh_dir("retrieval_prompt_config");
  const auto index_file = dir / "bundled.kbrlidx";
  bundled_index()->save(index_file);
  c.index = index_file.string();
  CHECK(problem(c) == "fine");
  auto k0 = c;
  k0.k = 0;
  CHECK(contains(problem(k0), "k: 0 examples with an index"));
  auto negative = c;
  negative.token_budget = -1;
  CHECK(problem(negative) == "token_budget: -1 is below 0");
  auto zero = c;
  zero.token_budget = 0;
  CHECK(contains(problem(zero), "token_budget: 0 leaves no room"));
  auto chars = c;
  chars.max_example_chars = -5;
  CHECK(contains(problem(chars), "max_example_chars: -5 is below 0"));
  auto near = c;
  near.leakage.near_threshold = 1.5;
  CHECK(contains(problem(near), "near_threshold: 1.5 is outside (0, 1]"));
  auto shingle = c;
  shingle.leakage.shingle_size = 0;
  CHECK(contains(problem(shingle), "shingle_size"));

  // The provider: the index loaded through load_retriever; the language asked must be in it.
  const auto flag = [](const std::string& field) { return "--retrieval-" + field; };
  const auto provider = make_example_provider(c, core::KernelLanguage::triton, counter(), flag);
  CHECK(provider->language() == "triton");
  CHECK(provider->counts_tokens());
  const auto e = kbrl_rag_test::config_error_of([&] { make_example_provider(c, core::KernelLanguage::cpp, {}, flag); });
  CHECK(e.field() == "--retrieval-language");
  CHECK(contains(e.what(), "holds no cpp examples (it holds: cuda 25, triton 11)"));
  auto any = c;
  any.language = "any";
  CHECK(make_example_provider(any, core::KernelLanguage::cpp)->language().empty());
  CHECK(kbrl_rag_test::config_error_of([&] { make_example_provider(k0, core::KernelLanguage::cuda, {}, flag); }).field() ==
        "--retrieval-k");
  const auto not_index = dir / "corpus.jsonl";
  kbrl_rag_test::write_file(not_index, "{}\n");
  auto wrong = c;
  wrong.index = not_index.string();
  CHECK(contains(kbrl_rag_test::config_error_of([&] { load_retriever(not_index); }).what(), "not a kbrl retrieval index"));
  CHECK(contains(kbrl_rag_test::config_error_of([&] { load_retriever(dir / "missing"); }).what(), "no such file"));
  CHECK(contains(kbrl_rag_test::config_error_of([&] { load_retriever(dir); }).what(), "not a file"));
}
