// The router's HTTP side (router_impl.h): /models/sse events, error replies in the request's
// dialect, the routes of handle(), and the relay of a request to its model's child and of the
// child's answer back (whole, or SSE piece by piece).
#include <algorithm>
#include <cstdio>
#include <set>

#include "api/anthropic.h"
#include "http_client.h"
#include "loom/loom.h"
#include "router_impl.h"

namespace loom::server::router_detail {

namespace {

// Paths the router relays to a model's child (llama-server's list and loom's own endpoints).
bool relayed_post(const std::string& p) {
  static const std::set<std::string> kPaths = {"/completion",
                                               "/completions",
                                               "/v1/completions",
                                               "/chat/completions",
                                               "/v1/chat/completions",
                                               "/v1/chat/completions/control",
                                               "/v1/responses",
                                               "/responses",
                                               "/v1/messages",
                                               "/v1/messages/count_tokens",
                                               "/infill",
                                               "/embedding",
                                               "/embeddings",
                                               "/v1/embeddings",
                                               "/rerank",
                                               "/reranking",
                                               "/v1/rerank",
                                               "/v1/reranking",
                                               "/tokenize",
                                               "/detokenize",
                                               "/apply-template",
                                               "/chat/completions/input_tokens",
                                               "/v1/chat/completions/input_tokens",
                                               "/responses/input_tokens",
                                               "/v1/responses/input_tokens",
                                               "/lora-adapters",
                                               "/props"};
  return kPaths.count(p) > 0 || p.rfind("/slots/", 0) == 0;
}
bool relayed_get(const std::string& p) { return p == "/props" || p == "/metrics" || p == "/lora-adapters" || p == "/slots"; }

// The value of one query parameter, percent-decoded ("" when absent or malformed).
std::string query_param(const std::string& query, std::string_view name) {
  size_t i = 0;
  while (i <= query.size()) {
    size_t j = query.find('&', i);
    if (j == std::string::npos) j = query.size();
    std::string_view kv = std::string_view(query).substr(i, j - i);
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) == name) {
      std::string raw(eq == std::string_view::npos ? std::string_view() : kv.substr(eq + 1));
      std::replace(raw.begin(), raw.end(), '+', ' ');
      std::string out;
      return http::percent_decode(raw, &out) ? out : std::string();
    }
    i = j + 1;
  }
  return std::string();
}

}  // namespace

void Router::event(const std::string& model, const std::string& ev, nlohmann::json data) {
  nlohmann::json j = {{"model", model}, {"event", ev}};
  if (!data.is_null()) j["data"] = std::move(data);
  const std::string line = "data: " + dump(j) + "\n\n";
  std::lock_guard<std::mutex> l(sse_mu_);
  std::vector<std::shared_ptr<http::Response>> keep;
  for (auto& r : sse_) {
    if (r->write(line)) keep.push_back(r);
  }
  sse_.swap(keep);
}

nlohmann::json Router::status_data(const Model& m) const {
  nlohmann::json d = {{"status", state_name(m.state)}};
  if (m.state == State::kUnloaded && m.gen > 0) {
    d["exit_code"] = m.exit_code;
    if (m.failed) {
      d["failed"] = true;
      d["message"] = m.failure;
    }
  }
  return d;
}

void Router::fail(const http::Request& req, http::Response& res, const HttpFailure& e) {
  http::Headers h;
  if (e.status == 401) h.emplace_back("WWW-Authenticate", "Bearer");
  if (e.status == 503) h.emplace_back("Retry-After", "1");
  const int status = e.status == 499 ? 400 : e.status;
  if (anthropic_path(req)) {
    res.send(status, "application/json", dump(loom::api::anthropic_error(status, e.message)), h);
  } else {
    res.send(status, "application/json", error_json(status, e.message, e.type), h);
  }
}

void Router::handle(http::Request&& req, std::shared_ptr<http::Response> res) {
  const std::string& path = req.decoded_path;
  const std::string& m = req.method;
  if (o_.verbose) {
    std::fprintf(stderr, "loom: router: request %llu: %s %s, %zu bytes\n", (unsigned long long)res->connection_id(),
                 m.c_str(), req.target.c_str(), req.body.size());
  }
  cors(req, *res);
  if (m == "OPTIONS") return answer_preflight(o_, req, *res);
  if (path == "/health" || path == "/v1/health") return send_json(*res, {{"status", "ok"}});
  if (!authorized(req)) return fail(req, *res, {401, "Invalid API Key", "authentication_error"});
  const bool get = m == "GET" || m == "HEAD";
  try {
    if (path == "/models" || path == "/v1/models") return handle_models(req, res);
    if (path == "/models/sse") return handle_models_sse(req, res);
    if (path == "/models/load" || path == "/models/unload") return handle_load_unload(req, res);
    if (path == "/props" && get && query_param(req.query, "model").empty()) return send_props(*res);
    route_to_model(std::move(req), res);
  } catch (const HttpError& e) {
    fail(req, *res, {e.status, e.message, e.type});
  } catch (const std::exception& e) {
    fail(req, *res, {500, std::string("internal error: ") + e.what(), "server_error"});
  }
}

// GET /models (?reload=1 reads the sources again); POST and DELETE: loom downloads nothing.
void Router::handle_models(const http::Request& req, const std::shared_ptr<http::Response>& res) {
  const std::string& path = req.decoded_path;
  const std::string& m = req.method;
  const bool get = m == "GET" || m == "HEAD", post = m == "POST";
  if (get) {
    const std::string rl = query_param(req.query, "reload");
    if (!rl.empty() && rl != "0" && rl != "false") {
      if (std::string err = reload(); !err.empty()) return fail(req, *res, {500, "reload: " + err, "server_error"});
    }
    return send_json(*res, models_json());
  }
  if (post || m == "DELETE") {
    return fail(req, *res,
                {501, "loom downloads no models: put GGUF files in --models-dir or name them in --models-preset",
                 "not_supported_error"});
  }
  return fail(req, *res, {405, "method " + m + " is not allowed on " + path, "invalid_request_error"});
}

// GET /models/sse: the models' status events, as they happen.
void Router::handle_models_sse(const http::Request& req, const std::shared_ptr<http::Response>& res) {
  const std::string& path = req.decoded_path;
  const std::string& m = req.method;
  const bool get = m == "GET" || m == "HEAD";
  if (!get) return fail(req, *res, {405, "method " + m + " is not allowed on " + path, "invalid_request_error"});
  std::lock_guard<std::mutex> l(sse_mu_);
  if (res->begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) sse_.push_back(res);
}

// POST /models/load, /models/unload {"model": ID}: the load runs on a thread of its own.
void Router::handle_load_unload(const http::Request& req, const std::shared_ptr<http::Response>& res) {
  const std::string& path = req.decoded_path;
  const std::string& m = req.method;
  const bool post = m == "POST";
  if (!post) return fail(req, *res, {405, "method " + m + " is not allowed on " + path, "invalid_request_error"});
  const nlohmann::json body = parse_body(req.body);
  const std::string id = body.contains("model") && body["model"].is_string() ? body["model"].get<std::string>() : "";
  Model* model = find(id);
  if (path == "/models/load") {
    if (!model) return fail(req, *res, {404, "model is not found", "not_found_error"});
    {
      std::lock_guard<std::mutex> l(mu_);
      if (model->state == State::kLoaded || model->state == State::kLoading) {
        return fail(req, *res, {400, "model is already running", "invalid_request_error"});
      }
    }
    go([this, model] {
      Lease lease;
      if (!acquire(*model, true, nullptr, &lease)) release(lease);
    });
    return send_json(*res, {{"success", true}});
  }
  if (!model) return fail(req, *res, {400, "model is not found", "invalid_request_error"});
  {
    std::lock_guard<std::mutex> l(mu_);
    if (model->state != State::kLoaded && model->state != State::kLoading) {
      return fail(req, *res, {400, "model is not running", "invalid_request_error"});
    }
    stop_child(*model);
  }
  return send_json(*res, {{"success", true}});
}

// GET /props without ?model=: the router's own.
void Router::send_props(http::Response& res) {
  return send_json(res, {{"role", "router"},
                         {"max_instances", o_.models_max},
                         {"models_autoload", o_.models_autoload},
                         {"model_alias", "loom"},
                         {"model_path", "none"},
                         {"default_generation_settings", {{"params", nlohmann::json::object()}, {"n_ctx", 0}}},
                         {"build_info", loom_version()}});
}

// Everything else goes to a model's child: POST names it in the body's "model" (or ?model=), GET
// in ?model=.
void Router::route_to_model(http::Request&& req, const std::shared_ptr<http::Response>& res) {
  const std::string& path = req.decoded_path;
  const std::string& m = req.method;
  const bool get = m == "GET" || m == "HEAD", post = m == "POST";
  if (!(post && relayed_post(path)) && !(get && relayed_get(path))) {
    if (relayed_post(path) || relayed_get(path)) {
      return fail(req, *res, {405, "method " + m + " is not allowed on " + path, "invalid_request_error"});
    }
    return fail(req, *res, {404, "no endpoint " + path, "not_found_error"});
  }
  std::string id;
  if (post) {
    const nlohmann::json body = parse_any_body(req.body);
    if (body.is_object() && body.contains("model") && body["model"].is_string()) id = body["model"].get<std::string>();
  }
  if (id.empty()) id = query_param(req.query, "model");
  if (id.empty()) return fail(req, *res, {400, "model name is missing from the request", "invalid_request_error"});
  Model* model = find(id);
  if (!model) {
    return fail(req, *res, {404, "model '" + id + "' not found; the models are: " + model_list_text(), "not_found_error"});
  }
  const std::string al = query_param(req.query, "autoload");
  const bool autoload = al.empty() ? o_.models_autoload : (al == "true" || al == "1");
  // The load and the relay block: on a thread of their own, not on one of loom_http's handlers.
  auto shared_req = std::make_shared<http::Request>(std::move(req));
  go([this, shared_req, res, model, autoload] { relay(*shared_req, res, *model, autoload); });
}

void Router::relay(const http::Request& req, const std::shared_ptr<http::Response>& res, Model& model, bool autoload) {
  auto conn_holder = std::make_shared<std::shared_ptr<http::ClientConnection>>();
  auto gone = [&res] { return res->client_gone(); };
  Lease lease;
  if (auto e = acquire(model, autoload, gone, &lease)) {
    if (!res->client_gone()) fail(req, *res, *e);
    return;
  }
  struct Release {
    Router* r;
    Lease l;
    ~Release() { r->release(l); }
  } release_on_exit{this, lease};

  http::ClientOptions co;
  co.io_timeout = std::chrono::seconds(std::max(1, o_.timeout_s));
  auto c = http::ClientConnection::connect_unix(lease.sock, co);
  if (!c) {
    if (!res->client_gone()) fail(req, *res, {500, child_failure(lease, c.status().message()), "server_error"});
    return;
  }
  std::shared_ptr<http::ClientConnection> conn = std::move(*c);
  // The client leaving closes the child's connection: the child cancels the request.
  res->on_disconnect([conn] { conn->abort(); });

  http::Headers fwd;
  static const std::set<std::string> kHop = {
      "connection",     "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host",
      "content-length", "expect"};
  for (const auto& [k, v] : req.headers) {
    if (!kHop.count(k)) fwd.emplace_back(k, v);
  }
  fwd.emplace_back("Connection", "close");
  auto head = conn->send(req.method, req.target, fwd, req.body);
  if (!head) {
    if (!res->client_gone()) fail(req, *res, {500, child_failure(lease, head.status().message()), "server_error"});
    return;
  }
  const http::ClientResponse& h = *head;
  std::string ctype = "application/json";
  http::Headers extra;
  for (const auto& [k, v] : h.headers) {
    if (k == "content-type") ctype = v;
    else if (k.rfind("access-control-", 0) == 0 || k == "vary" || kHop.count(k) || k == "date" || k == "server") continue;
    else extra.emplace_back(k, v);
  }
  const bool sized = h.header("content-length") && !h.header("transfer-encoding");
  if (sized) {
    // A complete answer: relayed whole, with its length.
    std::string body;
    auto got = conn->read_body([&](std::string_view piece) {
      body.append(piece);
      return true;
    });
    if (!got) {
      if (!res->client_gone()) fail(req, *res, {500, child_failure(lease, got.status().message()), "server_error"});
      return;
    }
    res->send(h.status, ctype, std::move(body), extra);
    return;
  }
  // A stream (SSE): each piece goes out as it arrives.
  if (!res->begin_stream(h.status, ctype, extra)) return;
  auto got = conn->read_body([&](std::string_view piece) { return res->write(piece); });
  if (got) res->end();
  // Otherwise the child died or the client left: the stream is cut without its last chunk, so the
  // client sees it truncated.
  else if (!res->client_gone()) {
    std::fprintf(stderr, "loom: router: %s: stream cut: %s\n", model.def.id.c_str(),
                 child_failure(lease, got.status().message()).c_str());
  }
}

}  // namespace loom::server::router_detail
