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
  Expected(T v) : v_(std::move(v)) {}                     // NOLINT: implicit, as std::expected
  Expected(Status s) : v_(std::move(s)) {}                // NOLINT
  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { check(); return std::get<0>(v_); }
  T&& value() && { check(); return std::move(std::get<0>(v_)); }
  const T& value() const& { check(); return std::get<0>(v_); }
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

  Token bos() const { return loom_token_bos(handle()); }
  Token eos() const { return loom_token_eos(handle()); }
  bool is_eog(Token t) const { return loom_token_is_eog(handle(), t); }

  Expected<std::vector<Token>> tokenize(const std::string& text, bool add_special = true, bool parse_special = false) const {
    std::vector<Token> ids(text.size() + 8);
    int32_t n = loom_tokenize(handle(), text.data(), int32_t(text.size()), ids.data(), int32_t(ids.size()), add_special, parse_special);
    if (n < 0 && n != LOOM_SIZE_ERROR) {
      ids.resize(size_t(-n));
      n = loom_tokenize(handle(), text.data(), int32_t(text.size()), ids.data(), int32_t(ids.size()), add_special, parse_special);
    }
    if (n < 0) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    ids.resize(size_t(n));
    return ids;
  }
  Expected<std::string> detokenize(const std::vector<Token>& ids, bool remove_special = false, bool unparse_special = false) const {
    std::string out(ids.size() * 8 + 16, '\0');
    int32_t n = loom_detokenize(handle(), ids.data(), int32_t(ids.size()), out.data(), int32_t(out.size()), remove_special, unparse_special);
    if (n < 0 && n != LOOM_SIZE_ERROR) {
      out.resize(size_t(-n));
      n = loom_detokenize(handle(), ids.data(), int32_t(ids.size()), out.data(), int32_t(out.size()), remove_special, unparse_special);
    }
    if (n < 0) return Status::last(LOOM_ERR_INVALID_ARGUMENT);
    out.resize(size_t(n));
    return out;
  }
  // A token's text (its bytes; a piece may be part of a UTF-8 character).
  std::string piece(Token t, bool special = false) const {
    char buf[128];
    const int32_t n = loom_token_to_piece(handle(), t, buf, sizeof buf, 0, special);
    return n > 0 ? std::string(buf, size_t(n)) : std::string();
  }

  // A chat request (JSON with "messages", "tools", ...) rendered with the model's template:
  // {"prompt", "grammar", "additional_stops", ...} as JSON text (loom_chat_format).
  Expected<std::string> chat_format(const std::string& request_json) const {
    return detail_json([&](char* b, size_t n) { return loom_chat_format(handle(), request_json.c_str(), b, n); });
  }
  // Renders messages (a JSON array) and returns the prompt text.
  Expected<std::string> apply_chat_template(const std::string& messages_json, bool add_generation_prompt = true) const {
    auto f = chat_format("{\"messages\": " + messages_json + ", \"add_generation_prompt\": " +
                         (add_generation_prompt ? "true" : "false") + "}");
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
  explicit Batch(int32_t capacity, int32_t n_seq_max = 1) : b_(loom_batch_init(capacity, 0, n_seq_max)), cap_(capacity), n_seq_max_(n_seq_max) {}
  ~Batch() { loom_batch_free(&b_); }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
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
  loom_context* handle() const { return c_.get(); }
  int32_t n_ctx() const { return loom_n_ctx(handle()); }

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
  Status seq_cp(int32_t src, int32_t dst, int32_t p0 = -1, int32_t p1 = -1) { return code(loom_kv_seq_cp(handle(), src, dst, p0, p1)); }
  Status seq_keep(int32_t seq) { return code(loom_kv_seq_keep(handle(), seq)); }
  Status save_state(const std::string& path, const std::vector<Token>& tokens) const {
    return code(loom_state_save_file(handle(), path.c_str(), tokens.data(), tokens.size()));
  }

 private:
  explicit Context(loom_context* c) : c_(c, loom_context_free) {}
  static Status code(int32_t rc) { return rc == LOOM_OK ? Status::ok() : Status::last(rc); }
  static Status result(int32_t rc) {
    if (rc == LOOM_DECODE_OK) return Status::ok();
    if (rc > 0) return Status(rc == LOOM_DECODE_NO_KV_SLOT ? LOOM_ERR_RESOURCE_EXHAUSTED : LOOM_ERR_ABORTED, loom_last_error());
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
  bool grammar_done() const { return loom_sampler_grammar_done(s_.get()); }
  void reset() { loom_sampler_reset(s_.get()); }

 private:
  explicit Sampler(loom_sampler* s) : s_(s, loom_sampler_free) {}
  std::shared_ptr<loom_sampler> s_;
};

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
  // Queues a request (JSON, loom_serve.h); on_event runs on the scheduler's thread.
  Expected<uint64_t> submit(const std::string& request_json, OnEvent on_event) {
    auto* cb = new OnEvent(std::move(on_event));
    uint64_t id = 0;
    const int32_t rc = loom_scheduler_submit(s_.get(), request_json.c_str(), &Scheduler::dispatch, cb, &id);
    if (rc != LOOM_OK) {
      Status st = Status::last(rc);
      delete cb;
      return st;
    }
    return id;
  }
  void cancel(uint64_t id) { loom_scheduler_cancel(s_.get(), id); }
  Expected<std::string> stats() const {
    return Model::detail_json([&](char* b, size_t n) { return loom_scheduler_stats(s_.get(), b, n); });
  }
  loom_scheduler* handle() const { return s_.get(); }

 private:
  explicit Scheduler(loom_scheduler* s) : s_(s, [](loom_scheduler* p) { loom_scheduler_free(p, 0); }) {}
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
