#include "frontend.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string_view>

#include "json_fields.h"

namespace loom::server {

namespace {

bool localhost_origin(std::string_view origin) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (origin.substr(0, scheme.size()) != scheme) continue;
    std::string_view host = origin.substr(scheme.size());
    for (std::string_view h : {"localhost", "127.0.0.1", "[::1]"}) {
      if (host.substr(0, h.size()) == h && (host.size() == h.size() || host[h.size()] == ':')) return true;
    }
  }
  return false;
}

}  // namespace

bool api_key_ok(const ServeOptions& o, const http::Request& req) {
  if (o.api_keys.empty()) return true;
  std::string key;
  if (const std::string* h = req.header("authorization")) {
    std::string_view v = *h;
    if (v.size() > 7 && (v.substr(0, 7) == "Bearer " || v.substr(0, 7) == "bearer ")) key = std::string(v.substr(7));
  } else if (const std::string* x = req.header("x-api-key")) {
    key = *x;
  }
  bool ok = false;
  for (const std::string& k : o.api_keys) {  // constant time per key
    if (k.size() != key.size()) continue;
    unsigned char d = 0;
    for (size_t i = 0; i < k.size(); ++i) d |= uint8_t(k[i] ^ key[i]);
    ok |= d == 0;
  }
  return ok;
}

void apply_cors(const ServeOptions& o, const http::Request& req, http::Response& res) {
  const std::string* origin = req.header("origin");
  if (o.cors_origins == "*") {
    res.set_header("Access-Control-Allow-Origin", o.cors_credentials && origin && !origin->empty() ? *origin : "*");
  } else if (o.cors_origins == "localhost") {
    if (origin && localhost_origin(*origin)) res.set_header("Access-Control-Allow-Origin", *origin);
  } else if (origin) {
    std::string_view list = o.cors_origins;
    while (!list.empty()) {
      const size_t comma = list.find(',');
      std::string_view one = list.substr(0, comma);
      while (!one.empty() && one.front() == ' ') one.remove_prefix(1);
      while (!one.empty() && one.back() == ' ') one.remove_suffix(1);
      if (one == *origin) {
        res.set_header("Access-Control-Allow-Origin", *origin);
        res.set_header("Vary", "Origin");
        break;
      }
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  if (o.cors_credentials && req.method != "OPTIONS") res.set_header("Access-Control-Allow-Credentials", "true");
}

void answer_preflight(const ServeOptions& o, const http::Request& req, http::Response& res) {
  res.set_header("Access-Control-Allow-Credentials", o.cors_credentials ? "true" : "false");
  res.set_header("Access-Control-Allow-Methods", o.cors_methods);
  const std::string* asked = req.header("access-control-request-headers");
  res.set_header("Access-Control-Allow-Headers",
                 o.cors_headers == "*" && asked && !asked->empty() ? *asked : o.cors_headers);
  res.set_header("Access-Control-Max-Age", "86400");
  res.send(200, "text/html", "");
}

std::vector<std::string> listen_hosts(const std::string& host_list) {
  std::vector<std::string> hosts;
  std::string cur;
  for (char ch : host_list + ",") {
    if (ch == ',') {
      if (!cur.empty()) hosts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (hosts.empty()) hosts.push_back("127.0.0.1");
  return hosts;
}

http::ServerOptions http_options(const ServeOptions& o) {
  http::ServerOptions ho;
  ho.max_body_bytes = o.max_body;
  ho.handler_threads = size_t(std::max(1, o.http_threads));
  ho.header_timeout = std::chrono::seconds(std::max(1, std::min(o.timeout_s, 10)));
  ho.body_timeout = std::chrono::seconds(std::max(1, std::min(o.timeout_s, 30)));
  ho.write_timeout = std::chrono::seconds(std::max(1, o.timeout_s));
  ho.error_body = [](int status, std::string_view msg) { return error_json(status, msg); };
  ho.log = [](std::string_view m) { std::fprintf(stderr, "loom: http: %.*s\n", int(m.size()), m.data()); };
  return ho;
}

sigset_t block_stop_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return sigs;
}

void announce_listening(const std::vector<std::string>& hosts, int port) {
  std::vector<std::string> where;
  for (const std::string& h : hosts) {
    const bool sock = h.size() > 5 && h.compare(h.size() - 5, 5, ".sock") == 0;
    where.push_back(sock ? "unix:" + h
                         : "http://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(port));
  }
  std::stable_partition(where.begin(), where.end(), [](const std::string& w) { return w.rfind("http://", 0) == 0; });
  for (const std::string& w : where) std::fprintf(stderr, "loom: listening on %s\n", w.c_str());
  std::fflush(stderr);
}

}  // namespace loom::server
