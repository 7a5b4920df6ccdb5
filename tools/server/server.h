// `loom serve`: an OpenAI-compatible HTTP server over one model, one scheduler and loom_http. It is
// built on loom's public API alone (include/loom: the model, loom_scheduler_*, chat formatting), as
// any embedding program could be. This layer turns HTTP + JSON into scheduler requests and events
// back into OpenAI's response shapes; the scheduler knows nothing of HTTP (docs/serving.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom::server {

struct ServeOptions {
  std::string model;
  std::string host = "127.0.0.1";  // a comma list: addresses and UNIX socket paths (*.sock)
  int port = 8080;
  int slots = 4;        // -np
  int n_ctx = 0;        // -c: total KV cells shared by every slot (0: the model's, at most 4096 x slots... see run())
  int n_batch = 2048;   // -b
  int n_ubatch = 512;   // -ub
  int step_tokens = 0;  // tokens per scheduler step (0: n_ubatch)
  int threads = 0, threads_batch = 0;
  int32_t type_k = LOOM_TYPE_F16, type_v = LOOM_TYPE_F16;  // KV cache types (LOOM_TYPE_*)
  std::vector<std::string> api_keys;
  int max_queue = 256;
  int timeout_s = 600;  // HTTP read/write timeout
  std::string cache_dir;
  bool prefix_cache = true;
  bool embedding = false;
  std::string pooling;  // "" = the model's
  std::string alias;    // model name reported (default: the file name)
  std::string chat_template_file;
  std::vector<std::pair<std::string, float>> loras;
  bool context_shift = false;
  // Recurrent, hybrid and sliding-window models resume prefixes from checkpoints (llama-server's
  // --ctx-checkpoints per path, --cache-ram MiB in all); --swa-full keeps full-size caches for
  // sliding-window layers.
  int ctx_checkpoints = 8;
  int64_t cache_ram_mib = 8192;
  bool swa_full = false;
  size_t max_body = size_t(8) << 20;
  int n_predict = -1;  // default max_tokens when a request gives none
  int http_threads = 4;
  // Speculative decoding with a draft model (llama-server's -md / --draft-max / --draft-min /
  // --draft-p-min): requests without prompt lookup draft with it.
  std::string draft_model;
  int draft_max = 16, draft_min = 0;
  int draft_n_ctx = 0;  // -cd: cells of each slot's draft context (0: twice a slot's share, >= 2048)
  float draft_p_min = 0.75f;
  bool verbose = false;
  // CORS, as llama-server: --cors-origins ("*", "localhost" = reflect localhost origins only, or a
  // comma list), --cors-methods, --cors-headers ("*" = whatever the preflight asks for),
  // --[no-]cors-credentials (with "*": the request's Origin is echoed).
  std::string cors_origins = "*";
  std::string cors_methods = "GET, POST, DELETE, OPTIONS";
  std::string cors_headers = "*";
  bool cors_credentials = true;
  // A built-in template name (llama.cpp's: chatml, llama3, ...) or Jinja source given on the
  // command line (--chat-template); --chat-template-file wins when both are given.
  std::string chat_template;
  // Defaults merged under each chat request's chat_template_kwargs (--chat-template-kwargs JSON).
  std::string chat_template_kwargs;
  // --reasoning on|off|auto: off renders templates with enable_thinking false; on / auto leave
  // the template's default (llama.cpp: auto). --reasoning-format: the default reasoning_format of
  // chat requests. --reasoning-budget N: thinking tokens before the block is closed (-1: no limit).
  std::string reasoning = "auto";
  std::string reasoning_format = "auto";
  int reasoning_budget = -1;
  // Server-wide request defaults (llama-server's sampling flags: --temp, --top-k, -s, --samplers,
  // --grammar, -j, --keep, --reasoning-budget-message, ...): a JSON object of request fields,
  // merged under every generation request's own fields ("" = none).
  std::string request_defaults;
  // Extra names the model answers to (--alias a,b: the first is reported) and tags (/v1/models).
  std::vector<std::string> aliases;
  std::vector<std::string> tags;
  // Slots (llama-server's): GET /slots unless --no-slots; POST /slots/{id}?action=save|restore|erase
  // with files in --slot-save-path ("" = refused).
  bool slots_endpoint = true;
  std::string slot_save_path;
  // --sleep-idle-seconds N: after N seconds without work the model is unloaded (its memory given
  // back) and the next request loads it again; -1 = never.
  int sleep_idle_seconds = -1;
  // Router mode (no -m): every GGUF in --models-dir and the [sections] of --models-preset, one child
  // server per model loaded on demand, at most --models-max at once (0 = no limit; the least
  // recently used one is unloaded beyond it), loaded by a request naming it unless
  // --no-models-autoload.
  std::string models_dir;
  std::string models_preset;
  int models_max = 4;
  bool models_autoload = true;
};

// Runs until *stop becomes true (set by a signal handler thread) or the listener fails. Prints
// "loom: listening on http://HOST:PORT" on stderr as soon as the port is bound (requests get 503
// while the model loads), then "loom: ready". Returns the process exit code.
int run_server(const ServeOptions& opts, std::atomic<bool>* stop);

}  // namespace loom::server
