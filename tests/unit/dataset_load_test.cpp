#include <kbrl/core/error.hpp>
#include <kbrl/core/hash.hpp>
#include <kbrl/core/json.hpp>
#include <kbrl/dataset/load.hpp>

#include <algorithm>
#include <cstdlib>
#include <boost/json.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "catch.hpp"
#include "dataset_fixtures.hpp"

using namespace kbrl::dataset;
using kbrl::core::Problem;
using kbrl_test::config_error_of;
using kbrl_test::contains;
using kbrl_test::fresh_dir;
using kbrl_test::problem_source;
using kbrl_test::write_file;
namespace fs = std::filesystem;

namespace {

// A KernelBench-shaped repository: KernelBench/level1..4 with problems written out of order,
// plus the clutter a real checkout or a user's copy has.
fs::path make_fake_kernelbench(const std::string& name) {
  const fs::path repo = fresh_dir(name);
  const fs::path kb = repo / "KernelBench";
  for (const char* f : {"level1/19_ReLU.py", "level1/2_Add.py", "level1/10_Softmax_.py", "level2/1_Conv2d_ReLU.py",
                        "level2/3_Gemm_Scale.py", "level3/1_MLP.py", "level4/2_facebook-opt-1p3b_bs1_seq2047.py",
                        "level4/1_gpt2_bs32_seq256.py"})
    write_file(kb / f, problem_source(f));
  write_file(kb / "level1/__init__.py", "");
  write_file(kb / "level1/helper.py", "def util(): pass\n");
  write_file(kb / "level1/README.md", "# notes\n");
  write_file(kb / "level1/2_Add.py.orig", "junk\n");
  write_file(kb / "level1/nested/5_Hidden.py", problem_source("nested"));  // not flat: ignored
  write_file(kb / "changelog/v0.1", "changes\n");
  write_file(kb / "level0/1_Zero.py", problem_source("level0"));    // not a KernelBench level
  write_file(kb / "level01/1_Leading.py", problem_source("lead"));  // not level<N> spelled canonically
  write_file(kb / "levels.txt", "1 2 3 4\n");
  write_file(repo / "README.md", "# KernelBench\n");
  return repo;
}

std::vector<std::string> ids_of(const std::vector<Problem>& ps) {
  std::vector<std::string> ids;
  for (const Problem& p : ps) ids.push_back(p.id);
  return ids;
}

std::vector<std::string> file_names(const std::vector<fs::path>& paths) {
  std::vector<std::string> names;
  for (const fs::path& p : paths) names.push_back(p.filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string jsonl_line(const boost::json::object& o) { return boost::json::serialize(o) + "\n"; }

}  // namespace

TEST_CASE("a KernelBench checkout loads in level and number order") {
  const fs::path repo = make_fake_kernelbench("checkout");
  std::vector<fs::path> skipped;
  const std::vector<Problem> ps = load_kernelbench(repo, &skipped);
  CHECK(ids_of(ps) == std::vector<std::string>{"level1/2_Add", "level1/10_Softmax_", "level1/19_ReLU",
                                               "level2/1_Conv2d_ReLU", "level2/3_Gemm_Scale", "level3/1_MLP",
                                               "level4/1_gpt2_bs32_seq256",
                                               "level4/2_facebook-opt-1p3b_bs1_seq2047"});
  CHECK(file_names(skipped) == std::vector<std::string>{"__init__.py", "helper.py"});

  const Problem& relu = ps[2];
  CHECK(relu.level == 1);
  CHECK(relu.number == 19);
  CHECK(relu.name == "ReLU");
  CHECK(relu.source == problem_source("level1/19_ReLU.py"));
  CHECK(relu.content_hash == kbrl::core::python_content_hash(relu.source));
  CHECK(relu.content_hash.size() == 64);
  CHECK(fs::equivalent(relu.origin, repo / "KernelBench/level1/19_ReLU.py"));
  CHECK_FALSE(relu.needs_weights);
  for (const Problem& p : ps) {
    INFO(p.id);
    CHECK(p.needs_weights == (p.level == 4));
  }
  CHECK(ps[7].name == "facebook-opt-1p3b_bs1_seq2047");

  SECTION("the KernelBench directory itself loads the same problems") {
    CHECK(load_kernelbench(repo / "KernelBench") == ps);
  }
  SECTION("one level directory loads as that level") {
    const std::vector<Problem> level4 = load_problem_dir(repo / "KernelBench" / "level4");
    REQUIRE(level4.size() == 2);
    CHECK(level4[0] == ps[6]);
    CHECK(level4[1] == ps[7]);
  }
  SECTION("load_problems detects the checkout") {
    CHECK(detect_problem_format(repo) == ProblemFormat::kernelbench);
    CHECK(detect_problem_format(repo / "KernelBench") == ProblemFormat::kernelbench);
    CHECK(load_problems(repo) == ps);
  }
}

TEST_CASE("a duplicate problem number within a level names both files") {
  const fs::path repo = make_fake_kernelbench("duplicate");
  write_file(repo / "KernelBench/level2/03_Gemm_Again.py", problem_source("again"));
  const auto e = config_error_of([&] { load_kernelbench(repo); });
  const std::string what = e.what();
  CHECK(contains(what, "03_Gemm_Again.py"));
  CHECK(contains(what, "3_Gemm_Scale.py"));
  CHECK(contains(what, "problem number 3"));
  // The same number in different levels is normal.
  fs::remove(repo / "KernelBench/level2/03_Gemm_Again.py");
  write_file(repo / "KernelBench/level3/19_ReLU.py", problem_source("l3 relu"));
  CHECK(load_kernelbench(repo).size() == 9);
}

TEST_CASE("a problem file that is not a KernelBench problem names the file") {
  const fs::path repo = make_fake_kernelbench("malformed");
  const fs::path bad = repo / "KernelBench/level3/7_Broken.py";
  write_file(bad, "import torch\n# def get_inputs(): commented out\nclass Model(torch.nn.Module):\n    pass\n");
  const auto e = config_error_of([&] { load_kernelbench(repo); });
  CHECK(e.where() == bad.string());
  CHECK(contains(e.what(), "get_inputs"));
  CHECK(contains(e.what(), "get_init_inputs"));
}

TEST_CASE("directories that are not KernelBench checkouts are refused") {
  const fs::path dir = fresh_dir("not_a_checkout");
  write_file(dir / "notes.txt", "hello\n");
  CHECK(contains(config_error_of([&] { load_kernelbench(dir); }).what(), "not a KernelBench checkout"));
  CHECK(contains(config_error_of([&] { load_kernelbench(dir / "missing"); }).what(), "does not exist"));
  CHECK(contains(config_error_of([&] { load_kernelbench(dir / "notes.txt"); }).what(), "not a directory"));
  // Level directories without a single problem: an error, not an empty dataset.
  fs::create_directories(dir / "KernelBench/level1");
  write_file(dir / "KernelBench/level1/helper.py", "x = 1\n");
  CHECK(contains(config_error_of([&] { load_kernelbench(dir); }).what(), "no problem files"));
}

TEST_CASE("the bundled example problems all load") {
  const fs::path dir = fs::path(KBRL_SOURCE_DIR) / "examples" / "problems";
  // Count the problem files independently of the loader's name parser.
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (e.path().extension() == ".py" && !n.empty() && n[0] >= '0' && n[0] <= '9') ++files;
  }
  REQUIRE(files >= 12);
  std::vector<fs::path> skipped;
  const std::vector<Problem> ps = load_problem_dir(dir, &skipped);
  CHECK(ps.size() == files);
  CHECK(file_names(skipped) == std::vector<std::string>{"check_problems.py"});
  for (std::size_t i = 0; i < ps.size(); ++i) {
    INFO(ps[i].origin);
    CHECK(ps[i].number == static_cast<int>(i + 1));
    CHECK(ps[i].level == 0);
    CHECK_FALSE(ps[i].needs_weights);
    CHECK(ps[i].id == "problems/" + std::to_string(i + 1) + "_" + ps[i].name);
    CHECK(fs::path(ps[i].origin).filename() == std::to_string(i + 1) + "_" + ps[i].name + ".py");
  }
  // Problems are distinct programs, so their content hashes are too.
  std::vector<std::string> hashes;
  for (const Problem& p : ps) hashes.push_back(p.content_hash);
  std::sort(hashes.begin(), hashes.end());
  CHECK(std::adjacent_find(hashes.begin(), hashes.end()) == hashes.end());
  CHECK(detect_problem_format(dir) == ProblemFormat::problem_dir);
  // A trailing slash names the same directory.
  CHECK(load_problem_dir(dir.string() + "/") == ps);
}

TEST_CASE("JSONL accepts KernelBench and kbrl field names and blank lines") {
  const fs::path dir = fresh_dir("jsonl_ok");
  const fs::path path = dir / "mixed.jsonl";
  const std::string relu = problem_source("relu"), gemm = problem_source("gemm"), mine = problem_source("mine");
  const std::string bare = problem_source("bare");
  std::string text;
  // KernelBench's Hugging Face rows: name is the file stem.
  text += jsonl_line({{"code", relu}, {"level", 1}, {"name", "19_ReLU"}, {"problem_id", 19}});
  text += "\n   \n";
  text += jsonl_line({{"code", gemm}, {"level", 4}, {"name", "1_gpt2_bs32_seq256.py"}, {"problem_id", 1}});
  // core::Problem's own form, with an explicit id and a verified hash.
  text += jsonl_line({{"source", mine}, {"id", "custom/7_Fused"}, {"number", 7}, {"name", "Fused"},
                      {"level", 0}, {"needs_weights", false},
                      {"content_hash", kbrl::core::python_content_hash(mine)}, {"origin", "elsewhere.py"}});
  // Only a source and a name: unnumbered, id from the file stem.
  text += jsonl_line({{"source", bare}, {"name", "Bare"}});
  write_file(path, text);

  const std::vector<Problem> ps = load_jsonl(path);
  REQUIRE(ps.size() == 4);
  CHECK(ps[0].id == "level1/19_ReLU");
  CHECK(ps[0].name == "ReLU");
  CHECK(ps[0].number == 19);
  CHECK(ps[0].level == 1);
  CHECK(ps[0].source == relu);
  CHECK(ps[0].content_hash == kbrl::core::python_content_hash(relu));
  CHECK(ps[0].origin == path.string() + ":1");
  CHECK_FALSE(ps[0].needs_weights);
  CHECK(ps[1].id == "level4/1_gpt2_bs32_seq256");
  CHECK(ps[1].name == "gpt2_bs32_seq256");
  CHECK(ps[1].needs_weights);
  CHECK(ps[1].origin == path.string() + ":4");
  CHECK(ps[2].id == "custom/7_Fused");
  CHECK(ps[2].number == 7);
  CHECK(ps[2].origin == path.string() + ":5");
  CHECK(ps[3].id == "mixed/Bare");
  CHECK(ps[3].number == 0);
  CHECK(detect_problem_format(path) == ProblemFormat::jsonl);
}

TEST_CASE("JSONL rows of a KernelBench checkout get the checkout's ids and hashes") {
  const fs::path repo = make_fake_kernelbench("jsonl_hf");
  const std::vector<Problem> from_dir = load_kernelbench(repo);
  const fs::path path = repo / "kernelbench_hf.jsonl";
  std::string text;
  for (const Problem& p : from_dir)
    text += jsonl_line({{"code", p.source}, {"level", p.level},
                        {"name", std::to_string(p.number) + "_" + p.name}, {"problem_id", p.number}});
  write_file(path, text);
  const std::vector<Problem> from_jsonl = load_jsonl(path);
  REQUIRE(from_jsonl.size() == from_dir.size());
  for (std::size_t i = 0; i < from_dir.size(); ++i) {
    Problem expected = from_dir[i];
    expected.origin = path.string() + ":" + std::to_string(i + 1);
    CHECK(from_jsonl[i] == expected);
  }
}

TEST_CASE("write_jsonl and load_jsonl round trip") {
  const fs::path repo = make_fake_kernelbench("roundtrip");
  std::vector<Problem> ps = load_kernelbench(repo);
  const std::vector<Problem> bundled = load_problem_dir(fs::path(KBRL_SOURCE_DIR) / "examples" / "problems");
  ps.insert(ps.end(), bundled.begin(), bundled.end());
  const fs::path path = repo / "all.jsonl";
  write_jsonl(ps, path);
  const std::vector<Problem> back = load_problems(path);
  REQUIRE(back.size() == ps.size());
  for (std::size_t i = 0; i < ps.size(); ++i) {
    Problem expected = ps[i];
    expected.origin = path.string() + ":" + std::to_string(i + 1);
    CHECK(back[i] == expected);
  }
  // No temporary file is left behind.
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(repo)) entries += e.path().filename().string().starts_with("all.jsonl");
  CHECK(entries == 1);
}

TEST_CASE("a bad JSONL line names the file the line and the field") {
  const fs::path dir = fresh_dir("jsonl_bad");
  const std::string good = jsonl_line({{"code", problem_source("good")}, {"level", 1}, {"name", "1_Good"}, {"problem_id", 1}});
  struct Case {
    std::string line;
    std::string field;
    std::string message;
  };
  const std::string src = problem_source("x");
  const std::vector<Case> cases = {
      {"{\"code\": \"abc\", \"level\": 1", "", "malformed JSON"},
      {"[1, 2]", "", "expected a JSON object"},
      {jsonl_line({{"name", "No_source"}, {"level", 1}}), "source", "missing the problem's source"},
      {jsonl_line({{"code", ""}, {"name", "Empty"}}), "code", "missing the problem's source"},
      {jsonl_line({{"code", src}, {"source", src}, {"name", "Both"}}), "code", "not both"},
      {jsonl_line({{"code", src}, {"name", "2_X"}, {"number", 2}, {"problem_id", 2}}), "problem_id", "not both"},
      {jsonl_line({{"code", src}, {"name", "X"}, {"level", "one"}}), "level", "expected an integer"},
      {jsonl_line({{"code", src}, {"name", "X"}, {"level", -1}}), "level", "out of range"},
      {jsonl_line({{"code", src}, {"name", "X"}, {"problem_id", 1.5}}), "problem_id", "expected an integer"},
      {jsonl_line({{"code", src}, {"name", 7}}), "name", "expected a string"},
      {jsonl_line({{"code", src}, {"name", "X"}, {"needs_weights", "yes"}}), "needs_weights", "true or false"},
      {jsonl_line({{"code", src}, {"name", "X"}, {"levle", 1}}), "levle", "unknown field"},
      {jsonl_line({{"code", src}, {"level", 1}}), "name", "missing"},
      {jsonl_line({{"code", src}, {"name", "X"}, {"content_hash", "abc"}}), "content_hash", "does not match"},
      {jsonl_line({{"code", "import torch\nx = 1\n"}, {"name", "X"}}), "code", "not a KernelBench problem"},
      {jsonl_line({{"source", "class Model: pass\n"}, {"name", "X"}}), "source", "get_inputs"},
      {jsonl_line({{"code", problem_source("dup")}, {"level", 1}, {"name", "Good"}, {"problem_id", 1}}), "id",
       "duplicate id 'level1/1_Good' (first on line 2)"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO("case " << i << ": " << c.line);
    const fs::path path = dir / ("bad" + std::to_string(i) + ".jsonl");
    // Line 1 blank, line 2 good, line 3 the bad one.
    write_file(path, "\n" + good + c.line + "\n" + good);
    const auto e = config_error_of([&] { load_jsonl(path); });
    CHECK(e.where() == path.string() + ":3");
    CHECK(e.field() == c.field);
    CHECK(contains(e.what(), c.message));
    CHECK(contains(e.what(), path.string() + ":3"));
  }
  SECTION("an empty file is an error too") {
    write_file(dir / "empty.jsonl", "\n\n");
    CHECK(contains(config_error_of([&] { load_jsonl(dir / "empty.jsonl"); }).what(), "no problems"));
  }
}

TEST_CASE("load_problems refuses what it cannot recognise") {
  const fs::path dir = fresh_dir("detect");
  write_file(dir / "problems.txt", "hello\n");
  write_file(dir / "empty/.keep", "");
  write_file(dir / "scripts/helper.py", "x = 1\n");
  CHECK(contains(config_error_of([&] { load_problems(dir / "problems.txt"); }).what(), "expected a .jsonl file"));
  CHECK(contains(config_error_of([&] { load_problems(dir / "empty"); }).what(), "no problems here"));
  CHECK(contains(config_error_of([&] { load_problems(dir / "scripts"); }).what(), "no problems here"));
  CHECK(contains(config_error_of([&] { load_problems(dir / "nope"); }).what(), "does not exist"));
  // Upper-case extensions are still JSONL.
  write_file(dir / "UPPER.JSONL", jsonl_line({{"code", problem_source("u")}, {"name", "U"}}));
  CHECK(load_problems(dir / "UPPER.JSONL").at(0).id == "UPPER/U");
}

TEST_CASE("a single problem file loads whatever its name") {
  const fs::path dir = fresh_dir("single_file");
  write_file(dir / "7_Scale.py", problem_source("scale"));
  write_file(dir / "my problem.py", problem_source("other"));

  const Problem named = load_problem_file(dir / "7_Scale.py", 2, "level2");
  CHECK(named.number == 7);
  CHECK(named.name == "Scale");
  CHECK(named.level == 2);
  CHECK(named.id == "level2/7_Scale");
  CHECK(named.content_hash == kbrl::core::python_content_hash(named.source));
  CHECK(named.origin == (dir / "7_Scale.py").string());

  const Problem loose = load_problem_file(dir / "my problem.py");
  CHECK(loose.number == 0);
  CHECK(loose.name == "my problem");
  CHECK(loose.id == "my problem");
  CHECK_FALSE(loose.needs_weights);
  CHECK(load_problem_file(dir / "7_Scale.py", 4).needs_weights);

  write_file(dir / "broken.py", "import torch\n");
  CHECK_THROWS_AS(load_problem_file(dir / "broken.py"), kbrl::core::ConfigError);
  CHECK_THROWS_AS(load_problem_file(dir / "missing.py"), kbrl::core::ConfigError);
}

TEST_CASE("without named problems, KernelBench is found by KERNELBENCH_ROOT or beside the run, and the error says where it looked") {
  const fs::path kb = make_fake_kernelbench("find_kb_root");
  const fs::path near = fresh_dir("find_kb_near");
  const fs::path away = fresh_dir("find_kb_away");
  fs::create_directories(near / "kernelbench");
  fs::copy(kb / "KernelBench", near / "kernelbench", fs::copy_options::recursive);
  const char* saved = std::getenv("KERNELBENCH_ROOT");
  const std::string saved_value = saved != nullptr ? saved : "";

  ::setenv("KERNELBENCH_ROOT", kb.c_str(), 1);
  CHECK(find_kernelbench({away}) == kb);  // the variable first, a checkout nearby or not
  CHECK(find_kernelbench({near}) == kb);
  ::setenv("KERNELBENCH_ROOT", away.c_str(), 1);
  try {
    find_kernelbench({near});
    FAIL("a KERNELBENCH_ROOT that is not a checkout was accepted");
  } catch (const kbrl::core::InvalidArgument& e) {
    CHECK(contains(e.what(), "KERNELBENCH_ROOT is " + away.string() + ", which is not a KernelBench checkout"));
  }

  ::unsetenv("KERNELBENCH_ROOT");
  CHECK(find_kernelbench({away, near}) == near / "kernelbench");  // in the order given
  CHECK(load_problems(find_kernelbench({near})).size() == 8);
  try {
    find_kernelbench({away});
    FAIL("a folder without a checkout gave one");
  } catch (const kbrl::core::InvalidArgument& e) {
    CHECK(contains(e.what(), "KERNELBENCH_ROOT is not set"));
    CHECK(contains(e.what(), (away / "KernelBench").string()));
    CHECK(contains(e.what(), (away / "kernelbench").string()));
  }
  if (saved != nullptr) ::setenv("KERNELBENCH_ROOT", saved_value.c_str(), 1);
}
