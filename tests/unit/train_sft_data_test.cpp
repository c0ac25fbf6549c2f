// The examples of kbrl-train's train.mode=sft (train/sft_data.hpp): the sft section's checks, a
// corpus pair asked exactly as RL asks its problem and answered in the format the answer parser
// reads, prompt/answer and chat-message files, the held-out split, tokenization with the end of
// the turn and the length limit, batches and the learning-rate schedule.
#include "kbrl/train/sft_data.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <set>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/prompt/answer_parser.hpp"
#include "kbrl/prompt/chat_renderer.hpp"
#include "kbrl/tokenizer/chat_tokens.hpp"

using namespace kbrl;
using namespace kbrl::train;
namespace fs = std::filesystem;

namespace {

fs::path write(const std::string& name, const std::string& text) {
  const auto dir = fs::path(KBRL_TEST_TMP) / "sft_data";
  fs::create_directories(dir);
  const auto p = dir / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string config_error(const std::vector<std::string>& overrides) {
  try {
    load_run_config(std::nullopt, overrides);
  } catch (const core::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

std::string read_error(const RunConfig& c, const fs::path& file) {
  try {
    SftReadStats stats;
    read_sft_examples(c, {file.string()}, stats);
  } catch (const core::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

// A JSON string literal.
std::string js(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out + "\"";
}

const std::string kSource =
    "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return "
    "torch.relu(x)\n\ndef get_inputs():\n    return [torch.randn(8)]\n\ndef get_init_inputs():\n    return []\n";
const std::string kProgram =
    "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        # ```fenced``` in a "
    "comment\n        return x.clamp_min(0)\n";

RunConfig sft_config() {
  RunConfig c;
  c.log_path = "unused";
  c.train.mode = "sft";
  c.prompt.language = "cpp";
  c.prompt.one_shot = false;
  return c;
}

tokenizer::Tokenizer qwen_tokenizer() {
  return tokenizer::Tokenizer::from_file(fs::path(KBRL_SOURCE_DIR) / "tests/data/tokenizer/qwen2.json");
}

}  // namespace

TEST_CASE("train.mode=sft: the sft section is checked before anything runs") {
  CHECK(load_run_config(std::nullopt, {"log_path=x"}).train.mode == "grpo");
  // An RL run ignores the sft section: one file can hold both.
  CHECK(load_run_config(std::nullopt, {"log_path=x", "sft.batch_size=3"}).sft.batch_size == 3);
  const auto c = load_run_config(std::nullopt, {"log_path=x", "train.mode=sft", "sft.data=[a.jsonl, b.csv]",
                                                "sft.preset=sakana", "sft.levels=[1]", "sft.lr_schedule=cosine"});
  CHECK(c.sft.data == std::vector<std::string>{"a.jsonl", "b.csv"});
  CHECK(c.sft.lr_schedule == "cosine");
  // The resolved file reads back what it was written from.
  const auto resolved = write("resolved.yaml", to_yaml(c));
  const auto again = load_run_config(resolved, {});
  CHECK(again.sft.data == c.sft.data);
  CHECK(again.sft.levels == std::vector<int>{1});
  CHECK(again.train.mode == "sft");

  CHECK(has(config_error({"log_path=x", "train.mode=sft"}), "sft.data"));
  CHECK(has(config_error({"log_path=x", "train.mode=dpo"}), "grpo, sft"));
  CHECK(has(config_error({"log_path=x", "train.mode=sft", "sft.data=a.jsonl", "sft.format=pairs"}), "prompt_answer"));
  const auto corpus_only = config_error({"log_path=x", "train.mode=sft", "sft.data=a.jsonl", "sft.format=messages",
                                         "sft.kernel_field=code"});
  CHECK(has(corpus_only, "sft.kernel_field"));
  CHECK(has(corpus_only, "only with sft.format=corpus"));
  CHECK(has(config_error({"log_path=x", "train.mode=sft", "sft.data=a.jsonl", "sft.answer_field=out"}),
            "only with sft.format=prompt_answer"));
  CHECK(has(config_error({"log_path=x", "train.mode=sft", "sft.data=a.jsonl", "sft.levels=[1]"}), "sft.level_field"));
  CHECK(has(config_error({"log_path=x", "train.mode=sft", "sft.data=a.jsonl", "sft.language=fortran"}), "sft.language"));
  CHECK(has(config_error({"log_path=x", "train.mode=sft", "sft.data=a.jsonl", "sft.preset=alpaca"}), "kernelbook"));
  CHECK(has(config_error({"log_path=x", "sft.heldout_fraction=1"}), "outside [0, 1)"));
  CHECK(has(config_error({"log_path=x", "sft.overlong=drop"}), "skip, truncate"));
  CHECK(has(config_error({"log_path=x", "sft.batch_size=0"}), "sft.batch_size"));
}

TEST_CASE("a corpus pair is asked as RL asks its problem and answered in the format the parser reads") {
  const auto row = [](const std::string& id, const std::string& source, const std::string& kernel,
                      const std::string& lang) {
    return "{\"id\": \"" + id + "\", \"source\": " + js(source) + ", \"kernel\": " + js(kernel) +
           ", \"lang\": \"" + lang + "\"}\n";
  };
  const auto file = write("corpus.jsonl", row("relu", kSource, kProgram, "cpp") +
                                              row("relu-again", "# a comment\n" + kSource, kProgram, "CPP") +
                                              row("relu-triton", kSource, kProgram, "triton") +
                                              row("raw", kSource, "__global__ void k() {}\n", "cpp") + "\n");
  RunConfig c = sft_config();
  c.sft.id_fields = {"id"};
  c.sft.language_field = "lang";
  SftReadStats stats;
  auto examples = read_sft_examples(c, {file.string()}, stats);
  // A duplicate (comments do not count), another language, a CUDA source without ModelNew.
  REQUIRE(examples.size() == 1);
  CHECK(stats.rows == 4);
  CHECK(stats.kept == 1);
  CHECK(stats.duplicates == 1);
  CHECK(stats.other_language == 1);
  CHECK(stats.no_model_new == 1);
  CHECK(describe(stats) ==
        "4 rows, 1 kept; left out: 1 duplicates, 1 in another kernel language than prompt.language, 1 without class "
        "ModelNew");
  // A row without the language field fails, naming the file, the line and the field.
  const auto missing = read_error(c, write("no_lang.jsonl", "\n" + row("a", kSource, kProgram, "cpp") +
                                                                "{\"source\": \"x\", \"kernel\": \"y\"}\n"));
  CHECK(has(missing, "no_lang.jsonl:3"));
  CHECK(has(missing, "lang"));
  const SftExample& x = examples[0];
  CHECK(x.id == "relu");
  CHECK(has(x.origin, "corpus.jsonl:1"));
  core::Problem problem;
  problem.source = kSource;
  CHECK(x.conversation == prompt::build_messages(problem, task_prompt_options(c)));
  CHECK(has(x.conversation[1].content, "# C++ (CPU)"));
  CHECK_FALSE(has(x.conversation[1].content, "# Example"));  // prompt.one_shot=false
  const core::Completion parsed = prompt::parse_completion(x.answer);
  CHECK(parsed.format_ok);
  CHECK(parsed.kernel == kProgram);
  CHECK(x.answer.rfind("<KERNEL>\n````python\n", 0) == 0);  // longer than the program's backtick run
  CHECK(x.group == core::normalize_python_source(kSource));

  // Rows of another language than prompt.language are counted and left out.
  c.prompt.language = "triton";
  SftReadStats other;
  const auto triton = read_sft_examples(c, {file.string()}, other);
  REQUIRE(triton.size() == 1);
  CHECK(triton[0].id == "relu-triton");
  CHECK(has(triton[0].conversation[1].content, "# Triton"));
  CHECK(other.other_language == 2);

  // A preset maps the export's own columns.
  RunConfig k = sft_config();
  k.prompt.language = "triton";
  k.sft.preset = "kernelbook";
  const auto book = write("kernelbook.jsonl", "{\"uuid\": \"u1\", \"python_code\": " + js(kSource) +
                                                  ", \"triton_code\": " + js(kProgram) + "}\n");
  SftReadStats book_stats;
  const auto from_book = read_sft_examples(k, {book.string()}, book_stats);
  REQUIRE(from_book.size() == 1);
  CHECK(from_book[0].id == "u1");
  CHECK(has(from_book[0].conversation[1].content, "# Triton"));
  CHECK(has(read_error(k, write("book_bad.jsonl", "{\"uuid\": \"u1\", \"python_code\": 3}\n")), "python_code"));
  CHECK(has(read_error(k, fs::path(KBRL_TEST_TMP) / "sft_data/missing.jsonl"), "no such file"));
}

TEST_CASE("prompt/answer rows and chat messages are read verbatim") {
  RunConfig c = sft_config();
  c.sft.format = "prompt_answer";
  const auto csv = write("pairs.csv", "id,prompt,answer\np1,\"Say, hi\",\"hi,\nthere\"\np2,empty answer,\n");
  SftReadStats stats;
  auto pairs = read_sft_examples(c, {csv.string()}, stats);
  REQUIRE(pairs.size() == 1);
  CHECK(stats.empty == 1);
  CHECK(pairs[0].id == "p1");
  CHECK(pairs[0].conversation == std::vector<core::Message>{{"user", "Say, hi"}});
  CHECK(pairs[0].answer == "hi,\nthere");
  c.sft.prompt_field = "question";
  CHECK(has(read_error(c, csv), "question"));

  c.sft.format = "messages";
  const auto chat = write("chat.jsonl",
                          "{\"id\": \"m1\", \"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, "
                          "{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}], "
                          "\"source\": \"an extra column\"}\n"
                          "\n"
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                          "\"content\": \"hello\"}, {\"role\": \"user\", \"content\": \"bye\"}, {\"role\": "
                          "\"assistant\", \"content\": \"bye!\"}]}\n");
  SftReadStats chat_stats;
  const auto chats = read_sft_examples(c, {chat.string()}, chat_stats);
  REQUIRE(chats.size() == 2);
  CHECK(chats[0].id == "m1");
  CHECK(chats[0].conversation == std::vector<core::Message>{{"system", "be brief"}, {"user", "2+2?"}});
  CHECK(chats[0].answer == "4");
  CHECK(chats[1].id == "chat.jsonl:3");
  CHECK(chats[1].conversation.size() == 3);
  CHECK(chats[1].answer == "bye!");
  const auto last_user = read_error(
      c, write("user_last.jsonl", "{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]}\n"));
  CHECK(has(last_user, "user_last.jsonl:1"));
  CHECK(has(last_user, "the assistant's answer as the last message"));
  CHECK(has(read_error(c, write("no_content.jsonl", "{\"messages\": [{\"role\": \"user\"}]}\n")), "messages[0].content"));
  CHECK(has(read_error(c, write("not_json.jsonl", "{\"messages\": [}\n")), "not_json.jsonl:1"));
  CHECK(has(read_error(c, write("chat.csv", "messages\nx\n")), "JSONL"));
}

TEST_CASE("the held-out split keeps a problem's examples together and depends only on the seed") {
  std::vector<SftExample> all;
  for (int g = 0; g < 20; ++g)
    for (int k = 0; k < (g % 3) + 1; ++k) {
      SftExample x;
      x.id = "p" + std::to_string(g) + "/" + std::to_string(k);
      x.group = "problem " + std::to_string(g);
      all.push_back(x);
    }
  std::vector<SftExample> train, heldout;
  split_sft_examples(all, 0.2, 7, train, heldout);
  CHECK(train.size() + heldout.size() == all.size());
  std::set<std::string> held_groups, train_groups;
  for (const auto& x : heldout) held_groups.insert(x.group);
  for (const auto& x : train) train_groups.insert(x.group);
  CHECK(held_groups.size() == 4);  // round(0.2 x 20 problems)
  for (const auto& g : held_groups) CHECK(train_groups.count(g) == 0);
  // The input order does not matter; the order within each side is the input's.
  std::vector<SftExample> reversed(all.rbegin(), all.rend()), train2, heldout2;
  split_sft_examples(reversed, 0.2, 7, train2, heldout2);
  std::set<std::string> held2;
  for (const auto& x : heldout2) held2.insert(x.group);
  CHECK(held2 == held_groups);
  const auto position = [&](const std::string& id) {
    return std::find_if(all.begin(), all.end(), [&](const SftExample& x) { return x.id == id; }) - all.begin();
  };
  for (const auto* side : {&train, &heldout})
    for (std::size_t i = 1; i < side->size(); ++i) CHECK(position((*side)[i - 1].id) < position((*side)[i].id));
  std::vector<SftExample> train3, heldout3;
  split_sft_examples(all, 0.2, 8, train3, heldout3);
  std::set<std::string> held3;
  for (const auto& x : heldout3) held3.insert(x.group);
  CHECK(held3 != held_groups);
  std::vector<SftExample> train4, heldout4;
  split_sft_examples(all, 0, 7, train4, heldout4);
  CHECK(heldout4.empty());
}

TEST_CASE("tokens: the rendered prompt, the answer and the end of the turn, the length limit") {
  const auto tok = qwen_tokenizer();
  const auto renderer = prompt::make_renderer("chatml");
  const auto im_end = *tok.token_to_id("<|im_end|>");
  CHECK(answer_end_token(*renderer, tok, {}) == im_end);
  CHECK(answer_end_token(*prompt::make_renderer("plain"), tok, {5}) == 5);
  CHECK_THROWS_AS(answer_end_token(*prompt::make_renderer("plain"), tok, {}), core::InvalidArgument);

  RunConfig c = sft_config();
  c.sft.format = "messages";
  std::string lines;
  for (int i = 0; i < 12; ++i)
    lines += "{\"id\": \"e" + std::to_string(i) + "\", \"messages\": [{\"role\": \"user\", \"content\": \"question " +
             std::to_string(i) + "\"}, {\"role\": \"assistant\", \"content\": \"answer " + std::to_string(i) +
             (i == 3 ? " <|im_end|> not a turn's end" : "") + (i == 5 ? std::string(400, 'x') : "") + "\"}]}\n";
  c.sft.data = {write("tok.jsonl", lines).string()};
  c.sft.heldout_fraction = 0.25;
  const SftData d = prepare_sft_data(c, *renderer, tok, im_end);
  CHECK(d.train.size() + d.heldout.size() == 12);
  CHECK(d.heldout.size() == 3);
  CHECK(d.read.kept == 12);
  const auto at = std::find(d.train_ids.begin(), d.train_ids.end(), "e3");
  const auto& s = at != d.train_ids.end() ? d.train[static_cast<std::size_t>(at - d.train_ids.begin())]
                                          : d.heldout[static_cast<std::size_t>(
                                                std::find(d.heldout_ids.begin(), d.heldout_ids.end(), "e3") -
                                                d.heldout_ids.begin())];
  CHECK(s.prompt == tokenizer::render_chat_ids(*renderer, tok, {{"user", "question 3"}}, true));
  CHECK(s.answer.back() == im_end);
  // The special token's text inside the answer is text, not the turn's end.
  CHECK(std::count(s.answer.begin(), s.answer.end(), im_end) == 1);
  CHECK(tok.decode(std::vector<tokenizer::TokenId>(s.answer.begin(), s.answer.end() - 1)) ==
        "answer 3 <|im_end|> not a turn's end");
  const Datum datum = sft_datum(s);
  CHECK(datum.model_input.size() == s.prompt.size() + s.answer.size() - 1);
  CHECK(std::count(datum.weights.begin(), datum.weights.end(), 1.0F) == static_cast<long>(s.answer.size()));
  CHECK(datum.weights[s.prompt.size() - 2] == 0.0F);
  CHECK(datum.weights[s.prompt.size() - 1] == 1.0F);  // the last prompt token predicts the answer's first
  CHECK(datum.target_tokens.back() == im_end);

  // Longer than sft.max_tokens: left out, or its answer cut.
  const std::size_t long_total = [&] {
    std::size_t m = 0;
    for (const auto& q : d.train) m = std::max(m, q.prompt.size() + q.answer.size());
    for (const auto& q : d.heldout) m = std::max(m, q.prompt.size() + q.answer.size());
    return m;
  }();
  c.sft.max_tokens = static_cast<int>(long_total) - 20;
  const SftData skipped = prepare_sft_data(c, *renderer, tok, im_end);
  CHECK(skipped.overlong_skipped == 1);
  CHECK(skipped.train.size() + skipped.heldout.size() == 11);
  c.sft.overlong = "truncate";
  const SftData cut = prepare_sft_data(c, *renderer, tok, im_end);
  CHECK(cut.truncated == 1);
  CHECK(cut.train.size() + cut.heldout.size() == 12);
  for (const auto* split : {&cut.train, &cut.heldout})
    for (const auto& q : *split) {
      CHECK(q.prompt.size() + q.answer.size() <= static_cast<std::size_t>(c.sft.max_tokens));
      if (q.truncated) CHECK(q.answer.back() != im_end);
    }
  // Nothing left to train: the error names the files and says why.
  c.sft.max_tokens = 4;
  c.sft.overlong = "skip";
  try {
    prepare_sft_data(c, *renderer, tok, im_end);
    FAIL("no error");
  } catch (const core::ConfigError& e) {
    CHECK(has(e.what(), "tok.jsonl"));
    CHECK(has(e.what(), "over sft.max_tokens (4) left out"));
  }
}

TEST_CASE("batches take every example once per epoch, from the seed and the step alone") {
  SftSection s;
  s.batch_size = 4;
  CHECK(sft_steps_per_epoch(10, 4) == 3);
  CHECK(sft_total_steps(s, 10) == 3);
  s.num_epochs = 2;
  CHECK(sft_total_steps(s, 10) == 6);
  s.max_steps = 5;
  CHECK(sft_total_steps(s, 10) == 5);
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::size_t> seen;
    for (std::int64_t w = 0; w < 3; ++w) {
      const auto b = sft_batch(s, 3, 10, epoch * 3 + w);
      CHECK(b.size() == (w < 2 ? 4U : 2U));
      seen.insert(seen.end(), b.begin(), b.end());
    }
    std::sort(seen.begin(), seen.end());
    CHECK(seen == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  }
  CHECK(sft_batch(s, 3, 10, 4) == sft_batch(s, 3, 10, 4));
  CHECK(sft_batch(s, 3, 10, 0) != sft_batch(s, 3, 10, 3));  // another epoch, another order
  s.shuffle = false;
  CHECK(sft_batch(s, 3, 10, 1) == std::vector<std::size_t>{4, 5, 6, 7});
}

TEST_CASE("the learning rate: warmup, then constant, linear or cosine toward 0") {
  RunConfig c;
  c.train.learning_rate = 1e-3;
  CHECK(sft_learning_rate(c, 5, 10) == 1e-3);
  c.sft.learning_rate = 2e-4;  // sft's own, when set
  c.sft.warmup_steps = 4;
  CHECK(sft_learning_rate(c, 0, 10) == Catch::Approx(0.5e-4));
  CHECK(sft_learning_rate(c, 3, 10) == Catch::Approx(2e-4));
  CHECK(sft_learning_rate(c, 7, 10) == Catch::Approx(2e-4));
  c.sft.lr_schedule = "linear";
  CHECK(sft_learning_rate(c, 4, 10) == Catch::Approx(2e-4));
  CHECK(sft_learning_rate(c, 7, 10) == Catch::Approx(1e-4));
  c.sft.lr_schedule = "cosine";
  CHECK(sft_learning_rate(c, 4, 10) == Catch::Approx(2e-4));
  CHECK(sft_learning_rate(c, 7, 10) == Catch::Approx(1e-4));
  CHECK(sft_learning_rate(c, 9, 10) == Catch::Approx(1e-4 * (1 + std::cos(std::numbers::pi * 5.0 / 6.0))));
}
