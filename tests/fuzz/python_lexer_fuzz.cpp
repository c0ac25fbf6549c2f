// Fuzz target: the Python tokenizer (core::lex_python) and the content hash built on it, which
// read problem and candidate sources. Both promise never to throw on malformed source.
#include "fuzz_support.hpp"
#include "kbrl/core/hash.hpp"
#include "kbrl/core/python_lexer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using kbrl::fuzz::require;
  const std::string_view source = kbrl::fuzz::as_text(data, size);
  const std::vector<kbrl::core::PyToken> tokens = kbrl::core::lex_python(source);
  const char* cursor = source.data();
  int line = 1;
  for (const kbrl::core::PyToken& t : tokens) {
    // Views into the source, in order, never overlapping: the checker and the hash rely on it.
    if (t.kind != kbrl::core::PyTokenKind::newline) {
      require(t.text.data() >= cursor && t.text.data() + t.text.size() <= source.data() + source.size(),
              "a token is a view into the source, after the previous token");
      cursor = t.text.data() + t.text.size();
    }
    require(t.line >= line, "token lines never go back");
    line = t.line;
    require(t.indent >= 0, "indentation is not negative");
    if (t.kind == kbrl::core::PyTokenKind::string) {
      require(t.string_body.data() >= t.text.data() &&
                  t.string_body.data() + t.string_body.size() <= t.text.data() + t.text.size(),
              "a string's body lies inside its token");
    }
  }
  const std::string normalized = kbrl::core::normalize_python_source(source);
  require(normalized.size() <= source.size() + tokens.size() + 1, "normalizing never grows the source much");
  (void)kbrl::core::python_content_hash(source);
  return 0;
}
