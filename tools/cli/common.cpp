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

// One sampler flag: its names, loom_sampler_new's field, its help and its check.
struct SamplerFlag {
  const char* names;
  const char* field;
  bool integer;
  bool chat;  // also a flag of `loom chat`
  const char* help;
  CLI::Validator check;
};

const std::vector<SamplerFlag>& sampler_flags() {
  const CLI::Validator any;
  static const std::vector<SamplerFlag> flags = {
      {"--temp", "temperature", false, true, "temperature; 0 = greedy (default 0.8)", CLI::NonNegativeNumber},
      {"--top-k", "top_k", true, true, "keep the k most likely tokens; 0 = all (default 40)", CLI::NonNegativeNumber},
      {"--top-p", "top_p", false, true, "nucleus sampling threshold (default 0.95)", CLI::Range(0.0, 1.0)},
      {"--min-p", "min_p", false, true, "drop tokens below p times the top probability; 0 = off (default 0.05)",
       CLI::Range(0.0, 1.0)},
      {"--typical-p", "typical_p", false, false, "locally typical sampling; 1 = off (default 1)", CLI::Range(0.0, 1.0)},
      {"--repeat-penalty", "repeat_penalty", false, true, "penalize repeated tokens; 1 = off (default 1)",
       CLI::PositiveNumber},
      {"--repeat-last-n", "repeat_last_n", true, false,
       "tokens the penalties look back over; 0 = off, -1 = context (default 64)", CLI::Range(-1, 1 << 30)},
      {"--frequency-penalty", "frequency_penalty", false, false,
       "subtract count * F from a repeated token's logit (default 0)", any},
      {"--presence-penalty", "presence_penalty", false, false, "subtract P from a repeated token's logit (default 0)", any},
      {"--dry-multiplier", "dry_multiplier", false, false, "DRY repetition penalty multiplier; 0 = off (default 0)",
       CLI::NonNegativeNumber},
      {"--dry-base", "dry_base", false, false, "DRY base (default 1.75)", CLI::Range(1.0, 1e9)},
      {"--dry-allowed-length", "dry_allowed_length", true, false, "DRY: repeats up to this length are free (default 2)",
       CLI::NonNegativeNumber},
      {"--dry-penalty-last-n", "dry_penalty_last_n", true, false, "DRY look-back; 0 = off, -1 = context (default -1)",
       CLI::Range(-1, 1 << 30)},
      {"--mirostat", "mirostat", true, false, "mirostat sampling: 0 off, 1 v1, 2 v2 (default 0)", CLI::Range(0, 2)},
      {"--mirostat-lr", "mirostat_eta", false, false, "mirostat learning rate eta (default 0.1)", CLI::NonNegativeNumber},
      {"--mirostat-ent", "mirostat_tau", false, false, "mirostat target entropy tau (default 5)", CLI::NonNegativeNumber},
      {"--xtc-probability", "xtc_probability", false, false, "XTC: chance of removing the top choices; 0 = off (default 0)",
       CLI::Range(0.0, 1.0)},
      {"--xtc-threshold", "xtc_threshold", false, false, "XTC: probability threshold (default 0.1)", CLI::Range(0.0, 1.0)},
      {"--dynatemp-range", "dynatemp_range", false, false,
       "dynamic temperature in [temp - R, temp + R]; 0 = off (default 0)", CLI::NonNegativeNumber},
      {"--dynatemp-exp", "dynatemp_exponent", false, false, "dynamic temperature exponent (default 1)",
       CLI::NonNegativeNumber},
  };
  return flags;
}

}  // namespace

void add_sampler_flags(CLI::App* sub, nlohmann::json& given, SamplerFlagSet set) {
  for (const SamplerFlag& f : sampler_flags()) {
    if (set == SamplerFlagSet::kChat && !f.chat) continue;
    const std::string field = f.field;
    CLI::Option* opt = f.integer ? sub->add_option_function<int>(
                                       f.names, [&given, field](int v) { given[field] = v; }, f.help)
                                 : sub->add_option_function<float>(
                                       f.names, [&given, field](float v) { given[field] = v; }, f.help);
    opt->check(f.check);
  }
}

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
