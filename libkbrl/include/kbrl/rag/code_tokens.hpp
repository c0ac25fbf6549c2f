// How retrieval reads code: the search terms BM25 indexes (identifiers split on case and
// underscores, torch op names kept whole), and the canonical forms the leakage filter and the
// corpus deduplication compare (comments, docstrings, layout, local names and constants blinded).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kbrl::rag {

// Lowercase search terms of a Python (PyTorch) source, in order, repeats kept:
// - every identifier whole, and its parts when it splits on underscores, case changes or digits
//   (`LayerNorm` -> layernorm, layer, norm; `get_init_inputs` -> get_init_inputs, get, init,
//   inputs); parts of one letter are dropped;
// - a dotted name not starting with `self` whole as well (`torch.nn.functional.conv2d`,
//   `f.relu`), besides its identifiers; `@` counts as `torch.matmul` and `matmul`;
// - words of comments and string literals (docstrings name the operation) as identifiers;
// - Python keywords, `self`, numbers and punctuation dropped.
std::vector<std::string> code_search_terms(std::string_view python_source);

// Words of free text (comments, docstrings) split the same way: for tests and callers indexing
// prose.
void append_word_terms(std::string_view text, std::vector<std::string>& out);

// The fingerprint of a Python source that leakage control compares (see leakage.hpp):
struct SourceFingerprint {
  // Hash of the token stream without comments, docstrings, imports and layout, local names
  // renamed in order of first appearance within each top-level statement ("x" and "inp" alike),
  // constants verbatim: equal for copies that
  // differ only in formatting, comments, docstrings or the names of locals.
  std::uint64_t exact_hash = 0;
  // Sorted, distinct hashes of the k-token shingles of the same stream with every local name and
  // every number blinded: near copies share most of them.
  std::vector<std::uint64_t> shingles;
  // Sorted multiset of what the program computes with: attribute names (`relu` of `torch.relu`,
  // `F.relu` and `x.relu()`; not the attribute right after `self`), imported names used bare,
  // builtins called, keyword-argument names of calls, and arithmetic, comparison and bitwise
  // operators (`+=` counts as `+`).
  std::vector<std::string> operations;
};

SourceFingerprint fingerprint_python_source(std::string_view python_source, int shingle_size = 5);

// |a ∩ b| / |a ∪ b| of two sorted, distinct vectors; 1 when both are empty.
double jaccard(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b);

// The canonical token stream behind exact_hash, tokens joined by spaces, logical lines by "\n":
// for tests and for people checking why two sources matched.
std::string canonical_python_source(std::string_view python_source);

// C-like source (CUDA, HIP, C++) without comments and with runs of whitespace made one space
// (none at the ends): what deduplication compares on the kernel side of non-Python languages.
std::string normalize_c_like_source(std::string_view source);

// 64-bit FNV-1a: deterministic across runs and machines (it keys deduplication and leak checks;
// not persisted as a content address, where core::sha256_hex is used instead).
std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed = 14695981039346656037ull);

}  // namespace kbrl::rag
