// loom-node's LoomNativeContext: the class and its methods table, the model's description (info),
// chat formatting, grammar checks, stats, and release().
#include "addon.h"

namespace loom::node {

Napi::FunctionReference* Context::ctor = nullptr;

Napi::Function Context::Init(Napi::Env env) {
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

Context::Context(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Context>(info) {
  if (info.Length() < 1 || !info[0].IsExternal()) type_error(info.Env(), "use loadModel() to create a context");
  native_ = *info[0].As<Napi::External<std::shared_ptr<Native>>>().Data();
}

std::shared_ptr<Native> Context::live(Napi::Env env) const {
  if (!native_ || native_->released) throw Napi::Error::New(env, "this context has been released");
  return native_;
}

std::shared_ptr<loom_scheduler> Context::sched(Napi::Env env) const {
  auto n = live(env);
  if (!n->sched) throw Napi::Error::New(env, "the model was loaded with vocab_only: no inference");
  return n->sched;
}

Napi::Value Context::Info(const Napi::CallbackInfo& info) {
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

Napi::Value Context::Stats(const Napi::CallbackInfo& info) {
  auto s = sched(info.Env());
  return Napi::String::New(info.Env(),
                           json_call([&](char* b, size_t n) { return loom_scheduler_stats(s.get(), b, n); }, "stats"));
}

// chatFormat(requestJson) -> string json (sync: rendering a template is quick)
Napi::Value Context::ChatFormat(const Napi::CallbackInfo& info) {
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
Napi::Value Context::ChatTemplateInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto n = live(env);
  std::optional<std::string> over;
  if (info.Length() > 0 && !info[0].IsUndefined() && !info[0].IsNull()) over = string_arg(info, 0, "template");
  try {
    return Napi::String::New(env, json_call(
                                      [&](char* b, size_t s) {
                                        return loom_chat_template_info(n->model.get(), over ? over->c_str() : nullptr, b, s);
                                      },
                                      "chat template"));
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
}

// grammarCheck(gbnf) -> undefined (sync): throws an Error with loom's message when the grammar
// does not parse (a sampler is built with it and freed).
Napi::Value Context::GrammarCheck(const Napi::CallbackInfo& info) {
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

std::string Context::json_quote(const std::string& s) {
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
Napi::Value Context::Release(const Napi::CallbackInfo& info) {
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

}  // namespace loom::node
