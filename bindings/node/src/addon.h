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
//
// This header is the addon's own (not installed): what its files share. addon.cpp (the module's
// exports, logging, describe), args.cpp (argument checks, conversions), context.cpp (the
// LoomNativeContext class: info, chat formatting, release), load.cpp (loading a model, making
// schedulers: load, reconfigure, fork), tokenize.cpp (tokenize, detokenize, token pieces),
// completion.cpp (submit, cancel, embed: requests whose events come back from the scheduler's
// thread) and session.cpp (session files, cache, LoRA adapters, bench on the worker pool).
#pragma once

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
namespace loom::node {

// An Error with loom's last message (or `what` when there is none).
std::runtime_error loom_error(const std::string& what);

// The ids of `text` (loom_tokenize, grown once when the first guess is short); throws loom_error.
std::vector<int32_t> tokenize_text(const loom_model* m, const std::string& text, bool add_special, bool parse_special);
// The text of `ids` (loom_detokenize, grown once); throws loom_error.
std::string detokenize_ids(const loom_model* m, const std::vector<int32_t>& ids, bool unparse_special);

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

[[noreturn]] void type_error(Napi::Env env, const std::string& msg);
std::string string_arg(const Napi::CallbackInfo& info, size_t i, const char* name);
double number_arg(const Napi::CallbackInfo& info, size_t i, const char* name);
// An integer in [lo, hi], else a RangeError.
int32_t int_arg(const Napi::CallbackInfo& info, size_t i, const char* name, int32_t lo, int32_t hi);
// Token ids from an Int32Array or an array of integers.
std::vector<int32_t> tokens_arg(const Napi::CallbackInfo& info, size_t i, const char* name);
Napi::Int32Array to_int32_array(Napi::Env env, const std::vector<int32_t>& v);

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

inline std::shared_ptr<loom_model> own_model(loom_model* m) { return std::shared_ptr<loom_model>(m, loom_model_free); }
inline std::shared_ptr<loom_scheduler> own_sched(loom_scheduler* s) {
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

  static Napi::Function Init(Napi::Env env);
  explicit Context(const Napi::CallbackInfo& info);

 private:
  std::shared_ptr<Native> native_;

  std::shared_ptr<Native> live(Napi::Env env) const;
  std::shared_ptr<loom_scheduler> sched(Napi::Env env) const;

  // ---- the model (context.cpp) ----
  Napi::Value Info(const Napi::CallbackInfo& info);
  // chatFormat(requestJson) -> string json (sync: rendering a template is quick)
  Napi::Value ChatFormat(const Napi::CallbackInfo& info);
  // chatTemplateInfo(override?) -> string json (sync): loom_chat_template_info for the model's
  // template, or for `override` (a Jinja template or a built-in name) when given.
  Napi::Value ChatTemplateInfo(const Napi::CallbackInfo& info);
  // grammarCheck(gbnf) -> undefined (sync): throws an Error with loom's message when the grammar
  // does not parse (a sampler is built with it and freed).
  Napi::Value GrammarCheck(const Napi::CallbackInfo& info);
  static std::string json_quote(const std::string& s);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  // release() -> Promise: the scheduler stops at once (running requests end as cancelled, waiting
  // exclusive operations fail); the memory is freed off the event loop once every operation in
  // flight has settled, and the promise resolves then.
  Napi::Value Release(const Napi::CallbackInfo& info);

  // ---- tokens (tokenize.cpp) ----
  // tokenize(text, addSpecial, parseSpecial) -> Promise<Int32Array>
  Napi::Value Tokenize(const Napi::CallbackInfo& info);
  // detokenize(tokens, removeSpecial, unparseSpecial) -> Promise<string>
  Napi::Value Detokenize(const Napi::CallbackInfo& info);
  // tokenizeSync(text, addSpecial, parseSpecial) -> Int32Array, on the calling thread
  // (node-llama-cpp's model.tokenize is synchronous).
  Napi::Value TokenizeSync(const Napi::CallbackInfo& info);
  // detokenizeSync(tokens, unparseSpecial) -> string, on the calling thread.
  Napi::Value DetokenizeSync(const Napi::CallbackInfo& info);
  // tokenPiece(id) -> string (sync: one token)
  Napi::Value TokenPiece(const Napi::CallbackInfo& info);

  // ---- generation and embeddings (completion.cpp) ----
  struct Ev;
  struct Request;
  static void drain(Napi::Env env, Napi::Function fn, Request* r);
  static void on_event(const loom_event* e, void* user);
  // submit(requestJson, onEvent(kind, choice, token, text, json), tokens = true) -> request id
  Napi::Value Submit(const Napi::CallbackInfo& info);
  Napi::Value Cancel(const Napi::CallbackInfo& info);
  struct EmbedJob;
  // embed(requestJson, onId?) -> Promise<{data: Float32Array, n, dim, promptTokens}>; onId(id) is
  // called before this returns with the scheduler's request id.
  Napi::Value Embed(const Napi::CallbackInfo& info);

  // ---- state on the worker pool (session.cpp) ----
  // saveSession(path, tokens) -> Promise<number saved>
  Napi::Value SaveSession(const Napi::CallbackInfo& info);
  // loadSession(path) -> Promise<Int32Array tokens>
  Napi::Value LoadSession(const Napi::CallbackInfo& info);
  Napi::Value ClearCache(const Napi::CallbackInfo& info);
  struct Adapters;
  using AdaptersRef = std::shared_ptr<Adapters>;
  static AdaptersRef load_adapters(Napi::Env env, const std::shared_ptr<Native>& n, const Napi::Value& arg);
  // loadLora([{path, scaled}]) -> handle (sync; throws when a file cannot be used)
  Napi::Value LoadLora(const Napi::CallbackInfo& info);
  static constexpr napi_type_tag kAdaptersTag = {0x6c6f6f6d2d6c6f72ULL, 0x612d616461707472ULL};
  // setLora(handle from loadLora | [{path, scaled}]) -> Promise: replaces the context's adapters
  // (an empty list removes them) once no request runs.
  Napi::Value SetLora(const Napi::CallbackInfo& info);
  // bench(pp, tg, pl, nr) -> Promise<string json>
  Napi::Value Bench(const Napi::CallbackInfo& info);

  // ---- schedulers (load.cpp) ----
  // reconfigure(paramsJson-like object) -> Promise: a new scheduler (slots, batch) on the same
  // model once the running requests are done.
  Napi::Value Reconfigure(const Napi::CallbackInfo& info);

  // fork(options) -> Promise<LoomNativeContext>: another context (a scheduler of its own, with
  // these options) on the same model, which it keeps alive (node-llama-cpp's model.createContext).
  Napi::Value Fork(const Napi::CallbackInfo& info);

  friend Napi::Value Load(const Napi::CallbackInfo& info);
};

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

SchedOptions read_options(Napi::Env env, const Napi::Object& o);
// A scheduler on m with these options (and its draft model when one is named); null on failure.
loom_scheduler* make_scheduler(loom_model* m, const SchedOptions& o);

// load(path, options, onProgress?) -> Promise<LoomNativeContext>
Napi::Value Load(const Napi::CallbackInfo& info);

}  // namespace loom::node
