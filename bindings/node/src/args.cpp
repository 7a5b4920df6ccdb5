// loom-node's argument checks (TypeError / RangeError naming the argument) and conversions
// between JavaScript values and the C API's.
#include "addon.h"

namespace loom::node {

std::runtime_error loom_error(const std::string& what) {
  const std::string msg = loom_last_error();
  return std::runtime_error(msg.empty() ? what : msg);
}

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

}  // namespace loom::node
