// What both HTTP fronts of `loom serve` — the single-model server (server.cpp) and the router
// (router.cpp) — do alike with llama-server's flags: the API key check, CORS and its preflight,
// the listening addresses and loom_http's options; and their signals and first lines.
#pragma once

#include <signal.h>

#include <string>
#include <vector>

#include "http_server.h"
#include "server.h"

namespace loom::server {

// --api-key: "Authorization: Bearer KEY" or "x-api-key: KEY" (Anthropic's clients) matches one of
// the keys (compared in constant time per key); always true without keys.
bool api_key_ok(const ServeOptions& o, const http::Request& req);

// Access-Control-Allow-Origin as --cors-origins says: "*" (the request's Origin echoed when
// credentials are allowed, as a browser requires), "localhost" (localhost origins only), or a
// comma list (the request's Origin when it is in it); Allow-Credentials with --cors-credentials.
void apply_cors(const ServeOptions& o, const http::Request& req, http::Response& res);

// An OPTIONS preflight answered (after apply_cors): --cors-methods, --cors-headers ("*": what the
// preflight asks for), a day's max age.
void answer_preflight(const ServeOptions& o, const http::Request& req, http::Response& res);

// --host: a comma list of addresses and UNIX socket paths (*.sock); 127.0.0.1 when empty.
std::vector<std::string> listen_hosts(const std::string& host_list);

// loom_http's options from the server's (body limit, handler threads, timeouts, error body, log).
http::ServerOptions http_options(const ServeOptions& o);

// SIGINT and SIGTERM blocked (the thread that starts the server takes them synchronously with
// sigtimedwait; every thread started after this inherits the blocked mask), SIGPIPE ignored.
sigset_t block_stop_signals();

// "loom: listening on ..." for each address, as people type it: the TCP ones first (the first is
// what scripts and tests read), then the UNIX sockets.
void announce_listening(const std::vector<std::string>& hosts, int port);

}  // namespace loom::server
