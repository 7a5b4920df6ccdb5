// The `loom` command line: one binary, one subcommand per job (see docs/cli.md).
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "serve_flags.h"

// llama.cpp's multi-letter short flags, which CLI11 cannot declare, spelled out for the commands
// that take them (info: -np). `serve` parses llama-server's spellings itself (serve_flags.cpp).
static void expand_short_flags(int argc, char** argv) {
  static const std::pair<const char*, const char*> kLong[] = {{"-np", "--parallel"}};
  if (argc < 2 || std::strcmp(argv[1], "info") != 0) return;
  for (int i = 2; i < argc; ++i) {
    for (const auto& [s, l] : kLong) {
      if (std::strcmp(argv[i], s) == 0) argv[i] = const_cast<char*>(l);
    }
  }
}

// Started as `llama-server` or `loom-llama-server` (a symlink to loom, e.g. the package's
// loom-llama-server): llama-server's command line exactly, as `loom serve <args>`.
static bool started_as_llama_server(const char* argv0) {
  const char* base = std::strrchr(argv0, '/');
  base = base ? base + 1 : argv0;
  return std::strcmp(base, "llama-server") == 0 || std::strcmp(base, "loom-llama-server") == 0;
}

int main(int argc, char** argv) {
  if (argc >= 1 && started_as_llama_server(argv[0])) {
    try {
      return loom::cli::run_serve(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom: internal error: %s\n", e.what());
      return 1;
    }
  }
  expand_short_flags(argc, argv);
  CLI::App app{"loom — fast local LLM inference on GGUF models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("loom ") + loom_version());
  int exit_code = 0;
  loom::cli::register_generate(app, exit_code);
  loom::cli::register_tokenize(app, exit_code);
  loom::cli::register_logits(app, exit_code);
  loom::cli::register_info(app, exit_code);
  loom::cli::register_bench(app, exit_code);
  loom::cli::register_template(app, exit_code);
  loom::cli::register_embed(app, exit_code);
  loom::cli::register_quantize(app, exit_code);
  loom::cli::register_chat(app, exit_code);
  loom::cli::register_serve(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "loom: %s\n", e.what());
    std::fprintf(stderr, "run 'loom --help' for usage\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: internal error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
