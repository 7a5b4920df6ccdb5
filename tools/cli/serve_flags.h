// `loom serve`'s command line, which is llama-server's (docs/serving.md, "llama-server's flags"):
// every flag of llama-server's README with its aliases, `--no-x` negations and LLAMA_ARG_*
// environment variables, each implemented, accepted without effect (said once on stderr) or
// refused with one line naming it; plus loom's own flags. Parsed as llama.cpp parses: environment
// first, then the arguments in order (the last of a repeated value wins, comma lists add up),
// `--a_b` read as `--a-b`, values always in the next argument.
#pragma once

#include <string>
#include <vector>

#include "server.h"

namespace loom::cli {

struct ServeParse {
  enum class Outcome { kServe, kExit };
  Outcome outcome = Outcome::kExit;
  int exit_code = 0;  // with kExit: 0 after --help / --version / --list-devices, 2 for a usage error
};

// Fills *o from `args` (what follows `loom serve`, or llama-server's argv[1..]) and the
// environment. Notes and errors go to stderr as "loom: ..." lines.
ServeParse parse_serve_args(const std::vector<std::string>& args, server::ServeOptions* o);

// The Markdown table of docs/serving.md's "llama-server's flags" section, generated from the
// same table the parser uses (`loom serve --flag-table-markdown`; tests compare the two).
std::string serve_flag_table_markdown();

// Runs `loom serve` with these arguments; returns the exit code.
int run_serve(const std::vector<std::string>& args);

}  // namespace loom::cli
