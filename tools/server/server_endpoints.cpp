// `loom serve`'s other endpoints (server_app.h): embeddings (OpenAI's and llama-server's native
// ones), rerank, llama-server's slots and /lora-adapters, token counts, /models, /tokenize,
// /detokenize, /apply-template, /props and /metrics.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "api/anthropic.h"
#include "api/native.h"
#include "metrics_text.h"
#include "server_app.h"

namespace loom::server::server_detail {

namespace {

std::string base64(const void* data, size_t n) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = uint32_t(p[i]) << 16 | (i + 1 < n ? uint32_t(p[i + 1]) << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += i + 1 < n ? tbl[(v >> 6) & 63] : '=';
    out += i + 2 < n ? tbl[v & 63] : '=';
  }
  return out;
}

}  // namespace

bool App::apply_loras() {
  std::vector<loom_lora_adapter*> h;
  std::vector<float> sc;
  for (const Lora& l : loras) {
    if (l.scale != 0.0f) h.push_back(l.handle), sc.push_back(l.scale);
  }
  return loom_scheduler_set_lora(sched->handle(), h.data(), sc.data(), int32_t(h.size())) == LOOM_OK;
}

json App::lora_list() const {
  json out = json::array();
  for (size_t i = 0; i < loras.size(); ++i) {
    out.push_back({{"id", i}, {"path", loras[i].path}, {"scale", loras[i].scale}, {"task_name", ""}, {"prompt_prefix", ""}});
  }
  return out;
}

void App::lora_adapters(http::Request& req, http::Response& res) {
  std::lock_guard<std::mutex> l(lora_mu);
  if (req.method != "POST") return send_json(res, lora_list());
  const json body = parse_any_body(req.body);
  if (!body.is_array()) bad_request("Request body must be an array");
  std::vector<float> scales(loras.size(), 0.0f);
  for (size_t i = 0; i < body.size(); ++i) {
    const std::string where = "[" + std::to_string(i) + "]";
    const Fields f(body[i], where + ".");
    if (!body[i].is_object()) bad_request(where + ": expected {\"id\", \"scale\"}");
    const int64_t id = f.integer_in("id", -1, -1, INT32_MAX);
    if (id < 0 || id >= int64_t(loras.size()))
      bad_request(where + ".id: no adapter " + std::to_string(id) + " (" + std::to_string(loras.size()) + " loaded)");
    const json* sc = f.get("scale");
    if (sc && (!sc->is_number() || !std::isfinite(sc->get<double>()))) bad_request(where + ".scale: expected a number");
    scales[size_t(id)] = sc ? float(sc->get<double>()) : 0.0f;
  }
  std::vector<float> before;
  for (size_t i = 0; i < loras.size(); ++i) before.push_back(loras[i].scale), loras[i].scale = scales[i];
  if (!apply_loras()) {
    const std::string why = loom_last_error();
    for (size_t i = 0; i < loras.size(); ++i) loras[i].scale = before[i];
    throw HttpError{500, "applying the adapters failed: " + why, {}, {}};
  }
  send_json(res, {{"success", true}});
}

std::string App::query_param(const http::Request& req, std::string_view name) {
  std::string_view q = req.query;
  while (!q.empty()) {
    const size_t amp = q.find('&');
    const std::string_view kv = q.substr(0, amp);
    const size_t eq = kv.find('=');
    if (kv.substr(0, eq) == name) {
      std::string out;
      if (eq == std::string_view::npos) return out;
      return http::percent_decode(kv.substr(eq + 1), &out) ? out : std::string();
    }
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return {};
}

void App::remember_settings(uint64_t rid, const json& settings) {
  std::lock_guard<std::mutex> l(slot_mu);
  request_settings[rid] = dump(settings);
}

void App::forget_settings(uint64_t rid) {
  std::string settings;
  {
    std::lock_guard<std::mutex> l(slot_mu);
    auto it = request_settings.find(rid);
    if (it == request_settings.end()) return;
    settings = std::move(it->second);
    request_settings.erase(it);
  }
  auto text = api::Model::detail_json([&](char* b, size_t n) { return loom_scheduler_slots(sched->handle(), b, n); });
  if (!text) return;
  const json states = json::parse(*text, nullptr, false);
  if (!states.is_array()) return;
  std::lock_guard<std::mutex> l(slot_mu);
  slot_last_settings.resize(states.size());
  slot_last_request.resize(states.size(), 0);
  for (const json& s : states) {
    if (s.value("request_id", uint64_t(0)) != rid) continue;
    const size_t i = s.value("id", size_t(0));
    if (i < slot_last_settings.size()) {
      slot_last_settings[i] = settings;
      slot_last_request[i] = rid;
    }
  }
}

void App::slots(http::Request& req, http::Response& res) {
  if (!o.slots_endpoint) {
    throw HttpError{501, "This server does not support slots endpoint. Start it with `--slots`", "not_supported_error", {}};
  }
  auto text = api::Model::detail_json([&](char* b, size_t n) { return loom_scheduler_slots(sched->handle(), b, n); });
  if (!text) throw http_error(text.status());
  const json states = json::parse(*text);
  const int n_ctx = sched->n_ctx() / std::max(1, o.slots);
  bool any_free = false;
  json out = json::array();
  std::lock_guard<std::mutex> l(slot_mu);
  slot_last_settings.resize(states.size());
  slot_last_request.resize(states.size(), 0);
  for (const json& s : states) {
    const size_t i = s.at("id").get<size_t>();
    const bool processing = s.at("is_processing").get<bool>();
    any_free = any_free || !processing;
    const uint64_t rid = s.at("request_id").get<uint64_t>();
    if (rid != 0) {
      auto it = request_settings.find(rid);
      if (it != request_settings.end()) {
        slot_last_settings[i] = it->second;
        slot_last_request[i] = rid;
      }
    }
    if (i >= slot_last_settings.size()) continue;
    json j = {{"id", i}, {"n_ctx", n_ctx}, {"speculative", !o.draft_model.empty()}, {"is_processing", processing}};
    if (slot_last_request[i] != 0) {
      j["id_task"] = slot_last_request[i];
      j["n_prompt_tokens"] = s.at("n_prompt");
      j["params"] = json::parse(slot_last_settings[i], nullptr, false);
      j["next_token"] = json::array({{{"has_next_token", processing},
                                      {"has_new_line", false},
                                      {"n_remain", processing ? s.at("n_remain") : json(-1)},
                                      {"n_decoded", s.at("n_decoded")}}});
    }
    j["n_cached"] = s.at("n_cached");
    out.push_back(std::move(j));
  }
  if (!query_param(req, "fail_on_no_slot").empty() && !any_free) {
    throw HttpError{503, "no slot available", "unavailable_error", {}};
  }
  send_json(res, out);
}

void App::slot_action(http::Request& req, http::Response& res, const std::string& id_text) {
  if (o.slot_save_path.empty()) {
    throw HttpError{
        501, "This server does not support slots action. Start it with `--slot-save-path`", "not_supported_error", {}};
  }
  int slot = -1;
  {
    char* end = nullptr;
    errno = 0;
    const long v = id_text.empty() ? -1 : std::strtol(id_text.c_str(), &end, 10);
    if (id_text.empty() || errno != 0 || *end != '\0' || v < 0 || v >= o.slots)
      throw HttpError{400, "Invalid slot ID", {}, {}};
    slot = int(v);
  }
  const std::string action = query_param(req, "action");
  if (action != "save" && action != "restore" && action != "erase") throw HttpError{400, "Invalid action", {}, {}};
  if (action == "erase") {
    int32_t n = 0;
    const int32_t rc = loom_scheduler_slot_erase(sched->handle(), slot, &n);
    if (rc != LOOM_OK) throw http_error(api::Status::last(rc));
    send_json(res, {{"id_slot", slot}, {"n_erased", n}});
    return;
  }
  const json body = parse_body(req.body);
  const json* fn = body.contains("filename") ? &body["filename"] : nullptr;
  if (!fn || !fn->is_string()) throw HttpError{400, "filename: required (a string)", {}, {}};
  const std::string filename = fn->get<std::string>();
  if (!valid_slot_filename(filename)) throw HttpError{400, "Invalid filename", {}, {}};
  const std::string path = (std::filesystem::path(o.slot_save_path) / filename).string();
  const auto t0 = std::chrono::steady_clock::now();
  auto ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  int32_t n = 0;
  if (action == "save") {
    const int32_t rc = loom_scheduler_slot_save(sched->handle(), slot, path.c_str(), &n);
    if (rc != LOOM_OK) throw http_error(api::Status::last(rc));
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    send_json(res, {{"id_slot", slot},
                    {"filename", filename},
                    {"n_saved", n},
                    {"n_written", ec ? 0 : int64_t(bytes)},
                    {"timings", {{"save_ms", ms()}}}});
    return;
  }
  if (!std::filesystem::exists(path)) throw HttpError{404, "no slot file named " + filename, {}, {}};
  const int32_t rc = loom_scheduler_slot_restore(sched->handle(), slot, path.c_str(), &n);
  if (rc != LOOM_OK) throw http_error(api::Status::last(rc));
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  send_json(res, {{"id_slot", slot},
                  {"filename", filename},
                  {"n_restored", n},
                  {"n_read", ec ? 0 : int64_t(bytes)},
                  {"timings", {{"restore_ms", ms()}}}});
}

bool App::valid_slot_filename(const std::string& f) {
  if (f.empty() || f.size() > 255 || f == "." || f == "..") return false;
  for (unsigned char c : f) {
    if (c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == ':') return false;
  }
  return f.find("..") == std::string::npos && f.front() != ' ' && f.back() != ' ' && f.back() != '.';
}

int64_t App::chat_prompt_tokens(const json& chat) {
  json r = plan_apply_template(chat);
  apply_chat_defaults(r);
  if (!template_override.empty()) r["chat_template"] = template_override;
  auto f = model->chat_format(dump(r));
  if (!f) throw http_error(f.status());
  auto ids = model->tokenize(json::parse(*f).at("prompt").get<std::string>(), true, true);
  if (!ids) throw http_error(ids.status());
  return int64_t(ids->size());
}

void App::count_tokens(http::Request& req, http::Response& res) {
  send_json(res, loom::api::anthropic_count_tokens_response(
                     chat_prompt_tokens(loom::api::anthropic_to_chat(parse_body(req.body)))));
}

void App::run_embed(const json& request, const std::shared_ptr<http::Response>& res,
                    std::function<void(api::Scheduler::Embeddings&)> done) {
  auto id = api::submit_embedding(sched->handle(), request,
                                  [this, res, done, token = busy_token()](api::Expected<api::Scheduler::Embeddings> r) {
                                    if (!r) {
                                      send_error(*res, http_error(r.status()));
                                      return;
                                    }
                                    try {
                                      done(*r);
                                    } catch (const std::exception& e) {
                                      send_error(*res, {500, std::string("internal error: ") + e.what(), {}, {}});
                                    }
                                  });
  if (!id) throw http_error(id.status());
}

void App::embeddings(http::Request& req, const std::shared_ptr<http::Response>& res) {
  if (!o.embedding) throw HttpError{501, "this server was not started with --embedding", "not_supported_error", {}};
  const EmbeddingsPlan p = plan_embeddings(parse_body(req.body));
  const bool base64_out = p.base64, normalize = p.normalize;
  const std::string model_name = alias;
  run_embed(p.request, res, [this, res, base64_out, normalize, model_name](api::Scheduler::Embeddings& r) {
    json data = json::array();
    for (int32_t i = 0; i < r.n_inputs; ++i) {
      float* e = r.data.data() + size_t(i) * size_t(r.n_dim);
      if (normalize) {
        double ss = 0;
        for (int32_t k = 0; k < r.n_dim; ++k) ss += double(e[k]) * e[k];
        const float inv = ss > 0 ? float(1.0 / std::sqrt(ss)) : 0.0f;
        for (int32_t k = 0; k < r.n_dim; ++k) e[k] *= inv;
      }
      json item = {{"object", "embedding"}, {"index", int(i)}};
      if (base64_out) item["embedding"] = base64(e, size_t(r.n_dim) * sizeof(float));
      else item["embedding"] = std::vector<float>(e, e + r.n_dim);
      data.push_back(std::move(item));
    }
    send_json(*res, {{"object", "list"},
                     {"data", data},
                     {"model", model_name},
                     {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}}});
  });
}

void App::native_embeddings(http::Request& req, const std::shared_ptr<http::Response>& res) {
  if (!o.embedding) throw HttpError{501, "this server was not started with --embedding", "not_supported_error", {}};
  const json body = parse_body(req.body);
  const EmbeddingsPlan p = plan_embeddings(body);
  const Fields f(body);
  const int64_t mode = f.integer_in("embd_normalize", 2, -1, 1000);
  run_embed(p.request, res, [this, res, mode](api::Scheduler::Embeddings& r) {
    json out = json::array();
    for (int32_t i = 0; i < r.n_inputs; ++i) {
      float* e = r.data.data() + size_t(i) * size_t(r.n_dim);
      double norm = 0;
      if (mode == 0) {
        for (int32_t k = 0; k < r.n_dim; ++k) norm = std::max(norm, double(std::fabs(e[k])));
        norm /= 32760.0;
      } else if (mode == 2) {
        for (int32_t k = 0; k < r.n_dim; ++k) norm += double(e[k]) * e[k];
        norm = std::sqrt(norm);
      } else if (mode > 0) {
        for (int32_t k = 0; k < r.n_dim; ++k) norm += std::pow(std::fabs(double(e[k])), double(mode));
        norm = std::pow(norm, 1.0 / double(mode));
      }
      const float inv = mode >= 0 && norm > 0 ? float(1.0 / norm) : 1.0f;
      std::vector<float> v(e, e + r.n_dim);
      for (float& x : v) x *= inv;
      out.push_back({{"index", int(i)}, {"embedding", json::array({std::move(v)})}});
    }
    send_json(*res, out);
  });
}

void App::rerank(http::Request& req, const std::shared_ptr<http::Response>& res) {
  if (!o.embedding || !rank_pooling()) {
    throw HttpError{501,
                    "reranking needs a reranker model (rank pooling) started with --embedding --pooling rank",
                    "not_supported_error",
                    {}};
  }
  RerankPlan p = plan_rerank(parse_body(req.body));
  const int top_n = p.top_n;
  const bool return_docs = p.return_documents;
  std::vector<std::string> texts = std::move(p.texts);
  const std::string model_name = alias;
  run_embed(p.request, res, [this, res, texts, top_n, return_docs, model_name](api::Scheduler::Embeddings& r) {
    std::vector<std::pair<float, int>> scores;
    for (int32_t i = 0; i < r.n_inputs; ++i) {
      scores.emplace_back(r.n_dim > 0 ? r.data[size_t(i) * size_t(r.n_dim)] : 0.0f, int(i));
    }
    std::stable_sort(scores.begin(), scores.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    json results = json::array();
    for (int k = 0; k < top_n && k < int(scores.size()); ++k) {
      json item = {{"index", scores[size_t(k)].second}, {"relevance_score", scores[size_t(k)].first}};
      if (return_docs) item["document"] = {{"text", texts[size_t(scores[size_t(k)].second)]}};
      results.push_back(std::move(item));
    }
    send_json(*res, {{"model", model_name},
                     {"object", "list"},
                     {"results", results},
                     {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}}});
  });
}

bool App::rank_pooling() const {
  return o.pooling == "rank" || (o.pooling.empty() && model->pooling_type() == LOOM_POOLING_RANK);
}

void App::models(http::Response& res) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(o.model, ec);
  const json meta = {{"n_vocab", model_meta["n_vocab"]},         {"n_ctx", model_meta["n_ctx"]},
                     {"n_ctx_train", model_meta["n_ctx_train"]}, {"n_embd", model_meta["n_embd"]},
                     {"n_params", model_meta["n_params"]},       {"size", ec ? uintmax_t(0) : size}};
  // llama-server's shape: OpenAI's list in "data" (with aliases and tags), ollama's in "models".
  json aliases = json::array();
  for (const std::string& a : o.aliases) {
    if (a != alias) aliases.push_back(a);
  }
  const json ollama = {{"name", alias},
                       {"model", alias},
                       {"modified_at", ""},
                       {"size", ""},
                       {"digest", ""},
                       {"type", "model"},
                       {"description", ""},
                       {"tags", o.tags.empty() ? json::array({""}) : json(o.tags)},
                       {"capabilities", json::array({o.embedding ? "embedding" : "completion"})},
                       {"parameters", ""},
                       {"details",
                        {{"parent_model", ""},
                         {"format", "gguf"},
                         {"family", ""},
                         {"families", json::array({""})},
                         {"parameter_size", ""},
                         {"quantization_level", ""}}}};
  send_json(res, {{"models", json::array({ollama})},
                  {"object", "list"},
                  {"data", json::array({{{"id", alias},
                                         {"aliases", aliases},
                                         {"tags", o.tags},
                                         {"object", "model"},
                                         {"created", created},
                                         {"owned_by", "loom"},
                                         {"meta", meta}}})}});
}

void App::tokenize(http::Request& req, http::Response& res) {
  const TokenizePlan p = plan_tokenize(parse_body(req.body));
  auto ids = model->tokenize(p.content, p.add_special, p.parse_special);
  if (!ids) throw http_error(ids.status());
  json toks = json::array();
  for (api::Token id : *ids) {
    if (p.with_pieces) toks.push_back({{"id", id}, {"piece", model->piece(id, true)}});
    else toks.push_back(id);
  }
  send_json(res, {{"tokens", toks}});
}

void App::detokenize(http::Request& req, http::Response& res) {
  const std::vector<int32_t> ids = plan_detokenize(parse_body(req.body), model->n_vocab());
  auto text = model->detokenize(ids, false, true);
  if (!text) throw http_error(text.status());
  send_json(res, {{"content", *text}});
}

void App::apply_template(http::Request& req, http::Response& res) {
  json r = plan_apply_template(parse_body(req.body));
  apply_chat_defaults(r);
  if (!template_override.empty()) r["chat_template"] = template_override;
  auto f = model->chat_format(dump(r));
  if (!f) throw http_error(f.status());
  send_json(res, {{"prompt", json::parse(*f).at("prompt")}});
}

void App::props(http::Response& res) {
  const json params = loom::api::generation_settings(json::object(), 4294967295u, false);
  send_json(res, {{"default_generation_settings", {{"params", params}, {"n_ctx", model_meta["n_ctx"]}}},
                  {"total_slots", o.slots},
                  {"model_alias", alias},
                  {"model_path", o.model},
                  {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
                  {"endpoint_slots", o.slots_endpoint},
                  {"endpoint_props", false},
                  {"endpoint_metrics", true},
                  {"chat_template", template_source},
                  {"bos_token", model_meta["bos"]},
                  {"eos_token", model_meta["eos"]},
                  {"build_info", build_info()},
                  {"is_sleeping", sleeping},
                  {"n_ctx", model_meta["n_ctx_total"]},
                  {"embedding", o.embedding}});
}

std::string App::build_info() {
  static const std::string s = [] {
    const std::string v = loom_version();  // "MAJOR.MINOR.PATCH (git COMMIT)"
    int major = 0, minor = 0, patch = 0;
    std::sscanf(v.c_str(), "%d.%d.%d", &major, &minor, &patch);
    std::string commit = "unknown";
    const size_t g = v.find("(git ");
    if (g != std::string::npos) commit = v.substr(g + 5, v.find(')', g) - g - 5);
    return "b" + std::to_string(major * 10000 + minor * 100 + patch) + "-" + commit;
  }();
  return s;
}

void App::metrics(http::Response& res) {
  std::string text = last_stats;
  if (!sleeping) {
    auto s = sched->stats();
    if (!s) throw http_error(s.status());
    text = *s;
  }
  res.send(200, "text/plain; version=0.0.4", render_metrics(json::parse(text), http->stats()));
}

}  // namespace loom::server::server_detail
