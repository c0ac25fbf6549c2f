// benchmarks/eval_throughput/workload: the candidates on which kbrl-eval is compared with
// KernelBench's own evaluation. The comparison only means something if every candidate reaches
// the stage its expected verdict is decided at, so the static checker must reject none of them
// (KernelBench has no such stage), and the manifest must describe a mixed batch as RL produces it.
#include <kbrl/core/json.hpp>
#include <kbrl/check/static_check.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <boost/json.hpp>

#include "catch.hpp"

using namespace kbrl;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

const fs::path kWorkload = fs::path(KBRL_SOURCE_DIR) / "benchmarks/eval_throughput/workload";

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json::array candidates() { return core::parse_json(read_text(kWorkload / "workload.json")).at("candidates").as_array(); }

}  // namespace

TEST_CASE("the throughput workload is a mixed batch over at least sixteen problems") {
  const auto all = candidates();
  CHECK(all.size() >= 64);
  std::map<std::int64_t, std::set<std::string>> kinds_by_problem;
  std::set<std::string> files;
  const std::regex layout(R"(level_1_problem_(\d+)_sample_(\d+)_kernel\.py)");
  for (const auto& v : all) {
    const auto& c = v.as_object();
    const std::string file(c.at("file").as_string());
    const std::string kind(c.at("kind").as_string());
    INFO(file);
    std::smatch m;
    REQUIRE(std::regex_match(file, m, layout));
    CHECK(std::stoll(m[1]) == c.at("problem").as_int64());
    CHECK(std::stoll(m[2]) == c.at("sample").as_int64());
    CHECK(fs::is_regular_file(kWorkload / file));
    CHECK(files.insert(file).second);
    const bool compiled = c.at("expect").at("compiled").as_bool();
    const bool correct = c.at("expect").at("correct").as_bool();
    if (kind == "as_is" || kind == "variant") {
      CHECK((compiled && correct));
    } else if (kind == "wrong") {
      CHECK((compiled && !correct));
    } else {
      CHECK(kind == "compile_error");
      CHECK((!compiled && !correct));
    }
    kinds_by_problem[c.at("problem").as_int64()].insert(kind);
  }
  CHECK(kinds_by_problem.size() >= 16);
  for (const auto& [problem, kinds] : kinds_by_problem) {
    INFO("problem " << problem);
    CHECK(kinds == std::set<std::string>{"as_is", "variant", "wrong", "compile_error"});
  }
}

TEST_CASE("the static checker rejects no candidate of the throughput workload") {
  check::StaticCheckConfig config;
  config.language = core::KernelLanguage::cuda;
  config.precision = core::Precision::fp32;
  for (const auto& v : candidates()) {
    const std::string file(v.at("file").as_string());
    const auto findings = check::static_check(read_text(kWorkload / file), config);
    std::string listed;
    for (const auto& f : findings) listed += std::to_string(f.line) + " " + f.rule + ": " + f.message + "\n";
    INFO(file << "\n" << listed);
    CHECK_FALSE(check::has_errors(findings));
  }
}
