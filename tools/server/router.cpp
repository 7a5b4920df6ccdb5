// llama-server's router mode for `loom serve` (router.h). One child process per model, reached over
// a UNIX socket in a private folder; this process only routes, relays and keeps the models' states.
// This file runs the router: its setup, the wait for a stop, and the orderly stop; router_impl.h
// names the files of the rest.
#include "router.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "router_impl.h"

namespace loom::server {

namespace {

using namespace router_detail;

std::unique_ptr<Router> make_router(const ServeOptions& opts, const RouterSetup& setup, std::vector<RouterModel> defs) {
  auto router = std::make_unique<Router>(opts, setup);
  Router& r = *router;
  for (size_t i = 0; i < defs.size(); ++i) {
    auto m = std::make_unique<Model>();
    m->def = std::move(defs[i]);
    m->index = int(i);
    r.by_id_[m->def.id] = m.get();
    r.models_.push_back(std::move(m));
  }
  return router;
}

// The children's private socket folder (mode 0700: only this user reaches them); false, after
// saying why, when it cannot be made.
bool make_socket_dir(Router& r) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp && std::strlen(tmp) < 60 ? tmp : "/tmp") + "/loom-router-XXXXXX";
  if (!mkdtemp(templ.data())) {
    std::fprintf(stderr, "loom: cannot make the router's socket folder %s: %s\n", templ.c_str(), std::strerror(errno));
    return false;
  }
  r.dir_ = templ;
  return true;
}

void remove_socket_dir(const Router& r) {
  std::error_code ec;
  std::filesystem::remove_all(r.dir_, ec);
}

// The preset's load-on-startup models, each loaded on a thread of its own.
void load_on_startup(Router& r) {
  for (const auto& m : r.models_) {
    if (!m->def.load_on_startup) continue;
    Model* mp = m.get();
    r.go([&r, mp] {
      Router::Lease lease;
      if (!r.acquire(*mp, true, nullptr, &lease)) r.release(lease);
    });
  }
}

// Children asked to stop that outlive their stop timeout are killed.
void kill_overdue_children(Router& r) {
  std::lock_guard<std::mutex> l(r.mu_);
  for (const auto& m : r.models_) {
    if (m->state == State::kStopping && m->pid > 0 && Clock::now() > m->stop_deadline) {
      std::fprintf(stderr, "loom: router: %s did not stop within %d s: killed\n", m->def.id.c_str(), m->def.stop_timeout_s);
      kill(m->pid, SIGKILL);
      m->stop_deadline = Clock::now() + std::chrono::hours(1);
    }
  }
}

// Until SIGINT, SIGTERM or *stop.
void wait_for_stop(Router& r, sigset_t sigs, const std::atomic<bool>* stop) {
  for (;;) {
    timespec ts{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (stop && stop->load()) break;
    kill_overdue_children(r);
  }
}

// Every child gets SIGTERM (their requests finish), and SIGKILL when still there after 8 s.
void stop_children(Router& r) {
  {
    std::lock_guard<std::mutex> l(r.mu_);
    r.stopping_ = true;
    for (const auto& m : r.models_) {
      if (m->pid > 0) kill(m->pid, SIGTERM);
    }
    r.cv_.notify_all();
  }
  std::unique_lock<std::mutex> l(r.mu_);
  const auto deadline = Clock::now() + std::chrono::seconds(8);
  r.cv_.wait_until(l, deadline, [&] {
    for (const auto& m : r.models_) {
      if (m->pid > 0) return false;
    }
    return true;
  });
  for (const auto& m : r.models_) {
    if (m->pid > 0) kill(m->pid, SIGKILL);
  }
}

void end_sse_streams(Router& r) {
  std::lock_guard<std::mutex> l(r.sse_mu_);
  for (auto& s : r.sse_) s->end();
  r.sse_.clear();
}

// Waits up to 10 s for the router's threads; false when some are still running.
bool wait_for_threads(Router& r) {
  std::unique_lock<std::mutex> l(r.threads_mu_);
  r.threads_cv_.wait_for(l, std::chrono::seconds(10), [&] { return r.threads_ == 0; });
  return r.threads_ == 0;
}

}  // namespace

int run_router(const ServeOptions& opts, const RouterSetup& setup, std::atomic<bool>* stop) {
  const sigset_t sigs = block_stop_signals();
  for (const auto& k : opts.api_keys) {
    if (k.empty()) {
      std::fprintf(stderr, "loom: an API key is empty\n");
      return 2;
    }
  }
  std::vector<RouterModel> defs;
  if (std::string err = load_router_models(opts, setup, &defs); !err.empty()) {
    std::fprintf(stderr, "loom: %s\n", err.c_str());
    return 2;
  }

  auto router = make_router(opts, setup, std::move(defs));
  Router& r = *router;
  if (!make_socket_dir(r)) return 1;
  r.spawner_ = std::make_unique<Spawner>();

  const http::ServerOptions ho = http_options(opts);
  const std::vector<std::string> hosts = listen_hosts(opts.host);
  auto srv = http::Server::listen(hosts, uint16_t(opts.port), ho);
  if (!srv) {
    std::fprintf(stderr, "loom: %s\n", srv.status().message().c_str());
    r.spawner_.reset();
    remove_socket_dir(r);
    return 1;
  }
  r.http_ = std::move(*srv);
  r.http_->start(
      [&r](http::Request&& req, std::shared_ptr<http::Response> res) { r.handle(std::move(req), std::move(res)); });
  announce_listening(hosts, r.http_->port());
  std::fprintf(stderr, "loom: router: %zu models (%s), at most %d loaded%s\n", r.models_.size(), r.model_list_text().c_str(),
               opts.models_max, opts.models_autoload ? ", loaded on demand" : "");
  load_on_startup(r);
  std::fprintf(stderr, "loom: ready: router\n");
  std::fflush(stderr);

  wait_for_stop(r, sigs, stop);

  std::fprintf(stderr, "loom: stopping: the models' servers finish their requests (5 s grace)\n");
  r.http_->stop_accepting();
  stop_children(r);
  end_sse_streams(r);
  r.http_->drain(std::chrono::seconds(2));
  r.http_->shutdown();
  if (!wait_for_threads(r)) {
    // A thread still blocked (it cannot be, with every child gone and every client closed):
    // leave the process rather than free what it uses.
    std::fprintf(stderr, "loom: stopped\n");
    std::fflush(stderr);
    remove_socket_dir(r);
    std::_Exit(0);
  }
  r.spawner_.reset();
  remove_socket_dir(r);
  std::fprintf(stderr, "loom: stopped\n");
  return 0;
}

}  // namespace loom::server
