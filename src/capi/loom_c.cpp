// The C API (include/loom/loom.h): a thin layer over loom::Model, loom::Vocab and loom::Context
// that converts arguments, catches every exception and records failures in a thread-local
// message. Behaviour lives in the C++ classes; nothing here decides anything they already do.
#include "loom/loom.h"

#include "capi/capi_internal.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"
#include "base/version.h"
#include "context/context.h"
#include "model/adapters.h"
#include "model/model.h"

using namespace loom::capi;

namespace {

const loom::Vocab* vocab_of(const char* fn, const loom_model* model) {
  if (!model) {
    set_error(fn, "model is NULL");
    return nullptr;
  }
  return &model->m->vocab();
}

#define LOOM_NEED_CTX(ret)                    \
  do {                                        \
    if (!ctx) {                               \
      set_error(__func__, "context is NULL"); \
      return ret;                             \
    }                                         \
  } while (0)

// ---- parameters -------------------------------------------------------------------------------

}  // namespace

loom::Status loom::capi::to_params(const loom_context_params& p, loom::ContextParams* out) {
  loom::ContextParams& cp = *out;
  cp.n_ctx = p.n_ctx;
  cp.n_batch = p.n_batch;
  cp.n_ubatch = p.n_ubatch;
  cp.n_seq_max = p.n_seq_max;
  cp.n_threads = p.n_threads;
  cp.n_threads_batch = p.n_threads_batch;
  switch (p.rope_scaling_type) {
    case LOOM_ROPE_SCALING_UNSPECIFIED: cp.rope_scaling = loom::RopeScaling::kUnspecified; break;
    case LOOM_ROPE_SCALING_NONE: cp.rope_scaling = loom::RopeScaling::kNone; break;
    case LOOM_ROPE_SCALING_LINEAR: cp.rope_scaling = loom::RopeScaling::kLinear; break;
    case LOOM_ROPE_SCALING_YARN: cp.rope_scaling = loom::RopeScaling::kYarn; break;
    default: return loom::invalid_argument("unknown rope_scaling_type " + std::to_string(p.rope_scaling_type));
  }
  switch (p.pooling_type) {
    case LOOM_POOLING_UNSPECIFIED: cp.pooling = loom::Pooling::kUnspecified; break;
    case LOOM_POOLING_NONE: cp.pooling = loom::Pooling::kNone; break;
    case LOOM_POOLING_MEAN: cp.pooling = loom::Pooling::kMean; break;
    case LOOM_POOLING_CLS: cp.pooling = loom::Pooling::kCls; break;
    case LOOM_POOLING_LAST: cp.pooling = loom::Pooling::kLast; break;
    case LOOM_POOLING_RANK: cp.pooling = loom::Pooling::kRank; break;
    default: return loom::invalid_argument("unknown pooling_type " + std::to_string(p.pooling_type));
  }
  switch (p.attention_type) {
    case LOOM_ATTENTION_UNSPECIFIED: cp.attention = loom::AttentionType::kUnspecified; break;
    case LOOM_ATTENTION_CAUSAL: cp.attention = loom::AttentionType::kCausal; break;
    case LOOM_ATTENTION_NON_CAUSAL: cp.attention = loom::AttentionType::kNonCausal; break;
    default: return loom::invalid_argument("unknown attention_type " + std::to_string(p.attention_type));
  }
  cp.rope_freq_base = p.rope_freq_base;
  cp.rope_freq_scale = p.rope_freq_scale;
  cp.yarn_ext_factor = p.yarn_ext_factor;
  cp.yarn_attn_factor = p.yarn_attn_factor;
  cp.yarn_beta_fast = p.yarn_beta_fast;
  cp.yarn_beta_slow = p.yarn_beta_slow;
  cp.yarn_orig_ctx = p.yarn_orig_ctx;
  cp.n_swa = p.n_swa;
  cp.defrag_thold = p.defrag_thold;
  for (int32_t t : {p.type_k, p.type_v}) {
    if (t < 0 || !loom::tensor_type_info(uint32_t(t))) {
      return loom::invalid_argument("unknown KV cache type id " + std::to_string(t));
    }
  }
  cp.type_k = loom::TensorType(uint32_t(p.type_k));
  cp.type_v = loom::TensorType(uint32_t(p.type_v));
  cp.embeddings = p.embeddings;
  cp.no_perf = p.no_perf;
  cp.abort_callback = p.abort_callback;
  cp.abort_data = p.abort_callback_data;
  cp.eval_callback = p.eval_callback;
  cp.eval_data = p.eval_callback_data;
  return loom::Status::ok();
}

namespace {

int32_t pooling_to_c(loom::Pooling p) {
  switch (p) {
    case loom::Pooling::kUnspecified: return LOOM_POOLING_UNSPECIFIED;
    case loom::Pooling::kNone: return LOOM_POOLING_NONE;
    case loom::Pooling::kMean: return LOOM_POOLING_MEAN;
    case loom::Pooling::kCls: return LOOM_POOLING_CLS;
    case loom::Pooling::kLast: return LOOM_POOLING_LAST;
    case loom::Pooling::kRank: return LOOM_POOLING_RANK;
  }
  return LOOM_POOLING_UNSPECIFIED;
}

// Fills ctx->batch from the caller's struct (capacity of the reused vectors is kept).
loom::Status to_batch(loom_context* ctx, const loom_batch& b, loom::Batch& out) {
  const int n = b.n_tokens;
  if (n <= 0) return loom::invalid_argument("empty batch (n_tokens = " + std::to_string(n) + ")");
  if (n > ctx->c->n_batch()) {
    return loom::invalid_argument("batch of " + std::to_string(n) + " tokens exceeds n_batch " +
                                  std::to_string(ctx->c->n_batch()));
  }
  const size_t un = size_t(n);
  if (b.token) {
    out.tokens.assign(b.token, b.token + un);
    out.embd.clear();
    out.embd_dim = 0;
  } else if (b.embd) {
    const size_t dim = size_t(ctx->c->n_embd());
    out.tokens.clear();
    out.embd.assign(b.embd, b.embd + un * dim);
    out.embd_dim = int(dim);
  } else {
    return loom::invalid_argument("batch has neither tokens nor embeddings");
  }
  if (b.pos) out.pos.assign(b.pos, b.pos + un);
  else out.pos.clear();
  if (b.seq_id) {
    const int max_ids = ctx->c->n_seq_max();
    out.seq_ids.resize(un);
    for (size_t i = 0; i < un; ++i) {
      const int32_t k = b.n_seq_id ? b.n_seq_id[i] : 1;
      if (k < 0 || k > max_ids) {
        return loom::invalid_argument("n_seq_id " + std::to_string(k) + " at batch index " + std::to_string(i) +
                                      " is outside [0, n_seq_max = " + std::to_string(max_ids) + "]");
      }
      if (k > 0 && !b.seq_id[i]) {
        return loom::invalid_argument("seq_id[" + std::to_string(i) + "] is NULL");
      }
      out.seq_ids[i].assign(b.seq_id[i], b.seq_id[i] + k);
    }
  } else {
    out.seq_ids.clear();
  }
  if (b.logits) {
    out.output.resize(un);
    for (size_t i = 0; i < un; ++i) out.output[i] = b.logits[i] ? 1 : 0;
  } else {
    out.output.clear();
  }
  return loom::Status::ok();
}

// The token count of a loom state file, read from its header (layout in src/context/state.cpp:
// "LOOMSTAT", u32 version, u32 kind, u64 fingerprint, u32 type_k, u32 type_v, u32 n_layer,
// u64 k_row_bytes, u64 v_row_bytes, u32 n_tokens). -1 when the header cannot be read; the
// load itself then reports why.
int64_t peek_state_token_count(const std::string& path) {
  constexpr size_t kOffset = 8 + 4 + 4 + 8 + 4 + 4 + 4 + 8 + 8;
  std::ifstream f(path, std::ios::binary);
  if (!f) return -1;
  unsigned char head[kOffset + 4];
  if (!f.read(reinterpret_cast<char*>(head), sizeof head)) return -1;
  if (std::memcmp(head, "LOOMSTAT", 8) != 0) return -1;
  uint32_t n = 0;
  std::memcpy(&n, head + kOffset, 4);
  return int64_t(n);
}

// Shared by the whole-context and sequence file loads.
template <typename Load>
int32_t load_state_file(const char* fn, const char* path, loom_token* tokens_out, size_t cap, size_t* n_out, Load&& load) {
  if (!path) return fail_arg(fn, "path is NULL");
  if (tokens_out) {
    const int64_t n = peek_state_token_count(path);
    if (n > int64_t(cap)) {
      if (n_out) *n_out = size_t(n);
      set_error(fn, std::string(path) + ": the state holds " + std::to_string(n) + " tokens, more than the capacity " +
                        std::to_string(cap));
      return LOOM_ERR_RESOURCE_EXHAUSTED;
    }
  }
  std::vector<int32_t> tokens;
  loom::Status st = load(std::string(path), &tokens);
  if (!st) return fail(fn, st);
  if (tokens_out) {
    if (tokens.size() > cap) {  // the file changed between peek and load
      if (n_out) *n_out = tokens.size();
      set_error(fn, "the state holds more tokens than the capacity");
      return LOOM_ERR_RESOURCE_EXHAUSTED;
    }
    std::copy(tokens.begin(), tokens.end(), tokens_out);
  }
  if (n_out) *n_out = tokens.size();
  return LOOM_OK;
}

template <typename Run>
int32_t run_batch(const char* fn, loom_context* ctx, const loom_batch* batch, Run&& run) {
  if (!ctx) {
    set_error(fn, "context is NULL");
    return LOOM_DECODE_INVALID;
  }
  if (!batch) {
    set_error(fn, "batch is NULL");
    return LOOM_DECODE_INVALID;
  }
  try {
    loom::Status st = to_batch(ctx, *batch, ctx->batch);
    if (st) st = run(ctx->batch);
    if (!st) set_error(fn, st.message());
    return loom::decode_result_code(st);
  } catch (const std::bad_alloc&) {
    set_error(fn, "out of memory");
  } catch (const std::exception& e) {
    set_error(fn, std::string("internal error: ") + e.what());
  } catch (...) {
    set_error(fn, "internal error: unknown exception");
  }
  return LOOM_DECODE_INTERNAL;
}

std::string human_count(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.1fB", double(n) / 1e9);
  else if (n >= 1000000ull) std::snprintf(buf, sizeof buf, "%.1fM", double(n) / 1e6);
  else if (n >= 1000ull) std::snprintf(buf, sizeof buf, "%.1fK", double(n) / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  return buf;
}

std::string meta_value_string(const loom::gguf::Value& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return loom::gguf::to_string(v, std::numeric_limits<size_t>::max());
}

}  // namespace

extern "C" {

// ---- errors, version ----------------------------------------------------------------------------

const char* loom_last_error(void) { return t_error.fallback ? t_error.fallback : t_error.msg.c_str(); }

void loom_clear_last_error(void) {
  t_error.msg.clear();
  t_error.fallback = nullptr;
}

const char* loom_status_string(int32_t status) {
  switch (status) {
    case LOOM_OK: return "ok";
    case LOOM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case LOOM_ERR_NOT_FOUND: return "not found";
    case LOOM_ERR_CORRUPT: return "corrupt";
    case LOOM_ERR_UNSUPPORTED: return "unsupported";
    case LOOM_ERR_IO: return "i/o error";
    case LOOM_ERR_OUT_OF_RANGE: return "out of range";
    case LOOM_ERR_RESOURCE_EXHAUSTED: return "resource exhausted";
    case LOOM_ERR_ABORTED: return "aborted";
    case LOOM_ERR_INTERNAL: return "internal error";
    case LOOM_ERR_OUT_OF_MEMORY: return "out of memory";
    case LOOM_ERR_UNAVAILABLE: return "unavailable";
    default: return "unknown status";
  }
}

const char* loom_version(void) {
  static const std::string v = loom::version_full();
  return v.c_str();
}

void loom_set_log_level(int32_t level) { loom::set_log_level(loom::LogLevel(std::clamp(level, 0, 4))); }

void loom_set_log_callback(loom_log_callback callback, void* user_data) {
  if (!callback) {
    loom::set_log_sink(nullptr, nullptr);
    return;
  }
  struct Target {
    loom_log_callback cb;
    void* user;
  };
  // One target at a time, kept for the process's life (a message may be in flight on another
  // thread while it is replaced).
  static std::atomic<Target*> last{nullptr};
  auto* t = new Target{callback, user_data};
  loom::set_log_sink(
      [](loom::LogLevel level, std::string_view msg, void* u) {
        auto* tg = static_cast<Target*>(u);
        const std::string text(msg);
        tg->cb(int32_t(level), text.c_str(), tg->user);
      },
      t);
  (void)last.exchange(t);  // the previous one is leaked on purpose (a few bytes per call)
}

// ---- model -------------------------------------------------------------------------------------

loom_model_params loom_model_default_params(void) {
  loom_model_params p{};
  p.vocab_only = false;
  p.progress_callback = nullptr;
  p.progress_callback_user_data = nullptr;
  return p;
}

loom_model* loom_model_load_from_file(const char* path, const loom_model_params* params) {
  return guarded<loom_model*>(__func__, nullptr, [&]() -> loom_model* {
    if (!path) {
      set_error("loom_model_load_from_file", "path is NULL");
      return nullptr;
    }
    loom::ModelLoadParams lp;
    lp.vocab_only = params ? params->vocab_only : false;
    if (params && params->progress_callback) {
      lp.progress = [cb = params->progress_callback, u = params->progress_callback_user_data](float f) { cb(f, u); };
    }
    auto m = loom::Model::load(path, lp);
    if (!m) {
      set_error("loom_model_load_from_file", m.status().message());
      return nullptr;
    }
    auto h = std::make_unique<loom_model>();
    h->m = std::move(*m);
    h->vocab_only = lp.vocab_only;
    auto arch = h->m->file().get_string_or("general.architecture", "");
    h->arch = arch ? *arch : std::string();
    return h.release();
  });
}

void loom_model_free(loom_model* model) { delete model; }

bool loom_model_is_vocab_only(const loom_model* model) { return model && model->vocab_only; }

int32_t loom_model_n_vocab(const loom_model* model) { return model ? model->m->vocab().n_tokens() : 0; }
int32_t loom_model_n_embd(const loom_model* model) { return model ? int32_t(model->m->hparams().n_embd) : 0; }
int32_t loom_model_n_cls_out(const loom_model* model) { return model ? int32_t(model->m->hparams().n_cls_out) : 0; }
bool loom_model_has_encoder(const loom_model* model) { return model && model->m->hparams().has_encoder(); }
bool loom_model_has_decoder(const loom_model* model) { return model && !model->m->hparams().is_encoder(); }
loom_token loom_model_decoder_start_token(const loom_model* model) {
  return model ? model->m->decoder_start_token() : LOOM_TOKEN_NULL;
}
int32_t loom_model_n_layer(const loom_model* model) { return model ? int32_t(model->m->hparams().n_layer) : 0; }
int32_t loom_model_n_head(const loom_model* model) { return model ? int32_t(model->m->hparams().n_head) : 0; }
int32_t loom_model_n_head_kv(const loom_model* model) { return model ? int32_t(model->m->hparams().n_head_kv) : 0; }
int32_t loom_model_n_ctx_train(const loom_model* model) { return model ? int32_t(model->m->hparams().n_ctx_train) : 0; }
float loom_model_rope_freq_scale_train(const loom_model* model) {
  return model ? model->m->hparams().rope_freq_scale : 0.0f;
}
const char* loom_model_arch_name(const loom_model* model) { return model ? model->arch.c_str() : ""; }

uint64_t loom_model_size(const loom_model* model) {
  if (!model) return 0;
  uint64_t n = 0;
  for (const auto& t : model->m->file().tensors()) n += t.nbytes;
  return n;
}

uint64_t loom_model_n_params(const loom_model* model) {
  if (!model) return 0;
  if (model->m->n_params() > 0) return model->m->n_params();
  uint64_t n = 0;
  for (const auto& t : model->m->file().tensors()) n += uint64_t(t.n_elements());
  return n;
}

int32_t loom_model_desc(const loom_model* model, char* buf, size_t buf_size) {
  return guarded<int32_t>(__func__, -1, [&]() -> int32_t {
    if (!model) {
      set_error("loom_model_desc", "model is NULL");
      return -1;
    }
    // The tensor type holding the most bytes stands for the file's quantization.
    std::vector<std::pair<uint32_t, uint64_t>> bytes;
    for (const auto& t : model->m->file().tensors()) {
      auto it = std::find_if(bytes.begin(), bytes.end(), [&](const auto& e) { return e.first == uint32_t(t.type); });
      if (it == bytes.end()) bytes.emplace_back(uint32_t(t.type), t.nbytes);
      else it->second += t.nbytes;
    }
    std::string type = "?";
    if (!bytes.empty()) {
      auto best =
          std::max_element(bytes.begin(), bytes.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
      type = std::string(loom::tensor_type_name(loom::TensorType(best->first)));
      for (char& ch : type) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    }
    const std::string desc =
        (model->arch.empty() ? std::string("?") : model->arch) + " " + human_count(loom_model_n_params(model)) + " " + type;
    return copy_string(desc, buf, buf_size);
  });
}

int32_t loom_model_meta_count(const loom_model* model) { return model ? int32_t(model->m->file().metadata().size()) : -1; }

int32_t loom_model_meta_key_by_index(const loom_model* model, int32_t i, char* buf, size_t buf_size) {
  return guarded<int32_t>(__func__, -1, [&]() -> int32_t {
    if (!model || i < 0 || size_t(i) >= model->m->file().metadata().size()) {
      set_error("loom_model_meta_key_by_index", !model ? "model is NULL" : "metadata index out of range");
      return -1;
    }
    return copy_string(model->m->file().metadata()[size_t(i)].key, buf, buf_size);
  });
}

int32_t loom_model_meta_val_str_by_index(const loom_model* model, int32_t i, char* buf, size_t buf_size) {
  return guarded<int32_t>(__func__, -1, [&]() -> int32_t {
    if (!model || i < 0 || size_t(i) >= model->m->file().metadata().size()) {
      set_error("loom_model_meta_val_str_by_index", !model ? "model is NULL" : "metadata index out of range");
      return -1;
    }
    return copy_string(meta_value_string(model->m->file().metadata()[size_t(i)].value), buf, buf_size);
  });
}

int32_t loom_model_meta_val_str(const loom_model* model, const char* key, char* buf, size_t buf_size) {
  return guarded<int32_t>(__func__, -1, [&]() -> int32_t {
    if (!model || !key) {
      set_error("loom_model_meta_val_str", !model ? "model is NULL" : "key is NULL");
      return -1;
    }
    const loom::gguf::Value* v = model->m->file().find(key);
    if (!v) {
      set_error("loom_model_meta_val_str", std::string("metadata key '") + key + "' not found");
      return -1;
    }
    return copy_string(meta_value_string(*v), buf, buf_size);
  });
}

// ---- vocabulary ----------------------------------------------------------------------------------

int32_t loom_vocab_type(const loom_model* model) {
  const loom::Vocab* v = vocab_of(__func__, model);
  if (!v) return -1;
  switch (v->type()) {
    case loom::VocabType::kSpm: return LOOM_VOCAB_TYPE_SPM;
    case loom::VocabType::kBpe: return LOOM_VOCAB_TYPE_BPE;
    case loom::VocabType::kWpm: return LOOM_VOCAB_TYPE_WPM;
    case loom::VocabType::kUgm: return LOOM_VOCAB_TYPE_UGM;
  }
  return -1;
}

int32_t loom_vocab_n_tokens(const loom_model* model) { return model ? model->m->vocab().n_tokens() : 0; }

int32_t loom_tokenize(const loom_model* model, const char* text, int32_t text_len, loom_token* tokens, int32_t n_tokens_max,
                      bool add_special, bool parse_special) {
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    const char* fn = "loom_tokenize";
    const loom::Vocab* v = vocab_of(fn, model);
    if (!v) return LOOM_SIZE_ERROR;
    if (!text && text_len != 0) {
      set_error(fn, "text is NULL");
      return LOOM_SIZE_ERROR;
    }
    if (n_tokens_max < 0 || (!tokens && n_tokens_max > 0)) {
      set_error(fn, "tokens is NULL or n_tokens_max is negative");
      return LOOM_SIZE_ERROR;
    }
    const size_t len = text ? (text_len < 0 ? std::strlen(text) : size_t(text_len)) : 0;
    const std::vector<int32_t> ids = v->tokenize(std::string_view(text ? text : "", len), add_special, parse_special);
    if (ids.size() > size_t(INT32_MAX)) {
      set_error(fn, "token count does not fit int32_t");
      return LOOM_SIZE_ERROR;
    }
    if (ids.size() > size_t(n_tokens_max)) return -int32_t(ids.size());
    std::copy(ids.begin(), ids.end(), tokens);
    return int32_t(ids.size());
  });
}

int32_t loom_token_to_piece(const loom_model* model, loom_token token, char* buf, int32_t length, int32_t lstrip,
                            bool special) {
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    const char* fn = "loom_token_to_piece";
    const loom::Vocab* v = vocab_of(fn, model);
    if (!v) return LOOM_SIZE_ERROR;
    if (!v->is_valid(token)) {
      set_error(fn, "invalid token id " + std::to_string(token) + " (the vocabulary has " + std::to_string(v->n_tokens()) +
                        " tokens)");
      return LOOM_SIZE_ERROR;
    }
    if (length < 0 || (!buf && length > 0)) {
      set_error(fn, "buf is NULL or length is negative");
      return LOOM_SIZE_ERROR;
    }
    const std::string piece = v->token_to_piece(token, special);
    std::string_view s = piece;
    for (int32_t k = 0; k < lstrip && !s.empty() && s.front() == ' '; ++k) s.remove_prefix(1);
    return copy_sized(fn, s, buf, length);
  });
}

int32_t loom_detokenize(const loom_model* model, const loom_token* tokens, int32_t n_tokens, char* text,
                        int32_t text_len_max, bool remove_special, bool unparse_special) {
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    const char* fn = "loom_detokenize";
    const loom::Vocab* v = vocab_of(fn, model);
    if (!v) return LOOM_SIZE_ERROR;
    if (n_tokens < 0 || (!tokens && n_tokens > 0) || text_len_max < 0 || (!text && text_len_max > 0)) {
      set_error(fn, "NULL pointer with a nonzero size, or a negative size");
      return LOOM_SIZE_ERROR;
    }
    auto s = v->detokenize(std::span<const int32_t>(tokens, size_t(n_tokens)), remove_special, unparse_special);
    if (!s) {
      set_error(fn, s.status().message());
      return LOOM_SIZE_ERROR;
    }
    return copy_sized(fn, *s, text, text_len_max);
  });
}

#define LOOM_SPECIAL_TOKEN(name) \
  loom_token loom_token_##name(const loom_model* model) { return model ? model->m->vocab().name() : LOOM_TOKEN_NULL; }
LOOM_SPECIAL_TOKEN(bos)
LOOM_SPECIAL_TOKEN(eos)
LOOM_SPECIAL_TOKEN(eot)
LOOM_SPECIAL_TOKEN(eom)
LOOM_SPECIAL_TOKEN(sep)
LOOM_SPECIAL_TOKEN(nl)
LOOM_SPECIAL_TOKEN(pad)
LOOM_SPECIAL_TOKEN(unk)
LOOM_SPECIAL_TOKEN(fim_pre)
LOOM_SPECIAL_TOKEN(fim_suf)
LOOM_SPECIAL_TOKEN(fim_mid)
LOOM_SPECIAL_TOKEN(fim_pad)
LOOM_SPECIAL_TOKEN(fim_rep)
LOOM_SPECIAL_TOKEN(fim_sep)
#undef LOOM_SPECIAL_TOKEN

bool loom_add_bos_token(const loom_model* model) { return model && model->m->vocab().add_bos(); }
bool loom_add_eos_token(const loom_model* model) { return model && model->m->vocab().add_eos(); }

bool loom_token_is_valid(const loom_model* model, loom_token token) { return model && model->m->vocab().is_valid(token); }
bool loom_token_is_eog(const loom_model* model, loom_token token) { return model && model->m->vocab().is_eog(token); }
bool loom_token_is_control(const loom_model* model, loom_token token) {
  return model && model->m->vocab().is_control(token);
}
const char* loom_token_get_text(const loom_model* model, loom_token token) {
  if (!model || !model->m->vocab().is_valid(token)) return "";
  return model->m->vocab().token_text(token).data();  // a view of a std::string: NUL-terminated
}
float loom_token_get_score(const loom_model* model, loom_token token) {
  return model ? model->m->vocab().token_score(token) : 0.0f;
}
uint32_t loom_token_get_attr(const loom_model* model, loom_token token) {
  return model ? model->m->vocab().token_attr(token) : 0u;
}

// ---- context ---------------------------------------------------------------------------------------

loom_context_params loom_context_default_params(void) {
  const loom::ContextParams d;
  loom_context_params p;
  std::memset(&p, 0, sizeof p);
  p.n_ctx = d.n_ctx;
  p.n_batch = d.n_batch;
  p.n_ubatch = d.n_ubatch;
  p.n_seq_max = d.n_seq_max;
  p.n_threads = d.n_threads;
  p.n_threads_batch = d.n_threads_batch;
  p.rope_scaling_type = LOOM_ROPE_SCALING_UNSPECIFIED;
  p.pooling_type = LOOM_POOLING_UNSPECIFIED;
  p.attention_type = LOOM_ATTENTION_UNSPECIFIED;
  p.rope_freq_base = d.rope_freq_base;
  p.rope_freq_scale = d.rope_freq_scale;
  p.yarn_ext_factor = d.yarn_ext_factor;
  p.yarn_attn_factor = d.yarn_attn_factor;
  p.yarn_beta_fast = d.yarn_beta_fast;
  p.yarn_beta_slow = d.yarn_beta_slow;
  p.yarn_orig_ctx = d.yarn_orig_ctx;
  p.n_swa = d.n_swa;
  p.defrag_thold = d.defrag_thold;
  p.type_k = int32_t(d.type_k);
  p.type_v = int32_t(d.type_v);
  p.embeddings = d.embeddings;
  p.no_perf = d.no_perf;
  p.abort_callback = nullptr;
  p.abort_callback_data = nullptr;
  p.eval_callback = nullptr;
  p.eval_callback_data = nullptr;
  return p;
}

loom_context* loom_context_new(const loom_model* model, const loom_context_params* params) {
  return new_context("loom_context_new", model, params, {});
}

}  // extern "C"

loom_context* loom::capi::new_context(const char* fn, const loom_model* model, const loom_context_params* params,
                                      const std::function<bool(loom::ContextParams&)>& adjust) {
  return guarded<loom_context*>(fn, nullptr, [&]() -> loom_context* {
    if (!model) {
      set_error(fn, "model is NULL");
      return nullptr;
    }
    if (model->vocab_only) {
      set_error(fn, "the model was loaded with vocab_only; it has no weights to run");
      return nullptr;
    }
    const loom_context_params p = params ? *params : loom_context_default_params();
    loom::ContextParams cp;
    if (loom::Status st = to_params(p, &cp); !st) {
      fail(fn, st);
      return nullptr;
    }
    if (adjust && !adjust(cp)) return nullptr;
    auto c = loom::Context::create(model->m, cp);
    if (!c) {
      fail(fn, c.status());
      return nullptr;
    }
    auto h = std::make_unique<loom_context>();
    h->c = std::move(*c);
    return h.release();
  });
}

extern "C" {

void loom_context_free(loom_context* ctx) { delete ctx; }

int32_t loom_n_ctx(const loom_context* ctx) { return ctx ? ctx->c->n_ctx() : 0; }
int32_t loom_n_batch(const loom_context* ctx) { return ctx ? ctx->c->n_batch() : 0; }
int32_t loom_n_ubatch(const loom_context* ctx) { return ctx ? ctx->c->n_ubatch() : 0; }
int32_t loom_n_seq_max(const loom_context* ctx) { return ctx ? ctx->c->n_seq_max() : 0; }
int32_t loom_n_threads(const loom_context* ctx) { return ctx ? ctx->c->params().n_threads : 0; }
int32_t loom_n_threads_batch(const loom_context* ctx) { return ctx ? ctx->c->params().n_threads_batch : 0; }
int32_t loom_pooling_type(const loom_context* ctx) {
  return ctx ? pooling_to_c(ctx->c->pooling()) : LOOM_POOLING_UNSPECIFIED;
}
int32_t loom_n_vocab(const loom_context* ctx) { return ctx ? ctx->c->n_vocab() : 0; }
int32_t loom_n_embd(const loom_context* ctx) { return ctx ? ctx->c->n_embd() : 0; }

int32_t loom_set_n_threads(loom_context* ctx, int32_t n_threads, int32_t n_threads_batch) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  ctx->c->set_n_threads(n_threads, n_threads_batch);
  return LOOM_OK;
}

int32_t loom_set_embeddings(loom_context* ctx, bool embeddings) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] {
    ctx->c->set_embeddings(embeddings);  // may reserve the logits buffer
    return int32_t(LOOM_OK);
  });
}

int32_t loom_set_causal_attn(loom_context* ctx, bool causal_attn) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  ctx->c->set_causal_attn(causal_attn);
  return LOOM_OK;
}

int32_t loom_set_abort_callback(loom_context* ctx, loom_abort_callback callback, void* data) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  ctx->c->set_abort_callback(callback, data);
  return LOOM_OK;
}

// ---- batches ----------------------------------------------------------------------------------------

loom_batch loom_batch_init(int32_t n_tokens_max, int32_t embd, int32_t n_seq_max) {
  loom_batch b;
  std::memset(&b, 0, sizeof b);
  if (n_tokens_max <= 0 || embd < 0 || n_seq_max <= 0) {
    set_error(__func__, "n_tokens_max and n_seq_max must be positive, embd not negative");
    return b;
  }
  const size_t n = size_t(n_tokens_max);
  bool ok = true;
  if (embd > 0) {
    b.embd = static_cast<float*>(std::calloc(n * size_t(embd), sizeof(float)));
    ok = ok && b.embd;
  } else {
    b.token = static_cast<loom_token*>(std::calloc(n, sizeof(loom_token)));
    ok = ok && b.token;
  }
  b.pos = static_cast<loom_pos*>(std::calloc(n, sizeof(loom_pos)));
  b.n_seq_id = static_cast<int32_t*>(std::calloc(n, sizeof(int32_t)));
  b.seq_id = static_cast<loom_seq_id**>(std::calloc(n + 1, sizeof(loom_seq_id*)));  // NULL-terminated
  b.logits = static_cast<int8_t*>(std::calloc(n, sizeof(int8_t)));
  ok = ok && b.pos && b.n_seq_id && b.seq_id && b.logits;
  for (size_t i = 0; ok && i < n; ++i) {
    b.seq_id[i] = static_cast<loom_seq_id*>(std::calloc(size_t(n_seq_max), sizeof(loom_seq_id)));
    ok = b.seq_id[i] != nullptr;
  }
  if (!ok) {
    loom_batch_free(&b);
    set_error("loom_batch_init", "out of memory");
  }
  return b;
}

void loom_batch_free(loom_batch* batch) {
  if (!batch) return;
  if (batch->seq_id) {
    for (size_t i = 0; batch->seq_id[i]; ++i) std::free(batch->seq_id[i]);
  }
  std::free(batch->token);
  std::free(batch->embd);
  std::free(batch->pos);
  std::free(batch->n_seq_id);
  std::free(batch->seq_id);
  std::free(batch->logits);
  std::memset(batch, 0, sizeof *batch);
}

loom_batch loom_batch_get_one(loom_token* tokens, int32_t n_tokens) {
  loom_batch b;
  std::memset(&b, 0, sizeof b);
  b.n_tokens = n_tokens;
  b.token = tokens;
  return b;
}

// ---- evaluation ---------------------------------------------------------------------------------------

int32_t loom_decode(loom_context* ctx, const loom_batch* batch) {
  return run_batch(__func__, ctx, batch, [&](const loom::Batch& b) { return ctx->c->decode(b); });
}

int32_t loom_encode(loom_context* ctx, const loom_batch* batch) {
  return run_batch(__func__, ctx, batch, [&](const loom::Batch& b) { return ctx->c->encode(b); });
}

int32_t loom_warmup(loom_context* ctx) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] { return check("loom_warmup", ctx->c->warmup()); });
}

int32_t loom_n_outputs(const loom_context* ctx) { return ctx ? ctx->c->n_outputs() : 0; }

const float* loom_get_logits(const loom_context* ctx) {
  LOOM_NEED_CTX(nullptr);
  auto s = ctx->c->all_logits();
  if (s.empty()) {
    set_error(__func__, "no logits: the last decode produced none (or the context is in embeddings mode)");
    return nullptr;
  }
  return s.data();
}

const float* loom_get_logits_ith(const loom_context* ctx, int32_t i) {
  LOOM_NEED_CTX(nullptr);
  return guarded<const float*>(__func__, nullptr, [&]() -> const float* {
    auto s = ctx->c->logits(i);
    if (!s) {
      set_error("loom_get_logits_ith", s.status().message());
      return nullptr;
    }
    return s->data();
  });
}

const float* loom_get_embeddings(const loom_context* ctx) {
  LOOM_NEED_CTX(nullptr);
  auto s = ctx->c->all_embeddings();
  if (s.empty()) {
    set_error(__func__, "no embeddings: the last decode produced none (is embeddings mode on?)");
    return nullptr;
  }
  return s.data();
}

const float* loom_get_embeddings_ith(const loom_context* ctx, int32_t i) {
  LOOM_NEED_CTX(nullptr);
  return guarded<const float*>(__func__, nullptr, [&]() -> const float* {
    auto s = ctx->c->embeddings(i);
    if (!s) {
      set_error("loom_get_embeddings_ith", s.status().message());
      return nullptr;
    }
    return s->data();
  });
}

const float* loom_get_embeddings_seq(const loom_context* ctx, loom_seq_id seq) {
  LOOM_NEED_CTX(nullptr);
  return guarded<const float*>(__func__, nullptr, [&]() -> const float* {
    auto s = ctx->c->embeddings_seq(seq);
    if (!s) {
      set_error("loom_get_embeddings_seq", s.status().message());
      return nullptr;
    }
    return s->data();
  });
}

// ---- KV cache ------------------------------------------------------------------------------------------

void loom_kv_clear(loom_context* ctx) {
  if (!ctx) {
    set_error(__func__, "context is NULL");
    return;
  }
  guarded_status(__func__, [&] {
    ctx->c->kv_clear();
    return int32_t(LOOM_OK);
  });
}

int32_t loom_kv_seq_rm(loom_context* ctx, loom_seq_id seq, loom_pos p0, loom_pos p1) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] { return check("loom_kv_seq_rm", ctx->c->seq_rm(seq, p0, p1)); });
}

int32_t loom_kv_seq_cp(loom_context* ctx, loom_seq_id src, loom_seq_id dst, loom_pos p0, loom_pos p1) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] { return check("loom_kv_seq_cp", ctx->c->seq_cp(src, dst, p0, p1)); });
}

int32_t loom_kv_seq_keep(loom_context* ctx, loom_seq_id seq) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] { return check("loom_kv_seq_keep", ctx->c->seq_keep(seq)); });
}

int32_t loom_kv_seq_add(loom_context* ctx, loom_seq_id seq, loom_pos p0, loom_pos p1, loom_pos delta) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] { return check("loom_kv_seq_add", ctx->c->seq_add(seq, p0, p1, delta)); });
}

int32_t loom_kv_seq_div(loom_context* ctx, loom_seq_id seq, loom_pos p0, loom_pos p1, int32_t d) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] { return check("loom_kv_seq_div", ctx->c->seq_div(seq, p0, p1, d)); });
}

loom_pos loom_kv_seq_pos_min(const loom_context* ctx, loom_seq_id seq) {
  LOOM_NEED_CTX(LOOM_SIZE_ERROR);
  return guarded<loom_pos>(__func__, LOOM_SIZE_ERROR, [&]() -> loom_pos {
    auto p = ctx->c->seq_pos_min(seq);
    if (!p) {
      set_error("loom_kv_seq_pos_min", p.status().message());
      return LOOM_SIZE_ERROR;
    }
    return *p;
  });
}

loom_pos loom_kv_seq_pos_max(const loom_context* ctx, loom_seq_id seq) {
  LOOM_NEED_CTX(LOOM_SIZE_ERROR);
  return guarded<loom_pos>(__func__, LOOM_SIZE_ERROR, [&]() -> loom_pos {
    auto p = ctx->c->seq_pos_max(seq);
    if (!p) {
      set_error("loom_kv_seq_pos_max", p.status().message());
      return LOOM_SIZE_ERROR;
    }
    return *p;
  });
}

bool loom_kv_can_shift(const loom_context* ctx) { return ctx && ctx->c->can_shift(); }

int32_t loom_kv_update(loom_context* ctx) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] { return check("loom_kv_update", ctx->c->kv_update()); });
}

void loom_kv_defrag(loom_context* ctx) {
  if (!ctx) {
    set_error(__func__, "context is NULL");
    return;
  }
  guarded_status(__func__, [&] {
    ctx->c->kv_defrag();
    return int32_t(LOOM_OK);
  });
}

int32_t loom_kv_n_tokens(const loom_context* ctx) { return ctx ? ctx->c->kv_n_tokens() : 0; }
int32_t loom_kv_used_cells(const loom_context* ctx) { return ctx ? ctx->c->kv_used_cells() : 0; }

// ---- state ------------------------------------------------------------------------------------------------

size_t loom_state_get_size(const loom_context* ctx) {
  LOOM_NEED_CTX(0);
  return guarded<size_t>(__func__, 0, [&] { return ctx->c->state_save().size(); });
}

size_t loom_state_get_data(const loom_context* ctx, uint8_t* dst, size_t size) {
  LOOM_NEED_CTX(0);
  return guarded<size_t>(__func__, 0, [&]() -> size_t {
    const std::vector<uint8_t> data = ctx->c->state_save();
    if (!dst || size < data.size()) {
      set_error("loom_state_get_data", "buffer of " + std::to_string(size) + " bytes is smaller than the state (" +
                                           std::to_string(data.size()) + " bytes)");
      return 0;
    }
    std::memcpy(dst, data.data(), data.size());
    return data.size();
  });
}

int32_t loom_state_set_data(loom_context* ctx, const uint8_t* src, size_t size) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  if (!src && size > 0) return fail_arg(__func__, "src is NULL");
  return guarded_status(
      __func__, [&] { return check("loom_state_set_data", ctx->c->state_load(std::span<const uint8_t>(src, size))); });
}

int32_t loom_state_save_file(const loom_context* ctx, const char* path, const loom_token* tokens, size_t n_token_count) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  if (!path) return fail_arg(__func__, "path is NULL");
  if (!tokens && n_token_count > 0) return fail_arg(__func__, "tokens is NULL");
  return guarded_status(__func__, [&] {
    return check("loom_state_save_file", ctx->c->state_save_file(path, std::span<const int32_t>(tokens, n_token_count)));
  });
}

int32_t loom_state_load_file(loom_context* ctx, const char* path, loom_token* tokens_out, size_t n_token_capacity,
                             size_t* n_token_count_out) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] {
    return load_state_file("loom_state_load_file", path, tokens_out, n_token_capacity, n_token_count_out,
                           [&](const std::string& p, std::vector<int32_t>* t) { return ctx->c->state_load_file(p, t); });
  });
}

size_t loom_state_seq_get_size(const loom_context* ctx, loom_seq_id seq) {
  LOOM_NEED_CTX(0);
  return guarded<size_t>(__func__, 0, [&]() -> size_t {
    auto data = ctx->c->seq_state_save(seq);
    if (!data) {
      set_error("loom_state_seq_get_size", data.status().message());
      return 0;
    }
    return data->size();
  });
}

size_t loom_state_seq_get_data(const loom_context* ctx, uint8_t* dst, size_t size, loom_seq_id seq) {
  LOOM_NEED_CTX(0);
  return guarded<size_t>(__func__, 0, [&]() -> size_t {
    const char* fn = "loom_state_seq_get_data";
    auto data = ctx->c->seq_state_save(seq);
    if (!data) {
      set_error(fn, data.status().message());
      return 0;
    }
    if (!dst || size < data->size()) {
      set_error(fn, "buffer of " + std::to_string(size) + " bytes is smaller than the state (" +
                        std::to_string(data->size()) + " bytes)");
      return 0;
    }
    std::memcpy(dst, data->data(), data->size());
    return data->size();
  });
}

int32_t loom_state_seq_set_data(loom_context* ctx, const uint8_t* src, size_t size, loom_seq_id dest_seq) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  if (!src && size > 0) return fail_arg(__func__, "src is NULL");
  return guarded_status(__func__, [&] {
    return check("loom_state_seq_set_data", ctx->c->seq_state_load(std::span<const uint8_t>(src, size), dest_seq));
  });
}

int32_t loom_state_seq_save_file(const loom_context* ctx, const char* path, loom_seq_id seq, const loom_token* tokens,
                                 size_t n_token_count) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  if (!path) return fail_arg(__func__, "path is NULL");
  if (!tokens && n_token_count > 0) return fail_arg(__func__, "tokens is NULL");
  return guarded_status(__func__, [&] {
    return check("loom_state_seq_save_file",
                 ctx->c->seq_state_save_file(path, seq, std::span<const int32_t>(tokens, n_token_count)));
  });
}

int32_t loom_state_seq_load_file(loom_context* ctx, const char* path, loom_seq_id dest_seq, loom_token* tokens_out,
                                 size_t n_token_capacity, size_t* n_token_count_out) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] {
    return load_state_file(
        "loom_state_seq_load_file", path, tokens_out, n_token_capacity, n_token_count_out,
        [&](const std::string& p, std::vector<int32_t>* t) { return ctx->c->seq_state_load_file(p, dest_seq, t); });
  });
}

// ---- adapters ------------------------------------------------------------------------------------------------

loom_lora_adapter* loom_lora_adapter_load(const loom_model* model, const char* path) {
  return guarded<loom_lora_adapter*>(__func__, nullptr, [&]() -> loom_lora_adapter* {
    const char* fn = "loom_lora_adapter_load";
    if (!model || !path) {
      set_error(fn, !model ? "model is NULL" : "path is NULL");
      return nullptr;
    }
    if (model->vocab_only) {
      set_error(fn, "the model was loaded with vocab_only");
      return nullptr;
    }
    auto a = loom::LoraAdapter::load(path, *model->m);
    if (!a) {
      set_error(fn, a.status().message());
      return nullptr;
    }
    auto h = std::make_unique<loom_lora_adapter>();
    h->a = std::move(*a);
    return h.release();
  });
}

void loom_lora_adapter_free(loom_lora_adapter* adapter) { delete adapter; }

int32_t loom_set_lora(loom_context* ctx, const loom_lora_adapter* adapter, float scale) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  if (!adapter) return fail_arg(__func__, "adapter is NULL");
  return guarded_status(__func__, [&] { return check("loom_set_lora", ctx->c->set_lora(adapter->a, scale)); });
}

int32_t loom_remove_lora(loom_context* ctx, const loom_lora_adapter* adapter) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  if (!adapter) return fail_arg(__func__, "adapter is NULL");
  return guarded_status(__func__, [&] { return check("loom_remove_lora", ctx->c->remove_lora(adapter->a.get())); });
}

void loom_clear_lora(loom_context* ctx) {
  if (!ctx) {
    set_error(__func__, "context is NULL");
    return;
  }
  guarded_status(__func__, [&] {
    ctx->c->clear_lora();
    return int32_t(LOOM_OK);
  });
}

loom_control_vector* loom_control_vector_load(const char* path, float strength) {
  return guarded<loom_control_vector*>(__func__, nullptr, [&]() -> loom_control_vector* {
    if (!path) {
      set_error("loom_control_vector_load", "path is NULL");
      return nullptr;
    }
    auto cv = loom::ControlVector::load(path, strength);
    if (!cv) {
      set_error("loom_control_vector_load", cv.status().message());
      return nullptr;
    }
    auto h = std::make_unique<loom_control_vector>();
    h->cv = std::move(*cv);
    return h.release();
  });
}

void loom_control_vector_free(loom_control_vector* cvec) { delete cvec; }

int32_t loom_control_vector_add(loom_control_vector* dst, const loom_control_vector* src) {
  if (!dst || !src) return fail_arg(__func__, "control vector is NULL");
  return guarded_status(__func__, [&] { return check("loom_control_vector_add", dst->cv.add(src->cv)); });
}

const float* loom_control_vector_data(const loom_control_vector* cvec) {
  return cvec && !cvec->cv.data.empty() ? cvec->cv.data.data() : nullptr;
}
int32_t loom_control_vector_n_embd(const loom_control_vector* cvec) { return cvec ? cvec->cv.n_embd : 0; }
int32_t loom_control_vector_n_layers(const loom_control_vector* cvec) { return cvec ? cvec->cv.n_layers() : 0; }

int32_t loom_apply_control_vector(loom_context* ctx, const float* data, size_t len, int32_t n_embd, int32_t il_start,
                                  int32_t il_end) {
  LOOM_NEED_CTX(LOOM_ERR_INVALID_ARGUMENT);
  return guarded_status(__func__, [&] {
    const std::span<const float> s = data ? std::span<const float>(data, len) : std::span<const float>();
    return check("loom_apply_control_vector", ctx->c->set_control_vector(s, n_embd, il_start, il_end));
  });
}

// ---- perf ----------------------------------------------------------------------------------------------------------

loom_perf_data loom_perf_get(const loom_context* ctx) {
  loom_perf_data d;
  std::memset(&d, 0, sizeof d);
  if (!ctx) {
    set_error(__func__, "context is NULL");
    return d;
  }
  const loom::PerfCounters& p = ctx->c->perf();
  d.t_load_us = p.t_load_us;
  d.n_prompt_tokens = p.n_prompt_tokens;
  d.t_prompt_us = p.t_prompt_us;
  d.n_gen_tokens = p.n_gen_tokens;
  d.t_gen_us = p.t_gen_us;
  d.n_reused = p.n_reused;
  return d;
}

void loom_perf_reset(loom_context* ctx) {
  if (!ctx) {
    set_error(__func__, "context is NULL");
    return;
  }
  ctx->c->reset_perf();
}

int32_t loom_perf_report(const loom_context* ctx, char* buf, size_t buf_size) {
  LOOM_NEED_CTX(-1);
  return guarded<int32_t>(__func__, -1, [&] { return copy_string(ctx->c->perf_report(), buf, buf_size); });
}

int64_t loom_perf_expert_counts(const loom_context* ctx, uint64_t* out, size_t n) {
  LOOM_NEED_CTX(-1);
  const std::span<const uint64_t> c = ctx->c->expert_counts();
  if (out) std::copy_n(c.begin(), std::min(n, c.size()), out);
  return int64_t(c.size());
}

void loom_perf_print(const loom_context* ctx) {
  if (!ctx) {
    set_error(__func__, "context is NULL");
    return;
  }
  guarded<int32_t>(__func__, -1, [&] {
    std::fputs(ctx->c->perf_report().c_str(), stderr);
    return 0;
  });
}

}  // extern "C"
