// loom-node's tokens: tokenize and detokenize (on the worker pool, or synchronously) and single
// token pieces.
#include "addon.h"

namespace loom::node {

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

namespace {

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

}  // namespace

// tokenize(text, addSpecial, parseSpecial) -> Promise<Int32Array>
Napi::Value Context::Tokenize(const Napi::CallbackInfo& info) {
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
Napi::Value Context::Detokenize(const Napi::CallbackInfo& info) {
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
Napi::Value Context::TokenizeSync(const Napi::CallbackInfo& info) {
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
Napi::Value Context::DetokenizeSync(const Napi::CallbackInfo& info) {
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
Napi::Value Context::TokenPiece(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto n = live(env);
  const int32_t id = int_arg(info, 0, "token", 0, loom_model_n_vocab(n->model.get()) - 1);
  char buf[256];
  const int32_t k = loom_token_to_piece(n->model.get(), id, buf, sizeof buf, 0, true);
  return Napi::String::New(env, k > 0 ? std::string(buf, size_t(k)) : std::string());
}

}  // namespace loom::node
