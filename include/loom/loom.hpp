// loom's C++ API: RAII types over the C API (loom.h, loom_serve.h), header-only, C++17. It
// includes nothing from loom's source tree and exposes no internal type: the C handles are the
// pimpl, so the ABI is the C API's (see "Versions and ABI" in loom.h).
//
//   auto model = loom::api::Model::load("model.gguf").value();
//   auto ctx = loom::api::Context::create(model, {}).value();
//   auto ids = model.tokenize("Once upon a time").value();
//   ...
// Errors are loom::api::Status values (code + message, the C API's loom_last_error()) carried by
// loom::api::Expected<T>; nothing throws unless you call value() on an error (loom::api::Error).
#ifndef LOOM_LOOM_HPP
#define LOOM_LOOM_HPP

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "loom/loom_serve.h"

namespace loom::api {

using Token = loom_token;

// ---- status ------------------------------------------------------------------------------------

class Status {
 public:
  Status() = default;
  Status(int32_t code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }
  // The C API's last failure on this thread.
  static Status last(int32_t code) { return {code < 0 ? code : LOOM_ERR_INTERNAL, loom_last_error()}; }
  bool is_ok() const { return code_ == LOOM_OK; }
  explicit operator bool() const { return is_ok(); }
  int32_t code() const { return code_; }
  const std::string& message() const { return message_; }
  const char* code_name() const { return loom_status_string(code_); }

 private:
  int32_t code_ = LOOM_OK;
  std::string message_;
};

class Error : public std::runtime_error {
 public:
  explicit Error(Status s) : std::runtime_error(s.message()), status_(std::move(s)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// A value or the Status that prevented it.
template <typename T>
class Expected {
 public:
  Expected(T v) : v_(std::move(v)) {}       // NOLINT: implicit, as std::expected
  Expected(Status s) : v_(std::move(s)) {}  // NOLINT
  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & {
    check();
    return std::get<0>(v_);
  }
  T&& value() && {
    check();
    return std::move(std::get<0>(v_));
  }
  const T& value() const& {
    check();
    return std::get<0>(v_);
  }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }
  const Status& status() const {
    static const Status ok;
    return has_value() ? ok : std::get<1>(v_);
  }

 private:
  void check() const {
    if (!has_value()) throw Error(std::get<1>(v_));
  }
  std::variant<T, Status> v_;
};

// ---- model and vocabulary ---------------------------------------------------------------------

struct ModelParams {
  bool vocab_only = false;
  std::function<void(float)> progress;  // 0 .. 1 on the loading thread
};

class Model {
 public:
  static Expected<Model> load(const std::string& path, const ModelParams& params = {}) {
    loom_model_params p = loom_model_default_params();
    p.vocab_only = params.vocab_only;
    const std::function<void(float)>* progress = params.progress ? &params.progress : nullptr;
    if (progress) {
      p.progress_callback = [](float f, void* u) { (*static_cast<const std::function<void(float)>*>(u))(f); };
      p.progress_callback_user_data = const_cast<std::function<void(float)>*>(progress);
    }
    loom_model* m = loom_model_load_from_file(path.c_str(), &p);
    if (!m) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    return Model(m);
  }

  loom_model* handle() const { return m_.get(); }
  int32_t n_vocab() const { return loom_model_n_vocab(handle()); }
  int32_t n_embd() const { return loom_model_n_embd(handle()); }
  int32_t n_ctx_train() const { return loom_model_n_ctx_train(handle()); }
  uint64_t n_params() const { return loom_model_n_params(handle()); }
  std::string arch() const { return loom_model_arch_name(handle()); }
  std::string desc() const {
    char buf[256];
    loom_model_desc(handle(), buf, sizeof buf);
    return buf;
  }
  // A metadata value as text (arrays abbreviated), or nothing when the key is absent.
  std::optional<std::string> meta(const std::string& key) const {
    std::string buf(256, '\0');
    int32_t n = loom_model_meta_val_str(handle(), key.c_str(), buf.data(), buf.size());
    if (n < 0) return std::nullopt;
    if (size_t(n) >= buf.size()) {
      buf.resize(size_t(n) + 1);
      n = loom_model_meta_val_str(handle(), key.c_str(), buf.data(), buf.size());
    }
    buf.resize(size_t(n));
    return buf;
  }

  int32_t n_layer() const { return loom_model_n_layer(handle()); }
  bool is_recurrent() const { return loom_model_is_recurrent(handle()); }
  bool has_encoder() const { return loom_model_has_encoder(handle()); }
  bool has_decoder() const { return loom_model_has_decoder(handle()); }
  Token decoder_start() const { return loom_model_decoder_start_token(handle()); }
  int32_t pooling_type() const { return loom_model_pooling_type(handle()); }  // LOOM_POOLING_*
  int32_t n_cls_out() const { return loom_model_n_cls_out(handle()); }
  std::vector<std::string> cls_labels() const {
    std::vector<std::string> out;
    for (int32_t i = 0;; ++i) {
      const int32_t n = loom_model_cls_label(handle(), i, nullptr, 0);
      if (n < 0) break;
      std::string l(size_t(n) + 1, '\0');
      loom_model_cls_label(handle(), i, l.data(), l.size());
      l.resize(size_t(n));
      out.push_back(std::move(l));
    }
    return out;
  }
  uint64_t decode_weight_bytes() const { return loom_model_decode_weight_bytes(handle()); }

  Token bos() const { return loom_token_bos(handle()); }
  Token eos() const { return loom_token_eos(handle()); }
  bool is_eog(Token t) const { return loom_token_is_eog(handle(), t); }
  bool add_bos() const { return loom_add_bos_token(handle()); }

  Expected<std::vector<Token>> tokenize(const std::string& text, bool add_special = true, bool parse_special = false) const {
    return detail_tokens(text.size() + 8, [&](Token* ids, int32_t cap) {
      return loom_tokenize(handle(), text.data(), int32_t(text.size()), ids, cap, add_special, parse_special);
    });
  }
  // A rendered chat prompt as the chat path tokenizes it (loom_tokenize_chat).
  Expected<std::vector<Token>> tokenize_chat(const std::string& rendered) const {
    return detail_tokens(rendered.size() + 8, [&](Token* ids, int32_t cap) {
      return loom_tokenize_chat(handle(), rendered.data(), int32_t(rendered.size()), ids, cap);
    });
  }
  // A reranker's (query, document) input (loom_tokenize_rerank).
  Expected<std::vector<Token>> tokenize_rerank(const std::string& query, const std::string& document) const {
    return detail_tokens(query.size() + document.size() + 8, [&](Token* ids, int32_t cap) {
      return loom_tokenize_rerank(handle(), query.data(), int32_t(query.size()), document.data(), int32_t(document.size()),
                                  ids, cap);
    });
  }
  // Runs a size-negotiating token function (internal helper).
  template <typename F>
  static Expected<std::vector<Token>> detail_tokens(size_t guess, F&& f) {
    std::vector<Token> ids(guess);
    int32_t n = f(ids.data(), int32_t(ids.size()));
    if (n < 0 && n != LOOM_SIZE_ERROR) {
      ids.resize(size_t(-n));
      n = f(ids.data(), int32_t(ids.size()));
    }
    if (n < 0) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    ids.resize(size_t(n));
    return ids;
  }
  Expected<std::string> detokenize(const std::vector<Token>& ids, bool remove_special = false,
                                   bool unparse_special = false) const {
    std::string out(ids.size() * 8 + 16, '\0');
    int32_t n = loom_detokenize(handle(), ids.data(), int32_t(ids.size()), out.data(), int32_t(out.size()), remove_special,
                                unparse_special);
    if (n < 0 && n != LOOM_SIZE_ERROR) {
      out.resize(size_t(-n));
      n = loom_detokenize(handle(), ids.data(), int32_t(ids.size()), out.data(), int32_t(out.size()), remove_special,
                          unparse_special);
    }
    if (n < 0) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    out.resize(size_t(n));
    return out;
  }
  // A token's text (its bytes; a piece may be part of a UTF-8 character).
  std::string piece(Token t, bool special = false) const {
    char buf[128];
    const int32_t n = loom_token_to_piece(handle(), t, buf, sizeof buf, 0, special);
    if (n >= 0) return std::string(buf, size_t(n));
    if (n == LOOM_SIZE_ERROR) return std::string();
    std::string big(size_t(-n), '\0');
    const int32_t m = loom_token_to_piece(handle(), t, big.data(), int32_t(big.size()), 0, special);
    big.resize(m > 0 ? size_t(m) : 0);
    return big;
  }

  // A chat request (JSON with "messages", "tools", ...) rendered with the model's template:
  // {"prompt", "grammar", "additional_stops", ...} as JSON text (loom_chat_format).
  Expected<std::string> chat_format(const std::string& request_json) const {
    return detail_json([&](char* b, size_t n) { return loom_chat_format(handle(), request_json.c_str(), b, n); });
  }
  // Renders messages (a JSON array) and returns the prompt text.
  Expected<std::string> apply_chat_template(const std::string& messages_json, bool add_generation_prompt = true) const {
    auto f = chat_format("{\"messages\": " + messages_json +
                         ", \"add_generation_prompt\": " + (add_generation_prompt ? "true" : "false") + "}");
    if (!f) return f.status();
    return json_string_field(*f, "prompt");
  }

  // Runs a size-negotiating JSON function (internal helper, public for the other wrappers).
  template <typename F>
  static Expected<std::string> detail_json(F&& f) {
    std::string buf(4096, '\0');
    for (int i = 0; i < 2; ++i) {
      const int32_t n = f(buf.data(), buf.size());
      if (n >= 0) {
        buf.resize(size_t(n));
        return buf;
      }
      if (n == LOOM_SIZE_ERROR) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
      buf.assign(size_t(-n) + 1, '\0');
    }
    return Status(LOOM_ERR_INTERNAL, "result size changed");
  }
  // The same for snprintf-style functions (-1 on error, else the full length).
  template <typename F>
  static Expected<std::string> detail_snprintf(F&& f) {
    const int32_t n = f(nullptr, 0);
    if (n < 0) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    std::string out(size_t(n) + 1, '\0');
    f(out.data(), out.size());
    out.resize(size_t(n));
    return out;
  }

 private:
  explicit Model(loom_model* m) : m_(m, loom_model_free) {}
  // The string value of a top-level field of a JSON object loom wrote (no JSON library needed).
  static std::string json_string_field(const std::string& j, const char* key) {
    const std::string k = std::string("\"") + key + "\":";
    size_t p = j.find(k);
    if (p == std::string::npos) return {};
    p = j.find('"', p + k.size());
    std::string out;
    for (size_t i = p + 1; i < j.size() && j[i] != '"'; ++i) {
      if (j[i] != '\\') {
        out += j[i];
        continue;
      }
      const char c = j[++i];
      switch (c) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          const unsigned cp = unsigned(std::stoul(j.substr(i + 1, 4), nullptr, 16));
          i += 4;
          if (cp < 0x80) out += char(cp);
          else if (cp < 0x800) out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
          else out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
          break;
        }
        default: out += c;
      }
    }
    return out;
  }
  std::shared_ptr<loom_model> m_;
};

// ---- batches, contexts, samplers ---------------------------------------------------------------

class Batch {
 public:
  explicit Batch(int32_t capacity, int32_t n_seq_max = 1)
      : b_(loom_batch_init(capacity, 0, n_seq_max)), cap_(capacity), n_seq_max_(n_seq_max) {}
  ~Batch() { loom_batch_free(&b_); }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  Batch(Batch&& o) noexcept : b_(o.b_), cap_(o.cap_), n_seq_max_(o.n_seq_max_) {
    o.b_ = loom_batch{};
    o.cap_ = 0;
  }
  Batch& operator=(Batch&&) = delete;
  void clear() { b_.n_tokens = 0; }
  int32_t size() const { return b_.n_tokens; }
  // Adds a token at `pos` for the given sequences; false when the batch is full.
  bool add(Token t, int32_t pos, std::initializer_list<int32_t> seqs = {0}, bool logits = false) {
    if (b_.n_tokens >= cap_ || int32_t(seqs.size()) > n_seq_max_) return false;
    const int32_t i = b_.n_tokens++;
    b_.token[i] = t;
    b_.pos[i] = pos;
    b_.n_seq_id[i] = int32_t(seqs.size());
    int32_t k = 0;
    for (int32_t s : seqs) b_.seq_id[i][k++] = s;
    b_.logits[i] = logits;
    return true;
  }
  bool add(Token t, int32_t pos, int32_t seq, bool logits) { return add(t, pos, {seq}, logits); }
  // Tokens at positions pos0, pos0 + 1, ... of one sequence; false when they do not fit.
  bool add_tokens(const Token* ids, size_t n, int32_t pos0, int32_t seq = 0, bool all_logits = false) {
    for (size_t i = 0; i < n; ++i) {
      if (!add(ids[i], pos0 + int32_t(i), seq, all_logits)) return false;
    }
    return true;
  }
  int32_t capacity() const { return cap_; }
  // Asks for the logits of the last token added (a prompt's end).
  void set_logits_last() {
    if (b_.n_tokens > 0) b_.logits[b_.n_tokens - 1] = 1;
  }
  const loom_batch* get() const { return &b_; }

 private:
  loom_batch b_;
  int32_t cap_, n_seq_max_;
};

struct ContextParams {
  loom_context_params p = loom_context_default_params();
};

class Context {
 public:
  static Expected<Context> create(const Model& model, const ContextParams& params = {}) {
    loom_context* c = loom_context_new(model.handle(), &params.p);
    if (!c) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    return Context(c);
  }
  // With options the params struct does not hold, as JSON (loom_context_new_ext): {"kv_unified": true}.
  static Expected<Context> create(const Model& model, const ContextParams& params, const std::string& options_json) {
    loom_context* c = loom_context_new_ext(model.handle(), &params.p, options_json.c_str());
    if (!c) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    return Context(c);
  }
  loom_context* handle() const { return c_.get(); }
  int32_t n_ctx() const { return loom_n_ctx(handle()); }
  int32_t n_batch() const { return loom_n_batch(handle()); }
  int32_t n_ubatch() const { return loom_n_ubatch(handle()); }
  int32_t n_vocab() const { return loom_n_vocab(handle()); }
  int32_t n_embd() const { return loom_n_embd(handle()); }
  int32_t pooling() const { return loom_pooling_type(handle()); }  // LOOM_POOLING_*
  bool causal() const { return loom_causal_attn(handle()); }
  loom_perf_data perf() const { return loom_perf_get(handle()); }
  Status encode(const Batch& b) { return result(loom_encode(handle(), b.get())); }
  const float* embeddings(int32_t i) const { return loom_get_embeddings_ith(handle(), i); }
  Status seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    return code(loom_kv_seq_add(handle(), seq, p0, p1, delta));
  }
  // Restores a state file; returns the tokens it holds.
  Expected<std::vector<Token>> load_state(const std::string& path) {
    size_t n = 0;
    int32_t rc = loom_state_load_file(handle(), path.c_str(), nullptr, 0, &n);
    if (rc != LOOM_OK) return Status::last(rc);
    std::vector<Token> ids(n);
    rc = loom_state_load_file(handle(), path.c_str(), ids.data(), ids.size(), &n);
    if (rc != LOOM_OK) return Status::last(rc);
    ids.resize(n);
    return ids;
  }

  // LOOM_DECODE_NO_KV_SLOT (1) and LOOM_DECODE_ABORTED (2) are statuses too: the cache is unchanged.
  Status decode(const Batch& b) { return result(loom_decode(handle(), b.get())); }
  Status decode(std::vector<Token>& ids) {
    loom_batch b = loom_batch_get_one(ids.data(), int32_t(ids.size()));
    return result(loom_decode(handle(), &b));
  }
  // The logits of output i (-1: the last), or nothing.
  const float* logits(int32_t i = -1) const { return loom_get_logits_ith(handle(), i); }
  const float* embeddings_seq(int32_t seq) const { return loom_get_embeddings_seq(handle(), seq); }

  void kv_clear() { loom_kv_clear(handle()); }
  Status seq_rm(int32_t seq, int32_t p0 = -1, int32_t p1 = -1) { return code(loom_kv_seq_rm(handle(), seq, p0, p1)); }
  Status seq_cp(int32_t src, int32_t dst, int32_t p0 = -1, int32_t p1 = -1) {
    return code(loom_kv_seq_cp(handle(), src, dst, p0, p1));
  }
  Status seq_keep(int32_t seq) { return code(loom_kv_seq_keep(handle(), seq)); }
  Status save_state(const std::string& path, const std::vector<Token>& tokens) const {
    return code(loom_state_save_file(handle(), path.c_str(), tokens.data(), tokens.size()));
  }

 private:
  explicit Context(loom_context* c) : c_(c, loom_context_free) {}
  static Status code(int32_t rc) { return rc == LOOM_OK ? Status::ok() : Status::last(rc); }
  static Status result(int32_t rc) {
    if (rc == LOOM_DECODE_OK) return Status::ok();
    if (rc > 0)
      return Status(rc == LOOM_DECODE_NO_KV_SLOT ? LOOM_ERR_RESOURCE_EXHAUSTED : LOOM_ERR_ABORTED, loom_last_error());
    return Status::last(rc == LOOM_DECODE_INVALID ? LOOM_ERR_INVALID_ARGUMENT : LOOM_ERR_INTERNAL);
  }
  std::shared_ptr<loom_context> c_;
};

// The sampler chain, parameters as JSON (loom_sampler_new): "{}" for the defaults,
// "{\"temperature\": 0}" for greedy, "{\"grammar\": \"root ::= ...\"}", ...
class Sampler {
 public:
  static Expected<Sampler> create(const Model& model, const std::string& params_json = "{}") {
    loom_sampler* s = loom_sampler_new(model.handle(), params_json.c_str());
    if (!s) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    return Sampler(s);
  }
  // Samples from output i and accepts the token; LOOM_TOKEN_NULL when the grammar admits none.
  Token sample(const Context& ctx, int32_t i = -1) {
    const Token t = loom_sampler_sample(s_.get(), ctx.handle(), i);
    if (t != LOOM_TOKEN_NULL) loom_sampler_accept(s_.get(), t);
    return t;
  }
  // Samples from a row of logits without accepting; LOOM_TOKEN_NULL when the grammar admits none.
  Token pick(const float* logits, int32_t n_vocab) { return loom_sampler_sample_logits(s_.get(), logits, n_vocab); }
  Status accept(Token t) { return code(loom_sampler_accept(s_.get(), t)); }
  // Into the penalties' history only (a prompt).
  Status accept_history(const std::vector<Token>& ids) {
    return code(loom_sampler_accept_history(s_.get(), ids.data(), int32_t(ids.size())));
  }
  bool has_grammar() const { return loom_sampler_has_grammar(s_.get()); }
  bool grammar_can_end() const { return loom_sampler_grammar_can_end(s_.get()); }
  bool grammar_done() const { return loom_sampler_grammar_done(s_.get()); }
  void reset() { loom_sampler_reset(s_.get()); }

 private:
  explicit Sampler(loom_sampler* s) : s_(s, loom_sampler_free) {}
  static Status code(int32_t rc) { return rc == LOOM_OK ? Status::ok() : Status::last(rc); }
  std::shared_ptr<loom_sampler> s_;
};

// Text of generated tokens as they come, in whole UTF-8 characters (loom_detokenizer_*).
class Detokenizer {
 public:
  static Expected<Detokenizer> create(const Model& model, uint32_t flags = LOOM_DETOK_CONTINUATION) {
    loom_detokenizer* d = loom_detokenizer_new(model.handle(), flags);
    if (!d) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    return Detokenizer(d);
  }
  Expected<std::string> push(Token t) {
    const char* text = nullptr;
    size_t len = 0;
    const int32_t rc = loom_detokenizer_push(d_.get(), t, &text, &len);
    if (rc != LOOM_OK) return Status::last(rc);
    return std::string(text, len);
  }
  std::string flush() {
    const char* text = nullptr;
    size_t len = 0;
    if (loom_detokenizer_flush(d_.get(), &text, &len) != LOOM_OK) return {};
    return std::string(text, len);
  }
  void reset() { loom_detokenizer_reset(d_.get()); }

 private:
  explicit Detokenizer(loom_detokenizer* d) : d_(d, loom_detokenizer_free) {}
  std::shared_ptr<loom_detokenizer> d_;
};

// ---- speculative decoding --------------------------------------------------------------------

class Drafter {
 public:
  // Prompt lookup (no second model).
  static Expected<Drafter> lookup(int32_t ngram_max, int32_t ngram_min = 1) {
    loom_drafter* d = loom_drafter_lookup_new(ngram_max, ngram_min);
    if (!d) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    return Drafter(d);
  }
  // A draft model with the target's vocabulary (checked).
  static Expected<Drafter> model(const Model& draft, const Model& target, const ContextParams& params, float p_min) {
    loom_drafter* d = loom_drafter_model_new(draft.handle(), target.handle(), &params.p, p_min);
    if (!d) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    return Drafter(d);
  }
  Expected<std::vector<Token>> draft(const std::vector<Token>& history, int32_t n_max) {
    std::vector<Token> out(size_t(n_max > 0 ? n_max : 0));
    const int32_t n = loom_drafter_draft(d_.get(), history.data(), int32_t(history.size()), n_max, out.data());
    if (n < 0) return Status::last(n);
    out.resize(size_t(n));
    return out;
  }
  std::string describe() const {
    auto s = Model::detail_snprintf([&](char* b, size_t n) { return loom_drafter_describe(d_.get(), b, n); });
    return s ? *s : std::string();
  }

 private:
  explicit Drafter(loom_drafter* d) : d_(d, loom_drafter_free) {}
  std::shared_ptr<loom_drafter> d_;
};

struct SpecPick {
  Token token = LOOM_TOKEN_NULL;
  bool emit = true;
  bool stop = false;
};
struct SpecRound {
  std::vector<Token> tokens;  // emitted, in order
  int32_t drafted = 0, accepted = 0;
  bool stopped = false;
};
// One verification round (loom_speculative_round): `pick` gets each row's logits (n_vocab floats)
// and returns what the caller's sampler chose, or a Status that ends the round with it.
inline Expected<SpecRound> speculative_round(Context& ctx, int32_t seq, const std::vector<Token>& history,
                                             const std::vector<Token>& draft,
                                             const std::function<Expected<SpecPick>(const float*, int32_t)>& pick) {
  struct Call {
    const std::function<Expected<SpecPick>(const float*, int32_t)>* pick;
    Status error;
  } call{&pick, Status::ok()};
  auto trampoline = [](const float* logits, int32_t n_vocab, loom_spec_pick* out, void* user) -> int32_t {
    auto* c = static_cast<Call*>(user);
    try {
      Expected<SpecPick> p = (*c->pick)(logits, n_vocab);
      if (!p) {
        c->error = p.status();
        return p.status().code() < 0 ? p.status().code() : LOOM_ERR_ABORTED;
      }
      *out = loom_spec_pick{p->token, p->emit, p->stop};
      return LOOM_OK;
    } catch (const std::exception& e) {
      c->error = Status(LOOM_ERR_INTERNAL, e.what());
      return LOOM_ERR_INTERNAL;
    }
  };
  SpecRound r;
  r.tokens.resize(draft.size() + 1);
  r.drafted = int32_t(draft.size());
  int32_t n_out = 0;
  const int32_t rc =
      loom_speculative_round(ctx.handle(), seq, history.data(), int32_t(history.size()), draft.data(), int32_t(draft.size()),
                             trampoline, &call, r.tokens.data(), &n_out, &r.accepted, &r.stopped);
  if (rc != LOOM_OK) return call.error.is_ok() ? Status::last(rc) : call.error;
  r.tokens.resize(size_t(n_out));
  return r;
}

// ---- files and the machine -------------------------------------------------------------------

inline Expected<std::string> json_schema_to_grammar(const std::string& schema_json) {
  return Model::detail_snprintf([&](char* b, size_t n) { return loom_json_schema_to_grammar(schema_json.c_str(), b, n); });
}
// A GGUF file's metadata and tensor table as JSON (loom_gguf_describe).
inline Expected<std::string> gguf_describe(const std::string& path) {
  return Model::detail_json([&](char* b, size_t n) { return loom_gguf_describe(path.c_str(), b, n); });
}
// Renders a Jinja2 template with a JSON object as context (loom_template_render).
inline Expected<std::string> render_template(const std::string& source, const std::string& context_json,
                                             int64_t now_unix = -1, bool lenient = false) {
  return Model::detail_json([&](char* b, size_t n) {
    return loom_template_render_ext(source.c_str(), context_json.c_str(), now_unix, lenient ? LOOM_TEMPLATE_LENIENT : 0u, b,
                                    n);
  });
}
inline std::string quantize_types() {
  auto s = Model::detail_snprintf([](char* b, size_t n) { return loom_quantize_types(b, n); });
  return s ? *s : std::string();
}
// Quantizes a GGUF file (loom_model_quantize); `progress` gets one JSON object per tensor. Returns
// the summary JSON.
inline Expected<std::string> quantize(const std::string& input, const std::string& output, const std::string& params_json,
                                      const std::function<void(const std::string&)>& progress = {}) {
  const std::function<void(const std::string&)>* p = progress ? &progress : nullptr;
  char summary[1024];
  loom_quantize_progress_callback cb = nullptr;
  if (p) cb = [](const char* j, void* u) { (*static_cast<const std::function<void(const std::string&)>*>(u))(j); };
  const int32_t rc = loom_model_quantize(input.c_str(), output.c_str(), params_json.c_str(), cb,
                                         const_cast<std::function<void(const std::string&)>*>(p), summary, sizeof summary);
  if (rc != LOOM_OK) return Status::last(rc);
  return std::string(summary);
}
inline std::string system_info() { return loom_system_info(); }
inline int32_t cpu_count() { return loom_cpu_count(); }

// ---- the scheduler ---------------------------------------------------------------------------

struct Event {
  int32_t kind;  // LOOM_EVENT_*
  uint64_t request_id;
  int32_t choice;
  Token token;
  std::string text;
  std::string json;  // "" or a JSON object (loom_serve.h)
};

struct SchedulerParams {
  loom_scheduler_params p = loom_scheduler_default_params();
};

class Scheduler {
 public:
  using OnEvent = std::function<void(const Event&)>;
  static Expected<Scheduler> create(const Model& model, const SchedulerParams& params = {}) {
    loom_scheduler* s = loom_scheduler_new(model.handle(), &params.p);
    if (!s) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    return Scheduler(s);
  }
  // With a draft model for speculative decoding (loom_scheduler_new_with_draft): options
  // {"draft_max", "draft_min", "p_min"}.
  static Expected<Scheduler> create(const Model& model, const SchedulerParams& params, const Model& draft,
                                    const std::string& draft_options_json = "{}") {
    loom_scheduler* s = loom_scheduler_new_with_draft(model.handle(), &params.p, draft.handle(), draft_options_json.c_str());
    if (!s) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    return Scheduler(s);
  }
  // loom_scheduler_new_ext: options {"ctx_checkpoints", "cache_ram_mib", "swa_full"}, and with a
  // draft model (may be null) its options too.
  static Expected<Scheduler> create_ext(const Model& model, const SchedulerParams& params, const Model* draft,
                                        const std::string& options_json) {
    loom_scheduler* s =
        loom_scheduler_new_ext(model.handle(), &params.p, draft ? draft->handle() : nullptr, options_json.c_str());
    if (!s) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    return Scheduler(s);
  }
  // Queues a request (JSON, loom_serve.h); on_event runs on the scheduler's thread.
  Expected<uint64_t> submit(const std::string& request_json, OnEvent on_event) {
    return queue(new OnEvent(std::move(on_event)), [&](OnEvent* cb, uint64_t* id) {
      return loom_scheduler_submit(s_.get(), request_json.c_str(), &Scheduler::dispatch, cb, id);
    });
  }
  // loom_scheduler_submit_ext: options {"n_predict", "endpoint"} ("" for none); *info (if given)
  // gets what the request became ({"prompt_tokens", "n", "seed", "grammar_triggers", ...}).
  Expected<uint64_t> submit(const std::string& request_json, const std::string& options_json, OnEvent on_event,
                            std::string* info = nullptr) {
    std::string buf(info ? size_t(1) << 16 : 0, '\0');
    auto id = queue(new OnEvent(std::move(on_event)), [&](OnEvent* cb, uint64_t* out) {
      return loom_scheduler_submit_ext(s_.get(), request_json.c_str(), options_json.empty() ? nullptr : options_json.c_str(),
                                       &Scheduler::dispatch, cb, out, info ? buf.data() : nullptr, buf.size());
    });
    if (id && info) *info = buf.c_str();
    return id;
  }
  // Embeddings (loom_scheduler_embed): done gets n_inputs x n_dim floats, or the failure.
  struct Embeddings {
    std::vector<float> data;
    int32_t n_inputs = 0, n_dim = 0, prompt_tokens = 0;
  };
  using OnEmbed = std::function<void(Expected<Embeddings>)>;
  Expected<uint64_t> embed(const std::string& request_json, OnEmbed done) {
    return queue(new OnEmbed(std::move(done)), [&](OnEmbed* cb, uint64_t* id) {
      return loom_scheduler_embed(s_.get(), request_json.c_str(), &Scheduler::dispatch_embed, cb, id);
    });
  }
  void cancel(uint64_t id) { loom_scheduler_cancel(s_.get(), id); }
  int32_t n_ctx() const { return loom_scheduler_n_ctx(s_.get()); }
  int32_t n_slots() const { return loom_scheduler_n_slots(s_.get()); }
  // Refuses new requests, lets running ones finish for up to grace_ms, cancels the rest
  // (loom_scheduler_shutdown); the scheduler answers stats and cancel until it is destroyed.
  void shutdown(int32_t grace_ms) { loom_scheduler_shutdown(s_.get(), grace_ms); }
  Expected<std::string> stats() const {
    return Model::detail_json([&](char* b, size_t n) { return loom_scheduler_stats(s_.get(), b, n); });
  }
  loom_scheduler* handle() const { return s_.get(); }

 private:
  explicit Scheduler(loom_scheduler* s) : s_(s, [](loom_scheduler* p) { loom_scheduler_free(p, 0); }) {}
  // Runs a queueing call that owns cb from success on (the dispatcher deletes it after the last
  // event); on failure cb was never handed over and is deleted here.
  template <typename Cb, typename Call>
  static Expected<uint64_t> queue(Cb* cb, Call&& call) {
    uint64_t id = 0;
    const int32_t rc = call(cb, &id);
    if (rc != LOOM_OK) {
      Status st = Status::last(rc);
      delete cb;
      return st;
    }
    return id;
  }
  static void dispatch_embed(int32_t status, const char* message, const float* data, int32_t n_inputs, int32_t n_dim,
                             int32_t prompt_tokens, void* user) {
    std::unique_ptr<OnEmbed> cb(static_cast<OnEmbed*>(user));
    if (status != LOOM_OK) {
      (*cb)(Status(status, message ? message : ""));
      return;
    }
    Embeddings e;
    e.data.assign(data, data + size_t(n_inputs) * size_t(n_dim));
    e.n_inputs = n_inputs;
    e.n_dim = n_dim;
    e.prompt_tokens = prompt_tokens;
    (*cb)(std::move(e));
  }
  static void dispatch(const loom_event* e, void* user) {
    auto* cb = static_cast<OnEvent*>(user);
    Event ev{e->kind, e->request_id, e->choice, e->token, std::string(e->text, e->text_len), e->json ? e->json : ""};
    (*cb)(ev);
    if (e->kind == LOOM_EVENT_DONE || e->kind == LOOM_EVENT_ERROR) delete cb;
  }
  std::shared_ptr<loom_scheduler> s_;
};

inline std::string version() { return loom_version(); }

}  // namespace loom::api

#endif  // LOOM_LOOM_HPP
