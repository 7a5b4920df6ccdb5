// Subcommands of the `loom` binary. Each registers its flags on the app and returns the exit
// code through `exit_code` when it runs: 0 success, 1 runtime error (bad file, bad input), 2 usage.
//
// The commands use loom's public API only (include/loom: loom.hpp over loom.h), as any program
// embedding loom would; `serve` runs tools/server, which is built on the same headers.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "loom/loom.hpp"

namespace loom::cli {

namespace api = loom::api;

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

// Prints "loom: <message>" on stderr and returns 1. A C API message's "loom_function: " prefix
// is dropped (the user did not call that function).
int fail(const api::Status& st);
int fail(const std::string& message);
// The C API's failure message without the function-name prefix.
std::string last_error();
// Loads a model, or returns nothing after printing the error.
std::optional<api::Model> load_model_or_report(const std::string& path, bool vocab_only = false);
// Context size default: the model's training context capped at 4096.
int default_n_ctx(const api::Model& m);
// --sliding-window N (loom_context_params::n_swa): -1 the model's, 0 off, N > 0 a window of N tokens.
void add_sliding_window_option(CLI::App* sub, int& n_swa);
// The sampler flags (llama.cpp's names): each one given is stored in `given` under its field of
// loom_sampler_new's JSON; those not given take the sampler's own defaults (loom.h), so the
// defaults are written once. `chat` registers only the flags `loom chat` takes.
enum class SamplerFlagSet { kAll, kChat };
void add_sampler_flags(CLI::App* sub, nlohmann::json& given, SamplerFlagSet set);
// A whole file, or nothing after setting *error.
std::optional<std::string> read_file(const std::string& path, std::string* error);
// Decodes tokens[from..] into sequence `seq` at positions from.., in batches of the context's
// n_batch; the last token's logits are the output.
api::Status decode_tokens(api::Context& ctx, const std::vector<api::Token>& tokens, size_t from, int32_t seq = 0);

}  // namespace loom::cli
