// loom quantize IN.gguf OUT.gguf TYPE [-t THREADS] [--allow-requantize] [--llama-order]:
// llama-quantize's type mixes (see src/quant/quantize_model.h), without an importance matrix.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "commands.h"
#include "gguf/gguf.h"
#include "quant/quantize_model.h"

namespace loom::cli {
namespace {

double mib(uint64_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

std::string known_types() {
  std::string s;
  for (const auto& f : quant::file_types()) s += (s.empty() ? "" : ", ") + std::string(f.name);
  return s;
}

std::string shape_of(const gguf::TensorInfo& t) {
  std::string s;
  for (int d = 0; d < t.n_dims; ++d) s += (d ? " x " : "") + std::to_string(t.ne[size_t(d)]);
  return s;
}

}  // namespace

void register_quantize(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string input, output, type;
    int threads = 0;
    bool allow_requantize = false;
    bool llama_order = false;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("quantize", "Quantize a GGUF model (llama-quantize's type mixes, no imatrix)");
  sub->add_option("input", o->input, "input GGUF (F32, F16 or BF16 weights)")->required();
  sub->add_option("output", o->output, "output GGUF (written atomically)")->required();
  sub->add_option("type", o->type, "target type: " + known_types())->required();
  sub->add_option("-t,--threads", o->threads, "threads (default: all cores)")->check(CLI::Range(1, 4096));
  sub->add_flag("--allow-requantize", o->allow_requantize, "allow quantized input tensors (dequantized first)");
  sub->add_flag("--llama-order", o->llama_order,
                "write tensors in llama.cpp's order (by layer, then name) instead of the input's");
  sub->add_flag("-q,--quiet", o->quiet, "no per-tensor progress lines");
  sub->callback([o, &exit_code] {
    const auto ftype = quant::parse_file_type(o->type);
    if (!ftype) {
      exit_code = fail(invalid_argument("unknown quantization type '" + o->type + "' (known: " + known_types() + ")"));
      return;
    }
    // Refuse an unwritable destination before spending the time to quantize.
    {
      namespace fs = std::filesystem;
      const fs::path dir = fs::path(o->output).parent_path().empty() ? fs::path(".") : fs::path(o->output).parent_path();
      std::error_code ec;
      if (!fs::is_directory(dir, ec)) {
        exit_code = fail(io_error("cannot write " + o->output + ": " + dir.string() + " is not a directory"));
        return;
      }
      if (::access(dir.c_str(), W_OK) != 0) {
        exit_code = fail(io_error("cannot write " + o->output + ": " + dir.string() + " is not writable"));
        return;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto in = gguf::GgufFile::open(o->input);
    if (!in) { exit_code = fail(in.status()); return; }

    quant::QuantizeParams p;
    p.ftype = *ftype;
    p.n_threads = o->threads;
    p.allow_requantize = o->allow_requantize;
    p.llama_cpp_order = o->llama_order;
    const bool quiet = o->quiet;
    auto progress = [quiet](const quant::TensorProgress& pr) {
      if (quiet) return;
      const gguf::TensorInfo& t = *pr.tensor;
      std::fprintf(stderr, "[%4zu/%4zu] %-40s %-6s -> %-6s%s %-18s %9.3f MiB -> %9.3f MiB\n", pr.index + 1, pr.count,
                   t.name.c_str(), std::string(tensor_type_name(t.type)).c_str(),
                   std::string(tensor_type_name(pr.out_type)).c_str(), pr.fallback ? " (fallback)" : "",
                   shape_of(t).c_str(), mib(t.nbytes), mib(pr.out_bytes));
    };
    quant::QuantizeStats stats;
    auto w = quant::quantize_model(*in, p, progress, &stats);
    if (!w) { exit_code = fail(w.status()); return; }
    if (Status st = w->write_file(o->output); !st.is_ok()) { exit_code = fail(st); return; }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::error_code ec;
    const uint64_t out_size = std::filesystem::file_size(o->output, ec);
    std::printf("quantized %s (%.2f MiB) -> %s (%.2f MiB) as %s (general.file_type %u): %d tensors converted "
                "(%d fallback), %d copied, %.2f s\n",
                o->input.c_str(), mib(in->file_size()), o->output.c_str(), ec ? 0.0 : mib(out_size),
                std::string(quant::file_type_info(*ftype).name).c_str(), static_cast<unsigned>(*ftype),
                stats.n_converted, stats.n_fallback, stats.n_copied, secs);
    exit_code = 0;
  });
}

}  // namespace loom::cli
