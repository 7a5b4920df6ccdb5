// loom serve -m MODEL [llama-server's flags]: an OpenAI-compatible server (tools/server,
// docs/serving.md). The command line is llama-server's, parsed by serve_flags.cpp from one table
// of every llama-server flag (implemented, accepted without effect, or refused with one line), so
// CLI11 only routes the arguments after `serve` there. `loom` started as `llama-server` or
// `loom-llama-server` (a symlink; main.cpp) runs the same parser on its whole command line.
#include "commands.h"
#include "serve_flags.h"

namespace loom::cli {

void register_serve(CLI::App& app, int& exit_code) {
  CLI::App* sub = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server with llama-server's flags (loom serve --help, docs/serving.md)");
  // Everything after `serve` goes to the flag table, --help included (it lists llama-server's flags).
  sub->prefix_command();
  sub->set_help_flag();
  sub->callback([sub, &exit_code] { exit_code = run_serve(sub->remaining()); });
}

}  // namespace loom::cli
