// The C API's additions of 0.3 (include/loom/loom.h, "since 0.3"): what the `loom` command line
// needs beyond models and contexts: more model and context facts, chat-prompt and rerank
// tokenization, the streaming detokenizer, speculative decoding (drafters and one verification
// round), JSON schema -> grammar, GGUF listing, quantization, template rendering, CPU facts.
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <functional>
#include <span>
#include <vector>

#include "base/cpu.h"
#include "capi/capi_internal.h"
#include "chat/chat_prompt.h"
#include "jinja/template.h"
#include "gguf/gguf.h"
#include "model/imatrix.h"
#include "model/quantize_model.h"
#include "sample/json_schema.h"
#include "speculative/speculative.h"
#include "vocab/stream_detokenizer.h"

using namespace loom::capi;

struct loom_detokenizer {
  std::shared_ptr<const loom::Model> model;  // keeps the vocabulary alive
  loom::StreamDetokenizer d;
  std::string out;  // the last call's text
};

struct loom_drafter {
  std::unique_ptr<loom::Drafter> d;
};

namespace {

const loom::Model* model_of(const char* fn, const loom_model* m) {
  if (!m) {
    set_error(fn, "model is NULL");
    return nullptr;
  }
  return m->m.get();
}

// Size-negotiated copy of a result string (loom_gguf_describe, loom_template_render).
int32_t copy_negotiated(const char* fn, std::string_view s, char* buf, size_t buf_size) {
  if (s.size() >= size_t(INT32_MAX)) {
    set_error(fn, "result does not fit int32_t");
    return LOOM_SIZE_ERROR;
  }
  if (!buf || buf_size < s.size() + 1) return -int32_t(s.size() + 1);
  if (!s.empty()) std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  return int32_t(s.size());
}

// Size negotiation for token vectors (as loom_tokenize).
int32_t copy_tokens(const char* fn, const std::vector<int32_t>& ids, loom_token* tokens, int32_t n_tokens_max) {
  if (n_tokens_max < 0 || (!tokens && n_tokens_max > 0)) {
    set_error(fn, "tokens is NULL or n_tokens_max is negative");
    return LOOM_SIZE_ERROR;
  }
  if (ids.size() > size_t(INT32_MAX)) {
    set_error(fn, "token count does not fit int32_t");
    return LOOM_SIZE_ERROR;
  }
  if (ids.size() > size_t(n_tokens_max)) return -int32_t(ids.size());
  std::copy(ids.begin(), ids.end(), tokens);
  return int32_t(ids.size());
}

std::string_view text_of(const char* text, int32_t len) {
  if (!text) return {};
  return std::string_view(text, len < 0 ? std::strlen(text) : size_t(len));
}

nlohmann::json gguf_array_json(const loom::gguf::Array& a) {
  using loom::gguf::ValueType;
  nlohmann::json j = nlohmann::json::array();
  for (uint64_t i = 0; i < a.count; ++i) {
    switch (a.elem_type) {
      case ValueType::kString: j.push_back(a.strings[i]); break;
      case ValueType::kArray: j.push_back(gguf_array_json(a.arrays[i])); break;
      case ValueType::kBool: j.push_back(a.raw[i] != 0); break;
      case ValueType::kFloat32:
      case ValueType::kFloat64: j.push_back(a.number_at(i)); break;
      case ValueType::kUint64: j.push_back(uint64_t(a.int_at(i))); break;
      default: j.push_back(a.int_at(i)); break;
    }
  }
  return j;
}

nlohmann::json gguf_value_json(const loom::gguf::Value& v) {
  return std::visit(
      [](const auto& x) -> nlohmann::json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, loom::gguf::Array>) return gguf_array_json(x);
        else return x;
      },
      v);
}

std::string dump_json(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string build_system_info() {
  const loom::CpuFeatures& f = loom::cpu_features();
  std::string s;
  auto add = [&](const char* name, bool v) { s += std::string(s.empty() ? "" : " | ") + name + " = " + (v ? "1" : "0"); };
  add("SIMD", f.simd);
  add("AVX2", f.avx2);
  add("FMA", f.fma);
  add("F16C", f.f16c);
  add("AVX512", f.avx512f && f.zmm_enabled);
  add("AVX512_VNNI", f.avx512vnni && f.zmm_enabled);
  add("AVX_VNNI", f.avx_vnni);
  add("AMX_INT8", f.amx_int8);
  add("AMX_BF16", f.amx_bf16);
  add("NEON_DOTPROD", f.neon_dotprod);
  add("NEON_I8MM", f.neon_i8mm);
  add("NEON_FP16", f.neon_fp16);
  add("NEON_FHM", f.neon_fhm);
  add("SVE", f.sve);
  const char* kernels = !f.simd                   ? "scalar"
                        : f.has_amx_int8_set()    ? "amx+avx512"
                        : f.has_avx512_vnni_set() ? "avx512"
                        : f.has_avx_vnni_set()    ? "avx-vnni"
                        : f.has_avx2_set()        ? "avx2"
                        : f.neon_i8mm             ? "neon-i8mm"
                        : f.neon_dotprod          ? "neon-dotprod"
                                                  : "baseline";
  s += std::string(" | kernels = ") + kernels;
  return s;
}

}  // namespace

extern "C" {

// ---- model, more ----------------------------------------------------------------------------

bool loom_model_is_recurrent(const loom_model* model) { return model && model->m->hparams().is_recurrent(); }

int32_t loom_model_pooling_type(const loom_model* model) {
  if (!model) return LOOM_POOLING_UNSPECIFIED;
  const int p = model->m->hparams().pooling_type;
  return p >= 0 && p <= 4 ? p : LOOM_POOLING_UNSPECIFIED;
}

int32_t loom_model_cls_label(const loom_model* model, int32_t i, char* buf, size_t buf_size) {
  if (!model || i < 0 || size_t(i) >= model->m->hparams().cls_labels.size()) return -1;
  return guarded<int32_t>(__func__, -1,
                          [&] { return copy_string(model->m->hparams().cls_labels[size_t(i)], buf, buf_size); });
}

uint64_t loom_model_decode_weight_bytes(const loom_model* model) { return model ? model->m->decode_weight_bytes() : 0; }

int32_t loom_tokenize_rerank(const loom_model* model, const char* query, int32_t query_len, const char* document,
                             int32_t document_len, loom_token* tokens, int32_t n_tokens_max) {
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    const char* fn = "loom_tokenize_rerank";
    const loom::Model* m = model_of(fn, model);
    if (!m) return LOOM_SIZE_ERROR;
    if ((!query && query_len > 0) || (!document && document_len > 0)) {
      set_error(fn, "query or document is NULL");
      return LOOM_SIZE_ERROR;
    }
    const loom::Vocab& v = m->vocab();
    const std::vector<int32_t> ids = v.rerank_input(v.tokenize(text_of(query, query_len), false, false),
                                                    v.tokenize(text_of(document, document_len), false, false));
    return copy_tokens(fn, ids, tokens, n_tokens_max);
  });
}

int32_t loom_tokenize_chat(const loom_model* model, const char* text, int32_t text_len, loom_token* tokens,
                           int32_t n_tokens_max) {
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    const char* fn = "loom_tokenize_chat";
    const loom::Model* m = model_of(fn, model);
    if (!m) return LOOM_SIZE_ERROR;
    if (!text && text_len > 0) {
      set_error(fn, "text is NULL");
      return LOOM_SIZE_ERROR;
    }
    return copy_tokens(fn, loom::chat::tokenize_chat_prompt(m->vocab(), text_of(text, text_len)), tokens, n_tokens_max);
  });
}

// ---- context, more --------------------------------------------------------------------------

loom_context* loom_context_new_ext(const loom_model* model, const loom_context_params* params, const char* options_json) {
  const char* fn = "loom_context_new_ext";
  return new_context(fn, model, params, [&](loom::ContextParams& cp) {
    if (!options_json || !*options_json) return true;
    nlohmann::json o = nlohmann::json::parse(options_json, nullptr, /*allow_exceptions=*/false);
    if (o.is_discarded() || !o.is_object()) {
      set_error(fn, "options_json is not a JSON object");
      return false;
    }
    for (const auto& [key, value] : o.items()) {
      if (key == "kv_unified" || key == "swa_full") {
        if (!value.is_boolean()) {
          set_error(fn, key + " must be a boolean");
          return false;
        }
        (key == "kv_unified" ? cp.kv_unified : cp.swa_full) = value.get<bool>();
      } else if (key == "n_seq_swa" || key == "n_seq_states") {
        if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 256) {
          set_error(fn, key + " must be an integer from 0 to 256");
          return false;
        }
        (key == "n_seq_swa" ? cp.n_seq_swa : cp.n_seq_states) = int(value.get<int64_t>());
      } else {
        set_error(fn, "unknown option '" + key + "'");
        return false;
      }
    }
    return true;
  });
}

int32_t loom_context_memory_json(const loom_context* ctx, char* buf, size_t buf_size) {
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    if (!ctx) {
      set_error("loom_context_memory_json", "ctx is NULL");
      return LOOM_SIZE_ERROR;
    }
    const loom::MemoryBreakdown b = ctx->c->memory().breakdown();
    auto part = [](size_t bytes, int cells, int layers) {
      return nlohmann::json{{"bytes", bytes}, {"cells", cells}, {"layers", layers}};
    };
    nlohmann::json j = {{"kv", part(b.kv_bytes, b.kv_cells, b.kv_layers)},
                        {"kv_swa", part(b.kv_swa_bytes, b.kv_swa_cells, b.kv_swa_layers)},
                        {"recurrent", part(b.rs_bytes, b.rs_cells, b.rs_layers)},
                        {"total_bytes", b.total()}};
    const std::string text = j.dump();
    if (!buf || buf_size <= text.size()) return -int32_t(text.size() + 1);
    std::memcpy(buf, text.data(), text.size());
    buf[text.size()] = '\0';
    return int32_t(text.size());
  });
}

bool loom_causal_attn(const loom_context* ctx) { return ctx && ctx->c->causal(); }

uint64_t loom_kv_cell_bytes(const loom_context* ctx) {
  if (!ctx) return 0;
  const loom::ModelHparams& hp = ctx->c->model().hparams();
  // One token's K and V over the layers that attend (a T5 decoder: its own layers), in every KV part.
  const int64_t n_layer = hp.arch == loom::Arch::kT5 ? hp.n_dec_layer : hp.n_layer;
  uint64_t bytes = 0;
  for (const loom::KvCache* part : {ctx->c->memory().kv(), ctx->c->memory().kv_swa()}) {
    if (!part) continue;
    const loom::KvView& v = part->view();
    for (int64_t il = 0; il < n_layer && il < int64_t(v.layers.size()); ++il) {
      bytes += uint64_t(v.layers[size_t(il)].k_row_bytes + v.layers[size_t(il)].v_row_bytes);
    }
  }
  return bytes;
}

uint64_t loom_recurrent_seq_state_bytes(const loom_context* ctx) {
  const loom::RecurrentCache* rs = ctx ? ctx->c->recurrent_cache() : nullptr;
  return rs ? uint64_t(rs->seq_state_bytes()) : 0;
}

// ---- grammar ----------------------------------------------------------------------------------

int32_t loom_json_schema_to_grammar(const char* schema_json, char* buf, size_t buf_size) {
  return guarded<int32_t>(__func__, -1, [&]() -> int32_t {
    if (!schema_json) {
      set_error("loom_json_schema_to_grammar", "schema_json is NULL");
      return -1;
    }
    auto g = loom::sample::json_schema_to_grammar(std::string_view(schema_json));
    if (!g) {
      fail("loom_json_schema_to_grammar", g.status());
      return -1;
    }
    return copy_string(*g, buf, buf_size);
  });
}

// ---- streaming detokenizer ----------------------------------------------------------------------

loom_detokenizer* loom_detokenizer_new(const loom_model* model, uint32_t flags) {
  return guarded<loom_detokenizer*>(__func__, nullptr, [&]() -> loom_detokenizer* {
    const loom::Model* m = model_of("loom_detokenizer_new", model);
    if (!m) return nullptr;
    loom::StreamDetokenizerOptions o;
    o.unparse_special = (flags & LOOM_DETOK_UNPARSE_SPECIAL) != 0;
    o.remove_special = (flags & LOOM_DETOK_REMOVE_SPECIAL) != 0;
    o.continuation = (flags & LOOM_DETOK_CONTINUATION) != 0;
    return new loom_detokenizer{model->m, loom::StreamDetokenizer(m->vocab(), o), {}};
  });
}

int32_t loom_detokenizer_push(loom_detokenizer* detok, loom_token token, const char** text, size_t* len) {
  if (!detok) return fail_arg(__func__, "detokenizer is NULL");
  return guarded_status(__func__, [&]() -> int32_t {
    auto chunk = detok->d.push(token);
    if (!chunk) return fail("loom_detokenizer_push", chunk.status());
    detok->out = std::move(*chunk);
    if (text) *text = detok->out.c_str();
    if (len) *len = detok->out.size();
    return LOOM_OK;
  });
}

int32_t loom_detokenizer_flush(loom_detokenizer* detok, const char** text, size_t* len) {
  if (!detok) return fail_arg(__func__, "detokenizer is NULL");
  return guarded_status(__func__, [&]() -> int32_t {
    detok->out = detok->d.flush();
    if (text) *text = detok->out.c_str();
    if (len) *len = detok->out.size();
    return LOOM_OK;
  });
}

void loom_detokenizer_reset(loom_detokenizer* detok) {
  if (detok) detok->d.reset();
}

void loom_detokenizer_free(loom_detokenizer* detok) { delete detok; }

// ---- speculative decoding -------------------------------------------------------------------

loom_drafter* loom_drafter_lookup_new(int32_t ngram_max, int32_t ngram_min) {
  if (ngram_max < 1 || ngram_max > 64 || ngram_min < 1 || ngram_min > ngram_max) {
    set_error(__func__, "need 1 <= ngram_min <= ngram_max <= 64");
    return nullptr;
  }
  return guarded<loom_drafter*>(__func__, nullptr, [&] {
    return new loom_drafter{std::make_unique<loom::speculative::LookupDrafter>(ngram_max, ngram_min)};
  });
}

loom_drafter* loom_drafter_model_new(const loom_model* draft, const loom_model* target, const loom_context_params* params,
                                     float p_min) {
  return guarded<loom_drafter*>(__func__, nullptr, [&]() -> loom_drafter* {
    const char* fn = "loom_drafter_model_new";
    if (!draft || !target) {
      set_error(fn, "draft or target model is NULL");
      return nullptr;
    }
    if (draft->vocab_only) {
      set_error(fn, "the draft model was loaded with vocab_only; it has no weights to run");
      return nullptr;
    }
    if (!(p_min >= 0.0f && p_min <= 1.0f)) {
      set_error(fn, "p_min must be in [0, 1]");
      return nullptr;
    }
    loom::ContextParams cp;
    if (loom::Status st = to_params(params ? *params : loom_context_default_params(), &cp); !st) {
      fail(fn, st);
      return nullptr;
    }
    auto d = loom::ModelDrafter::create(draft->m, *target->m, cp, p_min);
    if (!d) {
      fail(fn, d.status());
      return nullptr;
    }
    return new loom_drafter{std::move(*d)};
  });
}

int32_t loom_drafter_draft(loom_drafter* drafter, const loom_token* history, int32_t n_history, int32_t n_max,
                           loom_token* out) {
  if (!drafter) return fail_arg(__func__, "drafter is NULL");
  if (n_history < 1 || !history) return fail_arg(__func__, "history must hold at least one token");
  if (n_max < 0 || (n_max > 0 && !out)) return fail_arg(__func__, "out is NULL or n_max is negative");
  return guarded_status(__func__, [&]() -> int32_t {
    if (n_max == 0) return 0;
    auto d = drafter->d->draft(std::span<const int32_t>(history, size_t(n_history)), n_max);
    if (!d) return fail("loom_drafter_draft", d.status());
    const size_t n = std::min(d->size(), size_t(n_max));
    std::copy_n(d->begin(), n, out);
    return int32_t(n);
  });
}

int32_t loom_drafter_describe(const loom_drafter* drafter, char* buf, size_t buf_size) {
  if (!drafter) return -1;
  return guarded<int32_t>(__func__, -1, [&] { return copy_string(drafter->d->describe(), buf, buf_size); });
}

void loom_drafter_free(loom_drafter* drafter) { delete drafter; }

int32_t loom_speculative_round(loom_context* ctx, loom_seq_id seq, const loom_token* history, int32_t n_history,
                               const loom_token* draft, int32_t n_draft, loom_spec_pick_callback pick, void* user_data,
                               loom_token* tokens_out, int32_t* n_out, int32_t* n_accepted, bool* stopped) {
  const char* fn = "loom_speculative_round";
  if (!ctx) return fail_arg(fn, "context is NULL");
  if (!pick) return fail_arg(fn, "pick is NULL");
  if (!history || n_history < 1) return fail_arg(fn, "history must hold at least one token");
  if (n_draft < 0 || (n_draft > 0 && !draft)) return fail_arg(fn, "draft is NULL or n_draft is negative");
  if (!tokens_out || !n_out) return fail_arg(fn, "tokens_out and n_out must not be NULL");
  return guarded_status(fn, [&]() -> int32_t {
    int32_t callback_status = LOOM_OK;
    auto round = loom::speculative::speculative_round(
        *ctx->c, seq, std::span<const int32_t>(history, size_t(n_history)), std::span<const int32_t>(draft, size_t(n_draft)),
        [&](std::span<const float> logits) -> loom::Expected<loom::SpecPick> {
          loom_spec_pick p{LOOM_TOKEN_NULL, true, false};
          const int32_t rc = pick(logits.data(), int32_t(logits.size()), &p, user_data);
          if (rc != LOOM_OK) {
            callback_status = rc < 0 ? rc : LOOM_ERR_ABORTED;
            return loom::Status(loom::StatusCode::kAborted, "the pick callback returned " + std::to_string(rc));
          }
          return loom::SpecPick{p.token, p.emit, p.stop};
        });
    if (!round) {
      fail(fn, round.status());
      return callback_status != LOOM_OK ? callback_status : status_code(round.status());
    }
    std::copy(round->tokens.begin(), round->tokens.end(), tokens_out);
    *n_out = int32_t(round->tokens.size());
    if (n_accepted) *n_accepted = round->accepted;
    if (stopped) *stopped = round->stopped;
    return LOOM_OK;
  });
}

// ---- files ------------------------------------------------------------------------------------

int32_t loom_gguf_describe(const char* path, char* buf, size_t buf_size) {
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    const char* fn = "loom_gguf_describe";
    if (!path) {
      set_error(fn, "path is NULL");
      return LOOM_SIZE_ERROR;
    }
    auto file = loom::gguf::GgufFile::open(path);
    if (!file) {
      fail(fn, file.status());
      return LOOM_SIZE_ERROR;
    }
    const loom::gguf::GgufFile& f = *file;
    nlohmann::json j;
    j["gguf_version"] = f.version();
    j["alignment"] = f.alignment();
    j["file_size"] = f.file_size();
    auto arch = f.get_string_or("general.architecture", "");
    j["architecture"] = arch.has_value() ? std::string(*arch) : std::string();
    nlohmann::json meta = nlohmann::json::array();
    for (const auto& kv : f.metadata()) {
      meta.push_back({{"key", kv.key},
                      {"type", std::string(loom::gguf::value_type_name(loom::gguf::type_of(kv.value)))},
                      {"value", gguf_value_json(kv.value)},
                      {"text", loom::gguf::to_string(kv.value, 8)}});
    }
    j["metadata"] = std::move(meta);
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : f.tensors()) {
      tensors.push_back({{"name", t.name},
                         {"type", std::string(loom::gguf::tensor_type_name(t.type))},
                         {"shape", std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                         {"bytes", t.nbytes},
                         {"offset", t.offset}});
    }
    j["tensors"] = std::move(tensors);
    return copy_negotiated(fn, dump_json(j), buf, buf_size);
  });
}

int32_t loom_quantize_types(char* buf, size_t buf_size) {
  return guarded<int32_t>(__func__, -1, [&] {
    std::string s;
    for (const auto& f : loom::model::file_types()) s += (s.empty() ? "" : ", ") + std::string(f.name);
    return copy_string(s, buf, buf_size);
  });
}

namespace {

// loom_model_quantize's params_json, read.
struct QuantizeRequest {
  loom::model::QuantizeParams p;
  std::string imatrix_path;
  std::vector<std::string> include_weights, exclude_weights;
};

// A string or an array of strings, appended to `out`; false on any other value.
bool read_string_list(const nlohmann::json& v, std::vector<std::string>& out) {
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
    return true;
  }
  if (!v.is_array()) return false;
  for (const auto& e : v) {
    if (!e.is_string()) return false;
    out.push_back(e.get<std::string>());
  }
  return true;
}

// One params_json key other than "type": LOOM_OK, or the error set.
int32_t read_quantize_param(const char* fn, const std::string& key, const nlohmann::json& value, QuantizeRequest& r) {
  loom::model::QuantizeParams& p = r.p;
  if (key == "threads") {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 4096)
      return fail_arg(fn, "threads must be an integer in [0, 4096]");
    p.n_threads = value.get<int>();
  } else if (key == "allow_requantize" || key == "llama_order" || key == "pure" || key == "leave_output_tensor") {
    if (!value.is_boolean()) return fail_arg(fn, (key + " must be a boolean").c_str());
    const bool b = value.get<bool>();
    if (key == "allow_requantize") p.allow_requantize = b;
    else if (key == "llama_order") p.llama_cpp_order = b;
    else if (key == "pure") p.pure = b;
    else p.quantize_output_tensor = !b;
  } else if (key == "imatrix") {
    if (!value.is_string() || value.get<std::string>().empty()) return fail_arg(fn, "imatrix must be a file path");
    r.imatrix_path = value.get<std::string>();
  } else if (key == "include_weights" || key == "exclude_weights") {
    if (!read_string_list(value, key == "include_weights" ? r.include_weights : r.exclude_weights))
      return fail_arg(fn, (key + " must be a string or an array of strings").c_str());
  } else if (key == "output_tensor_type" || key == "token_embedding_type") {
    if (!value.is_string()) return fail_arg(fn, (key + " must be a string").c_str());
    const auto tt = loom::gguf::parse_tensor_type(value.get<std::string>());
    if (!tt || !loom::model::can_quantize_to(*tt)) {
      set_error(fn, "invalid " + key + " '" + value.get<std::string>() + "' (not a tensor type loom quantizes to)");
      return LOOM_ERR_INVALID_ARGUMENT;
    }
    (key == "output_tensor_type" ? p.output_tensor_type : p.token_embedding_type) = *tt;
  } else {
    set_error(fn, "unknown parameter '" + key + "'");
    return LOOM_ERR_INVALID_ARGUMENT;
  }
  return LOOM_OK;
}

// params_json into `r` (its "type" into r.p.ftype): LOOM_OK, or the error set.
int32_t read_quantize_request(const char* fn, const char* params_json, QuantizeRequest& r) {
  nlohmann::json o = nlohmann::json::parse(params_json ? params_json : "{}", nullptr, false);
  if (o.is_discarded() || !o.is_object()) return fail_arg(fn, "params_json is not a JSON object");
  if (!o.contains("type") || !o["type"].is_string()) return fail_arg(fn, "params_json needs \"type\" (a string)");
  const std::string type = o["type"].get<std::string>();
  const auto ftype = loom::model::parse_file_type(type);
  if (!ftype) {
    std::string known;
    for (const auto& f : loom::model::file_types()) known += (known.empty() ? "" : ", ") + std::string(f.name);
    set_error(fn, "unknown quantization type '" + type + "' (known: " + known + ")");
    return LOOM_ERR_INVALID_ARGUMENT;
  }
  r.p.ftype = *ftype;
  for (const auto& [key, value] : o.items()) {
    if (key == "type") continue;
    if (int32_t rc = read_quantize_param(fn, key, value, r); rc != LOOM_OK) return rc;
  }
  if (!r.include_weights.empty() && !r.exclude_weights.empty()) {
    return fail_arg(fn, "include_weights and exclude_weights cannot be used together");
  }
  if (r.imatrix_path.empty() && (!r.include_weights.empty() || !r.exclude_weights.empty())) {
    return fail_arg(fn, "include_weights / exclude_weights need an imatrix");
  }
  return LOOM_OK;
}

// The request's imatrix (if any), filtered, into `imatrix`, and r.p pointed at it.
int32_t load_quantize_imatrix(const char* fn, QuantizeRequest& r, loom::model::Imatrix& imatrix) {
  if (r.imatrix_path.empty()) return LOOM_OK;
  auto im = loom::model::read_imatrix(r.imatrix_path);
  if (!im) return fail(fn, im.status());
  auto filtered = loom::model::filter_imatrix(*im, r.include_weights, r.exclude_weights);
  if (!filtered) return fail(fn, filtered.status());
  imatrix = std::move(*filtered);
  r.p.imatrix = &imatrix;
  r.p.imatrix_path = r.imatrix_path;
  return LOOM_OK;
}

std::string quantize_progress_json(const loom::model::TensorProgress& pr) {
  const loom::gguf::TensorInfo& t = *pr.tensor;
  const nlohmann::json j = {{"index", pr.index},
                            {"count", pr.count},
                            {"name", t.name},
                            {"type", std::string(loom::gguf::tensor_type_name(t.type))},
                            {"out_type", std::string(loom::gguf::tensor_type_name(pr.out_type))},
                            {"fallback", pr.fallback},
                            {"shape", std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                            {"bytes", t.nbytes},
                            {"out_bytes", pr.out_bytes}};
  return dump_json(j);
}

std::string quantize_summary_json(const QuantizeRequest& r, const loom::model::QuantizeStats& stats,
                                  const loom::model::Imatrix& imatrix, uint64_t input_bytes) {
  const nlohmann::json j = {{"file_type", static_cast<unsigned>(r.p.ftype)},
                            {"file_type_name", std::string(loom::model::file_type_info(r.p.ftype).name)},
                            {"converted", stats.n_converted},
                            {"fallback", stats.n_fallback},
                            {"copied", stats.n_copied},
                            {"imatrix_entries", r.p.imatrix ? imatrix.entries.size() : size_t(0)},
                            {"input_bytes", input_bytes}};
  return dump_json(j);
}

}  // namespace

int32_t loom_model_quantize(const char* input, const char* output, const char* params_json,
                            loom_quantize_progress_callback progress, void* user_data, char* summary_json,
                            size_t summary_size) {
  const char* fn = "loom_model_quantize";
  if (!input || !output) return fail_arg(fn, "input or output is NULL");
  return guarded_status(fn, [&]() -> int32_t {
    QuantizeRequest r;
    if (int32_t rc = read_quantize_request(fn, params_json, r); rc != LOOM_OK) return rc;
    loom::model::Imatrix imatrix;
    if (int32_t rc = load_quantize_imatrix(fn, r, imatrix); rc != LOOM_OK) return rc;
    auto in = loom::gguf::GgufFile::open(input);
    if (!in) return fail(fn, in.status());
    auto report = [&](const loom::model::TensorProgress& pr) {
      if (progress) progress(quantize_progress_json(pr).c_str(), user_data);
    };
    loom::model::QuantizeStats stats;
    auto w = loom::model::quantize_model(*in, r.p, report, &stats);
    if (!w) return fail(fn, w.status());
    if (loom::Status st = w->write_file(output); !st) return fail(fn, st);
    if (summary_json && summary_size > 0) {
      copy_string(quantize_summary_json(r, stats, imatrix, in->file_size()), summary_json, summary_size);
    }
    return LOOM_OK;
  });
}

int32_t loom_template_render(const char* template_source, const char* context_json, int64_t now_unix, char* buf,
                             size_t buf_size) {
  return loom_template_render_ext(template_source, context_json, now_unix, 0, buf, buf_size);
}

int32_t loom_template_render_ext(const char* template_source, const char* context_json, int64_t now_unix, uint32_t flags,
                                 char* buf, size_t buf_size) {
  return guarded<int32_t>(__func__, LOOM_SIZE_ERROR, [&]() -> int32_t {
    const char* fn = "loom_template_render";
    if (!template_source || !context_json) {
      set_error(fn, "template_source or context_json is NULL");
      return LOOM_SIZE_ERROR;
    }
    nlohmann::ordered_json context = nlohmann::ordered_json::parse(context_json, nullptr, false);
    if (context.is_discarded()) {
      set_error(fn, "the context is not valid JSON");
      return LOOM_SIZE_ERROR;
    }
    if (!context.is_object()) {
      set_error(fn, "the context must be a JSON object");
      return LOOM_SIZE_ERROR;
    }
    auto tmpl = loom::jinja::Template::parse(template_source);
    if (!tmpl) {
      fail(fn, tmpl.status());
      return LOOM_SIZE_ERROR;
    }
    loom::jinja::RenderOptions opts;
    if (now_unix >= 0) opts.now_unix = now_unix;
    opts.lenient = (flags & LOOM_TEMPLATE_LENIENT) != 0;
    auto out = tmpl->render(context, opts);
    if (!out) {
      fail(fn, out.status());
      return LOOM_SIZE_ERROR;
    }
    return copy_negotiated(fn, *out, buf, buf_size);
  });
}

// ---- the machine ------------------------------------------------------------------------------

const char* loom_system_info(void) {
  static const std::string s = [] {
    try {
      return build_system_info();
    } catch (...) {
      return std::string();
    }
  }();
  return s.c_str();
}

int32_t loom_cpu_count(void) { return int32_t(loom::cpu_count()); }

}  // extern "C"
