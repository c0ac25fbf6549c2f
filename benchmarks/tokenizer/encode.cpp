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
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli.hpp"

int main(int argc, char** argv) {
  CLI::App app("Encoding MB/s of kbrl's tokenizer on one core, first with an empty merge cache, then warm "
               "(benchmarks/tokenizer/run.py runs it next to Hugging Face tokenizers).",
               "kbrl_bench_tokenizer");
  app.set_version_flag("--version", kbrl::apps::version_text("kbrl_bench_tokenizer"));
  std::string tokenizer_json, text_file;
  int repeats = 5;
  app.add_option("tokenizer", tokenizer_json, "tokenizer.json")->required()->check(CLI::ExistingFile);
  app.add_option("text", text_file, "UTF-8 text to encode, in 4 KB documents")->required()->check(CLI::ExistingFile);
  app.add_option("repeats", repeats, "warm-cache repeats (the best is reported)")->check(CLI::PositiveNumber)->capture_default_str();
  return kbrl::apps::run_program(app, argc, argv, [&] {
    std::ifstream in(text_file, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    const std::string text = s.str();
    // Documents of about 4 KB, as prompts and completions are; one encode call each.
    std::vector<std::string_view> docs;
    for (std::size_t i = 0; i < text.size(); i += 4096) docs.push_back(std::string_view(text).substr(i, 4096));
    // Cut at byte 4096 may split a character: those bytes become U+FFFD, as they would for anyone.

    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    const auto tokenizer = kbrl::tokenizer::Tokenizer::from_file(tokenizer_json);
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
  });
}
