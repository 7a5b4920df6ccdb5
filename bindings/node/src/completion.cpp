// loom-node's requests to the scheduler: completions (submit, cancel), whose events come back from
// the scheduler's thread through one thread-safe function per request, and embeddings.
#include "addon.h"

namespace loom::node {

// One event of a request, copied off the scheduler's thread.
struct Context::Ev {
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
struct Context::Request {
  Napi::ThreadSafeFunction tsfn;
  std::mutex mu;
  std::vector<Ev> pending;
  bool scheduled = false;
  bool tokens = true;  // token events wanted
  std::chrono::steady_clock::time_point last_wake{};
};

namespace {

// Token events arriving faster than this wait for the next one (at most one token gap late;
// finish, done and error events always wake JavaScript at once, so nothing waits past the end):
// at ~1000 tok/s one wake-up carries 2-3 tokens, which halves the JavaScript thread's share of
// the cores the decode threads run on.
constexpr std::chrono::microseconds kMinWakeInterval{2000};

}  // namespace

void Context::drain(Napi::Env env, Napi::Function fn, Request* r) {
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
void Context::on_event(const loom_event* e, void* user) {
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
Napi::Value Context::Submit(const Napi::CallbackInfo& info) {
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

Napi::Value Context::Cancel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!native_ || native_->released || !native_->sched) return env.Undefined();
  const double id = number_arg(info, 0, "requestId");
  // Ids are integers from 1 to 2^53: anything else (negative, fractional, NaN, 1e30) names no
  // request, and is ignored as unknown ids are (a cast would be undefined behaviour).
  if (!(id >= 0 && id <= 9007199254740992.0) || id != std::floor(id)) return env.Undefined();
  loom_scheduler_cancel(native_->sched.get(), uint64_t(id));
  return env.Undefined();
}

struct Context::EmbedJob {
  EmbedJob(Napi::ThreadSafeFunction t, Napi::Promise::Deferred d) : tsfn(t), deferred(d) {}
  Napi::ThreadSafeFunction tsfn;
  Napi::Promise::Deferred deferred;
  int32_t status = 0;
  std::string message;
  std::vector<float> data;
  int32_t n = 0, dim = 0, prompt_tokens = 0;
};

// embed(requestJson, onId?) -> Promise<{data: Float32Array, n, dim, promptTokens}>; onId(id) is
// called before this returns with the scheduler's request id.
Napi::Value Context::Embed(const Napi::CallbackInfo& info) {
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

}  // namespace loom::node
