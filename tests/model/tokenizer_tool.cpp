// The C++ side of tests/model/tokenizer_parity.py: reads inputs that the Python script wrote,
// runs kbrl's tokenizer on them and writes the results for the script to compare with the
// tokenizers library. Text travels as hex so that any bytes, invalid UTF-8 included, survive.
//
//   kbrl_tokenizer_tool encode <tokenizer.json> <in: hex per line> <out: ids per line> [--add-special-tokens] [--split-special-tokens]
//   kbrl_tokenizer_tool decode <tokenizer.json> <in: ids per line> <out: hex per line> [--skip-special-tokens]
//   kbrl_tokenizer_tool stream <tokenizer.json> <in: ids per line> <out: hex chunks per line> [--skip-special-tokens]
#include <kbrl/tokenizer/tokenizer.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    out.push_back(digits[(static_cast<unsigned char>(c) >> 4) & 0xF]);
    out.push_back(digits[static_cast<unsigned char>(c) & 0xF]);
  }
  return out;
}

std::vector<kbrl::tokenizer::TokenId> parse_ids(const std::string& line) {
  std::vector<kbrl::tokenizer::TokenId> ids;
  std::istringstream in(line);
  long long id = 0;
  while (in >> id) ids.push_back(static_cast<kbrl::tokenizer::TokenId>(id));
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: kbrl_tokenizer_tool encode|decode|stream <tokenizer.json> <in> <out> [flags]\n";
    return 2;
  }
  const std::string mode = argv[1];
  bool add_special = false, split_special = false, skip_special = false;
  for (int i = 5; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--add-special-tokens") add_special = true;
    else if (flag == "--split-special-tokens") split_special = true;
    else if (flag == "--skip-special-tokens") skip_special = true;
    else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  try {
    const auto tokenizer = kbrl::tokenizer::Tokenizer::from_file(argv[2]);
    std::ifstream in(argv[3]);
    std::ofstream out(argv[4]);
    std::string line;
    while (std::getline(in, line)) {
      if (mode == "encode") {
        kbrl::tokenizer::EncodeOptions options;
        options.add_special_tokens = add_special;
        options.split_special_tokens = split_special;
        const auto ids = tokenizer.encode(from_hex(line), options);
        for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
        out << "\n";
      } else if (mode == "decode") {
        out << to_hex(tokenizer.decode(parse_ids(line), skip_special)) << "\n";
      } else if (mode == "stream") {
        kbrl::tokenizer::StreamDecoder stream(tokenizer, skip_special);
        for (auto id : parse_ids(line)) out << to_hex(stream.step(id)) << ",";
        out << "|" << to_hex(stream.flush()) << "\n";
      } else {
        std::cerr << "unknown mode " << mode << "\n";
        return 2;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "kbrl_tokenizer_tool: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
