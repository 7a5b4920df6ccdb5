// Writes one vocabulary file per BPE pre-tokenizer name from a base vocabulary, for the
// pre-tokenizer goldens (tests/data/vocab-pre/README.md says how they are made):
//
//   make_vocab_pre BASE.gguf OUT_DIR MODEL NAME...
//
// OUT_DIR/NAME.gguf is BASE.gguf with tokenizer.ggml.model = MODEL, tokenizer.ggml.pre = NAME,
// and without tokenizer.ggml.add_bos_token / add_eos_token / add_sep_token, so that each
// pre-tokenizer's own defaults for those show in the goldens. Everything else (tokens, merges,
// token types, special ids) is BASE's. tests/vocab/test_pre_type.cpp makes the same vocabulary
// in memory (Vocab::read_data of BASE with those changes).
//
//   make_vocab_pre --regexes OUT.json
//
// writes llama.cpp's regex strings of every pre-tokenizer preset loom has, {"NAME": [...]} (one
// name per preset), for loom-ref-dump split (the pre-token goldens).
#include <cstdio>
#include <string>

#include <fstream>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "vocab/bpe_tokenizer.h"

using namespace loom;

namespace {

// A JSON string literal (the regexes are UTF-8 without control characters but \r, \n, \t).
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + "\"";
}

int write_regexes(const char* path) {
  std::ofstream out(path, std::ios::binary);
  out << "{";
  bool first = true;
  for (std::string_view name : vocab::detail::bpe_preset_names()) {
    out << (first ? "\n" : ",\n") << json_string(name) << ": [";
    first = false;
    bool first_re = true;
    for (std::string_view re : vocab::detail::bpe_pre_tokenizer_regexes(name)) {
      out << (first_re ? "" : ", ") << json_string(re);
      first_re = false;
    }
    out << "]";
  }
  out << "\n}\n";
  return out.good() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--regexes") return write_regexes(argv[2]);
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: make_vocab_pre BASE.gguf OUT_DIR MODEL NAME...\n"
                 "       make_vocab_pre --regexes OUT.json\n");
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
