// The C API's contexts (include/loom/loom.h): parameters and creation, run-time settings,
// batches, decode / encode and their outputs, and the KV cache's sequence operations.
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

// ---- parameters -------------------------------------------------------------------------------

loom::Status loom::capi::to_params(const loom_context_params& p, loom::ContextParams* out) {
  loom::ContextParams& cp = *out;
  cp.n_ctx = p.n_ctx;
  cp.n_batch = p.n_batch;
  cp.n_ubatch = p.n_ubatch;
  cp.n_seq_max = p.n_seq_max;
  cp.n_threads = p.n_threads;
  cp.n_threads_batch = p.n_threads_batch;
  switch (p.rope_scaling_type) {
    case LOOM_ROPE_SCALING_UNSPECIFIED: cp.rope_scaling = loom::context::RopeScaling::kUnspecified; break;
    case LOOM_ROPE_SCALING_NONE: cp.rope_scaling = loom::context::RopeScaling::kNone; break;
    case LOOM_ROPE_SCALING_LINEAR: cp.rope_scaling = loom::context::RopeScaling::kLinear; break;
    case LOOM_ROPE_SCALING_YARN: cp.rope_scaling = loom::context::RopeScaling::kYarn; break;
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
    case LOOM_ATTENTION_UNSPECIFIED: cp.attention = loom::context::AttentionType::kUnspecified; break;
    case LOOM_ATTENTION_CAUSAL: cp.attention = loom::context::AttentionType::kCausal; break;
    case LOOM_ATTENTION_NON_CAUSAL: cp.attention = loom::context::AttentionType::kNonCausal; break;
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
    if (t < 0 || !loom::gguf::tensor_type_info(uint32_t(t))) {
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
    return loom::context::decode_result_code(st);
  } catch (const std::bad_alloc&) {
    set_error(fn, "out of memory");
  } catch (const std::exception& e) {
    set_error(fn, std::string("internal error: ") + e.what());
  } catch (...) {
    set_error(fn, "internal error: unknown exception");
  }
  return LOOM_DECODE_INTERNAL;
}

}  // namespace

extern "C" {

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

}  // extern "C"
