// The C API's state files and buffers (whole context and per sequence), LoRA adapters and
// control vectors, and performance counters (include/loom/loom.h).
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

}  // namespace

extern "C" {

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
  const loom::context::PerfCounters& p = ctx->c->perf();
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
