// kbrl-index: builds a retrieval index from a kernel corpus and queries it (docs/retrieval.md).
//   kbrl-index build --corpus FILE [--corpus FILE ...] [--preset kernelbook|sakana] [--field-* X] --out INDEX
//   kbrl-index build ... --dense (--embeddings-endpoint URL --embeddings-model NAME | --embeddings-checkpoint DIR)
//   kbrl-index query --index INDEX --problem FILE.py [-k 5] [--language triton] [--no-leakage-filter]
// Flags and composition only: reading is rag::read_corpus, the indexes rag::CorpusIndex (BM25) and
// rag::DenseIndex, the embedders rag::make_embedder's (an OpenAI-compatible endpoint, or a
// checkpoint in process through apps/common/checkpoint_embedder.hpp where libtorch is built).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "checkpoint_embedder.hpp"
#include "cli.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/rag/corpus.hpp"
#include "kbrl/rag/corpus_index.hpp"
#include "kbrl/rag/dense_index.hpp"
#include "kbrl/rag/embedder_settings.hpp"
#include "kbrl/rag/retriever.hpp"

namespace fs = std::filesystem;
using namespace kbrl;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string human_bytes(std::uintmax_t n) {
  if (n >= (1u << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(n) / (1 << 20));
  if (n >= (1u << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(n) / (1 << 10));
  return fmt::format("{} B", n);
}

// Where dense embeddings come from: a served model or a checkpoint in process
// (rag::EmbedderSettings, which kbrl-train's prompt.retrieval.embeddings_* keys and kbrl-eval's
// --retrieval-embeddings-* flags fill too).
void add_embedder_flags(CLI::App* cmd, rag::EmbedderSettings& e) {
  const std::string g = "Dense embeddings (one of --embeddings-endpoint, --embeddings-checkpoint)";
  auto* endpoint = cmd->add_option("--embeddings-endpoint", e.endpoint,
                                   "an OpenAI-compatible server's API root (http://host:port/v1): POST /embeddings")
                       ->type_name("URL")
                       ->group(g);
  auto* checkpoint = cmd->add_option("--embeddings-checkpoint", e.checkpoint,
                                     "a Hugging Face checkpoint embedded in process (mean-pooled last hidden states)")
                         ->type_name("DIR")
                         ->group(g)
                         ->excludes(endpoint);
  cmd->add_option("--embeddings-model", e.model,
                  "the served model's name (with --embeddings-endpoint, required); with --embeddings-checkpoint the "
                  "name the index records [default: the folder's name, as kbrl-serve names it]")
      ->type_name("NAME")
      ->group(g);
  cmd->add_option("--embeddings-api-key-env", e.api_key_env,
                  "the environment variable holding the server's API key (the key is in no file or log)")
      ->type_name("VAR")
      ->group(g)
      ->needs(endpoint);
  cmd->add_option("--embeddings-batch", e.batch, "inputs per request [default: 64]")->group(g)->needs(endpoint);
  cmd->add_option("--embeddings-max-in-flight", e.max_in_flight, "requests at once [default: 4]")
      ->group(g)
      ->needs(endpoint);
  cmd->add_option("--embeddings-device", e.device, "auto, cpu, cuda, cuda:N [default: auto]")
      ->type_name("DEVICE")
      ->group(g)
      ->needs(checkpoint);
  cmd->add_option("--embeddings-dtype", e.dtype, "auto (bf16 on a GPU, fp32 on the CPU), bf16, fp32")
      ->type_name("DTYPE")
      ->group(g)
      ->needs(checkpoint);
  cmd->add_option("--embeddings-max-tokens", e.max_tokens,
                  "embed a text's first N tokens [default: 0, the model's context]")
      ->type_name("N")
      ->group(g)
      ->needs(checkpoint);
}

// A settings field as this program's flag: embeddings_api_key_env -> --embeddings-api-key-env.
std::string embedder_flag(const std::string& field) {
  std::string flag = "--" + field;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// The embedder the flags name (rag::make_embedder), and a line saying what it is. Settings that
// do not go together are a usage error.
std::shared_ptr<rag::Embedder> make_embedder(const rag::EmbedderSettings& s, std::string& description) {
  if (const auto problem = rag::check_embedder_settings(s, embedder_flag))
    throw apps::UsageError(fmt::format("{}: {}", embedder_flag(problem->field), problem->message));
  return rag::make_embedder(s, apps::checkpoint_embedder_loader(), embedder_flag, &description);
}

struct BuildFlags {
  std::vector<std::string> corpora;
  std::string preset;
  std::optional<std::string> field_source, field_kernel, field_language, field_speedup, field_level, field_correct;
  std::vector<std::string> field_id;
  std::optional<std::string> language;
  std::vector<int> levels;
  bool include_incorrect = false;
  bool no_dedup = false;
  std::size_t max_source_chars = 0, max_kernel_chars = 0;
  double k1 = 1.2, b = 0.75;
  std::string out;
  bool dense = false;
  rag::EmbedderSettings embeddings;
};

rag::CorpusSpec spec_of(const BuildFlags& f) {
  rag::CorpusSpec spec;
  if (!f.preset.empty()) {
    try {
      spec = rag::corpus_preset(f.preset);
    } catch (const core::InvalidArgument& e) {
      throw apps::UsageError(fmt::format("--preset: {}", e.what()));
    }
  }
  if (f.field_source) spec.source_field = *f.field_source;
  if (f.field_kernel) spec.kernel_field = *f.field_kernel;
  if (!f.field_id.empty()) spec.id_fields = f.field_id;
  if (f.field_language) spec.language_field = *f.field_language;
  if (f.field_speedup) spec.speedup_field = *f.field_speedup;
  if (f.field_level) spec.level_field = *f.field_level;
  if (f.field_correct) spec.correct_field = *f.field_correct;
  if (f.language) spec.language = *f.language;
  if (!f.levels.empty()) {
    if (spec.level_field.empty()) throw apps::UsageError("--level needs a level field (--field-level, or --preset sakana)");
    spec.levels = f.levels;
  }
  if (f.include_incorrect) spec.correct_only = false;
  if (f.no_dedup) spec.deduplicate = false;
  spec.max_source_chars = f.max_source_chars;
  spec.max_kernel_chars = f.max_kernel_chars;
  return spec;
}

int build_dense(const BuildFlags& f, std::vector<rag::CorpusEntry> entries) {
  const auto load_start = Clock::now();
  std::string description;
  auto embedder = make_embedder(f.embeddings, description);
  const rag::EmbedderIdentity identity = embedder->identity();
  std::cout << fmt::format("embedding with {}: {} in {:.2f} s\n", rag::to_string(identity), description,
                           seconds_since(load_start));
  const std::size_t n = entries.size();
  rag::DenseBuildOptions options;
  std::size_t reported = 0;
  const auto embed_start = Clock::now();
  options.progress = [&](std::size_t done, std::size_t total) {
    // About every tenth, on stderr: a large corpus on a CPU takes a while.
    if (done < total && done * 10 / total == reported * 10 / total) return;
    reported = done;
    std::cerr << fmt::format("embedded {}/{} ({:.0f} s)\n", done, total, seconds_since(embed_start));
  };
  const auto index = rag::DenseIndex::build(std::move(entries), std::move(embedder), options);
  const double embed_s = seconds_since(embed_start);
  const auto save_start = Clock::now();
  index.save(f.out);
  const double save_s = seconds_since(save_start);
  std::cout << fmt::format(
      "embedded and indexed {} entries ({} dimensions, exact inner product) in {:.2f} s ({:.1f} entries/s); wrote {} "
      "({}) in {:.2f} s\n",
      n, identity.dimension, embed_s, static_cast<double>(n) / std::max(embed_s, 1e-9), f.out,
      human_bytes(fs::file_size(f.out)), save_s);
  return apps::kExitOk;
}

int build(const BuildFlags& f) {
  const rag::CorpusSpec spec = spec_of(f);
  if (f.k1 < 0) throw apps::UsageError("--k1 must be >= 0");
  if (f.b < 0 || f.b > 1) throw apps::UsageError("--b must be in [0, 1]");
  if (f.dense && !f.embeddings.given())
    throw apps::UsageError("--dense needs --embeddings-endpoint URL --embeddings-model NAME, or --embeddings-checkpoint DIR");
  if (!f.dense && f.embeddings.given()) throw apps::UsageError("the --embeddings-* flags need --dense");
  if (f.dense && !rag::dense_retrieval_available())
    throw core::Error("--dense: this kbrl-index was built without FAISS (apt-get install libfaiss-dev, then build again)");
  const auto start = Clock::now();
  std::vector<rag::CorpusEntry> entries;
  rag::IngestStats stats;
  for (const std::string& corpus : f.corpora) rag::read_corpus(corpus, spec, entries, stats);
  const double read_s = seconds_since(start);
  std::cout << fmt::format(
      "read {} records from {} file(s) in {:.2f} s: kept {}, duplicates {}, incorrect {}, other level {}, too long {}, "
      "empty {}\n",
      stats.rows, f.corpora.size(), read_s, stats.kept, stats.duplicates, stats.incorrect, stats.other_level,
      stats.too_long, stats.empty);
  if (entries.empty()) throw core::Error("no entries kept: nothing to index (check the field mapping and filters)");
  if (f.dense) return build_dense(f, std::move(entries));
  const auto index_start = Clock::now();
  const auto index = rag::CorpusIndex::build(std::move(entries), rag::Bm25Params{f.k1, f.b});
  const double index_s = seconds_since(index_start);
  const auto save_start = Clock::now();
  index.save(f.out);
  const double save_s = seconds_since(save_start);
  std::cout << fmt::format(
      "indexed {} entries ({} terms, {} postings, {:.0f} terms per entry) in {:.2f} s; wrote {} ({}) in {:.2f} s\n",
      index.entries().size(), index.bm25().vocabulary_size(), index.bm25().posting_count(),
      index.bm25().average_length(), index_s, f.out, human_bytes(fs::file_size(f.out)), save_s);
  return apps::kExitOk;
}

struct QueryFlags {
  std::string index;
  std::string problem;
  std::size_t k = 5;
  std::string language;
  bool no_leakage_filter = false;
  double near_threshold = 0.8;
  bool show_kernels = false;
  rag::EmbedderSettings embeddings;
};

int query(const QueryFlags& f) {
  if (f.k == 0) throw apps::UsageError("-k must be at least 1");
  if (!(f.near_threshold > 0 && f.near_threshold <= 1)) throw apps::UsageError("--near-threshold must be in (0, 1]");
  const rag::IndexKind kind = rag::index_kind(f.index);
  // A BM25 index takes no embedder; a dense one needs the one it was built with, and names it.
  if (const auto problem = rag::check_index_embedder(f.index, f.embeddings, embedder_flag))
    throw apps::UsageError(problem->message);
  const std::string problem = core::read_file(f.problem);
  rag::SearchOptions options;
  options.k = f.k;
  options.language = f.language;
  options.leakage.enabled = !f.no_leakage_filter;
  options.leakage.near_threshold = f.near_threshold;

  const auto load_start = Clock::now();
  std::unique_ptr<rag::Retriever> index;
  rag::SearchResult result;
  std::string how;
  if (kind == rag::IndexKind::bm25) {
    auto bm25 = std::make_unique<rag::CorpusIndex>(rag::CorpusIndex::load(f.index));
    const double load_s = seconds_since(load_start);
    const auto query_start = Clock::now();
    result = bm25->search(problem, options);
    how = fmt::format("BM25, loaded in {:.2f} s, searched in {:.1f} ms", load_s, seconds_since(query_start) * 1e3);
    index = std::move(bm25);
  } else {
    std::string description;
    auto embedder = make_embedder(f.embeddings, description);
    auto dense = std::make_unique<rag::DenseIndex>(rag::DenseIndex::load(f.index, embedder));
    const double load_s = seconds_since(load_start);
    const auto embed_start = Clock::now();
    const std::vector<float> query = embedder->embed({problem});
    const double embed_ms = seconds_since(embed_start) * 1e3;
    const auto query_start = Clock::now();
    result = dense->search_embedding(query, problem, options);
    how = fmt::format("dense, {}, loaded with the model in {:.2f} s, problem embedded in {:.1f} ms, searched in {:.1f} ms",
                      rag::to_string(dense->identity()), load_s, embed_ms, seconds_since(query_start) * 1e3);
    index = std::move(dense);
  }
  std::cout << fmt::format("{} hits for {} ({} entries; {})\n", result.hits.size(), f.problem, index->entries().size(),
                           how);
  for (std::size_t i = 0; i < result.hits.size(); ++i) {
    const auto& hit = result.hits[i];
    const auto& e = index->entries()[hit.entry];
    std::cout << fmt::format("{:>3}. {:8.3f}  {}  [{}{}{}]  {}\n", i + 1, hit.score, e.id, e.language,
                             e.level != 0 ? fmt::format(", level {}", e.level) : "",
                             e.speedup ? fmt::format(", speedup {:.2f}", *e.speedup) : "", e.origin);
    if (f.show_kernels) std::cout << e.kernel << (e.kernel.empty() || e.kernel.back() == '\n' ? "" : "\n");
  }
  const auto exact = result.excluded_count(rag::LeakKind::exact);
  const auto near = result.excluded_count(rag::LeakKind::near);
  if (options.leakage.enabled) {
    std::cout << fmt::format("excluded as leaks of the problem: {} ({} exact, {} near)\n", exact + near, exact, near);
    for (const auto& x : result.excluded)
      std::cout << fmt::format("     {:8.3f}  {}  ({} copy)\n", x.score, index->entries()[x.entry].id, to_string(x.kind));
  } else {
    std::cout << "leakage filter off: hits may be copies of the problem\n";
  }
  return apps::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "Builds and queries retrieval indexes of solved kernel examples (docs/retrieval.md): BM25 over code terms, or "
      "dense (--dense: embeddings from a served model or a checkpoint, searched with FAISS). `query` reads either kind.",
      "kbrl-index");
  app.set_version_flag("--version", apps::version_text("kbrl-index"));
  app.footer("Exit codes: 0 done, 1 error (a missing or malformed file), 2 usage.");
  app.require_subcommand(1);

  BuildFlags bf;
  CLI::App* build_cmd = app.add_subcommand("build", "index a corpus (JSONL or CSV exports) into one file");
  build_cmd->add_option("--corpus", bf.corpora, "a .jsonl or .csv corpus file (repeatable)")->required()->type_name("FILE");
  build_cmd->add_option("--out", bf.out, "the index file to write")->required()->type_name("INDEX");
  build_cmd->add_option("--preset", bf.preset, "field mapping and filters: kernelbook or sakana")->type_name("NAME");
  const std::string fields = "Field mapping (overrides the preset)";
  build_cmd->add_option("--field-source", bf.field_source, "the PyTorch program [default: source]")->group(fields);
  build_cmd->add_option("--field-kernel", bf.field_kernel, "the kernel [default: kernel]")->group(fields);
  build_cmd->add_option("--field-id", bf.field_id, "id fields, joined with '/' (repeatable) [default: file:line]")
      ->group(fields);
  build_cmd->add_option("--field-language", bf.field_language, "the language of each row (else --language)")
      ->group(fields);
  build_cmd->add_option("--field-speedup", bf.field_speedup, "measured speedup")->group(fields);
  build_cmd->add_option("--field-level", bf.field_level, "KernelBench level")->group(fields);
  build_cmd->add_option("--field-correct", bf.field_correct, "true/false correctness")->group(fields);
  const std::string filters = "Filters";
  build_cmd->add_option("--language", bf.language, "the language tag of every entry [default: cuda; kernelbook: triton]")
      ->group(filters);
  build_cmd->add_option("--level", bf.levels, "keep only these levels (repeatable)")->group(filters);
  build_cmd->add_flag("--include-incorrect", bf.include_incorrect, "keep rows not marked correct")->group(filters);
  build_cmd->add_flag("--no-dedup", bf.no_dedup, "keep repeated (source, kernel) pairs")->group(filters);
  build_cmd->add_option("--max-source-chars", bf.max_source_chars, "skip longer PyTorch programs (0: no limit)")
      ->group(filters);
  build_cmd->add_option("--max-kernel-chars", bf.max_kernel_chars, "skip longer kernels (0: no limit)")->group(filters);
  build_cmd->add_option("--k1", bf.k1, "BM25 k1 [default: 1.2]")->group("BM25");
  build_cmd->add_option("--b", bf.b, "BM25 b [default: 0.75]")->group("BM25");
  build_cmd->add_flag("--dense", bf.dense,
                      "a dense index instead: each entry's PyTorch program embedded, searched by cosine similarity "
                      "with FAISS (needs --embeddings-endpoint or --embeddings-checkpoint)");
  add_embedder_flags(build_cmd, bf.embeddings);

  QueryFlags qf;
  CLI::App* query_cmd = app.add_subcommand(
      "query", "the examples an index (BM25 or dense: told by the file) returns for a problem; a dense index needs the "
               "embeddings it was built with");
  query_cmd->add_option("--index", qf.index, "an index from kbrl-index build")->required()->type_name("INDEX");
  query_cmd->add_option("--problem", qf.problem, "a KernelBench-format problem (.py)")->required()->type_name("FILE");
  query_cmd->add_option("-k", qf.k, "hits to return [default: 5]");
  query_cmd->add_option("--language", qf.language, "only examples in this language (triton, cuda, ...)");
  query_cmd->add_flag("--no-leakage-filter", qf.no_leakage_filter, "keep copies of the problem (for inspection only)");
  query_cmd->add_option("--near-threshold", qf.near_threshold, "shingle Jaccard of near copies [default: 0.8]");
  query_cmd->add_flag("--show-kernels", qf.show_kernels, "print each hit's kernel");
  add_embedder_flags(query_cmd, qf.embeddings);

  return apps::run_program(app, argc, argv, [&] {
    if (build_cmd->parsed()) return build(bf);
    return query(qf);
  });
}
