// The C API driven by a program read from the input: context parameters, batches (every field,
// consistent or not, within arrays of the sizes the caller promises), KV sequence operations,
// output and state accessors, tokenizer buffers, an abort callback that fires after a given
// number of polls, and the 0.3 additions: speculative rounds with any history, draft and picks,
// the streaming detokenizer, sampling a caller's row, prompt-lookup drafting. Every call returns a status (with a message on failure); a decode that fails
// leaves every sequence's KV cells byte for byte as they were.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_util.h"
#include "loom/loom.h"

namespace {

loom_model* g_model = nullptr;
loom_context* g_ctx = nullptr;
int g_abort_after = -1;  // polls until the abort callback fires; < 0: never

bool abort_cb(void*) { return g_abort_after >= 0 && g_abort_after-- == 0; }

// The KV cells of every sequence, as state bytes (a failed decode invalidates the last outputs,
// which the whole state would include).
std::vector<uint8_t> kv_bytes(loom_context* ctx) {
  std::vector<uint8_t> all;
  for (loom_seq_id s = 0; s < loom_n_seq_max(ctx); ++s) {
    std::vector<uint8_t> b(loom_state_seq_get_size(ctx, s));
    LOOM_FUZZ_CHECK(loom_state_seq_get_data(ctx, b.data(), b.size(), s) == b.size());
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

void check_status(int32_t st) {
  if (st != LOOM_OK) LOOM_FUZZ_CHECK(std::strlen(loom_last_error()) > 0);
}

int32_t small(loom::fuzz::Input& in) { return int32_t(int8_t(in.u8())); }  // -128..127

void run_decode(loom::fuzz::Input& in) {
  const uint8_t flags = in.u8();
  const int32_t n = flags & 0x80 ? small(in) : int32_t(in.u8() % 24);
  const size_t count = n > 0 ? size_t(n) : 0;
  const int32_t n_embd = loom_n_embd(g_ctx);
  std::vector<loom_token> tokens(count);
  std::vector<float> embd;
  std::vector<loom_pos> pos(count);
  std::vector<int32_t> n_seq(count);
  std::vector<std::vector<loom_seq_id>> seqs(count);
  std::vector<loom_seq_id*> seq_ptrs(count);
  std::vector<int8_t> logits(count);
  for (size_t i = 0; i < count; ++i) {
    tokens[i] = (flags & 1) ? int32_t(in.u32()) : int32_t(in.u8() % 520) - 4;
    pos[i] = (flags & 2) ? small(in) : int32_t(i);
    n_seq[i] = (flags & 4) ? small(in) % 6 : 1;
    seqs[i].resize(n_seq[i] > 0 ? size_t(n_seq[i]) : 0);
    for (auto& s : seqs[i]) s = (flags & 8) ? small(in) % 6 : 0;
    seq_ptrs[i] = seqs[i].data();
    logits[i] = int8_t(in.u8() & 1);
  }
  loom_batch b{};
  b.n_tokens = n;
  if (flags & 16) {
    embd.resize(count * size_t(n_embd));
    for (float& x : embd) x = float(int8_t(in.u8())) / 16.0f;
    b.embd = embd.data();
  } else {
    b.token = tokens.data();
  }
  if (flags & 32) b.pos = pos.data();
  if (flags & 64) {
    b.n_seq_id = n_seq.data();
    b.seq_id = seq_ptrs.data();
  }
  if (in.u8() & 1) b.logits = logits.data();
  g_abort_after = (in.u8() & 3) == 0 ? int(in.u8() % 16) : -1;

  // A decode applies pending K-shifts first, and keeps them when it fails (docs/context.md):
  // compare against the cache with its shifts applied.
  check_status(loom_kv_update(g_ctx));
  const std::vector<uint8_t> before = kv_bytes(g_ctx);
  const int32_t r = loom_decode(g_ctx, &b);
  g_abort_after = -1;
  if (std::getenv("LOOM_FUZZ_TRACE")) {
    std::fprintf(stderr, "decode n=%d flags=%02x -> %d %s\n", n, flags, r, r ? loom_last_error() : "");
  }
  if (r != LOOM_DECODE_OK) {
    LOOM_FUZZ_CHECK(std::strlen(loom_last_error()) > 0);
    LOOM_FUZZ_CHECK(kv_bytes(g_ctx) == before);
  }
}

std::vector<loom_token> fuzz_tokens(loom::fuzz::Input& in, size_t n) {
  std::vector<loom_token> t(n);
  for (auto& x : t) x = (in.u8() & 7) == 0 ? int32_t(in.u32()) : int32_t(in.u8() % 520) - 4;
  return t;
}

// Picks from the input: a token (any id), emit / stop, or an error.
struct Picks {
  loom::fuzz::Input* in;
  int calls = 0;
};

int32_t fuzz_pick(const float* logits, int32_t n_vocab, loom_spec_pick* pick, void* user) {
  auto* p = static_cast<Picks*>(user);
  LOOM_FUZZ_CHECK(logits != nullptr && n_vocab == loom_n_vocab(g_ctx));
  (void)logits[n_vocab - 1];
  ++p->calls;
  const uint8_t f = p->in->u8();
  if ((f & 15) == 15) return LOOM_ERR_ABORTED;
  pick->token = (f & 16) ? int32_t(p->in->u8() % 512) : int32_t(p->in->u32());
  pick->emit = (f & 32) == 0;
  pick->stop = (f & 64) != 0;
  return LOOM_OK;
}

void run_speculative(loom::fuzz::Input& in) {
  const std::vector<loom_token> history = fuzz_tokens(in, in.u8() % 12);
  const std::vector<loom_token> draft = fuzz_tokens(in, in.u8() % 40);
  const loom_seq_id seq = small(in) % 6;
  std::vector<loom_token> out(draft.size() + 1);
  int32_t n_out = -1, n_accepted = -1;
  bool stopped = false;
  Picks picks{&in};
  check_status(loom_kv_update(g_ctx));
  const int32_t r =
      loom_speculative_round(g_ctx, seq, history.data(), int32_t(history.size()), draft.data(), int32_t(draft.size()),
                             fuzz_pick, &picks, out.data(), &n_out, &n_accepted, &stopped);
  if (r != LOOM_OK) {
    LOOM_FUZZ_CHECK(std::strlen(loom_last_error()) > 0);
    return;
  }
  LOOM_FUZZ_CHECK(n_out >= 0 && size_t(n_out) <= draft.size() + 1 && n_out <= picks.calls);
  LOOM_FUZZ_CHECK(n_accepted >= 0 && n_accepted <= int32_t(draft.size()) && n_accepted <= n_out);
}

void run_detokenizer(loom::fuzz::Input& in) {
  loom_detokenizer* d = loom_detokenizer_new(g_model, in.u8() & 7);
  LOOM_FUZZ_CHECK(d != nullptr);
  for (loom_token t : fuzz_tokens(in, in.u8() % 24)) {
    const char* text = nullptr;
    size_t len = 0;
    const int32_t r = loom_detokenizer_push(d, t, &text, &len);
    const bool valid = t >= 0 && t < loom_model_n_vocab(g_model);
    LOOM_FUZZ_CHECK((r == LOOM_OK) == valid);
    // A piece may hold a NUL byte (a byte token): the length is len, then a terminating NUL.
    if (r == LOOM_OK) LOOM_FUZZ_CHECK(text != nullptr && text[len] == '\0');
    else check_status(r);
  }
  const char* text = nullptr;
  size_t len = 0;
  LOOM_FUZZ_CHECK(loom_detokenizer_flush(d, &text, &len) == LOOM_OK && text != nullptr);
  loom_detokenizer_free(d);
}

void run_sampler_and_lookup(loom::fuzz::Input& in, const int32_t* a) {
  loom_sampler* s = loom_sampler_new(g_model, (a[0] & 1) ? "{\"temperature\": 0}" : "{\"seed\": 3, \"n_ctx\": 64}");
  LOOM_FUZZ_CHECK(s != nullptr);
  const std::vector<loom_token> hist = fuzz_tokens(in, in.u8() % 16);
  check_status(loom_sampler_accept_history(s, hist.data(), int32_t(hist.size())));
  std::vector<float> row(size_t(loom_n_vocab(g_ctx)));
  for (size_t i = 0; i < row.size(); i += 1 + (in.u8() % 64)) row[i] = float(small(in)) / 8.0f;
  const int32_t n = (a[1] & 3) == 0 ? a[2] : int32_t(row.size());
  const loom_token t = loom_sampler_sample_logits(s, row.data(), n);
  LOOM_FUZZ_CHECK(t == LOOM_TOKEN_NULL ? std::strlen(loom_last_error()) > 0 : (t >= 0 && t < int32_t(row.size())));
  loom_sampler_free(s);
  loom_drafter* d = loom_drafter_lookup_new(a[3] % 8, (a[3] >> 3) % 8);
  if (!d) {
    LOOM_FUZZ_CHECK(std::strlen(loom_last_error()) > 0);
    return;
  }
  std::vector<loom_token> out(64);
  const int32_t k = small(in) % 64;
  const int32_t got = loom_drafter_draft(d, hist.data(), int32_t(hist.size()), k, out.data());
  if (got < 0) check_status(got);
  else LOOM_FUZZ_CHECK(got <= k);
  loom_drafter_free(d);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  loom_set_log_level(4);
  g_model = loom_model_load_from_file(loom::fuzz::shared_file("models/stories260K.gguf").c_str(), nullptr);
  LOOM_FUZZ_CHECK(g_model != nullptr);
  loom_context_params p = loom_context_default_params();
  p.n_ctx = 64;
  p.n_batch = 32;
  p.n_ubatch = 16;
  p.n_seq_max = 4;
  p.n_threads = 1;
  p.abort_callback = abort_cb;
  g_ctx = loom_context_new(g_model, &p);
  LOOM_FUZZ_CHECK(g_ctx != nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::Input in(data, size);
  loom_kv_clear(g_ctx);
  for (int step = 0; step < 32 && in.left() > 0; ++step) {
    loom_clear_last_error();
    const int op = in.u8() % 15;
    int32_t a[4];  // read in order (argument evaluation order differs between compilers)
    for (int32_t& x : a) x = small(in);
    if (std::getenv("LOOM_FUZZ_TRACE")) std::fprintf(stderr, "op %d (%d %d %d %d)\n", op, a[0], a[1], a[2], a[3]);
    switch (op) {
      case 0:
      case 1:
      case 2: run_decode(in); break;
      case 3: check_status(loom_kv_seq_rm(g_ctx, a[0], a[1], a[2])); break;
      case 4: check_status(loom_kv_seq_cp(g_ctx, a[0], a[1], a[2], a[3])); break;
      case 5: check_status(loom_kv_seq_add(g_ctx, a[0], a[1], a[2], a[3])); break;
      case 6: check_status(loom_kv_seq_div(g_ctx, a[0], a[1], a[2], a[3])); break;
      case 7: {
        const int32_t i = a[0];
        if (const float* l = loom_get_logits_ith(g_ctx, i)) (void)l[loom_n_vocab(g_ctx) - 1];
        if (const float* e = loom_get_embeddings_ith(g_ctx, i)) (void)e[0];
        if (const float* e = loom_get_embeddings_seq(g_ctx, i)) (void)e[0];
        (void)loom_kv_seq_pos_min(g_ctx, i);
        (void)loom_kv_seq_pos_max(g_ctx, i);
        break;
      }
      case 8: {
        const loom_seq_id s = a[0] % 6;
        std::vector<uint8_t> buf(loom_state_seq_get_size(g_ctx, s));
        const size_t got = loom_state_seq_get_data(g_ctx, buf.data(), buf.size(), s);
        if (got > 0) check_status(loom_state_seq_set_data(g_ctx, buf.data(), got, a[1] % 6));
        break;
      }
      case 9: {
        // Context parameters: any values, sizes kept small enough to allocate.
        loom_context_params p = loom_context_default_params();
        p.n_ctx = small(in) * 4;
        p.n_batch = small(in);
        p.n_ubatch = small(in);
        p.n_seq_max = small(in);
        p.n_threads = small(in) % 4;
        p.n_threads_batch = small(in) % 4;
        p.rope_scaling_type = small(in) % 5 - 1;
        p.pooling_type = small(in) % 7 - 1;
        p.attention_type = small(in) % 4 - 1;
        p.rope_freq_base = float(small(in)) * 100.0f;
        p.rope_freq_scale = float(small(in)) / 16.0f;
        p.yarn_ext_factor = float(small(in)) / 16.0f;
        p.yarn_orig_ctx = small(in);
        p.n_swa = small(in);
        p.defrag_thold = float(small(in)) / 64.0f;
        p.type_k = small(in) % 40;
        p.type_v = small(in) % 40;
        p.embeddings = in.u8() & 1;
        loom_context* c = loom_context_new(g_model, &p);
        if (!c) LOOM_FUZZ_CHECK(std::strlen(loom_last_error()) > 0);
        loom_context_free(c);
        break;
      }
      case 10: {
        // Tokenizer buffers of every size, text of any length.
        const int32_t cap = a[0];
        const std::string_view text = in.bytes(in.u8() % 64);
        std::vector<loom_token> toks(cap > 0 ? size_t(cap) : 0);
        const int32_t n = loom_tokenize(g_model, text.data(), int32_t(text.size()), toks.data(), cap, a[1] & 1, a[1] & 2);
        if (n > 0) {
          std::vector<char> out(static_cast<size_t>(a[2] & 0xff));
          (void)loom_detokenize(g_model, toks.data(), n, out.data(), int32_t(out.size()), a[1] & 4, a[1] & 8);
          (void)loom_token_to_piece(g_model, toks[0], out.data(), int32_t(out.size()), a[3], a[1] & 16);
        }
        break;
      }
      case 11:
        check_status(loom_set_n_threads(g_ctx, a[0] % 3, a[1] % 3));
        check_status(loom_kv_update(g_ctx));
        loom_kv_defrag(g_ctx);
        break;
      case 12: run_speculative(in); break;
      case 13: run_detokenizer(in); break;
      case 14: run_sampler_and_lookup(in, a); break;
    }
  }
  loom_set_n_threads(g_ctx, 1, 1);
  return 0;
}
