// The router's internals (router.h), shared by its files and not a public header: router.cpp
// (run_router: setup, the wait for a stop, the orderly stop), router_models.cpp (the model list:
// --models-dir, the preset file, reload, /models), router_children.cpp (the children: spawn,
// monitor, stop, leases) and router_http.cpp (the routes and the relay to a child).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "frontend.h"
#include "http_server.h"
#include "json_fields.h"
#include "router.h"

namespace loom::server::router_detail {

using Clock = std::chrono::steady_clock;

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- model states ----

enum class State { kUnloaded, kLoading, kLoaded, kStopping };

struct Model {
  RouterModel def;
  int index = 0;  // names its socket files
  // Everything below is under Router::mu.
  State state = State::kUnloaded;
  uint64_t gen = 0;  // incremented at each start: events of an older child are ignored
  pid_t pid = -1;
  std::string sock;
  std::vector<std::string> argv;  // of the current or last child
  bool failed = false;
  int exit_code = 0;
  std::string failure;  // why the last child failed
  int in_flight = 0;    // requests relayed to it now
  int waiting = 0;      // requests waiting for it to load (it is not evicted meanwhile)
  uint64_t last_used = 0;
  Clock::time_point stop_deadline{};
  nlohmann::json info;           // the child's /v1/models entry, merged into /models
  std::deque<std::string> tail;  // the child's last stderr lines
  bool ever_ready = false;
  bool sleeping = false;  // the child said it sleeps (--sleep-idle-seconds); requests wake it
  bool removed = false;   // gone from the sources at a reload: not listed, not found (kept for its threads)
  std::string file_id;    // the model file (device, inode, size, mtime) when its child started
};

// What identifies a model file's content for a reload: the file a path leads to, its size and time.
std::string file_identity(const std::string& path);

struct HttpFailure {
  int status;
  std::string message;
  std::string type;
};

const char* state_name(State s);

// Runs every fork() on one long-lived thread: PR_SET_PDEATHSIG fires when the *thread* that
// forked exits, so children must not be forked from short-lived request threads.
class Spawner {
 public:
  Spawner() : t_([this] { loop(); }) {}
  ~Spawner() {
    {
      std::lock_guard<std::mutex> l(m_);
      quit_ = true;
    }
    cv_.notify_all();
    t_.join();
  }
  template <typename F>
  auto run(F f) -> decltype(f()) {
    auto task = std::make_shared<std::packaged_task<decltype(f())()>>(std::move(f));
    auto fut = task->get_future();
    {
      std::lock_guard<std::mutex> l(m_);
      q_.push_back([task] { (*task)(); });
    }
    cv_.notify_all();
    return fut.get();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      cv_.wait(l, [&] { return quit_ || !q_.empty(); });
      if (q_.empty()) return;
      auto f = std::move(q_.front());
      q_.pop_front();
      l.unlock();
      f();
      l.lock();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool quit_ = false;
  std::thread t_;
};

class Router {
 public:
  Router(const ServeOptions& o, const RouterSetup& s) : o_(o), setup_(s) {}

  ServeOptions o_;
  RouterSetup setup_;
  std::string dir_;  // private folder of the children's sockets
  std::vector<std::unique_ptr<Model>> models_;
  std::map<std::string, Model*> by_id_;
  std::unique_ptr<http::Server> http_;
  std::unique_ptr<Spawner> spawner_;
  int64_t created_ = std::time(nullptr);

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t clock_ = 0;
  bool stopping_ = false;

  // Threads the router starts (request relays, child monitors), waited for at the end.
  std::mutex threads_mu_;
  std::condition_variable threads_cv_;
  int threads_ = 0;

  std::mutex sse_mu_;
  std::vector<std::shared_ptr<http::Response>> sse_;

  void go(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> l(threads_mu_);
      ++threads_;
    }
    std::thread([this, f = std::move(f)] {
      f();
      std::lock_guard<std::mutex> l(threads_mu_);
      --threads_;
      threads_cv_.notify_all();
    }).detach();
  }

  // ---- /models/sse (router_http.cpp) ----
  void event(const std::string& model, const std::string& ev, nlohmann::json data);
  nlohmann::json status_data(const Model& m) const;

  // ---- children (router_children.cpp) ----

  // The child's command line: the preset's flags, the router's own (which win), then what the
  // router decides (file, name, socket).
  std::vector<std::string> child_argv(const Model& m, const std::string& sock) const;
  // Starts m's child (m.state kUnloaded -> kLoading). Called with `l` (on mu_) held; releases it
  // while forking.
  void start_child(std::unique_lock<std::mutex>& l, Model& m);
  // fork + exec of setup_.exe with argv; the child's stderr is a pipe returned in *err_fd.
  pid_t spawn(const std::vector<std::string>& args, int* err_fd, std::string* why);
  // Reads the child's stderr (echoed as "[model] line"), notices "loom: ready", and records the exit.
  void monitor(Model* m, uint64_t gen, pid_t pid, int fd);
  // One line of the child's stderr: echoed, kept in its tail; "loom: ready" makes it loaded,
  // "loom: sleeping" / "loom: awake" its sleep.
  void on_child_line(Model* m, uint64_t gen, const std::string& id, const std::string& line);
  // The child's exit (waitpid status): the model unloaded, failed when nobody asked it to stop.
  void on_child_exit(Model* m, uint64_t gen, const std::string& id, int status);
  // Asks m's child to stop (SIGTERM: running requests finish), SIGKILL after its stop timeout.
  void stop_child(Model& m);
  // Room for one more child under --models-max? If not, the least recently used idle child is
  // asked to stop (the caller waits for it to go). Under mu_.
  bool make_room(const Model& for_model);

  struct Lease {
    Model* m = nullptr;
    uint64_t gen = 0;
    std::string sock;
  };

  // Waits until m is loaded (loading it when autoload), then counts a request in flight on it.
  // gone(): the client left. Errors as llama-server answers them.
  std::optional<HttpFailure> acquire(Model& m, bool autoload, const std::function<bool()>& gone, Lease* lease);
  void release(const Lease& lease);
  // Why a relay to the child failed: its exit, when it exited (waits a little for the monitor to
  // see it), else the connection's error.
  std::string child_failure(const Lease& lease, const std::string& conn_error);

  // ---- the model list (router_models.cpp) ----

  std::string model_list_text();
  Model* find(const std::string& id);
  // GET /models?reload=1 (llama-server's): the models dir and the preset are read again. A model
  // whose file, flags or preset lines changed is unloaded if it runs (its next load takes the new
  // ones); one no longer there is unloaded and leaves the list; a new one is added, unloaded
  // (load-on-startup applies at startup only). "" or why the sources could not be read (nothing
  // changes then).
  std::string reload();
  nlohmann::json models_json();

  // ---- HTTP (router_http.cpp) ----

  static bool anthropic_path(const http::Request& req) { return req.decoded_path.rfind("/v1/messages", 0) == 0; }
  void fail(const http::Request& req, http::Response& res, const HttpFailure& e);
  void send_json(http::Response& res, const nlohmann::json& j, int status = 200) {
    res.send(status, "application/json", dump(j));
  }

  bool authorized(const http::Request& req) const { return api_key_ok(o_, req); }
  void cors(const http::Request& req, http::Response& res) const { apply_cors(o_, req, res); }
  void handle(http::Request&& req, std::shared_ptr<http::Response> res);
  // The routes of handle(): /models, /models/sse, /models/load and /models/unload, the router's
  // /props, and the relay of everything else to the model the request names.
  void handle_models(const http::Request& req, const std::shared_ptr<http::Response>& res);
  void handle_models_sse(const http::Request& req, const std::shared_ptr<http::Response>& res);
  void handle_load_unload(const http::Request& req, const std::shared_ptr<http::Response>& res);
  void send_props(http::Response& res);
  void route_to_model(http::Request&& req, const std::shared_ptr<http::Response>& res);
  void relay(const http::Request& req, const std::shared_ptr<http::Response>& res, Model& model, bool autoload);
};

}  // namespace loom::server::router_detail
