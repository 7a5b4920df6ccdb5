// The server's request path (tools/server/request.h, then the C API as `loom serve` calls it):
// body -> plan for /v1/chat/completions and /v1/completions (flags bit 0), each planned request
// submitted to a real scheduler over stories260K (loom_scheduler_submit_ext, then cancelled at
// once and waited for), and with flags bits 3-5 = 1..5 /v1/embeddings and /v1/rerank (submitted
// to an embedding scheduler), /tokenize (then tokenized), /detokenize (then detokenized),
// /apply-template (then rendered by loom_chat_format), with loom's ChatML template or Qwen 2.5's
// (bit 1) and a default max_tokens of 16 or none (bit 2). Input: [flags] body.
//
// Any body gives a plan and a submit that succeeds, or an error with a 4xx status (501 for what is
// not supported); never another exception, a 5xx, or an error event other than a request's own
// fault. A grammar the request produced (json_schema, response_format, tools) parses.
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include "fuzz_util.h"
#include "json_fields.h"
#include "loom/loom.hpp"
#include "request.h"

using namespace loom;
namespace api = loom::api;

namespace {

struct Env {
  std::optional<api::Model> model;
  std::string qwen;  // Qwen 2.5's template source
  std::optional<api::Scheduler> chatml, qwen_sched, embed;
};
Env* g_env = nullptr;

// An HTTP status the server may answer a client's body with.
void check_status(int status, const std::string& message) {
  if (!((status >= 400 && status < 500) || status == 501)) {
    std::fprintf(stderr, "HTTP %d: %s\n", status, message.c_str());
    LOOM_FUZZ_CHECK(!"a request body must not cause a server error");
  }
  LOOM_FUZZ_CHECK(!message.empty());
}

void check_grammar(const std::string& gbnf) {
  if (gbnf.empty()) return;
  const server::json params = {{"grammar", gbnf}};
  loom_sampler* s = loom_sampler_new(g_env->model->handle(), server::dump(params).c_str());
  if (s) {
    loom_sampler_free(s);
    return;
  }
  const std::string why = loom_last_error();
  if (why.find("too large") == std::string::npos) {
    std::fprintf(stderr, "grammar:\n%s\nerror: %s\n", gbnf.c_str(), why.c_str());
    LOOM_FUZZ_CHECK(!"a request's generated grammar must parse");
  }
}

// Waits for a submitted request's last event (DONE or ERROR).
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int32_t error = LOOM_OK;
  std::string message;
  void finish(int32_t code, std::string why) {
    std::lock_guard<std::mutex> l(mu);
    done = true;
    error = code;
    message = std::move(why);
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
  }
};

void run_generation(const server::json& body, bool completion, bool qwen, int n_predict) {
  server::GenerationPlan p = completion ? server::plan_completion(body, n_predict) : server::plan_chat(body, n_predict);
  LOOM_FUZZ_CHECK(!p.requests.empty() && p.requests.size() <= 64);
  api::Scheduler& sched = qwen ? *g_env->qwen_sched : *g_env->chatml;
  for (const server::json& r : p.requests) {
    auto w = std::make_shared<Waiter>();
    api::GenerationInfo info;
    auto id = api::submit_generation(
        sched.handle(), r, p.options,
        [w](const api::GenerationEvent& e) {
          if (e.kind == LOOM_EVENT_ERROR) w->finish(e.token, e.text);
          else if (e.kind == LOOM_EVENT_DONE) w->finish(LOOM_OK, {});
        },
        &info);
    if (!id) {
      const server::HttpError e = server::http_error(id.status().code(), id.status().message());
      check_status(e.status, e.message);
      return;
    }
    sched.cancel(*id);
    w->wait();
    if (w->error != LOOM_OK) {
      const server::HttpError e = server::http_error(w->error, w->message);
      check_status(e.status, e.message);
    }
    LOOM_FUZZ_CHECK(info.n >= 1 && info.prompt_tokens >= 0);
  }
  // The grammar the request's own fields made (a client's "grammar" is its own business).
  if (body.contains("grammar") && !body["grammar"].is_null()) return;
  if (!completion) {
    server::json r = p.requests[0];
    if (qwen) r["chat_template"] = g_env->qwen;
    auto f = g_env->model->chat_format(server::dump(r));
    if (f) check_grammar(server::json::parse(*f).value("grammar", std::string()));
  } else if (body.contains("json_schema") && body["json_schema"].is_object()) {
    auto g = api::json_schema_to_grammar(server::dump(body["json_schema"]));
    if (g) check_grammar(*g);
  }
}

void run_embed(const server::json& request) {
  auto w = std::make_shared<Waiter>();
  auto id = g_env->embed->embed(server::dump(request), [w](api::Expected<api::Scheduler::Embeddings> r) {
    w->finish(r ? LOOM_OK : r.status().code(), r ? std::string() : r.status().message());
  });
  if (!id) {
    const server::HttpError e = server::http_error(id.status().code(), id.status().message());
    check_status(e.status, e.message);
    return;
  }
  w->wait();
  if (w->error != LOOM_OK) {
    const server::HttpError e = server::http_error(w->error, w->message);
    check_status(e.status, e.message);
  }
}

api::Scheduler make_scheduler(bool embeddings, const char* chat_template) {
  api::SchedulerParams sp;
  sp.p.n_slots = 1;
  sp.p.context.n_ctx = 512;
  sp.p.context.n_batch = sp.p.context.n_ubatch = 512;
  sp.p.context.n_threads = sp.p.context.n_threads_batch = 1;
  sp.p.context.embeddings = embeddings;
  if (embeddings) sp.p.context.pooling_type = LOOM_POOLING_MEAN;
  sp.p.chat_template = chat_template;
  auto s = api::Scheduler::create(*g_env->model, sp);
  if (!s) std::fprintf(stderr, "scheduler: %s\n", s.status().message().c_str());
  LOOM_FUZZ_CHECK(s.has_value());
  return std::move(*s);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_env = new Env;
  auto m = api::Model::load(fuzz::shared_file("models/stories260K.gguf"));
  LOOM_FUZZ_CHECK(m.has_value());
  g_env->model = std::move(*m);
  std::ifstream f(fuzz::shared_file("golden/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
  std::stringstream ss;
  ss << f.rdbuf();
  g_env->qwen = ss.str();
  LOOM_FUZZ_CHECK(!g_env->qwen.empty());
  g_env->chatml = make_scheduler(false, nullptr);
  g_env->qwen_sched = make_scheduler(false, g_env->qwen.c_str());
  g_env->embed = make_scheduler(true, nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t flags = in.u8();
  const std::string_view body = in.rest();
  const bool qwen = (flags & 2) != 0;
  const int n_predict = (flags & 4) ? 16 : -1;
  try {
    const server::json j = server::parse_body(body);
    const int endpoint = (flags >> 3) & 7;
    if (endpoint == 1) {
      run_embed(server::plan_embeddings(j).request);
    } else if (endpoint == 2) {
      const server::RerankPlan p = server::plan_rerank(j);
      LOOM_FUZZ_CHECK(p.texts.size() == p.request["rerank"]["documents"].size() && p.top_n >= 1 &&
                      p.top_n <= int(p.texts.size()));
      run_embed(p.request);
    } else if (endpoint == 3) {
      const server::TokenizePlan p = server::plan_tokenize(j);
      auto ids = g_env->model->tokenize(p.content, p.add_special, p.parse_special);
      LOOM_FUZZ_CHECK(ids.has_value());
      for (int32_t id : *ids) LOOM_FUZZ_CHECK(id >= 0 && id < g_env->model->n_vocab());
    } else if (endpoint == 4) {
      const std::vector<int32_t> ids = server::plan_detokenize(j, g_env->model->n_vocab());
      LOOM_FUZZ_CHECK(g_env->model->detokenize(ids, false, true).has_value());
    } else if (endpoint == 5) {
      server::json r = server::plan_apply_template(j);
      if (qwen) r["chat_template"] = g_env->qwen;
      auto f = g_env->model->chat_format(server::dump(r));
      if (!f) {
        const server::HttpError e = server::http_error(f.status().code(), f.status().message());
        check_status(e.status, e.message);
      }
    } else {
      run_generation(j, (flags & 1) != 0, qwen, n_predict);
    }
  } catch (const server::HttpError& e) {
    check_status(e.status, e.message);
  }
  return 0;
}
