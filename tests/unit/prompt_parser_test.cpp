// parse_completion on well-formed, sloppy and hostile answers. Each expectation follows one rule
// of docs/prompts.md ("Parsing the answer").
#include <kbrl/prompt/answer_parser.hpp>

#include <algorithm>
#include <cctype>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"

using kbrl::prompt::defines_top_level_class;
using kbrl::prompt::parse_completion;
using kbrl::prompt::ParseOptions;

namespace {

// A candidate program; `tag` tells versions apart.
std::string program(const std::string& tag = "v1") {
  return "import torch\n"
         "import torch.nn as nn\n"
         "\n"
         "# " + tag + "\n"
         "class ModelNew(nn.Module):\n"
         "    def forward(self, x):\n"
         "        return x\n";
}

std::string fenced(const std::string& code, const std::string& lang = "python") {
  return "```" + lang + "\n" + code + "```\n";
}

std::string kernel_block(const std::string& body) { return "<KERNEL>\n" + body + "</KERNEL>"; }

std::string crlf(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += '\r';
    out += c;
  }
  return out;
}

}  // namespace

TEST_CASE("the requested format yields thinking and the kernel") {
  const std::string text = "<think>\nFuse the add into the GEMM epilogue.\n</think>\n\n" +
                           kernel_block(fenced(program())) + "\n";
  const auto c = parse_completion(text);
  CHECK(c.text == text);
  CHECK(c.has_thinking);
  CHECK(c.thinking == "Fuse the add into the GEMM epilogue.");
  CHECK(c.has_kernel_block);
  CHECK(c.kernel == program());
  CHECK(c.format_ok);
  // The sampler's fields are not the parser's business.
  CHECK(c.tokens.empty());
  CHECK(c.num_tokens == 0);
  CHECK_FALSE(c.truncated);
}

TEST_CASE("a closing think tag without an opening one closes a block the prompt opened") {
  const auto c = parse_completion("  plan: one kernel\n</think>\n\n" + kernel_block(fenced(program())));
  CHECK(c.has_thinking);
  CHECK(c.thinking == "plan: one kernel");
  CHECK(c.kernel == program());
  CHECK(c.format_ok);
}

TEST_CASE("code inside the thinking never counts as the answer") {
  SECTION("a fenced draft in the thinking and no answer after it") {
    const auto c = parse_completion("<think>\n" + fenced(program()) + "</think>\nI am done.");
    CHECK(c.has_thinking);
    CHECK(c.kernel.empty());
    CHECK_FALSE(c.has_kernel_block);
    CHECK_FALSE(c.format_ok);
  }
  SECTION("a KERNEL block drafted in the thinking") {
    const auto c = parse_completion("<think>" + kernel_block(fenced(program("draft"))) + "</think>\n" +
                                    kernel_block(fenced(program("final"))));
    CHECK(c.kernel == program("final"));
    CHECK(c.has_kernel_block);
  }
  SECTION("only the drafted block exists") {
    const auto c = parse_completion("<think>" + kernel_block(fenced(program())) + "</think>");
    CHECK(c.kernel.empty());
    CHECK_FALSE(c.has_kernel_block);
    CHECK_FALSE(c.format_ok);
  }
  SECTION("an unclosed think block swallows the rest of the text") {
    const auto c = parse_completion("<think>\nstill thinking\n" + kernel_block(fenced(program())));
    CHECK_FALSE(c.has_thinking);
    CHECK(c.thinking.starts_with("still thinking\n<KERNEL>"));
    CHECK(c.kernel.empty());
    CHECK_FALSE(c.format_ok);
  }
  SECTION("a later think block is opaque too") {
    const auto c = parse_completion(kernel_block(fenced(program("answer"))) + "\n<think>\n" +
                                    kernel_block(fenced(program("second thoughts"))) + "\n</think>\n");
    CHECK(c.kernel == program("answer"));
    CHECK(c.has_thinking);  // the first think block is the later one here
    CHECK(c.thinking.starts_with("<KERNEL>"));
  }
}

TEST_CASE("the last KERNEL block is the answer") {
  const auto c = parse_completion("First try:\n" + kernel_block(fenced(program("v1"))) + "\nBetter:\n" +
                                  kernel_block(fenced(program("v2"))) + "\nDone.");
  CHECK(c.kernel == program("v2"));
  CHECK(c.has_kernel_block);
  CHECK(c.format_ok);
}

TEST_CASE("a later block without ModelNew does not hide the answer") {
  // Models mention the tags in prose after answering; that opens a block that never closes.
  const auto c = parse_completion(kernel_block(fenced(program())) + "\nI wrapped the code in <KERNEL> tags.");
  CHECK(c.kernel == program());
  CHECK(c.has_kernel_block);
  CHECK(c.format_ok);

  // With no block defining ModelNew, the last block is the answer even though it is useless.
  const auto d = parse_completion(kernel_block(fenced("print(1)\n")) + kernel_block("nothing here\n"));
  CHECK(d.kernel == "nothing here\n");
  CHECK(d.has_kernel_block);
  CHECK_FALSE(d.format_ok);
}

TEST_CASE("a block without a fence gives its raw contents") {
  const auto c = parse_completion("<KERNEL>\n\n" + program() + "\n  \n</KERNEL>");
  CHECK(c.kernel == program());
  CHECK(c.has_kernel_block);
  CHECK(c.format_ok);
  CHECK(parse_completion("<KERNEL>   \n\n</KERNEL>").kernel.empty());
  // format_ok is decided on the kernel as returned, with its final newline: a last line ending in
  // a backslash continues into it (found by fuzzing, where format_ok said the opposite).
  const auto continued = parse_completion("<KERNEL>\nclass ModelNew:\\");
  CHECK(continued.kernel == "class ModelNew:\\\n");
  CHECK(continued.format_ok == defines_top_level_class(continued.kernel, "ModelNew"));
}

TEST_CASE("several fences in one block: the one that defines ModelNew wins") {
  const std::string body = "The kernel:\n" + fenced("__global__ void k() {}\n", "cuda") + "The program:\n" +
                           fenced(program()) + "Usage:\n" + fenced("model = ModelNew()\n");
  const auto c = parse_completion(kernel_block(body));
  CHECK(c.kernel == program());
  CHECK(c.format_ok);
}

TEST_CASE("without a KERNEL block the answer falls back to fenced code outside the thinking") {
  SECTION("the python fence that defines ModelNew") {
    const auto c = parse_completion("<think>x</think>Install:\n" + fenced("pip install triton\n", "bash") +
                                    "Code:\n" + fenced(program(), "py"));
    CHECK(c.kernel == program());
    CHECK_FALSE(c.has_kernel_block);
    CHECK(c.format_ok);
  }
  SECTION("the last of several definitions") {
    const auto c = parse_completion(fenced(program("v1")) + "Fixed:\n" + fenced(program("v2"), ""));
    CHECK(c.kernel == program("v2"));
  }
  SECTION("a mislabelled fence that defines ModelNew beats python that does not") {
    const auto c = parse_completion(fenced("x = 1\n") + fenced(program(), "cuda"));
    CHECK(c.kernel == program());
    CHECK(c.format_ok);
  }
  SECTION("the first python-like fence when none defines ModelNew") {
    const auto c = parse_completion(fenced("int x;\n", "cpp") + fenced("print(1)\n") + fenced("print(2)\n"));
    CHECK(c.kernel == "print(1)\n");
    CHECK_FALSE(c.format_ok);
  }
  SECTION("the first fence of any language as a last resort") {
    const auto c = parse_completion("Here:\n" + fenced("int x;\n", "cpp"));
    CHECK(c.kernel == "int x;\n");
    CHECK_FALSE(c.format_ok);
  }
  SECTION("no fence at all: no candidate, even if the prose has code") {
    const auto c = parse_completion(program());
    CHECK(c.kernel.empty());
    CHECK_FALSE(c.format_ok);
  }
}

TEST_CASE("tags inside fenced code are code") {
  const std::string code = program() +
                           "TAGS = ['</KERNEL>', '<KERNEL>', '<think>', '</think>']\n"
                           "DOC = \"\"\"\n</KERNEL>\n\"\"\"\n";
  const auto c = parse_completion("<think>ok</think>\n" + kernel_block(fenced(code)) + "\n");
  CHECK(c.kernel == code);
  CHECK(c.has_kernel_block);
  CHECK(c.format_ok);
  CHECK(c.thinking == "ok");
}

TEST_CASE("nested and stray tags") {
  SECTION("an inner opening tag restarts the block") {
    const auto c = parse_completion("<KERNEL>\n<KERNEL>\n" + fenced(program()) + "</KERNEL>\n</KERNEL>");
    CHECK(c.kernel == program());
    CHECK(c.has_kernel_block);
  }
  SECTION("a stray closing tag outside any block is text") {
    const auto c = parse_completion("</KERNEL>\n" + fenced(program()) + "</KERNEL>");
    CHECK(c.kernel == program());
    CHECK_FALSE(c.has_kernel_block);
    CHECK(c.format_ok);
  }
  SECTION("a stray </think> after the first think block is text") {
    const auto c = parse_completion("<think>a</think>" + kernel_block(fenced(program())) + "</think>");
    CHECK(c.thinking == "a");
    CHECK(c.format_ok);
  }
}

TEST_CASE("truncated and sloppy fences") {
  SECTION("a fence cut off at the end of the text") {
    const auto c = parse_completion("<KERNEL>\n```python\n" + program());
    CHECK(c.kernel == program());
    CHECK_FALSE(c.has_kernel_block);  // the block never closed
    CHECK(c.format_ok);
  }
  SECTION("a fence that the closing tag ends") {
    const auto c = parse_completion("<KERNEL>\n```python\n" + program() + "</KERNEL>\ntrailing words");
    CHECK(c.kernel == program());
    CHECK(c.has_kernel_block);
  }
  SECTION("backticks glued to the last line of code are dropped") {
    const auto c = parse_completion("<KERNEL>\n```python\n" + program() + "        # end```\n</KERNEL>");
    CHECK(c.kernel == program() + "        # end");
    CHECK(c.format_ok);
  }
  SECTION("fences on the same line as the tags") {
    const auto c = parse_completion("<KERNEL>```python\n" + program() + "```</KERNEL>");
    CHECK(c.kernel == program());
    CHECK(c.has_kernel_block);
    CHECK(c.format_ok);
    // The fence closes before the tag, so a tag inside the code is still code.
    const std::string code = program() + "END = '</KERNEL>'\n";
    CHECK(parse_completion("<KERNEL>```python\n" + code + "```</KERNEL>").kernel == code);
  }
  SECTION("a longer fence may hold a shorter one") {
    const std::string code = program() + "NOTE = '''\n```\nnot a fence end\n'''\n";
    const auto c = parse_completion(kernel_block("````python\n" + code + "````\n"));
    CHECK(c.kernel == code);
  }
  SECTION("inline triple backticks do not open a fence") {
    const auto c = parse_completion("Use ```load_inline``` here.\n" + fenced(program()));
    CHECK(c.kernel == program());
  }
  SECTION("language tags are read case-insensitively from the first word") {
    for (const std::string lang : {"Python", "PY", "python3", " python title=model.py", "py3x"}) {
      INFO(lang);
      const auto c = parse_completion(fenced("print(0)\n", "cpp") + fenced("print(1)\n", lang));
      // "py3x" is not a python tag: then the first fence of any language is the candidate.
      CHECK(c.kernel == (lang == "py3x" ? "print(0)\n" : "print(1)\n"));
    }
  }
}

TEST_CASE("tags match case-insensitively") {
  const auto c = parse_completion("<Think>r</THINK>\n<kernel>\n" + fenced(program()) + "</Kernel>");
  CHECK(c.has_thinking);
  CHECK(c.thinking == "r");
  CHECK(c.has_kernel_block);
  CHECK(c.format_ok);
}

TEST_CASE("CRLF line ends are accepted and the code keeps them") {
  const std::string text = crlf("<think>\nplan\n</think>\n" + kernel_block(fenced(program())) + "\n");
  const auto c = parse_completion(text);
  CHECK(c.has_thinking);
  CHECK(c.thinking == "plan");
  CHECK(c.kernel == crlf(program()));
  CHECK(c.has_kernel_block);
  CHECK(c.format_ok);
}

TEST_CASE("empty and tag-only texts") {
  for (const std::string text : {"", "   \n", "<think></think>", "<KERNEL></KERNEL>", "```", "```python\n```",
                                 "<KERNEL>", "</think>"}) {
    INFO("text: " << text);
    const auto c = parse_completion(text);
    CHECK(c.text == text);
    CHECK(c.kernel.empty());
    CHECK_FALSE(c.format_ok);
  }
  CHECK(parse_completion("<think></think>").has_thinking);
  CHECK(parse_completion("<KERNEL></KERNEL>").has_kernel_block);
  CHECK_FALSE(parse_completion("<KERNEL>").has_kernel_block);
}

TEST_CASE("ModelNew must be a top-level class statement") {
  const auto candidate = [](const std::string& code) { return parse_completion(kernel_block(fenced(code))); };
  CHECK_FALSE(candidate("# class ModelNew(nn.Module):\nx = 1\n").format_ok);
  CHECK_FALSE(candidate("s = '''\nclass ModelNew(nn.Module):\n    pass\n'''\n").format_ok);
  CHECK_FALSE(candidate("if True:\n    class ModelNew(nn.Module):\n        pass\n").format_ok);
  CHECK_FALSE(candidate("class ModelNewer(nn.Module):\n    pass\n").format_ok);
  CHECK_FALSE(candidate("ModelNew = Model\n").format_ok);
  CHECK(candidate("class ModelNew:\n    pass\n").format_ok);
  CHECK(candidate("@torch.no_grad\nclass ModelNew(\n    nn.Module,\n):  # fused\n    pass\n").format_ok);
}

TEST_CASE("defines_top_level_class tells Python from C++ and from text") {
  CHECK(defines_top_level_class("class ModelNew(nn.Module):\n    pass\n", "ModelNew"));
  CHECK(defines_top_level_class("class ModelNew(Base[int], metaclass=M):\n    pass", "ModelNew"));
  CHECK(defines_top_level_class("class ModelNew:  # note\n    x = 1\n", "ModelNew"));
  CHECK_FALSE(defines_top_level_class("class ModelNew : public torch::nn::Module {\n};\n", "ModelNew"));
  CHECK_FALSE(defines_top_level_class("class ModelNew: pass\n", "ModelNew"));
  CHECK_FALSE(defines_top_level_class("x = 1; class_ = ModelNew\n", "ModelNew"));
  CHECK_FALSE(defines_top_level_class("", "ModelNew"));
  CHECK(defines_top_level_class("class Model(nn.Module):\n    pass\n", "Model"));
}

TEST_CASE("a prompt that opened the thinking leaves no answer until the thinking closes") {
  const ParseOptions opts{true};
  const auto unfinished = parse_completion("Let me draft:\n" + fenced(program()), opts);
  CHECK_FALSE(unfinished.has_thinking);
  CHECK(unfinished.thinking.starts_with("Let me draft:"));
  CHECK(unfinished.kernel.empty());
  CHECK_FALSE(unfinished.format_ok);
  // Without the option the same text is an answer.
  CHECK(parse_completion("Let me draft:\n" + fenced(program())).format_ok);

  const auto done = parse_completion("draft <think> tag talk\n</think>\n" + kernel_block(fenced(program())), opts);
  CHECK(done.has_thinking);
  CHECK(done.thinking == "draft <think> tag talk");
  CHECK(done.format_ok);
}

TEST_CASE("degenerate repetitive completions still parse") {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "<KERNEL>\n```\nx\n```\n";
  text += kernel_block(fenced(program()));
  const auto c = parse_completion(text);
  CHECK(c.kernel == program());
  CHECK(c.format_ok);
  CHECK(c.has_kernel_block);

  std::string thinks;
  for (int i = 0; i < 20000; ++i) thinks += "<think></think>```python\n";
  CHECK_FALSE(parse_completion(thinks).format_ok);
}

TEST_CASE("random mixtures of tags, fences and code keep the parser's invariants") {
  // Pieces that models emit, shuffled into texts the rules were not written for. Whatever the
  // text, the kernel must come from it, and format_ok must mean what it says.
  const std::vector<std::string> pieces{
      "<think>", "</think>", "<KERNEL>", "</KERNEL>", "<kernel>", "```", "```python", "```cuda", "````",
      "\n", "\r\n", "  ", "`", "class ModelNew(nn.Module):\n    pass\n", "class ModelNew:", "# class ModelNew\n",
      "import torch\n", "'</KERNEL>'", "\"\"\"", "text ", "\xc2\xa0", "<", ">", "/"};
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  };
  std::mt19937 rng(20240607);
  std::uniform_int_distribution<std::size_t> pick(0, pieces.size() - 1);
  std::uniform_int_distribution<int> length(0, 40);
  int with_kernel = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    for (int k = length(rng); k > 0; --k) text += pieces[pick(rng)];
    INFO("text: " << text);
    const auto c = parse_completion(text);
    REQUIRE(c.text == text);
    const bool from_text =
        text.find(c.kernel) != std::string::npos ||
        (c.kernel.ends_with("\n") && text.find(c.kernel.substr(0, c.kernel.size() - 1)) != std::string::npos);
    CHECK(from_text);
    CHECK(text.find(c.thinking) != std::string::npos);
    CHECK(c.format_ok == (!c.kernel.empty() && defines_top_level_class(c.kernel, "ModelNew")));
    if (c.has_kernel_block) CHECK(lower(text).find("</kernel>") != std::string::npos);
    if (c.has_thinking) CHECK(lower(text).find("</think>") != std::string::npos);
    with_kernel += c.kernel.empty() ? 0 : 1;
  }
  CHECK(with_kernel > 100);  // the mixtures do exercise extraction, not only rejection
}
