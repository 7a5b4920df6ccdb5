// Subcommands of the `loom` binary. Each registers its flags on the app and returns the exit
// code through `exit_code` when it runs: 0 success, 1 runtime error (bad file, bad input), 2 usage.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "base/status.h"
#include "model/model.h"

namespace loom::cli {

void register_generate(CLI::App& app, int& exit_code);
void register_tokenize(CLI::App& app, int& exit_code);
void register_logits(CLI::App& app, int& exit_code);
void register_info(CLI::App& app, int& exit_code);
void register_bench(CLI::App& app, int& exit_code);
void register_template(CLI::App& app, int& exit_code);
void register_embed(CLI::App& app, int& exit_code);
void register_quantize(CLI::App& app, int& exit_code);
void register_chat(CLI::App& app, int& exit_code);
void register_serve(CLI::App& app, int& exit_code);

// Prints "loom: <message>" on stderr and returns 1.
int fail(const Status& st);
// Loads a model, or returns nullptr after printing the error.
std::shared_ptr<const Model> load_model_or_report(const std::string& path, bool vocab_only = false);
// Context size default: the model's training context capped at 4096.
int default_n_ctx(const Model& m);
// --sliding-window N (ContextParams::n_swa): -1 the model's, 0 off, N > 0 a window of N tokens.
void add_sliding_window_option(CLI::App* sub, int& n_swa);

}  // namespace loom::cli
