// The router's children (router_impl.h): their command lines, fork + exec on the spawner thread,
// the monitor that reads a child's stderr and records its exit, stopping one, making room under
// --models-max, and the leases that count the requests relayed to a model.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "http_client.h"
#include "router_impl.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): unistd.h has it only with _GNU_SOURCE

namespace loom::server::router_detail {

namespace {

// The child's own /v1/models entry (metadata), shown in the router's /models; null when it has none.
nlohmann::json child_models_entry(const std::string& sock) {
  nlohmann::json info;
  http::ClientOptions co;
  co.io_timeout = std::chrono::milliseconds(10'000);
  if (auto c = http::ClientConnection::connect_unix(sock, co)) {
    if (auto r = (*c)->request("GET", "/v1/models", {{"Connection", "close"}}, ""); r && r->first.status == 200) {
      const nlohmann::json j = nlohmann::json::parse(r->second, nullptr, false);
      if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty()) info = j["data"][0];
    }
  }
  return info;
}

// The child's last "loom: ..." line that says what went wrong (not its progress lines); "" if none.
std::string last_words(const std::deque<std::string>& tail) {
  for (auto it = tail.rbegin(); it != tail.rend(); ++it) {
    if (it->rfind("loom: ", 0) != 0) continue;
    std::string t = it->substr(6);
    if (t.rfind("listening on", 0) == 0 || t.rfind("ready", 0) == 0 || t.rfind("stopp", 0) == 0) continue;
    return t;
  }
  return std::string();
}

// A waitpid status: the exit code (128 + the signal when killed) and how the child ended, in words.
void describe_exit(int st, int* code, std::string* how) {
  if (WIFEXITED(st)) {
    *code = WEXITSTATUS(st);
    *how = "exited with status " + std::to_string(*code);
  } else if (WIFSIGNALED(st)) {
    *code = 128 + WTERMSIG(st);
    *how = std::string("was killed by signal ") + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  }
}

}  // namespace

std::vector<std::string> Router::child_argv(const Model& m, const std::string& sock) const {
  std::vector<std::string> a = {"loom", "serve"};
  a.insert(a.end(), m.def.args.begin(), m.def.args.end());
  a.insert(a.end(), setup_.child_args.begin(), setup_.child_args.end());
  for (const char* x : {"-m", m.def.path.c_str(), "--alias", m.def.id.c_str(), "--host", sock.c_str(), "--port", "0"})
    a.push_back(x);
  return a;
}

void Router::start_child(std::unique_lock<std::mutex>& l, Model& m) {
  m.state = State::kLoading;
  m.failed = false;
  m.failure.clear();
  m.exit_code = 0;
  m.info = nullptr;
  m.tail.clear();
  m.ever_ready = false;
  m.sleeping = false;
  const uint64_t gen = ++m.gen;
  m.sock = dir_ + "/" + std::to_string(m.index) + "-" + std::to_string(gen) + ".sock";
  m.argv = child_argv(m, m.sock);
  m.file_id = file_identity(m.def.path);
  m.last_used = ++clock_;
  const std::vector<std::string> argv = m.argv;
  const std::string id = m.def.id;
  event(id, "model_status", {{"status", "loading"}});
  std::fprintf(stderr, "loom: router: loading %s\n", id.c_str());
  l.unlock();
  int err_fd = -1;
  std::string why;
  const pid_t pid = spawner_->run([&] { return spawn(argv, &err_fd, &why); });
  l.lock();
  if (pid < 0) {
    if (m.gen == gen) {
      m.state = State::kUnloaded;
      m.failed = true;
      m.exit_code = 1;
      m.failure = "cannot start the model's server: " + why;
      event(id, "model_status", status_data(m));
    }
    cv_.notify_all();
    return;
  }
  m.pid = pid;
  Model* mp = &m;
  go([this, mp, gen, pid, err_fd] { monitor(mp, gen, pid, err_fd); });
}

pid_t Router::spawn(const std::vector<std::string>& args, int* err_fd, std::string* why) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *why = std::string("pipe: ") + std::strerror(errno);
    return -1;
  }
  // Everything the child needs is prepared before fork(): after it, only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  // The environment, less what the router owns (children listen on their socket without a key).
  static const char* kDrop[] = {
      "LLAMA_API_KEY=",   "LLAMA_ARG_API_KEY_FILE=", "LLAMA_ARG_HOST=",       "LLAMA_ARG_PORT=",
      "LLAMA_ARG_MODEL=", "LLAMA_ARG_ALIAS=",        "LLAMA_ARG_MODELS_DIR=", "LLAMA_ARG_MODELS_PRESET="};
  std::vector<char*> envp;
  for (char** e = environ; e && *e; ++e) {
    bool drop = false;
    for (const char* d : kDrop) drop |= std::strncmp(*e, d, std::strlen(d)) == 0;
    if (!drop) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  const std::string exe = setup_.exe;
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    *why = std::string("fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // the router gone (even by SIGKILL): its children go too
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    const int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
    }
    dup2(fds[1], 2);
    // No descriptor of the router (listening sockets, other children's pipes) stays open.
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
    {
      for (int fd = 3; fd < 4096; ++fd) close(fd);
    }
    execve(exe.c_str(), argv.data(), envp.data());
    const char msg[] = "loom: cannot execute the loom binary for a model's server\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  close(fds[1]);
  *err_fd = fds[0];
  return pid;
}

void Router::monitor(Model* m, uint64_t gen, pid_t pid, int fd) {
  const std::string id = m->def.id;
  std::string buf;
  char tmp[4096];
  for (;;) {
    const ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(tmp, size_t(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      on_child_line(m, gen, id, buf.substr(0, nl));
      buf.erase(0, nl + 1);
    }
    if (buf.size() > 65536) {
      on_child_line(m, gen, id, buf);
      buf.clear();
    }
  }
  if (!buf.empty()) on_child_line(m, gen, id, buf);
  close(fd);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  on_child_exit(m, gen, id, st);
}

void Router::on_child_line(Model* m, uint64_t gen, const std::string& id, const std::string& line) {
  std::fprintf(stderr, "[%s] %s\n", id.c_str(), line.c_str());
  std::fflush(stderr);
  bool ready = line.rfind("loom: ready", 0) == 0;
  std::string sock;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (m->gen != gen) return;
    m->tail.push_back(line);
    if (m->tail.size() > 20) m->tail.pop_front();
    // The child's sleep (--sleep-idle-seconds) shows as llama-server's "sleeping" status.
    const bool sleeps = line.rfind("loom: sleeping", 0) == 0, wakes = line.rfind("loom: awake", 0) == 0;
    if ((sleeps || wakes) && m->state == State::kLoaded && m->sleeping != sleeps) {
      m->sleeping = sleeps;
      event(id, "model_status", {{"status", sleeps ? "sleeping" : "loaded"}});
    }
    if (!ready || m->state != State::kLoading) return;
    sock = m->sock;
  }
  nlohmann::json info = child_models_entry(sock);
  std::lock_guard<std::mutex> l(mu_);
  if (m->gen != gen || m->state != State::kLoading) return;
  m->state = State::kLoaded;
  m->ever_ready = true;
  m->info = std::move(info);
  event(id, "model_status", {{"status", "loaded"}});
  std::fprintf(stderr, "loom: router: %s loaded\n", id.c_str());
  cv_.notify_all();
}

void Router::on_child_exit(Model* m, uint64_t gen, const std::string& id, int st) {
  std::lock_guard<std::mutex> l(mu_);
  if (m->gen != gen) return;
  const bool asked = m->state == State::kStopping;
  int code = 0;
  std::string how;
  describe_exit(st, &code, &how);
  m->state = State::kUnloaded;
  m->pid = -1;
  m->exit_code = code;
  m->info = nullptr;
  ::unlink(m->sock.c_str());
  if (!asked && !stopping_) {
    m->failed = true;
    const std::string said = last_words(m->tail);
    if (m->ever_ready) m->failure = "the model's server " + how + (said.empty() || code >= 128 ? "" : ": " + said);
    else m->failure = (said.empty() ? std::string("the model's server ") + how : said + " (the model's server " + how + ")");
    std::fprintf(stderr, "loom: router: %s failed: %s\n", id.c_str(), m->failure.c_str());
  } else {
    std::fprintf(stderr, "loom: router: %s unloaded\n", id.c_str());
  }
  event(id, "model_status", status_data(*m));
  cv_.notify_all();
}

void Router::stop_child(Model& m) {
  if (m.state != State::kLoaded && m.state != State::kLoading) return;
  m.state = State::kStopping;
  m.stop_deadline = Clock::now() + std::chrono::seconds(std::max(0, m.def.stop_timeout_s));
  if (m.pid > 0) kill(m.pid, SIGTERM);
  // No event yet: llama-server's states have no "unloading"; "unloaded" follows at the exit.
  std::fprintf(stderr, "loom: router: unloading %s\n", m.def.id.c_str());
}

bool Router::make_room(const Model& for_model) {
  if (o_.models_max <= 0) return true;
  int active = 0, stopping = 0;
  for (const auto& p : models_) {
    if (p.get() == &for_model) continue;
    if (p->state == State::kLoading || p->state == State::kLoaded) ++active;
    if (p->state == State::kStopping) ++stopping;
  }
  if (active + stopping < o_.models_max) return true;
  if (active < o_.models_max) return false;  // a child on its way out frees the room
  Model* lru = nullptr;
  for (const auto& p : models_) {
    if (p->state != State::kLoaded || p->in_flight > 0 || p->waiting > 0) continue;
    if (!lru || p->last_used < lru->last_used) lru = p.get();
  }
  if (lru) stop_child(*lru);
  return false;
}

std::optional<HttpFailure> Router::acquire(Model& m, bool autoload, const std::function<bool()>& gone, Lease* lease) {
  std::unique_lock<std::mutex> l(mu_);
  ++m.waiting;
  uint64_t seen = 0;  // the child generation this request saw loading (or started)
  std::optional<HttpFailure> out;
  for (;;) {
    if (stopping_) {
      out = HttpFailure{503, "the server is shutting down", "unavailable_error"};
      break;
    }
    if (m.removed) {
      out = HttpFailure{404, "model '" + m.def.id + "' was removed from the sources", "not_found_error"};
      break;
    }
    if (m.state == State::kLoaded) {
      ++m.in_flight;
      m.last_used = ++clock_;
      *lease = {&m, m.gen, m.sock};
      break;
    }
    if (m.state == State::kLoading) seen = m.gen;
    if (m.state == State::kUnloaded) {
      if (seen != 0 && m.gen == seen && m.failed) {
        out = HttpFailure{500, "model '" + m.def.id + "' failed to load: " + m.failure, "server_error"};
        break;
      }
      if (!autoload) {
        out = HttpFailure{400, "model is not loaded", "invalid_request_error"};
        break;
      }
      if (make_room(m)) {
        start_child(l, m);
        seen = m.gen;
        continue;
      }
    }
    if (gone && gone()) {
      out = HttpFailure{499, "the client went away", "invalid_request_error"};
      break;
    }
    cv_.wait_for(l, std::chrono::milliseconds(200));
  }
  --m.waiting;
  cv_.notify_all();
  return out;
}

void Router::release(const Lease& lease) {
  std::lock_guard<std::mutex> l(mu_);
  --lease.m->in_flight;
  lease.m->last_used = ++clock_;
  cv_.notify_all();
}

std::string Router::child_failure(const Lease& lease, const std::string& conn_error) {
  std::unique_lock<std::mutex> l(mu_);
  Model& m = *lease.m;
  cv_.wait_for(l, std::chrono::milliseconds(2000), [&] { return m.gen != lease.gen || m.state == State::kUnloaded; });
  if (m.gen == lease.gen && m.state == State::kUnloaded && m.failed) return "model '" + m.def.id + "' failed: " + m.failure;
  if (m.gen == lease.gen && m.state == State::kUnloaded)
    return "model '" + m.def.id + "' was unloaded while the request ran";
  return "model '" + m.def.id + "': the connection to its server failed: " + conn_error;
}

}  // namespace loom::server::router_detail
