// Model load from arbitrary GGUF bytes: hyperparameters, vocabulary, weight binding and packing.
// Either a model comes out whose vocabulary and shapes are usable, or a Status. Seeds: the small
// models of tests/data and ../shared/models.
#include <cstdint>
#include <span>

#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "model/model.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = gguf::GgufFile::from_bytes(std::span<const uint8_t>(data, size));
  if (!f) return 0;
  for (bool vocab_only : {true, false}) {
    model::ModelLoadParams p;
    p.vocab_only = vocab_only;
    auto m = Model::from_gguf(*f, p);
    if (!m) {
      LOOM_FUZZ_CHECK(!m.status().message().empty());
      continue;
    }
    const Vocab& v = (*m)->vocab();
    LOOM_FUZZ_CHECK(v.n_tokens() > 0);
    const auto ids = v.tokenize("Hello world <s> 123", true, true);
    for (int32_t id : ids) LOOM_FUZZ_CHECK(v.is_valid(id));
    (void)v.detokenize(ids, false, false);
  }
  return 0;
}
