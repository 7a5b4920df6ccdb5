// loom quantize IN.gguf OUT.gguf TYPE [-t THREADS] [--imatrix FILE] [--pure] [--allow-requantize]
// [--llama-order] [--leave-output-tensor] [--output-tensor-type T] [--token-embedding-type T]
// [--include-weights NAME]... [--exclude-weights NAME]...: llama-quantize's file types and mixes
// (see src/model/quantize_rules.h), with an optional importance matrix.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "commands.h"

namespace loom::cli {
namespace {

double mib(uint64_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

std::string shape_of(const nlohmann::json& shape) {
  std::string s;
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? " x " : "") + std::to_string(shape[d].get<int64_t>());
  return s;
}

// What `loom quantize` writes, as its arguments and flags set it.
struct QuantizeOptions {
  std::string input, output, type;
  int threads = 0;
  bool allow_requantize = false;
  bool llama_order = false;
  bool quiet = false;
  bool pure = false;
  bool leave_output = false;
  std::string imatrix, output_type, embd_type;
  std::vector<std::string> include_weights, exclude_weights;
};

// Whether OUT's directory exists and is writable (before any work); prints why not.
bool output_dir_writable(const std::string& output) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(output).parent_path().empty() ? fs::path(".") : fs::path(output).parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    fail("cannot write " + output + ": " + dir.string() + " is not a directory");
    return false;
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    fail("cannot write " + output + ": " + dir.string() + " is not writable");
    return false;
  }
  return true;
}

// loom_model_quantize's parameters JSON.
nlohmann::json quantize_params(const QuantizeOptions& o) {
  nlohmann::json params = {{"type", o.type},
                           {"threads", o.threads},
                           {"allow_requantize", o.allow_requantize},
                           {"llama_order", o.llama_order},
                           {"pure", o.pure},
                           {"leave_output_tensor", o.leave_output}};
  if (!o.imatrix.empty()) params["imatrix"] = o.imatrix;
  if (!o.output_type.empty()) params["output_tensor_type"] = o.output_type;
  if (!o.embd_type.empty()) params["token_embedding_type"] = o.embd_type;
  if (!o.include_weights.empty()) params["include_weights"] = o.include_weights;
  if (!o.exclude_weights.empty()) params["exclude_weights"] = o.exclude_weights;
  return params;
}

// One progress line on stderr for a tensor's JSON report.
void print_progress(const std::string& line) {
  const nlohmann::json t = nlohmann::json::parse(line);
  std::fprintf(stderr, "[%4zu/%4zu] %-40s %-6s -> %-6s%s %-18s %9.3f MiB -> %9.3f MiB\n", t["index"].get<size_t>() + 1,
               t["count"].get<size_t>(), t["name"].get<std::string>().c_str(), t["type"].get<std::string>().c_str(),
               t["out_type"].get<std::string>().c_str(), t["fallback"].get<bool>() ? " (fallback)" : "",
               shape_of(t["shape"]).c_str(), mib(t["bytes"].get<uint64_t>()), mib(t["out_bytes"].get<uint64_t>()));
}

// The closing line: sizes, file type, tensor counts, time.
void print_summary(const QuantizeOptions& o, const nlohmann::json& sj, double secs) {
  std::error_code ec;
  const uint64_t out_size = std::filesystem::file_size(o.output, ec);
  std::printf(
      "quantized %s (%.2f MiB) -> %s (%.2f MiB) as %s (general.file_type %u): %d tensors converted "
      "(%d fallback), %d copied, %.2f s\n",
      o.input.c_str(), mib(sj["input_bytes"].get<uint64_t>()), o.output.c_str(), ec ? 0.0 : mib(out_size),
      sj["file_type_name"].get<std::string>().c_str(), sj["file_type"].get<unsigned>(), sj["converted"].get<int>(),
      sj["fallback"].get<int>(), sj["copied"].get<int>(), secs);
}

// `loom quantize`: 0 on success, 1 on a runtime error.
int run_quantize(const QuantizeOptions& o) {
  if (!output_dir_writable(o.output)) return 1;
  const auto t0 = std::chrono::steady_clock::now();
  const bool quiet = o.quiet;
  auto progress = [quiet](const std::string& line) {
    if (!quiet) print_progress(line);
  };
  auto summary = api::quantize(o.input, o.output, quantize_params(o).dump(), progress);
  if (!summary) return fail(summary.status());
  const nlohmann::json sj = nlohmann::json::parse(*summary);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_summary(o, sj, secs);
  return 0;
}

}  // namespace

void register_quantize(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* sub =
      app.add_subcommand("quantize", "Quantize a GGUF model (llama-quantize's file types and mixes, optional imatrix)");
  sub->add_option("input", o->input, "input GGUF (F32, F16 or BF16 weights)")->required();
  sub->add_option("output", o->output, "output GGUF (written atomically)")->required();
  sub->add_option("type", o->type, "target type: " + api::quantize_types())->required();
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::Range(1, 4096));
  sub->add_flag("--allow-requantize", o->allow_requantize, "allow quantized input tensors (dequantized first)");
  sub->add_flag("--llama-order", o->llama_order,
                "write tensors in llama.cpp's order (by layer, then name) instead of the input's");
  sub->add_option("--imatrix", o->imatrix, "importance matrix (llama-imatrix's GGUF or legacy .dat file)");
  sub->add_flag("--pure", o->pure, "no per-tensor mix rules: every quantized tensor gets TYPE's base type");
  sub->add_flag("--leave-output-tensor", o->leave_output, "copy output.weight unchanged");
  sub->add_option("--output-tensor-type", o->output_type, "tensor type of output.weight (e.g. q8_0)");
  sub->add_option("--token-embedding-type", o->embd_type, "tensor type of token_embd.weight (e.g. q4_k)");
  sub->add_option("--include-weights", o->include_weights,
                  "use the imatrix only for tensors whose name contains this (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--exclude-weights", o->exclude_weights,
                  "do not use the imatrix for tensors whose name contains this (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag("-q,--quiet", o->quiet, "no per-tensor progress lines");
  sub->callback([o, &exit_code] { exit_code = run_quantize(*o); });
}

}  // namespace loom::cli
