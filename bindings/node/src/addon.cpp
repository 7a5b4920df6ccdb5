// loom-node's native part: a Node-API addon over loom's C API (include/loom/loom.h and
// loom_serve.h), nothing else from the engine. It owns no policy: lib/index.js turns llama.node's
// API into these calls. Rules:
//   - model work never runs on the JavaScript thread: loads, tokenization, sessions, LoRA and
//     benchmarks run on libuv's worker pool (PromiseWorker), generation on the scheduler's own
//     thread, whose events come back through one thread-safe function per request;
//   - every failure is a rejected promise or a thrown Error / TypeError with loom's message;
//   - a context is a shared handle: release() shuts the scheduler down at once (running requests
//     end as cancelled), and the memory goes when the last in-flight operation lets go of it —
//     also when the JavaScript object is garbage-collected without release().
#define NAPI_VERSION 8
#include <napi.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/loom_serve.h"

namespace {

std::runtime_error loom_error(const std::string& what) {
  const std::string msg = loom_last_error();
  return std::runtime_error(msg.empty() ? what : msg);
}

// The ids of `text` (loom_tokenize, grown once when the first guess is short); throws loom_error.
std::vector<int32_t> tokenize_text(const loom_model* m, const std::string& text, bool add_special, bool parse_special) {
  const int32_t len = int32_t(std::min<size_t>(text.size(), INT32_MAX));
  std::vector<int32_t> ids(size_t(len) + 8);
  int32_t k = loom_tokenize(m, text.data(), len, ids.data(), int32_t(ids.size()), add_special, parse_special);
  if (k < 0 && k != LOOM_SIZE_ERROR) {
    ids.resize(size_t(-k));
    k = loom_tokenize(m, text.data(), len, ids.data(), int32_t(ids.size()), add_special, parse_special);
  }
  if (k < 0) throw loom_error("tokenize failed");
  ids.resize(size_t(k));
  return ids;
}

// The text of `ids` (loom_detokenize, grown once); throws loom_error.
std::string detokenize_ids(const loom_model* m, const std::vector<int32_t>& ids, bool unparse_special) {
  std::string out(ids.size() * 8 + 16, '\0');
  int32_t k = loom_detokenize(m, ids.data(), int32_t(ids.size()), out.data(), int32_t(out.size()), false, unparse_special);
  if (k < 0 && k != LOOM_SIZE_ERROR) {
    out.resize(size_t(-k));
    k = loom_detokenize(m, ids.data(), int32_t(ids.size()), out.data(), int32_t(out.size()), false, unparse_special);
  }
  if (k < 0) throw loom_error("detokenize failed");
  out.resize(size_t(k));
  return out;
}

// A RangeError naming the first id outside the model's vocabulary.
void check_token_ids(Napi::Env env, const loom_model* m, const std::vector<int32_t>& ids) {
  const int32_t n_vocab = loom_model_n_vocab(m);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab) {
      throw Napi::RangeError::New(env, "tokens[" + std::to_string(i) + "]: " + std::to_string(ids[i]) +
                                           " is not a token id (vocabulary of " + std::to_string(n_vocab) + ")");
    }
  }
}

// ---- promises over the worker pool ----------------------------------------------------------

template <typename R>
class PromiseWorker : public Napi::AsyncWorker {
 public:
  using Work = std::function<R()>;  // throws std::exception on failure
  using Done = std::function<Napi::Value(Napi::Env, R&)>;
  using Settled = std::function<void(Napi::Env)>;  // on the JavaScript thread, after resolve / reject
  PromiseWorker(Napi::Env env, Work work, Done done, Settled settled = {})
      : Napi::AsyncWorker(env, "loom"),
        deferred_(Napi::Promise::Deferred::New(env)),
        work_(std::move(work)),
        done_(std::move(done)),
        settled_(std::move(settled)) {}
  void Execute() override {
    try {
      result_ = work_();
    } catch (const std::exception& e) {
      SetError(e.what());
    } catch (...) {
      SetError("unknown native error");
    }
    work_ = nullptr;  // what the work captured (model and scheduler references) goes now, not after OnOK
  }
  void OnOK() override {
    Napi::HandleScope scope(Env());
    try {
      deferred_.Resolve(done_(Env(), result_));
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    }
    if (settled_) settled_(Env());
  }
  void OnError(const Napi::Error& e) override {
    deferred_.Reject(e.Value());
    if (settled_) settled_(Env());
  }
  Napi::Promise Promise() const { return deferred_.Promise(); }

 private:
  Napi::Promise::Deferred deferred_;
  Work work_;
  Done done_;
  Settled settled_;
  R result_{};
};

template <typename R>
Napi::Promise run_async(Napi::Env env, std::function<R()> work, std::function<Napi::Value(Napi::Env, R&)> done,
                        std::function<void(Napi::Env)> settled = {}) {
  auto* w = new PromiseWorker<R>(env, std::move(work), std::move(done), std::move(settled));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// ---- argument checks ---------------------------------------------------------------------------

[[noreturn]] void type_error(Napi::Env env, const std::string& msg) { throw Napi::TypeError::New(env, msg); }

std::string string_arg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (info.Length() <= i || !info[i].IsString()) type_error(info.Env(), std::string(name) + " must be a string");
  return info[i].As<Napi::String>().Utf8Value();
}

double number_arg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (info.Length() <= i || !info[i].IsNumber()) type_error(info.Env(), std::string(name) + " must be a number");
  return info[i].As<Napi::Number>().DoubleValue();
}

int32_t int_arg(const Napi::CallbackInfo& info, size_t i, const char* name, int32_t lo, int32_t hi) {
  const double d = number_arg(info, i, name);
  if (!std::isfinite(d) || d != std::floor(d) || d < lo || d > hi) {
    throw Napi::RangeError::New(
        info.Env(), std::string(name) + " must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  return int32_t(d);
}

// Token ids from an Int32Array or an array of integers.
std::vector<int32_t> tokens_arg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  std::vector<int32_t> out;
  if (info.Length() > i && info[i].IsTypedArray()) {
    auto ta = info[i].As<Napi::TypedArray>();
    if (ta.TypedArrayType() != napi_int32_array)
      type_error(info.Env(), std::string(name) + " must be an Int32Array or an array of integers");
    auto a = info[i].As<Napi::Int32Array>();
    out.assign(a.Data(), a.Data() + a.ElementLength());
    return out;
  }
  if (info.Length() <= i || !info[i].IsArray())
    type_error(info.Env(), std::string(name) + " must be an Int32Array or an array of integers");
  auto a = info[i].As<Napi::Array>();
  out.reserve(a.Length());
  for (uint32_t k = 0; k < a.Length(); ++k) {
    Napi::Value v = a.Get(k);
    if (!v.IsNumber()) type_error(info.Env(), std::string(name) + "[" + std::to_string(k) + "] must be an integer");
    const double d = v.As<Napi::Number>().DoubleValue();
    if (d != std::floor(d) || d < INT32_MIN || d > INT32_MAX) {
      type_error(info.Env(), std::string(name) + "[" + std::to_string(k) + "] must be an integer");
    }
    out.push_back(int32_t(d));
  }
  return out;
}

Napi::Int32Array to_int32_array(Napi::Env env, const std::vector<int32_t>& v) {
  auto a = Napi::Int32Array::New(env, v.size());
  if (!v.empty()) std::memcpy(a.Data(), v.data(), v.size() * sizeof(int32_t));
  return a;
}

// A JSON-returning C function (size negotiation: -needed when the buffer is too small).
template <typename F>
std::string json_call(F&& f, const char* what) {
  std::vector<char> buf(4096);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int32_t n = f(buf.data(), buf.size());
    if (n >= 0) return std::string(buf.data(), size_t(n));
    if (n == LOOM_SIZE_ERROR) throw loom_error(what);
    buf.resize(size_t(-n) + 1);
  }
  throw std::runtime_error(std::string(what) + ": result size changed");
}

// ---- the native context ------------------------------------------------------------------------

// A context's native half. Lifetime rules (release() during a tokenize() or a parallel.enable()
// once freed the model under a running worker):
//   - every operation that runs off the JavaScript thread captures its own references to the model
//     and the scheduler, and never reads them through Native afterwards (release() empties it);
//   - Native counts those operations (`ops`, touched on the JavaScript thread only): release()
//     stops the scheduler at once (running requests end as cancelled, exclusive tasks fail) and
//     frees the memory when the last operation has settled; its promise resolves then;
//   - a context garbage-collected without release() frees its memory when the last reference
//     (its own, or an operation's) goes.
struct Native {
  std::shared_ptr<loom_model> model;
  std::shared_ptr<loom_scheduler> sched;  // null for vocab_only
  std::atomic<bool> released{false};
  int ops = 0;                    // operations in flight (JavaScript thread only)
  std::function<void()> on_idle;  // set by release() while operations are in flight
};

std::shared_ptr<loom_model> own_model(loom_model* m) { return std::shared_ptr<loom_model>(m, loom_model_free); }
std::shared_ptr<loom_scheduler> own_sched(loom_scheduler* s) {
  return std::shared_ptr<loom_scheduler>(s, [](loom_scheduler* p) { loom_scheduler_free(p, 0); });
}

// run_async for an operation of context n: counted in n->ops until its promise settles.
template <typename R>
Napi::Promise run_op(Napi::Env env, const std::shared_ptr<Native>& n, std::function<R()> work,
                     std::function<Napi::Value(Napi::Env, R&)> done) {
  ++n->ops;
  return run_async<R>(env, std::move(work), std::move(done), [n](Napi::Env) {
    if (--n->ops == 0 && n->on_idle) {
      auto f = std::move(n->on_idle);
      n->on_idle = nullptr;
      f();
    }
  });
}

class Context : public Napi::ObjectWrap<Context> {
 public:
  static Napi::FunctionReference* ctor;

  static Napi::Function Init(Napi::Env env) {
    Napi::Function f = DefineClass(env, "LoomNativeContext",
                                   {InstanceMethod<&Context::Info>("info"),
                                    InstanceMethod<&Context::Tokenize>("tokenize"),
                                    InstanceMethod<&Context::Detokenize>("detokenize"),
                                    InstanceMethod<&Context::TokenPiece>("tokenPiece"),
                                    InstanceMethod<&Context::Submit>("submit"),
                                    InstanceMethod<&Context::Cancel>("cancel"),
                                    InstanceMethod<&Context::Embed>("embed"),
                                    InstanceMethod<&Context::Stats>("stats"),
                                    InstanceMethod<&Context::SaveSession>("saveSession"),
                                    InstanceMethod<&Context::LoadSession>("loadSession"),
                                    InstanceMethod<&Context::ClearCache>("clearCache"),
                                    InstanceMethod<&Context::LoadLora>("loadLora"),
                                    InstanceMethod<&Context::SetLora>("setLora"),
                                    InstanceMethod<&Context::Bench>("bench"),
                                    InstanceMethod<&Context::ChatFormat>("chatFormat"),
                                    InstanceMethod<&Context::ChatTemplateInfo>("chatTemplateInfo"),
                                    InstanceMethod<&Context::Reconfigure>("reconfigure"),
                                    InstanceMethod<&Context::Fork>("fork"),
                                    InstanceMethod<&Context::TokenizeSync>("tokenizeSync"),
                                    InstanceMethod<&Context::DetokenizeSync>("detokenizeSync"),
                                    InstanceMethod<&Context::GrammarCheck>("grammarCheck"),
                                    InstanceMethod<&Context::Release>("release")});
    ctor = new Napi::FunctionReference(Napi::Persistent(f));
    return f;
  }

  explicit Context(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Context>(info) {
    if (info.Length() < 1 || !info[0].IsExternal()) type_error(info.Env(), "use loadModel() to create a context");
    native_ = *info[0].As<Napi::External<std::shared_ptr<Native>>>().Data();
  }

 private:
  std::shared_ptr<Native> native_;

  std::shared_ptr<Native> live(Napi::Env env) const {
    if (!native_ || native_->released) throw Napi::Error::New(env, "this context has been released");
    return native_;
  }
  std::shared_ptr<loom_scheduler> sched(Napi::Env env) const {
    auto n = live(env);
    if (!n->sched) throw Napi::Error::New(env, "the model was loaded with vocab_only: no inference");
    return n->sched;
  }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    loom_model* m = n->model.get();
    Napi::Object o = Napi::Object::New(env);
    char buf[512];
    loom_model_desc(m, buf, sizeof buf);
    o.Set("desc", buf);
    o.Set("arch", loom_model_arch_name(m));
    o.Set("nEmbd", loom_model_n_embd(m));
    o.Set("nVocab", loom_model_n_vocab(m));
    o.Set("nLayer", loom_model_n_layer(m));
    o.Set("nCtxTrain", loom_model_n_ctx_train(m));
    o.Set("nParams", double(loom_model_n_params(m)));
    o.Set("size", double(loom_model_size(m)));
    o.Set("vocabOnly", loom_model_is_vocab_only(m));
    o.Set("pooling", loom_model_pooling_type(m));  // the file's (LOOM_POOLING_UNSPECIFIED: none given)
    o.Set("recurrent", loom_model_is_recurrent(m));
    o.Set("hasEncoder", loom_model_has_encoder(m));
    Napi::Object meta = Napi::Object::New(env);
    const int32_t nm = loom_model_meta_count(m);
    std::vector<char> val(1 << 16);
    for (int32_t i = 0; i < nm; ++i) {
      if (loom_model_meta_key_by_index(m, i, buf, sizeof buf) < 0) continue;
      const int32_t len = loom_model_meta_val_str_by_index(m, i, val.data(), val.size());
      if (len < 0) continue;
      meta.Set(buf, std::string(val.data(), std::min<size_t>(size_t(len), val.size() - 1)));
    }
    o.Set("metadata", meta);
    // Special tokens (-1: the model has none), for node-llama-cpp's model.tokens.
    Napi::Object sp = Napi::Object::New(env);
    sp.Set("bos", loom_token_bos(m));
    sp.Set("eos", loom_token_eos(m));
    sp.Set("eot", loom_token_eot(m));
    sp.Set("sep", loom_token_sep(m));
    sp.Set("nl", loom_token_nl(m));
    sp.Set("pad", loom_token_pad(m));
    sp.Set("fimPre", loom_token_fim_pre(m));
    sp.Set("fimSuf", loom_token_fim_suf(m));
    sp.Set("fimMid", loom_token_fim_mid(m));
    sp.Set("fimPad", loom_token_fim_pad(m));
    sp.Set("fimRep", loom_token_fim_rep(m));
    sp.Set("fimSep", loom_token_fim_sep(m));
    sp.Set("addBos", loom_add_bos_token(m));
    sp.Set("addEos", loom_add_eos_token(m));
    o.Set("specialTokens", sp);
    try {
      o.Set("chatTemplate",
            json_call([&](char* b, size_t s) { return loom_chat_template_info(m, nullptr, b, s); }, "chat template"));
    } catch (const std::exception& e) {
      o.Set("chatTemplateError", e.what());
    }
    if (n->sched) {
      o.Set("nCtx", loom_scheduler_n_ctx(n->sched.get()));
      o.Set("nParallel", loom_scheduler_n_slots(n->sched.get()));
    }
    return o;
  }

  // tokenize(text, addSpecial, parseSpecial) -> Promise<Int32Array>
  Napi::Value Tokenize(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    std::string text = string_arg(info, 0, "text");
    const bool add_special = info.Length() > 1 && info[1].ToBoolean();
    const bool parse_special = info.Length() > 2 && info[2].ToBoolean();
    return run_op<std::vector<int32_t>>(
        env, n,
        [m = n->model, text = std::move(text), add_special, parse_special] {
          return tokenize_text(m.get(), text, add_special, parse_special);
        },
        [](Napi::Env e, std::vector<int32_t>& ids) -> Napi::Value { return to_int32_array(e, ids); });
  }

  // detokenize(tokens, removeSpecial, unparseSpecial) -> Promise<string>
  Napi::Value Detokenize(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    std::vector<int32_t> ids = tokens_arg(info, 0, "tokens");
    const bool unparse_special = info.Length() > 1 && info[1].ToBoolean();
    check_token_ids(env, n->model.get(), ids);
    return run_op<std::string>(
        env, n,
        [m = n->model, ids = std::move(ids), unparse_special] { return detokenize_ids(m.get(), ids, unparse_special); },
        [](Napi::Env e, std::string& s) -> Napi::Value { return Napi::String::New(e, s); });
  }

  // tokenizeSync(text, addSpecial, parseSpecial) -> Int32Array, on the calling thread
  // (node-llama-cpp's model.tokenize is synchronous).
  Napi::Value TokenizeSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    const std::string text = string_arg(info, 0, "text");
    const bool add_special = info.Length() > 1 && info[1].ToBoolean();
    const bool parse_special = info.Length() > 2 && info[2].ToBoolean();
    std::vector<int32_t> ids;
    try {
      ids = tokenize_text(n->model.get(), text, add_special, parse_special);
    } catch (const std::runtime_error& e) {
      throw Napi::Error::New(env, e.what());
    }
    return to_int32_array(env, ids);
  }

  // detokenizeSync(tokens, unparseSpecial) -> string, on the calling thread.
  Napi::Value DetokenizeSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    std::vector<int32_t> ids = tokens_arg(info, 0, "tokens");
    const bool unparse_special = info.Length() > 1 && info[1].ToBoolean();
    check_token_ids(env, n->model.get(), ids);
    std::string out;
    try {
      out = detokenize_ids(n->model.get(), ids, unparse_special);
    } catch (const std::runtime_error& e) {
      throw Napi::Error::New(env, e.what());
    }
    return Napi::String::New(env, out);
  }

  // tokenPiece(id) -> string (sync: one token)
  Napi::Value TokenPiece(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    const int32_t id = int_arg(info, 0, "token", 0, loom_model_n_vocab(n->model.get()) - 1);
    char buf[256];
    const int32_t k = loom_token_to_piece(n->model.get(), id, buf, sizeof buf, 0, true);
    return Napi::String::New(env, k > 0 ? std::string(buf, size_t(k)) : std::string());
  }

  // ---- generation ----
  struct Ev {
    int32_t kind;
    int32_t choice;
    int32_t token;
    std::string text;
    std::string json;
  };
  // A request's events wait in `pending` for the JavaScript thread, which drains all of them per
  // wake-up: when JavaScript is busier than the generation (or the two share cores), one call
  // carries many tokens instead of one wake-up per token.
  // Without a token callback (and without logprobs) JavaScript needs only the finish and done
  // events (the finish event carries the whole text and the token ids): token events are then
  // dropped here and JavaScript is not woken once per token, which would take a core from the
  // decode threads.
  struct Request {
    Napi::ThreadSafeFunction tsfn;
    std::mutex mu;
    std::vector<Ev> pending;
    bool scheduled = false;
    bool tokens = true;  // token events wanted
    std::chrono::steady_clock::time_point last_wake{};
  };
  // Token events arriving faster than this wait for the next one (at most one token gap late;
  // finish, done and error events always wake JavaScript at once, so nothing waits past the end):
  // at ~1000 tok/s one wake-up carries 2-3 tokens, which halves the JavaScript thread's share of
  // the cores the decode threads run on.
  static constexpr std::chrono::microseconds kMinWakeInterval{2000};
  static void drain(Napi::Env env, Napi::Function fn, Request* r) {
    std::vector<Ev> evs;
    {
      std::lock_guard<std::mutex> l(r->mu);
      evs.swap(r->pending);
      r->scheduled = false;
    }
    bool last = false;
    for (const Ev& d : evs) {
      last = last || d.kind == LOOM_EVENT_DONE || d.kind == LOOM_EVENT_ERROR;
      if (env == nullptr || fn.IsEmpty()) continue;
      try {
        fn.Call({Napi::Number::New(env, d.kind), Napi::Number::New(env, d.choice), Napi::Number::New(env, d.token),
                 Napi::String::New(env, d.text), Napi::String::New(env, d.json)});
      } catch (const Napi::Error& err) {
        // lib/index.js never lets a user callback throw into here; this is the last guard.
        fprintf(stderr, "loom-node: a completion callback threw: %s\n", err.Message().c_str());
      }
    }
    if (last) {
      r->tsfn.Release();
      delete r;
    }
  }
  static void on_event(const loom_event* e, void* user) {
    auto* r = static_cast<Request*>(user);
    const bool token = e->kind == LOOM_EVENT_TOKEN;
    if (token && !r->tokens) return;
    bool call = false;
    {
      std::lock_guard<std::mutex> l(r->mu);
      r->pending.push_back(Ev{e->kind, e->choice, e->token, std::string(e->text, e->text_len), e->json ? e->json : ""});
      const auto now = std::chrono::steady_clock::now();
      if (!r->scheduled && (!token || now - r->last_wake >= kMinWakeInterval)) {
        r->scheduled = call = true;
        r->last_wake = now;
      }
    }
    if (call) r->tsfn.NonBlockingCall(r, &Context::drain);
  }

  // submit(requestJson, onEvent(kind, choice, token, text, json), tokens = true) -> request id
  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto s = sched(env);
    const std::string body = string_arg(info, 0, "request");
    if (info.Length() < 2 || !info[1].IsFunction()) type_error(env, "onEvent must be a function");
    auto* r = new Request;
    r->tokens = info.Length() < 3 || info[2].IsUndefined() || info[2].ToBoolean();
    r->tsfn = Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "loom-completion", 0, 1);
    uint64_t id = 0;
    const int32_t st = loom_scheduler_submit(s.get(), body.c_str(), &Context::on_event, r, &id);
    if (st != LOOM_OK) {
      const std::string msg = loom_last_error();
      r->tsfn.Release();
      delete r;
      Napi::Error err =
          st == LOOM_ERR_INVALID_ARGUMENT ? Napi::Error(Napi::TypeError::New(env, msg)) : Napi::Error::New(env, msg);
      err.Set("code", Napi::String::New(env, loom_status_string(st)));
      throw err;
    }
    return Napi::Number::New(env, double(id));
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!native_ || native_->released || !native_->sched) return env.Undefined();
    const double id = number_arg(info, 0, "requestId");
    // Ids are integers from 1 to 2^53: anything else (negative, fractional, NaN, 1e30) names no
    // request, and is ignored as unknown ids are (a cast would be undefined behaviour).
    if (!(id >= 0 && id <= 9007199254740992.0) || id != std::floor(id)) return env.Undefined();
    loom_scheduler_cancel(native_->sched.get(), uint64_t(id));
    return env.Undefined();
  }

  struct EmbedJob {
    EmbedJob(Napi::ThreadSafeFunction t, Napi::Promise::Deferred d) : tsfn(std::move(t)), deferred(std::move(d)) {}
    Napi::ThreadSafeFunction tsfn;
    Napi::Promise::Deferred deferred;
    int32_t status = 0;
    std::string message;
    std::vector<float> data;
    int32_t n = 0, dim = 0, prompt_tokens = 0;
  };

  // embed(requestJson, onId?) -> Promise<{data: Float32Array, n, dim, promptTokens}>; onId(id) is
  // called before this returns with the scheduler's request id.
  Napi::Value Embed(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto s = sched(env);
    const std::string body = string_arg(info, 0, "request");
    auto* job = new EmbedJob(
        Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo&) {}), "loom-embed", 0, 1),
        Napi::Promise::Deferred::New(env));
    Napi::Promise p = job->deferred.Promise();
    auto cb = [](int32_t status, const char* message, const float* data, int32_t n, int32_t dim, int32_t prompt_tokens,
                 void* user) {
      auto* j = static_cast<EmbedJob*>(user);
      j->status = status;
      j->message = message ? message : "";
      if (status == LOOM_OK && data) j->data.assign(data, data + size_t(n) * size_t(dim));
      j->n = n;
      j->dim = dim;
      j->prompt_tokens = prompt_tokens;
      auto call = [](Napi::Env e, Napi::Function, EmbedJob* jj) {
        std::unique_ptr<EmbedJob> owned(jj);
        if (e == nullptr) return;
        if (jj->status != LOOM_OK) {
          jj->deferred.Reject(Napi::Error::New(e, jj->message).Value());
          return;
        }
        auto arr = Napi::Float32Array::New(e, jj->data.size());
        if (!jj->data.empty()) std::memcpy(arr.Data(), jj->data.data(), jj->data.size() * sizeof(float));
        Napi::Object o = Napi::Object::New(e);
        o.Set("data", arr);
        o.Set("n", jj->n);
        o.Set("dim", jj->dim);
        o.Set("promptTokens", jj->prompt_tokens);
        jj->deferred.Resolve(o);
      };
      Napi::ThreadSafeFunction tsfn = j->tsfn;
      tsfn.NonBlockingCall(j, call);
      tsfn.Release();
    };
    uint64_t id = 0;
    const int32_t st = loom_scheduler_embed(s.get(), body.c_str(), cb, job, &id);
    if (st != LOOM_OK) {
      const std::string msg = loom_last_error();
      job->tsfn.Release();
      job->deferred.Reject(st == LOOM_ERR_INVALID_ARGUMENT ? Napi::TypeError::New(env, msg).Value()
                                                           : Napi::Error::New(env, msg).Value());
      delete job;
    } else if (info.Length() > 1 && info[1].IsFunction()) {
      info[1].As<Napi::Function>().Call({Napi::Number::New(env, double(id))});
    }
    return p;
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    auto s = sched(info.Env());
    return Napi::String::New(info.Env(),
                             json_call([&](char* b, size_t n) { return loom_scheduler_stats(s.get(), b, n); }, "stats"));
  }

  // saveSession(path, tokens) -> Promise<number saved>
  Napi::Value SaveSession(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    auto s = sched(env);
    std::string path = string_arg(info, 0, "path");
    std::vector<int32_t> toks = tokens_arg(info, 1, "tokens");
    return run_op<int32_t>(
        env, n,
        [s, path = std::move(path), toks = std::move(toks)] {
          int32_t saved = 0;
          if (loom_scheduler_save_session(s.get(), path.c_str(), toks.data(), int32_t(toks.size()), &saved) != LOOM_OK) {
            throw loom_error("saveSession failed");
          }
          return saved;
        },
        [](Napi::Env e, int32_t& n) -> Napi::Value { return Napi::Number::New(e, n); });
  }

  // loadSession(path) -> Promise<Int32Array tokens>
  Napi::Value LoadSession(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    auto s = sched(env);
    std::string path = string_arg(info, 0, "path");
    return run_op<std::vector<int32_t>>(
        env, n,
        [s, path = std::move(path)] {
          std::vector<int32_t> toks(size_t(loom_scheduler_n_ctx(s.get())) + 1);
          int32_t n = 0;
          if (loom_scheduler_load_session(s.get(), path.c_str(), toks.data(), int32_t(toks.size()), &n) != LOOM_OK) {
            throw loom_error("loadSession failed");
          }
          toks.resize(size_t(std::min<int32_t>(n, int32_t(toks.size()))));
          return toks;
        },
        [](Napi::Env e, std::vector<int32_t>& t) -> Napi::Value { return to_int32_array(e, t); });
  }

  Napi::Value ClearCache(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    auto s = sched(env);
    return run_op<int>(
        env, n,
        [s] {
          if (loom_scheduler_clear_cache(s.get()) != LOOM_OK) throw loom_error("clearCache failed");
          return 0;
        },
        [](Napi::Env e, int&) -> Napi::Value { return e.Undefined(); });
  }

  // LoRA adapters, loaded on the JavaScript thread (as llama.node does) so that a bad path or a
  // file that does not fit the model throws at the call: loading maps the file and checks its
  // header and tensor shapes, it reads no weights. Installing them in the context waits for the
  // running requests (an exclusive operation of the scheduler), so that part runs on the pool.
  struct Adapters {
    std::vector<loom_lora_adapter*> handles;
    std::vector<float> scales;
    Adapters() = default;
    Adapters(const Adapters&) = delete;
    Adapters& operator=(const Adapters&) = delete;
    ~Adapters() {
      for (auto* h : handles) loom_lora_adapter_free(h);  // the scheduler's context keeps what it uses
    }
  };
  using AdaptersRef = std::shared_ptr<Adapters>;

  static AdaptersRef load_adapters(Napi::Env env, const std::shared_ptr<Native>& n, const Napi::Value& arg) {
    if (!arg.IsArray()) type_error(env, "adapters must be an array of {path, scaled}");
    auto a = arg.As<Napi::Array>();
    std::vector<std::pair<std::string, float>> list;
    for (uint32_t i = 0; i < a.Length(); ++i) {
      Napi::Value v = a.Get(i);
      if (!v.IsObject()) type_error(env, "adapters[" + std::to_string(i) + "] must be {path, scaled}");
      Napi::Object o = v.As<Napi::Object>();
      Napi::Value p = o.Get("path"), sc = o.Get("scaled");
      if (!p.IsString()) type_error(env, "adapters[" + std::to_string(i) + "].path must be a string");
      if (!sc.IsUndefined() && !sc.IsNumber())
        type_error(env, "adapters[" + std::to_string(i) + "].scaled must be a number");
      list.emplace_back(p.As<Napi::String>().Utf8Value(), sc.IsNumber() ? sc.As<Napi::Number>().FloatValue() : 1.0f);
    }
    auto ad = std::make_shared<Adapters>();
    for (const auto& [path, scale] : list) {
      loom_lora_adapter* h = loom_lora_adapter_load(n->model.get(), path.c_str());
      if (!h) throw Napi::Error::New(env, loom_error("LoRA adapter " + path).what());
      ad->handles.push_back(h);
      ad->scales.push_back(scale);
    }
    return ad;
  }

  // loadLora([{path, scaled}]) -> handle (sync; throws when a file cannot be used)
  Napi::Value LoadLora(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    sched(env);
    AdaptersRef ad = load_adapters(env, n, info.Length() > 0 ? info[0] : env.Undefined());
    auto ext =
        Napi::External<AdaptersRef>::New(env, new AdaptersRef(std::move(ad)), [](Napi::Env, AdaptersRef* p) { delete p; });
    ext.TypeTag(&kAdaptersTag);
    return ext;
  }
  static constexpr napi_type_tag kAdaptersTag = {0x6c6f6f6d2d6c6f72ULL, 0x612d616461707472ULL};

  // setLora(handle from loadLora | [{path, scaled}]) -> Promise: replaces the context's adapters
  // (an empty list removes them) once no request runs.
  Napi::Value SetLora(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    auto s = sched(env);
    AdaptersRef ad;
    if (info.Length() > 0 && info[0].IsExternal()) {
      auto ext = info[0].As<Napi::External<AdaptersRef>>();
      if (!ext.CheckTypeTag(&kAdaptersTag)) type_error(env, "adapters must come from loadLora()");
      ad = *ext.Data();
    } else {
      ad = load_adapters(env, n, info.Length() > 0 ? info[0] : env.Undefined());
    }
    return run_op<int>(
        env, n,
        [s, ad] {
          const int32_t st =
              loom_scheduler_set_lora(s.get(), ad->handles.data(), ad->scales.data(), int32_t(ad->handles.size()));
          if (st != LOOM_OK) throw loom_error("applyLoraAdapters failed");
          return 0;
        },
        [](Napi::Env e, int&) -> Napi::Value { return e.Undefined(); });
  }

  // bench(pp, tg, pl, nr) -> Promise<string json>
  Napi::Value Bench(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    auto s = sched(env);
    const int32_t pp = int_arg(info, 0, "pp", 0, 1 << 20), tg = int_arg(info, 1, "tg", 0, 1 << 20);
    const int32_t pl = int_arg(info, 2, "pl", 1, 4096), nr = int_arg(info, 3, "nr", 1, 1000);
    return run_op<std::string>(
        env, n,
        [s, pp, tg, pl, nr] {
          return json_call([&](char* b, size_t n) { return loom_scheduler_bench(s.get(), pp, tg, pl, nr, b, n); }, "bench");
        },
        [](Napi::Env e, std::string& j) -> Napi::Value { return Napi::String::New(e, j); });
  }

  // chatFormat(requestJson) -> string json (sync: rendering a template is quick)
  Napi::Value ChatFormat(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    const std::string body = string_arg(info, 0, "request");
    try {
      return Napi::String::New(
          env, json_call([&](char* b, size_t s) { return loom_chat_format(n->model.get(), body.c_str(), b, s); },
                         "getFormattedChat"));
    } catch (const std::exception& e) {
      throw Napi::Error::New(env, e.what());
    }
  }

  // chatTemplateInfo(override?) -> string json (sync): loom_chat_template_info for the model's
  // template, or for `override` (a Jinja template or a built-in name) when given.
  Napi::Value ChatTemplateInfo(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    std::optional<std::string> over;
    if (info.Length() > 0 && !info[0].IsUndefined() && !info[0].IsNull()) over = string_arg(info, 0, "template");
    try {
      return Napi::String::New(
          env,
          json_call([&](char* b,
                        size_t s) { return loom_chat_template_info(n->model.get(), over ? over->c_str() : nullptr, b, s); },
                    "chat template"));
    } catch (const std::exception& e) {
      throw Napi::Error::New(env, e.what());
    }
  }

  // reconfigure(paramsJson-like object) -> Promise: a new scheduler (slots, batch) on the same
  // model once the running requests are done.
  Napi::Value Reconfigure(const Napi::CallbackInfo& info);

  // fork(options) -> Promise<LoomNativeContext>: another context (a scheduler of its own, with
  // these options) on the same model, which it keeps alive (node-llama-cpp's model.createContext).
  Napi::Value Fork(const Napi::CallbackInfo& info);

  // grammarCheck(gbnf) -> undefined (sync): throws an Error with loom's message when the grammar
  // does not parse (a sampler is built with it and freed).
  Napi::Value GrammarCheck(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto n = live(env);
    const std::string g = string_arg(info, 0, "grammar");
    std::string body = "{\"grammar\": ";
    body += json_quote(g);
    body += "}";
    loom_sampler* smp = loom_sampler_new(n->model.get(), body.c_str());
    if (!smp) throw Napi::Error::New(env, loom_error("invalid grammar").what());
    loom_sampler_free(smp);
    return env.Undefined();
  }
  static std::string json_quote(const std::string& s) {
    std::string o = "\"";
    for (unsigned char c : s) {
      if (c == '"' || c == '\\') {
        o += '\\';
        o += char(c);
      } else if (c < 0x20) {
        char b[8];
        std::snprintf(b, sizeof b, "\\u%04x", c);
        o += b;
      } else {
        o += char(c);
      }
    }
    return o + "\"";
  }

  // release() -> Promise: the scheduler stops at once (running requests end as cancelled, waiting
  // exclusive operations fail); the memory is freed off the event loop once every operation in
  // flight has settled, and the promise resolves then.
  Napi::Value Release(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    std::shared_ptr<Native> n = native_;
    auto deferred = std::make_shared<Napi::Promise::Deferred>(Napi::Promise::Deferred::New(env));
    if (!n || n->released.exchange(true)) {
      deferred->Resolve(env.Undefined());
      return deferred->Promise();
    }
    native_.reset();
    // Nothing new can start now; operations in flight hold references of their own.
    auto sched = std::move(n->sched);
    auto model = std::move(n->model);
    auto free_all = [sched, model, deferred](Napi::Env e) mutable {
      run_async<int>(
          e,
          [sched, model]() mutable {
            sched.reset();  // joins the scheduler's thread
            model.reset();
            return 0;
          },
          [deferred](Napi::Env e2, int&) -> Napi::Value {
            deferred->Resolve(e2.Undefined());
            return e2.Undefined();
          });
      sched.reset();
      model.reset();
    };
    run_async<int>(
        env,
        [sched] {
          if (sched) loom_scheduler_shutdown(sched.get(), 0);  // cancels what runs, refuses the rest
          return 0;
        },
        [](Napi::Env e, int&) -> Napi::Value { return e.Undefined(); },
        [n, free_all](Napi::Env e) mutable {
          if (n->ops == 0) {
            free_all(e);
          } else {
            n->on_idle = [e, free_all]() mutable { free_all(e); };
          }
        });
    sched.reset();
    model.reset();
    return deferred->Promise();
  }

  friend Napi::Value Load(const Napi::CallbackInfo& info);
};

Napi::FunctionReference* Context::ctor = nullptr;

// Scheduler parameters from a plain object of numbers / booleans / strings.
struct SchedOptions {
  int32_t n_ctx = 512, n_batch = 2048, n_ubatch = 512, n_threads = 0, n_parallel = 1;
  bool embedding = false, ctx_shift = true, kv_unified = true, vocab_only = false;
  bool no_context = false;  // the model's weights without a scheduler (fork() makes contexts)
  int32_t pooling = LOOM_POOLING_UNSPECIFIED, type_k = -1, type_v = -1;
  float rope_freq_base = 0, rope_freq_scale = 0;
  std::string chat_template;
  // Speculative decoding with a draft model (loom_scheduler_new_with_draft).
  std::string draft_model;
  int32_t draft_max = 16, draft_min = 0;
  float draft_p_min = 0.75f;
};

SchedOptions read_options(Napi::Env env, const Napi::Object& o) {
  SchedOptions s;
  auto num = [&](const char* k, auto& dst, double lo, double hi) {
    Napi::Value v = o.Get(k);
    if (v.IsUndefined() || v.IsNull()) return;
    if (!v.IsNumber()) type_error(env, std::string(k) + " must be a number");
    const double d = v.As<Napi::Number>().DoubleValue();
    if (!std::isfinite(d) || d < lo || d > hi) {
      throw Napi::RangeError::New(
          env, std::string(k) + " must be between " + std::to_string(int64_t(lo)) + " and " + std::to_string(int64_t(hi)));
    }
    dst = static_cast<std::remove_reference_t<decltype(dst)>>(d);
  };
  auto flag = [&](const char* k, bool& dst) {
    Napi::Value v = o.Get(k);
    if (v.IsUndefined() || v.IsNull()) return;
    if (!v.IsBoolean()) type_error(env, std::string(k) + " must be a boolean");
    dst = v.As<Napi::Boolean>().Value();
  };
  num("n_ctx", s.n_ctx, 0, 1 << 24);
  num("n_batch", s.n_batch, 1, 1 << 24);
  num("n_ubatch", s.n_ubatch, 1, 1 << 24);
  num("n_threads", s.n_threads, 0, 1024);
  num("n_parallel", s.n_parallel, 1, 256);
  num("pooling", s.pooling, -1, 4);
  num("type_k", s.type_k, -1, 1000);
  num("type_v", s.type_v, -1, 1000);
  num("rope_freq_base", s.rope_freq_base, 0, 1e12);
  num("rope_freq_scale", s.rope_freq_scale, 0, 1e6);
  flag("embedding", s.embedding);
  flag("ctx_shift", s.ctx_shift);
  flag("vocab_only", s.vocab_only);
  flag("no_context", s.no_context);
  Napi::Value t = o.Get("chat_template");
  if (t.IsString()) s.chat_template = t.As<Napi::String>().Utf8Value();
  Napi::Value d = o.Get("draft_model");
  if (d.IsString()) s.draft_model = d.As<Napi::String>().Utf8Value();
  num("draft_max", s.draft_max, 1, 32);
  num("draft_min", s.draft_min, 0, 32);
  num("draft_p_min", s.draft_p_min, 0, 1);
  return s;
}

loom_scheduler* make_scheduler(loom_model* m, const SchedOptions& o) {
  loom_scheduler_params p = loom_scheduler_default_params();
  p.context.n_ctx = o.n_ctx;
  p.context.n_batch = o.n_batch;
  p.context.n_ubatch = std::min(o.n_ubatch, o.n_batch);
  if (o.n_threads > 0) {
    p.context.n_threads = o.n_threads;
    p.context.n_threads_batch = o.n_threads;
  }
  p.context.embeddings = o.embedding;
  p.context.pooling_type = o.pooling;
  // An embeddings context of a model whose file names no pooling (a causal LM) pools by the mean
  // unless asked otherwise: llama.node then returns the first evaluated token's hidden state (on a
  // fresh context: the BOS token's, the same vector for every text); unpooled, loom's scheduler
  // would return nothing.
  if (o.embedding && o.pooling == LOOM_POOLING_UNSPECIFIED) {
    const int32_t mp = loom_model_pooling_type(m);
    if (mp == LOOM_POOLING_UNSPECIFIED || mp == LOOM_POOLING_NONE) p.context.pooling_type = LOOM_POOLING_MEAN;
  }
  if (o.type_k >= 0) p.context.type_k = o.type_k;
  if (o.type_v >= 0) p.context.type_v = o.type_v;
  p.context.rope_freq_base = o.rope_freq_base;
  p.context.rope_freq_scale = o.rope_freq_scale;
  p.n_slots = o.n_parallel;
  p.context_shift = o.ctx_shift;
  p.chat_template = o.chat_template.empty() ? nullptr : o.chat_template.c_str();
  if (o.draft_model.empty()) return loom_scheduler_new(m, &p);
  // The draft model is loaded for this scheduler, which keeps it alive; our handle goes at once.
  loom_model_params mp = loom_model_default_params();
  std::unique_ptr<loom_model, void (*)(loom_model*)> draft(loom_model_load_from_file(o.draft_model.c_str(), &mp),
                                                           loom_model_free);
  if (!draft) return nullptr;
  const std::string opts = "{\"draft_max\": " + std::to_string(o.draft_max) +
                           ", \"draft_min\": " + std::to_string(o.draft_min) +
                           ", \"p_min\": " + std::to_string(o.draft_p_min) + "}";
  return loom_scheduler_new_with_draft(m, &p, draft.get(), opts.c_str());
}

Napi::Value Context::Reconfigure(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto n = live(env);
  if (!n->sched) throw Napi::Error::New(env, "the model was loaded with vocab_only: no inference");
  if (info.Length() < 1 || !info[0].IsObject()) type_error(env, "options must be an object");
  SchedOptions o = read_options(env, info[0].As<Napi::Object>());
  struct Made {
    std::shared_ptr<loom_scheduler> s;
  };
  // The new scheduler is made on a worker; the swap happens here, on the JavaScript thread, which
  // is the only one that reads n->sched (operations in flight hold their own reference, so the old
  // scheduler lives until they end). lib/index.js waits for its running requests first.
  return run_op<Made>(
      env, n,
      [m = n->model, o] {
        loom_scheduler* s = make_scheduler(m.get(), o);
        if (!s) throw loom_error("reconfigure failed");
        return Made{own_sched(s)};
      },
      [n](Napi::Env e, Made& m) -> Napi::Value {
        if (!n->released) n->sched = std::move(m.s);
        return e.Undefined();
      });
}

Napi::Value Context::Fork(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto n = live(env);
  if (loom_model_is_vocab_only(n->model.get()))
    throw Napi::Error::New(env, "the model was loaded with vocab_only: no inference");
  if (info.Length() < 1 || !info[0].IsObject()) type_error(env, "options must be an object");
  SchedOptions o = read_options(env, info[0].As<Napi::Object>());
  struct Made {
    std::shared_ptr<Native> native;
  };
  return run_op<Made>(
      env, n,
      [m = n->model, o] {
        loom_scheduler* s = make_scheduler(m.get(), o);
        if (!s) throw loom_error("cannot create the context");
        auto native = std::make_shared<Native>();
        native->model = m;
        native->sched = own_sched(s);
        return Made{native};
      },
      [](Napi::Env e, Made& made) -> Napi::Value {
        auto ext = Napi::External<std::shared_ptr<Native>>::New(e, &made.native);
        return Context::ctor->New({ext});
      });
}

// jsonSchemaToGrammar(schemaJson) -> string (sync): loom_json_schema_to_grammar.
Napi::Value JsonSchemaToGrammar(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string schema = string_arg(info, 0, "schema");
  std::vector<char> buf(1 << 16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int32_t k = loom_json_schema_to_grammar(schema.c_str(), buf.data(), buf.size());
    if (k < 0) throw Napi::Error::New(env, loom_error("invalid JSON schema").what());
    if (size_t(k) < buf.size()) return Napi::String::New(env, std::string(buf.data(), size_t(k)));
    buf.resize(size_t(k) + 1);
  }
  throw Napi::Error::New(env, "jsonSchemaToGrammar: result size changed");
}

// load(path, options, onProgress?) -> Promise<LoomNativeContext>
Napi::Value Load(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string path = string_arg(info, 0, "model");
  if (info.Length() < 2 || !info[1].IsObject()) type_error(env, "options must be an object");
  SchedOptions o = read_options(env, info[1].As<Napi::Object>());
  std::shared_ptr<Napi::ThreadSafeFunction> progress;
  if (info.Length() > 2 && info[2].IsFunction()) {
    progress = std::make_shared<Napi::ThreadSafeFunction>(
        Napi::ThreadSafeFunction::New(env, info[2].As<Napi::Function>(), "loom-progress", 16, 1));
  }
  struct Loaded {
    std::shared_ptr<Native> native;
  };
  return run_async<Loaded>(
      env,
      [path, o, progress] {
        struct ProgressState {
          std::shared_ptr<Napi::ThreadSafeFunction> tsfn;
          int last = -1;
        } ps{progress};
        loom_model_params mp = loom_model_default_params();
        mp.vocab_only = o.vocab_only;
        if (progress) {
          mp.progress_callback = [](float f, void* u) {
            auto* st = static_cast<ProgressState*>(u);
            const int pct = int(std::lround(std::clamp(f, 0.0f, 1.0f) * 100.0f));
            if (pct == st->last) return;
            st->last = pct;
            auto* v = new int(pct);
            auto call = [](Napi::Env e, Napi::Function fn, int* p) {
              std::unique_ptr<int> owned(p);
              if (e != nullptr) fn.Call({Napi::Number::New(e, *p)});
            };
            if (st->tsfn->NonBlockingCall(v, call) != napi_ok) delete v;
          };
          mp.progress_callback_user_data = &ps;
        }
        loom_model* m = loom_model_load_from_file(path.c_str(), &mp);
        if (progress) progress->Release();
        if (!m) throw loom_error("cannot load " + path);
        auto native = std::make_shared<Native>();
        native->model = own_model(m);
        if (!o.vocab_only && !o.no_context) {
          loom_scheduler* s = make_scheduler(m, o);
          if (!s) throw loom_error("cannot create the context");
          native->sched = own_sched(s);
        }
        return Loaded{native};
      },
      [](Napi::Env e, Loaded& l) -> Napi::Value {
        auto ext = Napi::External<std::shared_ptr<Native>>::New(e, &l.native);
        return Context::ctor->New({ext});
      });
}

// ---- logging -----------------------------------------------------------------------------------

std::mutex g_log_mu;
std::unique_ptr<Napi::ThreadSafeFunction> g_log;

void on_log(int32_t level, const char* text, void*) {
  std::lock_guard<std::mutex> l(g_log_mu);
  if (!g_log) return;
  static const char* kNames[] = {"debug", "info", "warn", "error", "none"};
  auto* msg = new std::pair<std::string, std::string>(kNames[std::clamp(level, 0, 4)], text);
  auto call = [](Napi::Env e, Napi::Function fn, std::pair<std::string, std::string>* m) {
    std::unique_ptr<std::pair<std::string, std::string>> owned(m);
    if (e != nullptr) fn.Call({Napi::String::New(e, m->first), Napi::String::New(e, m->second)});
  };
  if (g_log->NonBlockingCall(msg, call) != napi_ok) delete msg;
}

// setLogCallback(fn | null, level)
Napi::Value SetLogCallback(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::lock_guard<std::mutex> l(g_log_mu);
  if (g_log) {
    g_log->Release();
    g_log.reset();
  }
  if (info.Length() > 0 && info[0].IsFunction()) {
    g_log = std::make_unique<Napi::ThreadSafeFunction>(
        Napi::ThreadSafeFunction::New(env, info[0].As<Napi::Function>(), "loom-log", 256, 1));
    g_log->Unref(env);  // logging never keeps the process alive
    loom_set_log_callback(on_log, nullptr);
  } else {
    loom_set_log_callback(nullptr, nullptr);
  }
  if (info.Length() > 1 && info[1].IsNumber()) loom_set_log_level(info[1].As<Napi::Number>().Int32Value());
  return env.Undefined();
}

// describe(path) -> Promise<string json>: loom_gguf_describe (the file's header: metadata with
// their types, tensors), read on the worker pool.
Napi::Value Describe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = string_arg(info, 0, "path");
  return run_async<std::string>(
      env,
      [path = std::move(path)] {
        return json_call([&](char* b, size_t s) { return loom_gguf_describe(path.c_str(), b, s); }, "describe");
      },
      [](Napi::Env e, std::string& j) -> Napi::Value { return Napi::String::New(e, j); });
}

Napi::Value Version(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), loom_version()); }

Napi::Object InitModule(Napi::Env env, Napi::Object exports) {
  exports.Set("LoomNativeContext", Context::Init(env));
  exports.Set("load", Napi::Function::New(env, Load, "load"));
  exports.Set("setLogCallback", Napi::Function::New(env, SetLogCallback, "setLogCallback"));
  exports.Set("version", Napi::Function::New(env, Version, "version"));
  exports.Set("describe", Napi::Function::New(env, Describe, "describe"));
  exports.Set("jsonSchemaToGrammar", Napi::Function::New(env, JsonSchemaToGrammar, "jsonSchemaToGrammar"));
  exports.Set("apiVersion", Napi::Number::New(env, LOOM_C_API_VERSION));
  return exports;
}

}  // namespace

NODE_API_MODULE(loom_node, InitModule)
