// Every tokenizer (SentencePiece, byte-level BPE under each pre-tokenizer preset, WordPiece) and
// the streaming detokenizer over arbitrary bytes: invalid UTF-8, special-token text, random ids.
//
// Input: [vocab selector] [flags] text. Checks: tokenize gives valid ids; detokenize accepts them;
// the StreamDetokenizer's chunks are valid UTF-8 and add up to sanitize_utf8(detokenize(...)),
// for the text's ids and for ids taken from the text's bytes.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "vocab/bpe_tokenizer.h"
#include "vocab/stream_detokenizer.h"
#include "vocab/utf8.h"
#include "vocab/vocab.h"

using namespace loom;

namespace {

const char* const kVocabFiles[] = {
    "golden/vocab/ggml-vocab-llama-spm.gguf", "golden/vocab/ggml-vocab-phi-3.gguf",
    "golden/vocab/llama3-bpe.gguf",           "golden/vocab/ggml-vocab-gpt-2.gguf",
    "golden/vocab/ggml-vocab-qwen2.gguf",     "golden/vocab/ggml-vocab-deepseek-coder.gguf",
    "golden/vocab/ggml-vocab-falcon.gguf",    "golden/vocab/bert-base-uncased.gguf",
    "golden/vocab/ggml-vocab-bert-bge.gguf",
};
// This repository's Unigram (T5) vocabularies, with their precompiled charsmaps.
const char* const kSourceVocabFiles[] = {
    "tests/data/synth-t5-tiny-f32.gguf",
    "tests/data/synth-t5encoder-tiny-f32.gguf",
};
// The BPE vocabulary that every other pre-tokenizer preset is tried with.
constexpr const char* kPresetBase = "golden/vocab/ggml-vocab-deepseek-coder.gguf";

struct Vocabs {
  std::vector<std::unique_ptr<Vocab>> files;
  VocabData preset_base;
  std::vector<std::string_view> presets = vocab::detail::bpe_preset_names();
  std::map<size_t, std::unique_ptr<Vocab>> by_preset;  // built on first use

  std::vector<std::unique_ptr<Vocab>> extra;  // kSourceVocabFiles, after the presets (seed indices stay)

  size_t size() const { return files.size() + presets.size() + extra.size(); }
  const Vocab& get(size_t i) {
    if (i < files.size()) return *files[i];
    i -= files.size();
    if (i >= presets.size()) return *extra[i - presets.size()];
    auto& v = by_preset[i];
    if (!v) {
      VocabData d = preset_base;
      d.pre = std::string(presets[i]);
      auto built = Vocab::from_data(std::move(d));
      LOOM_FUZZ_CHECK(built.has_value());
      v = std::make_unique<Vocab>(std::move(*built));
    }
    return *v;
  }
};

Vocabs* g_vocabs = nullptr;

std::unique_ptr<Vocab> load_vocab(const std::string& path) {
  auto f = gguf::GgufFile::open(path);
  LOOM_FUZZ_CHECK(f.has_value());
  auto v = Vocab::from_gguf(*f);
  LOOM_FUZZ_CHECK(v.has_value());
  return std::make_unique<Vocab>(std::move(*v));
}

void check_stream(const Vocab& v, const std::vector<int32_t>& ids, bool remove_special, bool unparse_special) {
  auto whole = v.detokenize(ids, remove_special, unparse_special);
  LOOM_FUZZ_CHECK(whole.has_value());
  StreamDetokenizerOptions o;
  o.remove_special = remove_special;
  o.unparse_special = unparse_special;
  StreamDetokenizer sd(v, o);
  std::string streamed;
  for (int32_t id : ids) {
    auto chunk = sd.push(id);
    LOOM_FUZZ_CHECK(chunk.has_value());
    LOOM_FUZZ_CHECK(vocab::is_valid_utf8(*chunk));
    streamed += *chunk;
  }
  const std::string tail = sd.flush();
  LOOM_FUZZ_CHECK(vocab::is_valid_utf8(tail));
  streamed += tail;
  LOOM_FUZZ_CHECK(streamed == vocab::sanitize_utf8(*whole));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_vocabs = new Vocabs;
  for (const char* rel : kVocabFiles) g_vocabs->files.push_back(load_vocab(fuzz::shared_file(rel)));
  for (const char* rel : kSourceVocabFiles) g_vocabs->extra.push_back(load_vocab(fuzz::source_file(rel)));
  auto f = gguf::GgufFile::open(fuzz::shared_file(kPresetBase));
  LOOM_FUZZ_CHECK(f.has_value());
  auto d = Vocab::read_data(*f);
  LOOM_FUZZ_CHECK(d.has_value());
  g_vocabs->preset_base = std::move(*d);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const Vocab& v = g_vocabs->get(in.u8() % g_vocabs->size());
  const uint8_t flags = in.u8();
  const std::string_view text = in.rest();

  const std::vector<int32_t> ids = v.tokenize(text, flags & 1, flags & 2);
  for (int32_t id : ids) LOOM_FUZZ_CHECK(v.is_valid(id));
  LOOM_FUZZ_CHECK(v.check_ids(ids).is_ok());
  check_stream(v, ids, flags & 4, flags & 8);

  // The text's bytes as token ids (two bytes each): control, byte and unused tokens in any order.
  std::vector<int32_t> random_ids;
  for (size_t i = 0; i + 1 < text.size(); i += 2) {
    random_ids.push_back(int32_t((uint8_t(text[i]) | uint32_t(uint8_t(text[i + 1])) << 8) % uint32_t(v.n_tokens())));
  }
  for (int32_t id : random_ids) (void)v.token_to_piece(id, flags & 16);
  check_stream(v, random_ids, flags & 4, flags & 8);
  return 0;
}
