// The in-process embedder (model::DecoderEmbedder) on the command line, for rag_dense.py, which
// compares it with kbrl-serve's /v1/embeddings and with transformers:
//   embed_texts <checkpoint dir> <texts.json: an array of strings>   -> a JSON array of rows on stdout
// Without fmt: this translation unit sees torch's include directories.
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "kbrl/core/file.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/model/torch/embedder.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: embed_texts <checkpoint dir> <texts.json>\n";
    return 2;
  }
  try {
    std::vector<std::string> texts;
    const boost::json::value input = kbrl::core::parse_json(kbrl::core::read_file(argv[2]));
    for (const auto& t : input.as_array()) texts.emplace_back(t.as_string());
    kbrl::model::DecoderEmbedderOptions options;
    options.model = argv[1];
    kbrl::model::DecoderEmbedder embedder(options);
    const auto identity = embedder.identity();
    const std::vector<float> rows = embedder.embed(texts);
    boost::json::array out;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      boost::json::array row;
      for (std::size_t d = 0; d < identity.dimension; ++d) row.emplace_back(static_cast<double>(rows[i * identity.dimension + d]));
      out.push_back(std::move(row));
    }
    std::cout << boost::json::serialize(boost::json::object{
                     {"model", identity.model}, {"dimension", identity.dimension}, {"embeddings", std::move(out)}})
              << "\n";
  } catch (const std::exception& e) {
    std::cerr << "embed_texts: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
