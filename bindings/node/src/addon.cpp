// loom-node's module: its exports, the log callback, describe(), jsonSchemaToGrammar(), version().
// The addon's rules and its files: addon.h.
#include "addon.h"

namespace loom::node {
namespace {

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
}  // namespace loom::node

using loom::node::InitModule;
NODE_API_MODULE(loom_node, InitModule)
