// llama-server's router mode for `loom serve` (router.h). One child process per model, reached over
// a UNIX socket in a private folder; this process only routes, relays and keeps the models' states.
#include "router.h"

#include "frontend.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "api/anthropic.h"
#include "http_client.h"
#include "http_server.h"
#include "json_fields.h"
#include "loom/loom.h"

extern char** environ;

namespace loom::server {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool truthy(std::string v) {
  for (char& c : v) c = char(std::tolower(static_cast<unsigned char>(c)));
  return v == "1" || v == "true" || v == "on" || v == "yes" || v == "enabled";
}

// ---- the preset file (llama-server's INI: [section] lines, key = value lines, ; or # comments) ----

struct IniEntry {
  std::string key, value;
  int line;
};
struct IniSection {
  std::string name;
  int line;
  std::vector<IniEntry> entries;
};

// Parses the INI grammar llama-server's preset reader accepts; "" or "FILE:LINE: why".
std::string parse_ini(const std::string& path, std::vector<IniSection>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return path + ": cannot open the preset file: " + std::strerror(errno);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  IniSection* cur = nullptr;
  auto section = [&](const std::string& name, int line) -> IniSection* {
    for (IniSection& s : *out) {
      if (s.name == name) return &s;
    }
    out->push_back({name, line, {}});
    return &out->back();
  };
  int lineno = 0;
  size_t i = 0;
  while (i <= text.size()) {
    // A line ends at \r\n, \n or \r.
    size_t j = i;
    while (j < text.size() && text[j] != '\n' && text[j] != '\r') ++j;
    std::string line = text.substr(i, j - i);
    if (j < text.size() && text[j] == '\r' && j + 1 < text.size() && text[j + 1] == '\n') ++j;
    i = j + 1;
    ++lineno;
    auto fail = [&](const std::string& why) { return path + ":" + std::to_string(lineno) + ": " + why; };
    size_t p = 0;
    auto ws = [&] {
      while (p < line.size() && (line[p] == ' ' || line[p] == '\t')) ++p;
    };
    // After a value: optional blanks, then a comment or the end.
    auto eol_ok = [&] {
      ws();
      return p == line.size() || line[p] == ';' || line[p] == '#';
    };
    ws();
    if (p == line.size() || line[p] == ';' || line[p] == '#') continue;  // blank or comment
    if (line[p] == '[') {
      ++p;
      ws();
      const size_t close = line.find(']', p);
      if (close == std::string::npos) return fail("a section header without ']'");
      std::string name = line.substr(p, close - p);
      while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
      if (name.empty()) return fail("an empty section name");
      p = close + 1;
      if (!eol_ok()) return fail("text after the section header");
      cur = section(name, lineno);
      continue;
    }
    auto ident_start = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
    auto ident_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'; };
    if (!ident_start(line[p])) return fail("expected '[section]', 'key = value' or a comment");
    const size_t k0 = p;
    while (p < line.size() && ident_char(line[p])) ++p;
    const std::string key = line.substr(k0, p - k0);
    ws();
    if (p == line.size() || line[p] != '=') return fail("expected '=' after '" + key + "'");
    ++p;
    ws();
    // The value runs up to blanks followed by a comment, or the end.
    size_t v_end = p;
    for (size_t q = p; q < line.size(); ++q) {
      if ((line[q] == ';' || line[q] == '#') && (q == p || line[q - 1] == ' ' || line[q - 1] == '\t')) break;
      v_end = q + 1;
    }
    std::string value = line.substr(p, v_end - p);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.pop_back();
    if (!cur) cur = section("default", lineno);  // llama-server's name for keys before any section
    bool replaced = false;
    for (IniEntry& e : cur->entries) {
      if (e.key == key) e = {key, value, lineno}, replaced = true;
    }
    if (!replaced) cur->entries.push_back({key, value, lineno});
  }
  return std::string();
}

// Flags a preset may not set for a child: the router owns them (llama-server removes them too).
bool router_owned(const std::string& canonical) {
  static const std::set<std::string> kOwned = {
      "--host",          "--port",       "--api-key",         "--api-key-file", "--alias",   "--tags",      "--models-dir",
      "--models-preset", "--models-max", "--models-autoload", "--hf-repo",      "--hf-file", "--model-url", "--hf-token"};
  return kOwned.count(canonical) > 0;
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
std::string file_identity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::string();
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

struct HttpFailure {
  int status;
  std::string message;
  std::string type;
};

const char* state_name(State s) {
  switch (s) {
    case State::kLoading: return "loading";
    case State::kLoaded: return "loaded";
    default: return "unloaded";
  }
}

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

  // ---- /models/sse ----
  void event(const std::string& model, const std::string& ev, nlohmann::json data) {
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
  nlohmann::json status_data(const Model& m) const {
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

  // ---- children ----

  // The child's command line: the preset's flags, the router's own (which win), then what the
  // router decides (file, name, socket).
  std::vector<std::string> child_argv(const Model& m, const std::string& sock) const {
    std::vector<std::string> a = {"loom", "serve"};
    a.insert(a.end(), m.def.args.begin(), m.def.args.end());
    a.insert(a.end(), setup_.child_args.begin(), setup_.child_args.end());
    for (const char* x : {"-m", m.def.path.c_str(), "--alias", m.def.id.c_str(), "--host", sock.c_str(), "--port", "0"})
      a.push_back(x);
    return a;
  }

  // Starts m's child (m.state kUnloaded -> kLoading). Called with `l` (on mu_) held; releases it
  // while forking.
  void start_child(std::unique_lock<std::mutex>& l, Model& m) {
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

  // fork + exec of setup_.exe with argv; the child's stderr is a pipe returned in *err_fd.
  pid_t spawn(const std::vector<std::string>& args, int* err_fd, std::string* why) {
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

  // Reads the child's stderr (echoed as "[model] line"), notices "loom: ready", and records the exit.
  void monitor(Model* m, uint64_t gen, pid_t pid, int fd) {
    const std::string id = m->def.id;
    std::string buf;
    char tmp[4096];
    auto on_line = [&](const std::string& line) {
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
      // The child's own /v1/models entry (metadata), shown in the router's /models.
      nlohmann::json info;
      http::ClientOptions co;
      co.io_timeout = std::chrono::milliseconds(10'000);
      if (auto c = http::ClientConnection::connect_unix(sock, co)) {
        if (auto r = (*c)->request("GET", "/v1/models", {{"Connection", "close"}}, ""); r && r->first.status == 200) {
          const nlohmann::json j = nlohmann::json::parse(r->second, nullptr, false);
          if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty()) info = j["data"][0];
        }
      }
      std::lock_guard<std::mutex> l(mu_);
      if (m->gen != gen || m->state != State::kLoading) return;
      m->state = State::kLoaded;
      m->ever_ready = true;
      m->info = std::move(info);
      event(id, "model_status", {{"status", "loaded"}});
      std::fprintf(stderr, "loom: router: %s loaded\n", id.c_str());
      cv_.notify_all();
    };
    for (;;) {
      const ssize_t n = read(fd, tmp, sizeof tmp);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      buf.append(tmp, size_t(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        on_line(buf.substr(0, nl));
        buf.erase(0, nl + 1);
      }
      if (buf.size() > 65536) {
        on_line(buf);
        buf.clear();
      }
    }
    if (!buf.empty()) on_line(buf);
    close(fd);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    std::lock_guard<std::mutex> l(mu_);
    if (m->gen != gen) return;
    const bool asked = m->state == State::kStopping;
    int code = 0;
    std::string how;
    if (WIFEXITED(st)) {
      code = WEXITSTATUS(st);
      how = "exited with status " + std::to_string(code);
    } else if (WIFSIGNALED(st)) {
      code = 128 + WTERMSIG(st);
      how = std::string("was killed by signal ") + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
    }
    m->state = State::kUnloaded;
    m->pid = -1;
    m->exit_code = code;
    m->info = nullptr;
    ::unlink(m->sock.c_str());
    if (!asked && !stopping_) {
      m->failed = true;
      // The child's last "loom: ..." line that says what went wrong (not its progress lines).
      std::string said;
      for (auto it = m->tail.rbegin(); it != m->tail.rend(); ++it) {
        if (it->rfind("loom: ", 0) != 0) continue;
        const std::string t = it->substr(6);
        if (t.rfind("listening on", 0) == 0 || t.rfind("ready", 0) == 0 || t.rfind("stopp", 0) == 0) continue;
        said = t;
        break;
      }
      if (m->ever_ready) m->failure = "the model's server " + how + (said.empty() || code >= 128 ? "" : ": " + said);
      else
        m->failure = (said.empty() ? std::string("the model's server ") + how : said + " (the model's server " + how + ")");
      std::fprintf(stderr, "loom: router: %s failed: %s\n", id.c_str(), m->failure.c_str());
    } else {
      std::fprintf(stderr, "loom: router: %s unloaded\n", id.c_str());
    }
    event(id, "model_status", status_data(*m));
    cv_.notify_all();
  }

  // Asks m's child to stop (SIGTERM: running requests finish), SIGKILL after its stop timeout.
  void stop_child(Model& m) {
    if (m.state != State::kLoaded && m.state != State::kLoading) return;
    m.state = State::kStopping;
    m.stop_deadline = Clock::now() + std::chrono::seconds(std::max(0, m.def.stop_timeout_s));
    if (m.pid > 0) kill(m.pid, SIGTERM);
    // No event yet: llama-server's states have no "unloading"; "unloaded" follows at the exit.
    std::fprintf(stderr, "loom: router: unloading %s\n", m.def.id.c_str());
  }

  // Room for one more child under --models-max? If not, the least recently used idle child is
  // asked to stop (the caller waits for it to go). Under mu_.
  bool make_room(const Model& for_model) {
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

  struct Lease {
    Model* m = nullptr;
    uint64_t gen = 0;
    std::string sock;
  };

  // Waits until m is loaded (loading it when autoload), then counts a request in flight on it.
  // gone(): the client left. Errors as llama-server answers them.
  std::optional<HttpFailure> acquire(Model& m, bool autoload, const std::function<bool()>& gone, Lease* lease) {
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

  void release(const Lease& lease) {
    std::lock_guard<std::mutex> l(mu_);
    --lease.m->in_flight;
    lease.m->last_used = ++clock_;
    cv_.notify_all();
  }

  // Why a relay to the child failed: its exit, when it exited (waits a little for the monitor to
  // see it), else the connection's error.
  std::string child_failure(const Lease& lease, const std::string& conn_error) {
    std::unique_lock<std::mutex> l(mu_);
    Model& m = *lease.m;
    cv_.wait_for(l, std::chrono::milliseconds(2000), [&] { return m.gen != lease.gen || m.state == State::kUnloaded; });
    if (m.gen == lease.gen && m.state == State::kUnloaded && m.failed)
      return "model '" + m.def.id + "' failed: " + m.failure;
    if (m.gen == lease.gen && m.state == State::kUnloaded)
      return "model '" + m.def.id + "' was unloaded while the request ran";
    return "model '" + m.def.id + "': the connection to its server failed: " + conn_error;
  }

  // ---- HTTP ----

  static bool anthropic_path(const http::Request& req) { return req.decoded_path.rfind("/v1/messages", 0) == 0; }

  void fail(const http::Request& req, http::Response& res, const HttpFailure& e) {
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
  void send_json(http::Response& res, const nlohmann::json& j, int status = 200) {
    res.send(status, "application/json", dump(j));
  }

  bool authorized(const http::Request& req) const { return api_key_ok(o_, req); }
  void cors(const http::Request& req, http::Response& res) const { apply_cors(o_, req, res); }

  std::string model_list_text() {
    std::lock_guard<std::mutex> l(mu_);
    std::string s;
    for (const auto& m : models_) {
      if (!m->removed) s += (s.empty() ? "" : ", ") + m->def.id;
    }
    return s.empty() ? std::string("none") : s;
  }

  Model* find(const std::string& id) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = by_id_.find(id);
    return it == by_id_.end() || it->second->removed ? nullptr : it->second;
  }

  // GET /models?reload=1 (llama-server's): the models dir and the preset are read again. A model
  // whose file, flags or preset lines changed is unloaded if it runs (its next load takes the new
  // ones); one no longer there is unloaded and leaves the list; a new one is added, unloaded
  // (load-on-startup applies at startup only). "" or why the sources could not be read (nothing
  // changes then).
  std::string reload() {
    std::vector<RouterModel> defs;
    if (std::string err = load_router_models(o_, setup_, &defs); !err.empty()) return err;
    std::lock_guard<std::mutex> l(mu_);
    std::set<std::string> seen;
    for (RouterModel& d : defs) {
      seen.insert(d.id);
      auto it = by_id_.find(d.id);
      if (it == by_id_.end()) {
        auto m = std::make_unique<Model>();
        m->def = std::move(d);
        m->index = int(models_.size());
        by_id_[m->def.id] = m.get();
        models_.push_back(std::move(m));
        std::fprintf(stderr, "loom: router: new model %s\n", models_.back()->def.id.c_str());
        continue;
      }
      Model& m = *it->second;
      const bool changed = m.def.path != d.path || m.def.args != d.args || m.def.preset_lines != d.preset_lines ||
                           (m.state != State::kUnloaded && file_identity(d.path) != m.file_id);
      if (changed) stop_child(m);
      m.removed = false;
      m.def = std::move(d);
    }
    for (auto& p : models_) {
      if (p->removed || seen.count(p->def.id)) continue;
      p->removed = true;
      stop_child(*p);
      std::fprintf(stderr, "loom: router: model %s is gone from the sources\n", p->def.id.c_str());
    }
    cv_.notify_all();
    return std::string();
  }

  nlohmann::json models_json() {
    std::lock_guard<std::mutex> l(mu_);
    nlohmann::json data = nlohmann::json::array();
    for (const auto& p : models_) {
      const Model& m = *p;
      if (m.removed) continue;
      nlohmann::json status = {{"value", m.state == State::kLoaded && m.sleeping ? "sleeping" : state_name(m.state)}};
      // The command line of its child: the current or last one, else the one it will get.
      status["args"] = m.gen > 0 ? m.argv : child_argv(m, dir_ + "/" + std::to_string(m.index) + "-1.sock");
      if (!m.def.preset_lines.empty()) {
        std::string ini;
        for (const std::string& line : m.def.preset_lines) ini += line + "\n";
        status["preset"] = ini;
      }
      if (m.state == State::kUnloaded && m.failed) {
        status["failed"] = true;
        status["exit_code"] = m.exit_code;
        status["message"] = m.failure;  // loom: why
      }
      if (m.pid > 0) status["pid"] = m.pid;  // loom: the child process
      nlohmann::json e = {{"id", m.def.id},
                          {"aliases", nlohmann::json::array()},
                          {"tags", nlohmann::json::array()},
                          {"object", "model"},
                          {"owned_by", "llamacpp"},
                          {"created", created_},
                          {"path", m.def.path},
                          {"status", status},
                          {"architecture", {{"input_modalities", {"text"}}, {"output_modalities", {"text"}}}},
                          {"source", m.def.source},
                          {"can_remove", false}};
      if (m.info.is_object() && m.state == State::kLoaded) {
        for (auto it = m.info.begin(); it != m.info.end(); ++it) {
          if (!e.contains(it.key())) e[it.key()] = it.value();
        }
      }
      data.push_back(std::move(e));
    }
    return {{"data", data}, {"object", "list"}};
  }

  void handle(http::Request&& req, std::shared_ptr<http::Response> res) {
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
    const bool get = m == "GET" || m == "HEAD", post = m == "POST";
    try {
      if (path == "/models" || path == "/v1/models") {
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
      if (path == "/models/sse") {
        if (!get) return fail(req, *res, {405, "method " + m + " is not allowed on " + path, "invalid_request_error"});
        std::lock_guard<std::mutex> l(sse_mu_);
        if (res->begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) sse_.push_back(res);
        return;
      }
      if (path == "/models/load" || path == "/models/unload") {
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
      if (path == "/props" && get && query_param(req.query, "model").empty()) {
        return send_json(*res, {{"role", "router"},
                                {"max_instances", o_.models_max},
                                {"models_autoload", o_.models_autoload},
                                {"model_alias", "loom"},
                                {"model_path", "none"},
                                {"default_generation_settings", {{"params", nlohmann::json::object()}, {"n_ctx", 0}}},
                                {"build_info", loom_version()}});
      }
      // Everything else goes to a model's child: POST names it in the body's "model" (or ?model=),
      // GET in ?model=.
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
        return fail(req, *res,
                    {404, "model '" + id + "' not found; the models are: " + model_list_text(), "not_found_error"});
      }
      const std::string al = query_param(req.query, "autoload");
      const bool autoload = al.empty() ? o_.models_autoload : (al == "true" || al == "1");
      // The load and the relay block: on a thread of their own, not on one of loom_http's handlers.
      auto shared_req = std::make_shared<http::Request>(std::move(req));
      go([this, shared_req, res, model, autoload] { relay(*shared_req, res, *model, autoload); });
    } catch (const HttpError& e) {
      fail(req, *res, {e.status, e.message, e.type});
    } catch (const std::exception& e) {
      fail(req, *res, {500, std::string("internal error: ") + e.what(), "server_error"});
    }
  }

  void relay(const http::Request& req, const std::shared_ptr<http::Response>& res, Model& model, bool autoload) {
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
};

}  // namespace

// ---- the model list ----

std::string load_router_models(const ServeOptions& opts, const RouterSetup& setup, std::vector<RouterModel>* out) {
  std::map<std::string, RouterModel> models;
  if (!opts.models_dir.empty()) {
    std::error_code ec;
    if (!fs::is_directory(opts.models_dir, ec)) return "--models-dir " + opts.models_dir + ": not a readable directory";
    auto gguf = [](const fs::path& p) { return ends_with(p.filename().string(), ".gguf"); };
    auto companion = [](const std::string& name) {
      return name.find("mmproj") != std::string::npos || name.rfind("mtp-", 0) == 0 || name.rfind("dspark-", 0) == 0 ||
             name.rfind("dflash-", 0) == 0;
    };
    std::vector<fs::directory_entry> entries;
    for (const auto& e : fs::directory_iterator(opts.models_dir, ec)) entries.push_back(e);
    if (ec) return "--models-dir " + opts.models_dir + ": " + ec.message();
    for (const auto& e : entries) {
      const std::string name = e.path().filename().string();
      if (e.is_directory(ec)) {
        // A model of several files: its first shard, else its one model file.
        std::string model_file, first_shard;
        std::vector<fs::path> files;
        for (const auto& f : fs::directory_iterator(e.path(), ec)) files.push_back(f.path());
        std::sort(files.begin(), files.end());
        for (const auto& f : files) {
          const std::string fn = f.filename().string();
          if (!gguf(f) || companion(fn)) continue;
          if (fn.find("-00001-of-") != std::string::npos) first_shard = f.string();
          else if (model_file.empty()) model_file = f.string();
        }
        const std::string path = !first_shard.empty() ? first_shard : model_file;
        if (!path.empty()) models[name] = RouterModel{name, path, "models_dir", {}, {}, false, 10};
      } else if (gguf(e.path()) && !companion(name)) {
        const std::string id = name.substr(0, name.size() - 5);
        models[id] = RouterModel{id, e.path().string(), "models_dir", {}, {}, false, 10};
      }
    }
  }
  if (!opts.models_preset.empty()) {
    std::vector<IniSection> sections;
    if (std::string err = parse_ini(opts.models_preset, &sections); !err.empty()) return err;
    const std::string& file = opts.models_preset;
    struct Parsed {
      std::vector<std::string> args, lines;
      std::string model;
      int model_line = 0;
      bool load_on_startup = false, has_los = false;
      int stop_timeout = 10;
      bool has_stop = false;
    };
    auto read = [&](const IniSection& s, Parsed* p) -> std::string {
      for (const IniEntry& e : s.entries) {
        auto where = [&] { return file + ":" + std::to_string(e.line) + ": "; };
        if (e.key == "version") continue;
        p->lines.push_back(e.key + " = " + e.value);
        if (e.key == "load-on-startup") {
          p->load_on_startup = truthy(e.value);
          p->has_los = true;
          continue;
        }
        if (e.key == "stop-timeout") {
          char* end = nullptr;
          const long v = std::strtol(e.value.c_str(), &end, 10);
          if (e.value.empty() || *end || v < 0 || v > 86400)
            return where() + "stop-timeout: expected seconds, not '" + e.value + "'";
          p->stop_timeout = int(v);
          p->has_stop = true;
          continue;
        }
        if (e.key == "dedup-cache-models") continue;  // about cached downloads, which loom has none of
        std::string canonical;
        std::vector<std::string> args;
        if (!setup.preset_option) return where() + "option '" + e.key + "' not recognized in preset '" + s.name + "'";
        if (std::string why = setup.preset_option(e.key, e.value, &canonical, &args); !why.empty()) {
          return where() + "option '" + e.key + "' in preset '" + s.name + "': " + why;
        }
        if (canonical == "--model") {
          p->model = e.value;
          p->model_line = e.line;
          continue;
        }
        if (router_owned(canonical)) continue;  // the router's: removed, as llama-server does
        p->args.insert(p->args.end(), args.begin(), args.end());
      }
      return std::string();
    };
    Parsed global;
    for (const IniSection& s : sections) {
      if (s.name != "*") continue;
      if (std::string err = read(s, &global); !err.empty()) return err;
    }
    for (const IniSection& s : sections) {
      if (s.name == "*") continue;
      Parsed p;
      if (std::string err = read(s, &p); !err.empty()) return err;
      if (s.name == "default" && p.lines.empty()) continue;
      auto it = models.find(s.name);
      if (it == models.end()) {
        if (p.model.empty()) {
          return file + ":" + std::to_string(s.line) + ": preset '" + s.name +
                 "' names no model file (model = PATH) and no model of --models-dir has its name";
        }
        it = models.emplace(s.name, RouterModel{s.name, p.model, "preset", {}, {}, false, 10}).first;
      } else if (!p.model.empty()) {
        it->second.path = p.model;
      }
      RouterModel& m = it->second;
      m.preset_lines = global.lines;
      m.preset_lines.insert(m.preset_lines.end(), p.lines.begin(), p.lines.end());
      m.args = global.args;
      m.args.insert(m.args.end(), p.args.begin(), p.args.end());
      m.load_on_startup = p.has_los ? p.load_on_startup : global.load_on_startup;
      m.stop_timeout_s = p.has_stop ? p.stop_timeout : global.stop_timeout;
    }
    // [*] applies to the models of --models-dir too.
    for (auto& [id, m] : models) {
      if (m.preset_lines.empty() && !global.lines.empty()) {
        m.preset_lines = global.lines;
        m.args = global.args;
        m.load_on_startup = global.load_on_startup;
        m.stop_timeout_s = global.stop_timeout;
      }
    }
  }
  out->clear();
  for (auto& [id, m] : models) out->push_back(std::move(m));
  return std::string();
}

int run_router(const ServeOptions& opts, const RouterSetup& setup, std::atomic<bool>* stop) {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

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

  auto router = std::make_unique<Router>(opts, setup);
  Router& r = *router;
  for (size_t i = 0; i < defs.size(); ++i) {
    auto m = std::make_unique<Model>();
    m->def = std::move(defs[i]);
    m->index = int(i);
    r.by_id_[m->def.id] = m.get();
    r.models_.push_back(std::move(m));
  }
  {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp && std::strlen(tmp) < 60 ? tmp : "/tmp") + "/loom-router-XXXXXX";
    if (!mkdtemp(templ.data())) {
      std::fprintf(stderr, "loom: cannot make the router's socket folder %s: %s\n", templ.c_str(), std::strerror(errno));
      return 1;
    }
    r.dir_ = templ;  // mode 0700: only this user reaches the children
  }
  auto cleanup_dir = [&r] {
    std::error_code ec;
    fs::remove_all(r.dir_, ec);
  };
  r.spawner_ = std::make_unique<Spawner>();

  const http::ServerOptions ho = http_options(opts);
  const std::vector<std::string> hosts = listen_hosts(opts.host);
  auto srv = http::Server::listen(hosts, uint16_t(opts.port), ho);
  if (!srv) {
    std::fprintf(stderr, "loom: %s\n", srv.status().message().c_str());
    r.spawner_.reset();
    cleanup_dir();
    return 1;
  }
  r.http_ = std::move(*srv);
  r.http_->start(
      [&r](http::Request&& req, std::shared_ptr<http::Response> res) { r.handle(std::move(req), std::move(res)); });
  std::vector<std::string> where;
  for (const std::string& h : hosts) {
    const bool sock = ends_with(h, ".sock") && h.size() > 5;
    where.push_back(sock ? "unix:" + h
                         : "http://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" +
                               std::to_string(r.http_->port()));
  }
  std::stable_partition(where.begin(), where.end(), [](const std::string& w) { return w.rfind("http://", 0) == 0; });
  for (const std::string& w : where) std::fprintf(stderr, "loom: listening on %s\n", w.c_str());
  std::fprintf(stderr, "loom: router: %zu models (%s), at most %d loaded%s\n", r.models_.size(), r.model_list_text().c_str(),
               opts.models_max, opts.models_autoload ? ", loaded on demand" : "");
  for (const auto& m : r.models_) {
    if (!m->def.load_on_startup) continue;
    Model* mp = m.get();
    r.go([&r, mp] {
      Router::Lease lease;
      if (!r.acquire(*mp, true, nullptr, &lease)) r.release(lease);
    });
  }
  std::fprintf(stderr, "loom: ready: router\n");
  std::fflush(stderr);

  for (;;) {
    timespec ts{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (stop && stop->load()) break;
    // Children asked to stop that outlive their stop timeout are killed.
    std::lock_guard<std::mutex> l(r.mu_);
    for (const auto& m : r.models_) {
      if (m->state == State::kStopping && m->pid > 0 && Clock::now() > m->stop_deadline) {
        std::fprintf(stderr, "loom: router: %s did not stop within %d s: killed\n", m->def.id.c_str(),
                     m->def.stop_timeout_s);
        kill(m->pid, SIGKILL);
        m->stop_deadline = Clock::now() + std::chrono::hours(1);
      }
    }
  }

  std::fprintf(stderr, "loom: stopping: the models' servers finish their requests (5 s grace)\n");
  r.http_->stop_accepting();
  {
    std::lock_guard<std::mutex> l(r.mu_);
    r.stopping_ = true;
    for (const auto& m : r.models_) {
      if (m->pid > 0) kill(m->pid, SIGTERM);
    }
    r.cv_.notify_all();
  }
  {
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
  {
    std::lock_guard<std::mutex> l(r.sse_mu_);
    for (auto& s : r.sse_) s->end();
    r.sse_.clear();
  }
  r.http_->drain(std::chrono::seconds(2));
  r.http_->shutdown();
  {
    std::unique_lock<std::mutex> l(r.threads_mu_);
    r.threads_cv_.wait_for(l, std::chrono::seconds(10), [&] { return r.threads_ == 0; });
    if (r.threads_ != 0) {
      // A thread still blocked (it cannot be, with every child gone and every client closed):
      // leave the process rather than free what it uses.
      std::fprintf(stderr, "loom: stopped\n");
      std::fflush(stderr);
      cleanup_dir();
      std::_Exit(0);
    }
  }
  r.spawner_.reset();
  cleanup_dir();
  std::fprintf(stderr, "loom: stopped\n");
  return 0;
}

}  // namespace loom::server
