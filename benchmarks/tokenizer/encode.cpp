// Encoding throughput of kbrl's tokenizer on one core: MB of UTF-8 input per second, first with
// an empty merge cache (every word merged once), then warm. Results: benchmarks/tokenizer/results.md.
//
//   kbrl_bench_tokenizer <tokenizer.json> <text file> [repeats]
#include <kbrl/tokenizer/tokenizer.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: kbrl_bench_tokenizer <tokenizer.json> <text file> [repeats]\n");
    return 2;
  }
  const int repeats = argc > 3 ? std::stoi(argv[3]) : 5;
  std::ifstream in(argv[2], std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  // Documents of about 4 KB, as prompts and completions are; one encode call each.
  std::vector<std::string_view> docs;
  for (std::size_t i = 0; i < text.size(); i += 4096) docs.push_back(std::string_view(text).substr(i, 4096));
  // Cut at byte 4096 may split a character: those bytes become U+FFFD, as they would for anyone.

  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  const auto tokenizer = kbrl::tokenizer::Tokenizer::from_file(argv[1]);
  const double load_s = std::chrono::duration<double>(clock::now() - t0).count();
  std::size_t tokens = 0;
  double cold = 0, best = 1e30;
  for (int r = 0; r <= repeats; ++r) {
    tokens = 0;
    t0 = clock::now();
    for (auto d : docs) tokens += tokenizer.encode(d).size();
    const double secs = std::chrono::duration<double>(clock::now() - t0).count();
    if (r == 0) cold = secs;
    else best = std::min(best, secs);
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("vocab %zu, load %.3f s, input %.2f MB, %zu tokens (%.2f bytes/token)\n", tokenizer.vocab_size(), load_s,
              mb, tokens, static_cast<double>(text.size()) / static_cast<double>(tokens));
  std::printf("cold cache: %.1f MB/s\nwarm cache: %.1f MB/s (best of %d)\n", mb / cold, mb / best, repeats);
  return 0;
}
