// Context state buffers, whole and per sequence, as state files carry them. Input: [flags] bytes.
// A refused state changes nothing (the context's own state bytes are identical before and after);
// an accepted one leaves a context that saves and decodes. Mutated inputs mostly break the
// checksum, so with flag bit 1 the harness rewrites it (FNV-1a of everything before the last 8
// bytes) to let mutations reach the parser behind it.
//
// LOOM_FUZZ_SEED_DIR=DIR: also writes seed states (whole.state, seq.state) to DIR.
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "context/context.h"
#include "fuzz_util.h"

using namespace loom;

namespace {

const std::vector<int32_t> kTokensA{1, 403, 407, 261}, kTokensB{1, 9, 33};
std::unique_ptr<Context>* g_ctx = nullptr;
std::vector<uint8_t>* g_baseline = nullptr;  // the state every input starts from

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void write_seed(const char* dir, const char* name, const std::vector<uint8_t>& bytes) {
  std::ofstream(std::string(dir) + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto model = Model::load(fuzz::shared_file("models/stories260K.gguf"));
  LOOM_FUZZ_CHECK(model.has_value());
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_batch = 64;
  cp.n_ubatch = 64;
  cp.n_seq_max = 3;
  cp.n_threads = 1;
  auto ctx = Context::create(*model, cp);
  LOOM_FUZZ_CHECK(ctx.has_value());
  g_ctx = new std::unique_ptr<Context>(std::move(*ctx));
  Context& c = **g_ctx;
  LOOM_FUZZ_CHECK(c.decode(Batch::from_tokens(kTokensA, 0, 0)).is_ok());
  LOOM_FUZZ_CHECK(c.decode(Batch::from_tokens(kTokensB, 0, 1)).is_ok());
  g_baseline = new std::vector<uint8_t>(c.state_save(kTokensA));
  if (const char* dir = std::getenv("LOOM_FUZZ_SEED_DIR")) {
    std::vector<uint8_t> whole{0};
    whole.insert(whole.end(), g_baseline->begin(), g_baseline->end());
    write_seed(dir, "whole.state", whole);
    auto seq = c.seq_state_save(1, kTokensB);
    LOOM_FUZZ_CHECK(seq.has_value());
    std::vector<uint8_t> s{2};
    s.insert(s.end(), seq->begin(), seq->end());
    write_seed(dir, "seq.state", s);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Context& c = **g_ctx;
  const uint8_t flags = data[0];
  std::vector<uint8_t> state(data + 1, data + size);
  if ((flags & 1) && state.size() >= 8) {
    const uint64_t h = fnv1a(state.data(), state.size() - 8);
    std::memcpy(state.data() + state.size() - 8, &h, 8);
  }
  std::vector<int32_t> tokens;
  Status st;
  if (flags & 2) st = c.seq_state_load(state, int(flags >> 2) % 4 - 1, &tokens);  // -1: an invalid id
  else st = c.state_load(state, &tokens);
  if (!st) {
    LOOM_FUZZ_CHECK(!st.message().empty());
    LOOM_FUZZ_CHECK(c.state_save(kTokensA) == *g_baseline);
    return 0;
  }
  // Accepted: the context is usable.
  (void)c.state_save(tokens);
  const std::vector<int32_t> next{5};
  auto pos = c.seq_pos_max(0);
  if (pos && *pos + 1 < c.n_ctx()) (void)c.decode(Batch::from_tokens(next, *pos + 1, 0));
  LOOM_FUZZ_CHECK(c.state_load(*g_baseline).is_ok());
  return 0;
}
