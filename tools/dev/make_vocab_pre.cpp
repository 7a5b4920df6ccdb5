// Writes one vocabulary file per BPE pre-tokenizer name from a base vocabulary, for the
// pre-tokenizer goldens (tests/data/vocab-pre/README.md says how they are made):
//
//   make_vocab_pre BASE.gguf OUT_DIR MODEL NAME...
//
// OUT_DIR/NAME.gguf is BASE.gguf with tokenizer.ggml.model = MODEL, tokenizer.ggml.pre = NAME,
// and without tokenizer.ggml.add_bos_token / add_eos_token / add_sep_token, so that each
// pre-tokenizer's own defaults for those show in the goldens. Everything else (tokens, merges,
// token types, special ids) is BASE's. tests/vocab/pre_type_test.cpp makes the same vocabulary
// in memory (Vocab::read_data of BASE with those changes).
#include <cstdio>
#include <string>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

using namespace loom;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: make_vocab_pre BASE.gguf OUT_DIR MODEL NAME...\n");
    return 2;
  }
  auto in = gguf::GgufFile::open(argv[1]);
  if (!in) return std::fprintf(stderr, "%s\n", in.status().message().c_str()), 1;
  for (int i = 4; i < argc; ++i) {
    auto w = gguf::GgufWriter::from_file(*in);
    if (!w) return std::fprintf(stderr, "%s\n", w.status().message().c_str()), 1;
    for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.add_bos_token",
                            "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_sep_token"}) {
      w->remove(key);
    }
    Status st = w->set_string("tokenizer.ggml.model", argv[3]);
    if (st.is_ok()) st = w->set_string("tokenizer.ggml.pre", argv[i]);
    const std::string out = std::string(argv[2]) + "/" + argv[i] + ".gguf";
    if (st.is_ok()) st = w->write_file(out);
    if (!st.is_ok()) return std::fprintf(stderr, "%s: %s\n", out.c_str(), st.message().c_str()), 1;
  }
  return 0;
}
