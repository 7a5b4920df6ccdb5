// The C API (include/loom/loom.h): a thin layer over loom::Model, loom::Vocab and loom::Context
// that converts arguments, catches every exception and records failures in a thread-local
// message. Behaviour lives in the C++ classes; nothing here decides anything they already do.
// This file: errors, version and logging, models and their vocabulary; contexts, batches and
// evaluation are in loom_context_c.cpp, state files, adapters and perf in loom_state_c.cpp.
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
    loom::model::ModelLoadParams lp;
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
      type = std::string(loom::gguf::tensor_type_name(loom::TensorType(best->first)));
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
}  // extern "C"
