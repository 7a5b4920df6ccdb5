// loom-node's operations on a context's state, run on the worker pool: session files, the prompt
// cache, LoRA adapters (loaded on the JavaScript thread, installed on the pool) and bench.
#include "addon.h"

namespace loom::node {

// saveSession(path, tokens) -> Promise<number saved>
Napi::Value Context::SaveSession(const Napi::CallbackInfo& info) {
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
Napi::Value Context::LoadSession(const Napi::CallbackInfo& info) {
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

Napi::Value Context::ClearCache(const Napi::CallbackInfo& info) {
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
struct Context::Adapters {
  std::vector<loom_lora_adapter*> handles;
  std::vector<float> scales;
  Adapters() = default;
  Adapters(const Adapters&) = delete;
  Adapters& operator=(const Adapters&) = delete;
  ~Adapters() {
    for (auto* h : handles) loom_lora_adapter_free(h);  // the scheduler's context keeps what it uses
  }
};

Context::AdaptersRef Context::load_adapters(Napi::Env env, const std::shared_ptr<Native>& n, const Napi::Value& arg) {
  if (!arg.IsArray()) type_error(env, "adapters must be an array of {path, scaled}");
  auto a = arg.As<Napi::Array>();
  std::vector<std::pair<std::string, float>> list;
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value v = a.Get(i);
    if (!v.IsObject()) type_error(env, "adapters[" + std::to_string(i) + "] must be {path, scaled}");
    Napi::Object o = v.As<Napi::Object>();
    Napi::Value p = o.Get("path"), sc = o.Get("scaled");
    if (!p.IsString()) type_error(env, "adapters[" + std::to_string(i) + "].path must be a string");
    if (!sc.IsUndefined() && !sc.IsNumber()) type_error(env, "adapters[" + std::to_string(i) + "].scaled must be a number");
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
Napi::Value Context::LoadLora(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto n = live(env);
  sched(env);
  AdaptersRef ad = load_adapters(env, n, info.Length() > 0 ? info[0] : env.Undefined());
  auto ext =
      Napi::External<AdaptersRef>::New(env, new AdaptersRef(std::move(ad)), [](Napi::Env, AdaptersRef* p) { delete p; });
  ext.TypeTag(&kAdaptersTag);
  return ext;
}

// setLora(handle from loadLora | [{path, scaled}]) -> Promise: replaces the context's adapters
// (an empty list removes them) once no request runs.
Napi::Value Context::SetLora(const Napi::CallbackInfo& info) {
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
Napi::Value Context::Bench(const Napi::CallbackInfo& info) {
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

}  // namespace loom::node
