// An outside program using the installed library through its public headers only.
#include <kbrl/core/json.hpp>
#include <kbrl/core/hash.hpp>
#include <kbrl/tokenizer/tokenizer.hpp>

#include <iostream>
#include <vector>

int main() {
  kbrl::core::Problem p;
  p.id = "consumer/1_Add";
  p.source = "import torch\n# comment\nx = 1\n";
  p.content_hash = kbrl::core::python_content_hash(p.source);
  const auto back = kbrl::core::from_json<kbrl::core::Problem>(kbrl::core::to_json(p));
  if (!(back == p)) return 1;
  // The tokenizer runs its pre-tokenizer on PCRE2, which libkbrl links privately: this proves
  // that the installed package brings it along.
  const auto tok = kbrl::tokenizer::Tokenizer::from_json(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
          "decoder": {"type": "ByteLevel"}})");
  if (tok.encode("ab ab") != std::vector<kbrl::tokenizer::TokenId>{2, 2} || tok.decode(std::vector<kbrl::tokenizer::TokenId>{2, 0}) != "aba") return 1;
  std::cout << "kbrl consumer ok " << back.content_hash.substr(0, 12) << "\n";
  return 0;
}
