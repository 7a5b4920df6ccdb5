// JSON schema -> GBNF. Any text is either refused (not JSON, unsupported keyword, ...) with a
// Status, or converted into a grammar that the GBNF parser accepts (unless it is too large once
// its repetitions are expanded, which the parser refuses by name).
#include <string>

#include "fuzz_util.h"
#include "sample/grammar.h"
#include "sample/json_schema.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto gbnf = sample::json_schema_to_grammar(text);
  if (!gbnf) {
    LOOM_FUZZ_CHECK(!gbnf.status().message().empty());
    return 0;
  }
  auto g = Grammar::parse(*gbnf);
  if (!g) {
    const std::string& m = g.status().message();
    if (m.find("too large") == std::string::npos) {
      std::fprintf(stderr, "schema:\n%.*s\ngrammar:\n%s\nerror: %s\n", int(size), text.data(), gbnf->c_str(), m.c_str());
      LOOM_FUZZ_CHECK(!"a converted schema's grammar must parse");
    }
    return 0;
  }
  GrammarMatcher m(*g);
  LOOM_FUZZ_CHECK(!m.is_dead());
  return 0;
}
