#include <kbrl/core/error.hpp>
#include <kbrl/rag/corpus.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "catch.hpp"
#include "rag_fixtures.hpp"

using namespace kbrl::rag;
using kbrl_rag_test::config_error_of;
using kbrl_rag_test::contains;
using kbrl_rag_test::fresh_dir;
using kbrl_rag_test::write_file;

namespace {

const std::string kReluSource = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n";

std::string sakana_csv() {
  // What pandas' to_csv writes for the archive: an index column, True/False, multi-line quoted
  // code with commas and doubled quotes, an empty speedup for a failed kernel.
  return "\xEF\xBB\xBF,Op_Name,Level_ID,Task_ID,Kernel_Name,CUDA_Speedup_Native,CUDA_Code,PyTorch_Code_Module,Correct\r\n"
         "0,19_ReLU,1,19,relu_v1,1.25,\"__global__ void k(float* y, const float* x) {\r\n  y[0] = x[0] > 0 ? x[0] : 0;\r\n}\","
         "\"import torch\r\nclass Model(torch.nn.Module):\r\n    \"\"\"\"\"\"Docstring, with a comma.\"\"\"\"\"\"\r\n"
         "    def forward(self, x):\r\n        return torch.relu(x)\r\n\",True\r\n"
         "1,19_ReLU,1,19,relu_bad,,\"__global__ void k() {}\",\"import torch\r\nclass Model: pass\r\n\",False\r\n"
         "2,1_MLP,3,1,mlp_v2,0.8,\"__global__ void mlp() {}\",\"import torch\r\nclass Model: pass\r\n\",True\r\n";
}

}  // namespace

TEST_CASE("presets map KernelBook and the Sakana archive fields") {
  const CorpusSpec book = corpus_preset("kernelbook");
  CHECK(book.source_field == "python_code");
  CHECK(book.kernel_field == "triton_code");
  CHECK(book.language == "triton");
  const CorpusSpec sakana = corpus_preset("sakana");
  CHECK(sakana.source_field == "PyTorch_Code_Module");
  CHECK(sakana.kernel_field == "CUDA_Code");
  CHECK(sakana.correct_only);
  CHECK(sakana.correct_field == "Correct");
  CHECK(sakana.speedup_field == "CUDA_Speedup_Native");
  CHECK(sakana.level_field == "Level_ID");
  CHECK_THROWS_AS(corpus_preset("kernelbench"), kbrl::core::InvalidArgument);
}

TEST_CASE("JSONL with the kernelbook preset: ids, language, blank lines, missing ids") {
  const auto dir = fresh_dir("jsonl_kernelbook");
  write_file(dir / "book.jsonl",
             "{\"uuid\": \"a1\", \"python_code\": \"import torch\\nx = torch.relu(y)\\n\", \"triton_code\": \"@triton.jit\\ndef k(): pass\\n\", \"stars\": 3}\n"
             "\n"
             "{\"python_code\": \"import torch\\nx = torch.sigmoid(y)\\n\", \"triton_code\": \"def k2(): pass\\n\"}\n");
  IngestStats stats;
  const auto entries = read_corpus(dir / "book.jsonl", corpus_preset("kernelbook"), &stats);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].id == "a1");
  CHECK(entries[0].language == "triton");
  CHECK(entries[0].origin == (dir / "book.jsonl").string() + ":1");
  CHECK_FALSE(entries[0].speedup.has_value());
  CHECK(entries[1].id == "book.jsonl:3");  // no uuid: file and line
  CHECK(stats.rows == 2);
  CHECK(stats.kept == 2);
}

TEST_CASE("CSV with the sakana preset: RFC 4180 quoting, correct-only, speedup, levels") {
  const auto dir = fresh_dir("csv_sakana");
  write_file(dir / "level.csv", sakana_csv());
  IngestStats stats;
  const auto entries = read_corpus(dir / "level.csv", corpus_preset("sakana"), &stats);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].id == "1/19/relu_v1");
  CHECK(entries[0].level == 1);
  CHECK(entries[0].language == "cuda");
  REQUIRE(entries[0].speedup.has_value());
  CHECK(*entries[0].speedup == 1.25);
  CHECK(contains(entries[0].source, "\"\"\"Docstring, with a comma.\"\"\""));
  CHECK(contains(entries[0].kernel, "y[0] = x[0] > 0 ? x[0] : 0;"));
  CHECK(entries[0].origin == (dir / "level.csv").string() + ":2");
  CHECK(entries[1].id == "3/1/mlp_v2");
  CHECK(entries[1].origin == (dir / "level.csv").string() + ":13");  // records span lines
  CHECK(stats.rows == 3);
  CHECK(stats.incorrect == 1);

  CorpusSpec level1 = corpus_preset("sakana");
  level1.levels = {1};
  IngestStats s1;
  const auto only1 = read_corpus(dir / "level.csv", level1, &s1);
  REQUIRE(only1.size() == 1);
  CHECK(only1[0].id == "1/19/relu_v1");
  CHECK(s1.other_level == 1);

  CorpusSpec all = corpus_preset("sakana");
  all.correct_only = false;
  CHECK(read_corpus(dir / "level.csv", all).size() == 3);
}

TEST_CASE("length limits and deduplication of reformatted copies") {
  const auto dir = fresh_dir("dedup");
  const std::string commented = "import torch\n# a comment\nclass Model(torch.nn.Module):\n\n    def forward(self, x):\n"
                                "        return torch.relu(x)   # relu\n";
  auto line = [](const std::string& source, const std::string& kernel) {
    return boost::json::serialize(boost::json::object{{"source", source}, {"kernel", kernel}}) + "\n";
  };
  write_file(dir / "c.jsonl", line(kReluSource, "__global__ void k() { /* v1 */ }") +
                                  line(commented, "__global__  void k()  {  }  // same kernel") +
                                  line(kReluSource, "__global__ void other() {}") +
                                  line(kReluSource, std::string(5000, 'x')) + line("   \n", "__global__ void e() {}"));
  CorpusSpec spec;
  spec.max_kernel_chars = 4000;
  IngestStats stats;
  const auto entries = read_corpus(dir / "c.jsonl", spec, &stats);
  CHECK(entries.size() == 2);
  CHECK(stats.rows == 5);
  CHECK(stats.duplicates == 1);
  CHECK(stats.too_long == 1);
  CHECK(stats.empty == 1);
  CHECK(stats.kept == 2);
  spec.deduplicate = false;
  CHECK(read_corpus(dir / "c.jsonl", spec).size() == 3);
}

TEST_CASE("bad corpus input fails with the file, line and field") {
  const auto dir = fresh_dir("errors");
  CorpusSpec spec;
  write_file(dir / "missing.jsonl", "{\"source\": \"a\", \"kernel\": \"b\"}\n{\"source\": \"a\"}\n");
  auto e = config_error_of([&] { read_corpus(dir / "missing.jsonl", spec); });
  CHECK(e.where() == (dir / "missing.jsonl").string() + ":2");
  CHECK(e.field() == "kernel");

  write_file(dir / "badjson.jsonl", "{\"source\": \"a\", \"kernel\": \"b\"}\n\n{\"source\": \n");
  e = config_error_of([&] { read_corpus(dir / "badjson.jsonl", spec); });
  CHECK(e.where() == (dir / "badjson.jsonl").string() + ":3");
  CHECK(contains(e.what(), "not valid JSON"));

  write_file(dir / "type.jsonl", "{\"source\": 3, \"kernel\": \"b\"}\n");
  e = config_error_of([&] { read_corpus(dir / "type.jsonl", spec); });
  CHECK(e.field() == "source");
  CHECK(contains(e.what(), "expected a string"));

  CorpusSpec with_speedup = spec;
  with_speedup.speedup_field = "speedup";
  write_file(dir / "speedup.csv", "source,kernel,speedup\na,b,1.5\nc,d,fast\n");
  e = config_error_of([&] { read_corpus(dir / "speedup.csv", with_speedup); });
  CHECK(e.where() == (dir / "speedup.csv").string() + ":3");
  CHECK(e.field() == "speedup");

  write_file(dir / "unterminated.csv", "source,kernel\na,b\n\"open,b\nmore\n");
  e = config_error_of([&] { read_corpus(dir / "unterminated.csv", spec); });
  CHECK(e.where() == (dir / "unterminated.csv").string() + ":3");
  CHECK(contains(e.what(), "unterminated"));

  write_file(dir / "fields.csv", "source,kernel\na,b,c\n");
  e = config_error_of([&] { read_corpus(dir / "fields.csv", spec); });
  CHECK(e.where() == (dir / "fields.csv").string() + ":2");
  CHECK(contains(e.what(), "3 fields"));

  write_file(dir / "stray.csv", "source,kernel\n\"a\"x,b\n");
  e = config_error_of([&] { read_corpus(dir / "stray.csv", spec); });
  CHECK(contains(e.what(), "after a closing quote"));

  CorpusSpec correct = spec;
  correct.correct_field = "ok";
  write_file(dir / "bool.csv", "source,kernel,ok\na,b,maybe\n");
  e = config_error_of([&] { read_corpus(dir / "bool.csv", correct); });
  CHECK(e.field() == "ok");

  write_file(dir / "data.parquet", "PAR1");
  e = config_error_of([&] { read_corpus(dir / "data.parquet", spec); });
  CHECK(contains(e.what(), "to_json"));
  e = config_error_of([&] { read_corpus(dir / "data.txt", spec); });
  CHECK(contains(e.what(), "unknown corpus format"));
  e = config_error_of([&] { read_corpus(dir / "absent.jsonl", spec); });
  CHECK(contains(e.where(), "absent.jsonl"));
}

TEST_CASE("parse_csv follows RFC 4180") {
  const auto records = parse_csv("a,b\n\"x, y\",\"say \"\"hi\"\"\"\n\"multi\nline\",\n", "t.csv");
  REQUIRE(records.size() == 3);
  CHECK(records[1].fields == std::vector<std::string>{"x, y", "say \"hi\""});
  CHECK(records[2].fields == std::vector<std::string>{"multi\nline", ""});
  CHECK(records[2].line == 3);
}

TEST_CASE("the bundled corpus reads whole") {
  IngestStats stats;
  const auto entries = kbrl::rag::read_corpus(kbrl_rag_test::data_dir() / "corpus.jsonl",
                                                    kbrl_rag_test::bundled_spec(), &stats);
  CHECK(entries.size() == 36);
  CHECK(stats.duplicates == 0);
  const auto triton = std::count_if(entries.begin(), entries.end(), [](const CorpusEntry& e) { return e.language == "triton"; });
  CHECK(triton > 5);
  CHECK(triton < 30);
}
