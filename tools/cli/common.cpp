#include <cstdio>

#include "commands.h"

namespace loom::cli {

int fail(const Status& st) {
  std::fprintf(stderr, "loom: %s\n", st.message().c_str());
  return 1;
}

std::shared_ptr<const Model> load_model_or_report(const std::string& path, bool vocab_only) {
  ModelLoadParams lp;
  lp.vocab_only = vocab_only;
  auto m = Model::load(path, lp);
  if (!m) {
    fail(m.status());
    return nullptr;
  }
  return *m;
}

int default_n_ctx(const Model& m) {
  return int(std::min<int64_t>(m.hparams().n_ctx_train, 4096));
}

void add_sliding_window_option(CLI::App* sub, int& n_swa) {
  sub->add_option("--sliding-window", n_swa,
                  "attend only to the last N positions: -1 = the model's (llama/Mistral: none, as llama.cpp), "
                  "0 = off, N = a window of N tokens (on every layer, or on the model's sliding layers)")
      ->check(CLI::Range(-1, 1 << 30));
}

}  // namespace loom::cli
