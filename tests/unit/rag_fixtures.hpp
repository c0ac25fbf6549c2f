// Helpers shared by the retrieval tests: the bundled corpus and its labeled query and leakage
// sets (tests/data/retrieval, written by make_corpus.py there), and scratch files.
#pragma once

#include <kbrl/core/error.hpp>
#include <kbrl/core/file.hpp>
#include <kbrl/core/json.hpp>
#include <kbrl/rag/corpus.hpp>

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "dataset_fixtures.hpp"

namespace kbrl_rag_test {

namespace fs = std::filesystem;

inline fs::path data_dir() { return fs::path(KBRL_SOURCE_DIR) / "tests" / "data" / "retrieval"; }

inline fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(KBRL_TEST_TMP) / "retrieval" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

using kbrl_test::write_file;

inline kbrl::rag::CorpusSpec bundled_spec() {
  kbrl::rag::CorpusSpec spec;
  spec.source_field = "source";
  spec.kernel_field = "kernel";
  spec.id_fields = {"id"};
  spec.language_field = "language";
  spec.speedup_field = "speedup";
  return spec;
}

inline std::vector<kbrl::rag::CorpusEntry> bundled_corpus() {
  return kbrl::rag::read_corpus(data_dir() / "corpus.jsonl", bundled_spec());
}

inline std::vector<boost::json::object> read_jsonl_objects(const fs::path& path) {
  std::vector<boost::json::object> out;
  const std::string text = kbrl::core::read_file(path);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) out.push_back(kbrl::core::parse_json(std::string_view(text).substr(pos, end - pos)).as_object());
    pos = end + 1;
  }
  return out;
}

using kbrl_test::config_error_of;
using kbrl_test::contains;

}  // namespace kbrl_rag_test
