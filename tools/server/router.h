// `loom serve` without -m: llama-server's router mode. A front HTTP server over many models, each
// served by its own child process (`loom serve -m FILE ...` listening on a UNIX socket in a private
// temporary folder), started when a request names the model and stopped when more than
// --models-max are loaded (least recently used first, never one with requests in flight). Requests
// are relayed to the child of their model as they are, and its answers back as they arrive (SSE
// chunk by chunk); a client that leaves closes the child's connection, so the child cancels. A
// child that crashes or runs out of memory fails only its own model's requests (docs/design.md,
// "Router mode: one process per model"; docs/serving.md, "Router mode").
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "server.h"

namespace loom::server {

// What the router needs from the command line's parser (tools/cli/serve_flags.cpp), which knows
// llama-server's flags: this layer does not.
struct RouterSetup {
  // The router's command line without the flags the router owns (-m, --host, --port, --api-key,
  // --alias, --models-*): given to every child after the preset's flags, so they win over them
  // (llama-server's precedence: command line, then the model's section, then [*]).
  std::vector<std::string> child_args;
  // One preset key (a flag without its dashes, long or short, or its LLAMA_ARG_* variable) and its
  // value -> the child's arguments for it and the flag's canonical long name ("--ctx-size").
  // Returns "" or why the key is not accepted.
  std::function<std::string(const std::string& key, const std::string& value, std::string* canonical,
                            std::vector<std::string>* args)>
      preset_option;
  // The program the children run (argv[0] "loom", argv[1] "serve").
  std::string exe = "/proc/self/exe";
};

// Runs the router until SIGINT / SIGTERM (or *stop). Prints "loom: listening on http://HOST:PORT"
// and "loom: ready" as run_server does. A --models-dir that cannot be read or a --models-preset that
// does not parse: one line naming the file (and line) and exit code 2.
int run_router(const ServeOptions& opts, const RouterSetup& setup, std::atomic<bool>* stop);

// ---- parts with no process or socket, for tests ----

struct RouterModel {
  std::string id;
  std::string path;                       // the GGUF file (-m)
  std::string source;                     // "models_dir" or "preset"
  std::vector<std::string> args;          // the preset's flags for it: [*] first, then its section
  std::vector<std::string> preset_lines;  // "key = value" lines of its preset (shown in /models)
  bool load_on_startup = false;
  int stop_timeout_s = 10;
};

// The models of --models-dir (every *.gguf by file stem; a subfolder with GGUF files is one model
// named by the folder: its first shard "-00001-of-" or its one file, mmproj files and draft
// sidecars skipped) and --models-preset. Returns "" or the error ("FILE:LINE: why" for the preset).
std::string load_router_models(const ServeOptions& opts, const RouterSetup& setup, std::vector<RouterModel>* out);

}  // namespace loom::server
