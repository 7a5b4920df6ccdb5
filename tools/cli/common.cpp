#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"

namespace loom::cli {
namespace {

// "loom_model_load_from_file: cannot open x" -> "cannot open x".
std::string strip_function(const std::string& msg) {
  if (msg.rfind("loom_", 0) != 0) return msg;
  const size_t colon = msg.find(": ");
  if (colon == std::string::npos || msg.find_first_of(" \t") < colon) return msg;
  return msg.substr(colon + 2);
}

}  // namespace

std::string last_error() { return strip_function(loom_last_error()); }

int fail(const std::string& message) {
  std::fprintf(stderr, "loom: %s\n", strip_function(message).c_str());
  return 1;
}

int fail(const api::Status& st) { return fail(st.message()); }

std::optional<api::Model> load_model_or_report(const std::string& path, bool vocab_only) {
  api::ModelParams p;
  p.vocab_only = vocab_only;
  auto m = api::Model::load(path, p);
  if (!m) {
    fail(m.status());
    return std::nullopt;
  }
  return std::move(*m);
}

int default_n_ctx(const api::Model& m) { return std::min<int>(m.n_ctx_train(), 4096); }

void add_sliding_window_option(CLI::App* sub, int& n_swa) {
  sub->add_option("--sliding-window", n_swa,
                  "attend only to the last N positions: -1 = the model's (llama/Mistral: none, as llama.cpp), "
                  "0 = off, N = a window of N tokens (on every layer, or on the model's sliding layers)")
      ->check(CLI::Range(-1, 1 << 30));
}

std::optional<std::string> read_file(const std::string& path, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *error = "cannot open " + path;
    return std::nullopt;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) {
    *error = "error reading " + path;
    return std::nullopt;
  }
  return ss.str();
}

api::Status decode_tokens(api::Context& ctx, const std::vector<api::Token>& tokens, size_t from, int32_t seq) {
  const size_t step = size_t(std::max(1, ctx.n_batch()));
  api::Batch batch(int32_t(std::min(step, std::max<size_t>(tokens.size(), 1))));
  for (size_t i = from; i < tokens.size(); i += step) {
    const size_t n = std::min(tokens.size() - i, step);
    batch.clear();
    batch.add_tokens(tokens.data() + i, n, int32_t(i), seq);
    batch.set_logits_last();
    api::Status st = ctx.decode(batch);
    if (!st) return st;
  }
  return api::Status::ok();
}

}  // namespace loom::cli
