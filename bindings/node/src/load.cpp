// loom-node's model loading and schedulers: the options object, making a scheduler (with a draft
// model when asked), load(), and a context's reconfigure() and fork().
#include "addon.h"

namespace loom::node {

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

}  // namespace loom::node
