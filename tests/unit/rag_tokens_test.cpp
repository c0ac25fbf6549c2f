#include <kbrl/rag/code_tokens.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "catch.hpp"

using namespace kbrl::rag;

namespace {

bool has(const std::vector<std::string>& terms, const std::string& t) {
  return std::find(terms.begin(), terms.end(), t) != terms.end();
}

}  // namespace

TEST_CASE("search terms split identifiers and keep torch op names whole") {
  const auto terms = code_search_terms(
      "import torch.nn.functional as F\n"
      "class LayerNorm2d(nn.Module):\n"
      "    def forward(self, x):\n"
      "        y = torch.nn.functional.conv2d(x, self.weight_tensor)\n"
      "        return F.relu(y) @ self.HTTPServer\n"
      "def get_init_inputs():\n"
      "    return [16384, 3.5]\n");
  for (const char* t : {"torch.nn.functional.conv2d", "conv2d", "conv", "f.relu", "relu", "layernorm2d", "layer", "norm",
                        "weight_tensor", "weight", "tensor", "httpserver", "http", "server", "get_init_inputs", "get",
                        "init", "inputs", "torch.matmul", "matmul", "nn.module", "module", "forward"})
    CHECK(has(terms, t));
  // Keywords, self, one-letter names, numbers and punctuation are not terms; nor is a chain
  // that starts with self.
  for (const char* t : {"class", "def", "return", "import", "as", "self", "x", "y", "16384", "3", "5", "self.weight_tensor",
                        "(", "2d", "d"})
    CHECK_FALSE(has(terms, t));
  // Everything is lowercase.
  CHECK(std::none_of(terms.begin(), terms.end(), [](const std::string& t) {
    return std::any_of(t.begin(), t.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
  }));
}

TEST_CASE("comments and docstrings contribute their words") {
  const auto terms = code_search_terms("def f():\n    \"\"\"Applies the GELU activation.\"\"\"\n    pass  # fused softmax\n");
  CHECK(has(terms, "applies"));
  CHECK(has(terms, "gelu"));
  CHECK(has(terms, "activation"));
  CHECK(has(terms, "fused"));
  CHECK(has(terms, "softmax"));
  CHECK_FALSE(has(terms, "the"));
}

TEST_CASE("canonical source ignores comments, docstrings, imports, layout and local names") {
  const std::string a =
      "import torch\n\ndef f(x, scale):\n    \"\"\"Doc.\"\"\"\n    y = torch.relu(x) * scale  # c\n    return y\n";
  const std::string b =
      "import torch\nimport math\ndef f(inp,  s):\n    # other comment\n    out = torch.relu( inp )*s\n\n    return out\n";
  CHECK(canonical_python_source(a) == canonical_python_source(b));
  CHECK(fingerprint_python_source(a).exact_hash == fingerprint_python_source(b).exact_hash);
  // A comment before the imports hides neither them nor what follows.
  CHECK(canonical_python_source("# copied\n" + a) == canonical_python_source(a));
  // Attribute names, keyword-argument names and constants are not renamed.
  const std::string c = "import torch\n\ndef f(x, scale):\n    y = torch.sigmoid(x) * scale\n    return y\n";
  CHECK(fingerprint_python_source(a).exact_hash != fingerprint_python_source(c).exact_hash);
  CHECK(fingerprint_python_source("y = f(x, dim=1)\n").exact_hash != fingerprint_python_source("y = f(x, axis=1)\n").exact_hash);
  CHECK(fingerprint_python_source("y = x * 2\n").exact_hash != fingerprint_python_source("y = x * 3\n").exact_hash);
}

TEST_CASE("operations are attribute names, operators and keyword arguments, not attributes of self") {
  const auto f = fingerprint_python_source(
      "import torch\nfrom torch.nn.functional import gelu\n"
      "def forward(self, x):\n    x += self.bias\n    return gelu(torch.sum(x, dim=1)) * abs(x.mean())\n");
  const std::vector<std::string> expected{"*", "+", "abs", "dim", "gelu", "mean", "sum"};
  CHECK(f.operations == expected);
}

TEST_CASE("jaccard of sorted shingle sets") {
  CHECK(jaccard({}, {}) == 1.0);
  CHECK(jaccard({1, 2, 3}, {2, 3, 4}) == Catch::Approx(0.5));
  CHECK(jaccard({1}, {2}) == 0.0);
  const auto f = fingerprint_python_source("a = b + c\n", 5);
  CHECK(std::is_sorted(f.shingles.begin(), f.shingles.end()));
  CHECK(f.shingles.size() == 1);  // 5 tokens: one shingle
}

TEST_CASE("C-like normalization drops comments and layout, keeps literals") {
  CHECK(normalize_c_like_source("int  a; // x\n/* block\n */ int b;\n") == "int a; int b;");
  CHECK(normalize_c_like_source("printf(\"// not a comment\");") == "printf(\"// not a comment\");");
}
