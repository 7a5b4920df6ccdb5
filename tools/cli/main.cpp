// The `loom` command line: one binary, one subcommand per job (see docs/cli.md).
#include <cstdio>
#include <cstring>
#include <utility>

#include "commands.h"

// llama.cpp's multi-letter short flags, which CLI11 cannot declare, spelled out for the commands
// that take them (serve: llama-server's spelling; info: -np).
static void expand_short_flags(int argc, char** argv) {
  static const std::pair<const char*, const char*> kLong[] = {
      {"-np", "--parallel"}, {"-ub", "--ubatch-size"}, {"-tb", "--threads-batch"},
      {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-md", "--model-draft"}, {"-cd", "--ctx-size-draft"}, {"-cram", "--cache-ram"}};
  if (argc < 2 || (std::strcmp(argv[1], "serve") != 0 && std::strcmp(argv[1], "info") != 0)) return;
  for (int i = 2; i < argc; ++i) {
    for (const auto& [s, l] : kLong) {
      if (std::strcmp(argv[i], s) == 0) argv[i] = const_cast<char*>(l);
    }
  }
}

int main(int argc, char** argv) {
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
