#include "http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

namespace loom::http {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

namespace {

bool is_tchar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x + 32);
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y + 32);
    if (x != y) return false;
  }
  return true;
}

// A value we may put in a header line: no CR, LF or NUL (response splitting).
bool safe_value(std::string_view v) { return v.find_first_of(std::string_view("\r\n\0", 3)) == v.npos; }

void append_date(std::string* out) {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  thread_local time_t cached = -1;
  thread_local char buf[48];
  const time_t now = time(nullptr);
  if (now != cached) {
    tm t{};
    gmtime_r(&now, &t);
    std::snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[t.tm_wday % 7], t.tm_mday,
                  kMonths[t.tm_mon % 12], t.tm_year + 1900, t.tm_hour, t.tm_min, t.tm_sec);
    cached = now;
  }
  out->append("Date: ").append(buf).append("\r\n");
}

enum class Framing { kLength, kChunked, kNoBody, kUntilClose };

// Status line and header fields, up to and including the empty line.
void append_head(std::string* out, int status, std::string_view content_type, Framing framing, uint64_t length, bool close,
                 int minor, const Headers& extra) {
  out->append("HTTP/1.1 ").append(std::to_string(status)).append(" ");
  out->append(reason_phrase(status)).append("\r\nServer: loom\r\n");
  append_date(out);
  if (!content_type.empty() && safe_value(content_type)) out->append("Content-Type: ").append(content_type).append("\r\n");
  if (framing == Framing::kLength) out->append("Content-Length: ").append(std::to_string(length)).append("\r\n");
  else if (framing == Framing::kChunked) out->append("Transfer-Encoding: chunked\r\n");
  if (close) out->append("Connection: close\r\n");
  else if (minor == 0) out->append("Connection: keep-alive\r\n");
  for (const auto& [name, value] : extra) {
    if (name.empty() || iequals(name, "content-length") || iequals(name, "transfer-encoding") ||
        iequals(name, "connection") || !safe_value(value))
      continue;
    bool ok = true;
    for (unsigned char c : name) ok = ok && is_tchar(c);
    if (!ok) continue;
    out->append(name).append(": ").append(value).append("\r\n");
  }
  out->append("\r\n");
}

bool body_allowed(int status) { return status >= 200 && status != 204 && status != 304; }

int sane_status(int status) { return (status >= 200 && status <= 999) ? status : 500; }

}  // namespace

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string default_error_body(int status, std::string_view message) {
  std::string m;
  for (unsigned char c : message) {
    if (c == '"' || c == '\\') {
      m.push_back('\\');
      m.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      m += buf;
    } else {
      m.push_back(static_cast<char>(c));
    }
  }
  return "{\"error\":{\"message\":\"" + m + "\",\"type\":\"" + (status < 500 ? "invalid_request_error" : "server_error") +
         "\",\"code\":" + std::to_string(status) + "}}";
}

namespace detail {

// What the I/O thread shares with every Response: the wake-up channel and the options. Kept
// alive by the Responses, so a Response that outlives the Server stays harmless.
struct Core {
  ServerOptions opts;
  int wake_fd = -1;
  std::mutex mu;
  std::vector<uint64_t> woken;  // connections with new output or a finished response
  bool stopped = false;         // the I/O thread is gone: wake() does nothing
  std::atomic<bool> draining{false};
  std::atomic<bool> stop_accept_requested{false};
  std::atomic<bool> shutdown_requested{false};
  std::atomic<uint64_t> open_streams{0};
  std::atomic<uint64_t> connections_open{0}, connections_total{0}, connections_rejected{0}, requests_total{0},
      bad_requests{0}, timeouts{0}, client_disconnects{0}, bytes_received{0}, bytes_sent{0};

  ~Core() {
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void kick() {
    const uint64_t one = 1;
    ssize_t r;
    do r = ::write(wake_fd, &one, sizeof one);
    while (r < 0 && errno == EINTR);
    // EAGAIN: the counter is saturated, so the I/O thread is due to wake anyway.
  }

  void wake(uint64_t conn_id) {
    bool first;
    {
      std::lock_guard lk(mu);
      if (stopped) return;
      first = woken.empty();
      woken.push_back(conn_id);
    }
    if (first) kick();
  }

  std::string error_body(int status, std::string_view message) const {
    if (opts.error_body) {
      try {
        return opts.error_body(status, message);
      } catch (...) {
      }
    }
    return default_error_body(status, message);
  }

  void log(std::string_view what) const {
    if (!opts.log) return;
    try {
      opts.log(what);
    } catch (...) {
    }
  }
};

enum class Phase { kNone, kStreaming, kDone };

// One request's response, shared by its Response (the handler side) and its connection (the I/O
// thread). Everything below mu is guarded by it.
struct Exchange {
  std::shared_ptr<Core> core;
  uint64_t conn_id = 0;
  bool head = false;       // HEAD request: no body bytes
  int minor = 1;           // the request's HTTP/1.x
  bool keep_alive = true;  // what the request allows

  mutable std::mutex mu;
  std::string out;  // queued bytes; out[out_off..] not yet written
  size_t out_off = 0;
  Phase phase = Phase::kNone;
  bool chunked = false;
  bool close_after = false;  // the connection closes once this response is written
  bool gone = false;         // the connection closed first: nothing more is accepted
  bool notified = false;     // on_disconnect ran (or never will)
  bool overflow = false;     // a write passed max_output_bytes: the I/O thread drops the client
  bool completed = false;    // completely written; the connection has moved on
  std::function<void()> on_disconnect;
  Headers always;  // set_header(): fields of whatever reply goes out

  size_t pending() const { return out.size() - out_off; }
};

}  // namespace detail

using detail::Exchange;
using detail::Phase;

// ---- Response ---------------------------------------------------------------------------------

Response::Response(std::shared_ptr<Exchange> ex) : ex_(std::move(ex)) {}

Response::~Response() {
  Exchange& ex = *ex_;
  bool wake = false;
  {
    std::lock_guard lk(ex.mu);
    if (!ex.gone && !ex.completed) {
      if (ex.phase == Phase::kNone) {
        const std::string body = ex.core->error_body(500, "the handler sent no response");
        ex.close_after = !ex.keep_alive || ex.core->draining.load();
        append_head(&ex.out, 500, ex.core->opts.error_content_type, Framing::kLength, body.size(), ex.close_after, ex.minor,
                    {});
        if (!ex.head) ex.out += body;
        ex.phase = Phase::kDone;
        wake = true;
      } else if (ex.phase == Phase::kStreaming) {
        ex.phase = Phase::kDone;  // truncated: no terminating chunk, and the connection closes
        ex.close_after = true;
        wake = true;
      }
    }
  }
  if (wake) ex.core->wake(ex.conn_id);
}

void Response::send(int status, std::string_view content_type, std::string body, const Headers& extra) {
  Exchange& ex = *ex_;
  status = sane_status(status);
  {
    std::lock_guard lk(ex.mu);
    if (ex.gone || ex.phase != Phase::kNone) return;
    ex.close_after = !ex.keep_alive || ex.core->draining.load();
    const bool with_body = body_allowed(status);
    Headers all = ex.always;
    all.insert(all.end(), extra.begin(), extra.end());
    append_head(&ex.out, status, content_type, with_body || status == 304 ? Framing::kLength : Framing::kNoBody, body.size(),
                ex.close_after, ex.minor, all);
    if (with_body && !ex.head) ex.out += body;
    ex.phase = Phase::kDone;
  }
  ex.core->wake(ex.conn_id);
}

void Response::set_header(std::string name, std::string value) {
  std::lock_guard lk(ex_->mu);
  ex_->always.emplace_back(std::move(name), std::move(value));
}

void Response::send_error(int status, std::string_view message) {
  status = sane_status(status);
  send(status, ex_->core->opts.error_content_type, ex_->core->error_body(status, message));
}

bool Response::begin_stream(int status, std::string_view content_type, const Headers& extra) {
  Exchange& ex = *ex_;
  status = sane_status(status);
  {
    std::lock_guard lk(ex.mu);
    if (ex.gone || ex.phase != Phase::kNone) return false;
    ex.chunked = ex.minor >= 1 && body_allowed(status);
    ex.close_after = !ex.keep_alive || ex.core->draining.load() || (!ex.chunked && body_allowed(status));
    Headers all = ex.always;
    all.insert(all.end(), extra.begin(), extra.end());
    append_head(&ex.out, status, content_type,
                !body_allowed(status) ? Framing::kNoBody : (ex.chunked ? Framing::kChunked : Framing::kUntilClose), 0,
                ex.close_after, ex.minor, all);
    ex.phase = Phase::kStreaming;
    if (!body_allowed(status)) ex.head = true;  // nothing of the stream may go out
  }
  ex.core->wake(ex.conn_id);
  return true;
}

bool Response::write(std::string_view data) {
  Exchange& ex = *ex_;
  bool wake, ok = true;
  {
    std::lock_guard lk(ex.mu);
    if (ex.gone || ex.phase != Phase::kStreaming) return false;
    if (data.empty() || ex.head) return true;
    const size_t pending = ex.pending();
    const size_t add = data.size() + (ex.chunked ? 20 : 0);
    if (add > ex.core->opts.max_output_bytes || pending > ex.core->opts.max_output_bytes - add) {
      ex.gone = true;
      ex.overflow = true;
      wake = true;
      ok = false;
    } else {
      wake = pending == 0;
      if (ex.chunked) {
        char size[24];
        const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
        ex.out.append(size, static_cast<size_t>(n));
        ex.out.append(data);
        ex.out.append("\r\n");
      } else {
        ex.out.append(data);
      }
    }
  }
  if (wake) ex.core->wake(ex.conn_id);
  return ok;
}

void Response::end() {
  Exchange& ex = *ex_;
  {
    std::lock_guard lk(ex.mu);
    if (ex.gone || ex.phase != Phase::kStreaming) return;
    if (ex.chunked && !ex.head) ex.out.append("0\r\n\r\n");
    ex.phase = Phase::kDone;
  }
  ex.core->wake(ex.conn_id);
}

bool Response::client_gone() const {
  std::lock_guard lk(ex_->mu);
  return ex_->gone;
}

void Response::on_disconnect(std::function<void()> cb) {
  Exchange& ex = *ex_;
  {
    std::lock_guard lk(ex.mu);
    if (ex.completed) return;
    if (!ex.gone) {
      ex.on_disconnect = std::move(cb);
      return;
    }
  }
  if (cb) cb();  // gone already: now, here
}

bool Response::started() const {
  std::lock_guard lk(ex_->mu);
  return ex_->phase != Phase::kNone;
}

size_t Response::queued_bytes() const {
  std::lock_guard lk(ex_->mu);
  return ex_->pending();
}

uint64_t Response::connection_id() const { return ex_->conn_id; }

// ---- handler pool -----------------------------------------------------------------------------

namespace {

class HandlerPool {
 public:
  void start(size_t n) {
    if (n == 0) n = 1;
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  void submit(std::function<void()> task) {
    {
      std::lock_guard lk(mu_);
      if (stopped_) return;  // task (and its Response) is destroyed here, outside the lock
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  // Tasks not yet started are dropped; running ones are waited for.
  void stop() {
    std::deque<std::function<void()>> dropped;
    {
      std::lock_guard lk(mu_);
      stopped_ = true;
      dropped.swap(tasks_);
    }
    cv_.notify_all();
    dropped.clear();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void run() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stopped_ || !tasks_.empty(); });
        if (stopped_) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopped_ = false;
  std::vector<std::thread> threads_;
};

constexpr uint64_t kListenId = UINT64_MAX;
constexpr uint64_t kWakeId = UINT64_MAX - 1;
constexpr size_t kReadChunk = 64 * 1024;
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

enum class ConnState {
  kReading,   // reading (and parsing) a request, or idle between requests
  kHandling,  // a request is with the handler; its response is written as it comes
  kClosing,   // writing an error reply (then kLinger)
  kLinger,    // half-closed after the last response: discarding input until EOF or linger_timeout
};

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  std::string addr;
  uint16_t port = 0;
  ConnState state = ConnState::kReading;
  RequestParser parser;
  std::string in;  // bytes received and not yet parsed: in[in_off..]
  size_t in_off = 0;
  std::string own;  // the I/O thread's own output (100 Continue, error replies): own[own_off..]
  size_t own_off = 0;
  std::shared_ptr<Exchange> ex;  // kHandling
  bool ex_done = false;          // ex completely written
  bool ex_close = false;         // ... and asked for the connection to close
  bool req_started = false;      // a byte of the current request arrived (req_start is valid)
  bool headers_seen = false;     // its headers are complete (body_start is valid)
  bool out_pending = false;      // output waiting for the socket (last_progress is valid)
  TimePoint idle_since, req_start, body_start, close_start, last_progress;
  TimePoint deadline = TimePoint::max();
  uint32_t events = 0;  // the epoll interest set

  explicit Conn(ParserLimits limits) : parser(limits) {}
  size_t buffered() const { return in.size() - in_off; }
};

std::string error_response(const detail::Core& core, int status, std::string_view message) {
  const std::string body = core.error_body(status, message);
  std::string out;
  append_head(&out, status, core.opts.error_content_type, Framing::kLength, body.size(), true, 1, {});
  out += body;
  return out;
}

}  // namespace

struct Server::Impl {
  std::shared_ptr<detail::Core> core = std::make_shared<detail::Core>();
  std::vector<int> listen_fds;          // TCP and UNIX listeners, all under kListenId in epoll
  std::vector<std::string> unix_paths;  // socket files to remove when the server goes
  int epoll_fd = -1;
  int port = 0;
  bool listening = false;  // the listeners are in the epoll set
  TimePoint accept_resume = TimePoint::max();

  std::mutex life_mu;  // start / shutdown
  bool started = false;
  bool shut = false;
  Handler handler;
  HandlerPool pool;
  std::thread io;

  // I/O thread only from here on.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::set<std::pair<TimePoint, uint64_t>> timers;
  uint64_t next_id = 1;
  bool drained = false;  // stop_accepting has been carried out
  std::vector<char> scratch = std::vector<char>(kReadChunk);

  ~Impl() {
    close_listeners();
    if (epoll_fd >= 0) ::close(epoll_fd);
  }

  const ServerOptions& opts() const { return core->opts; }

  void close_listeners() {
    for (int fd : listen_fds) {
      if (listening && epoll_fd >= 0) epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
      ::close(fd);
    }
    listen_fds.clear();
    listening = false;
    for (const std::string& p : unix_paths) ::unlink(p.c_str());
    unix_paths.clear();
  }
  bool watch_listeners() {
    for (int fd : listen_fds) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenId;
      if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) return false;
    }
    return true;
  }

  void run();
  void accept_some(TimePoint now);
  bool accept_from(int listen_fd, TimePoint now);  // false: accepting is paused
  void pause_accepting(TimePoint now);
  void on_event(Conn* c, uint32_t events);
  void on_wakes();
  bool on_readable(Conn* c);
  bool drive(Conn* c);
  void parse_input(Conn* c, TimePoint now);
  void dispatch(Conn* c);
  bool write_out(Conn* c, TimePoint now);
  void reply_error(Conn* c, int status, std::string_view message, TimePoint now);
  void start_linger(Conn* c, TimePoint now);
  void refresh(Conn* c);
  void set_deadline(Conn* c, TimePoint t);
  void run_timers();
  void on_timeout(Conn* c, TimePoint now);
  void abort_conn(Conn* c, bool count_disconnect);
  void close_conn(Conn* c);
  void do_stop_accepting();
  int wait_timeout_ms() const;
};

int Server::Impl::wait_timeout_ms() const {
  TimePoint next = accept_resume;
  if (!timers.empty()) next = std::min(next, timers.begin()->first);
  if (next == TimePoint::max()) return -1;
  const auto now = Clock::now();
  if (next <= now) return 0;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
  return static_cast<int>(std::min<int64_t>(ms, 60'000));
}

void Server::Impl::run() {
  std::vector<epoll_event> events(256);
  while (!core->shutdown_requested.load()) {
    if (core->stop_accept_requested.load() && !drained) do_stop_accepting();
    const int n = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), wait_timeout_ms());
    if (n < 0) {
      if (errno == EINTR) continue;
      core->log(std::string("loom_http: epoll_wait: ") + std::strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenId) {
        accept_some(Clock::now());
      } else if (id == kWakeId) {
        on_wakes();
      } else {
        auto it = conns.find(id);
        if (it != conns.end()) on_event(it->second.get(), events[i].events);
      }
    }
    run_timers();
  }
  // Shutdown: every connection goes; responses in progress see client_gone().
  std::vector<Conn*> all;
  all.reserve(conns.size());
  for (auto& [id, c] : conns) all.push_back(c.get());
  for (Conn* c : all) abort_conn(c, false);
  close_listeners();
  std::lock_guard lk(core->mu);
  core->stopped = true;
  core->woken.clear();
}

void Server::Impl::do_stop_accepting() {
  drained = true;
  close_listeners();
  accept_resume = TimePoint::max();
  std::vector<Conn*> idle;
  for (auto& [id, c] : conns)
    if (c->state == ConnState::kReading && !c->req_started && c->buffered() == 0 && !c->out_pending) idle.push_back(c.get());
  for (Conn* c : idle) close_conn(c);
}

void Server::Impl::pause_accepting(TimePoint now) {
  // Out of descriptors (or memory): the listener stays readable, so stop watching it for a while
  // instead of spinning on accept.
  if (listening) {
    for (int fd : listen_fds) epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  }
  listening = false;
  accept_resume = now + kAcceptPause;
}

void Server::Impl::accept_some(TimePoint now) {
  // Every listener is tried (they share one epoll id; an idle one answers EAGAIN at once).
  for (size_t l = 0; l < listen_fds.size(); ++l) {
    if (!accept_from(listen_fds[l], now)) return;
  }
}

bool Server::Impl::accept_from(int listen_fd, TimePoint now) {
  for (int k = 0; k < 64; ++k) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == ENETDOWN || e == ENOPROTOOPT || e == EHOSTDOWN ||
          e == ENONET || e == EHOSTUNREACH || e == EOPNOTSUPP || e == ENETUNREACH)
        continue;  // that connection failed; the next one may not
      if (e == EAGAIN || e == EWOULDBLOCK) return true;
      core->log(std::string("loom_http: accept: ") + std::strerror(e));
      pause_accepting(now);
      return false;
    }
    if (conns.size() >= opts().max_connections) {
      core->connections_rejected.fetch_add(1, std::memory_order_relaxed);
      const std::string reply = error_response(*core, 503, "too many connections");
      [[maybe_unused]] ssize_t r = ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      continue;
    }
    const int one = 1;
    if (ss.ss_family != AF_UNIX) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>(ParserLimits{opts().max_header_bytes, opts().max_body_bytes});
    c->id = next_id++;
    c->fd = fd;
    char host[INET6_ADDRSTRLEN] = "";
    if (ss.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      c->port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      c->port = ntohs(a->sin6_port);
    } else if (ss.ss_family == AF_UNIX) {
      std::snprintf(host, sizeof host, "unix");
    }
    c->addr = host;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      core->log(std::string("loom_http: epoll_ctl: ") + std::strerror(errno));
      ::close(fd);
      continue;
    }
    c->events = ev.events;
    c->idle_since = now;
    core->connections_total.fetch_add(1, std::memory_order_relaxed);
    core->connections_open.fetch_add(1, std::memory_order_relaxed);
    Conn* raw = c.get();
    conns.emplace(raw->id, std::move(c));
    set_deadline(raw, now + opts().keepalive_timeout);
  }
  return true;
}

void Server::Impl::on_wakes() {
  uint64_t counter;
  while (::read(core->wake_fd, &counter, sizeof counter) < 0 && errno == EINTR) {
  }
  std::vector<uint64_t> ids;
  {
    std::lock_guard lk(core->mu);
    ids.swap(core->woken);
  }
  for (uint64_t id : ids) {
    auto it = conns.find(id);
    if (it != conns.end()) drive(it->second.get());
  }
}

void Server::Impl::on_event(Conn* c, uint32_t events) {
  if (events & EPOLLERR) return abort_conn(c, true);  // reset
  if ((events & EPOLLIN) && !on_readable(c)) return;
  if (events & (EPOLLHUP | EPOLLRDHUP)) {
    // The peer closed (or half-closed: for a server of streamed replies that is the same as
    // leaving), so whatever is in progress will never be read.
    if (c->state == ConnState::kLinger || c->state == ConnState::kClosing) return close_conn(c);
    return abort_conn(c, true);
  }
  if (events & EPOLLOUT) drive(c);
}

bool Server::Impl::on_readable(Conn* c) {
  ssize_t n;
  do n = ::recv(c->fd, scratch.data(), scratch.size(), 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    abort_conn(c, true);
    return false;
  }
  if (n == 0) {
    if (c->state == ConnState::kLinger || c->state == ConnState::kClosing) close_conn(c);
    else abort_conn(c, true);
    return false;
  }
  core->bytes_received.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  if (c->state == ConnState::kLinger || c->state == ConnState::kClosing) return true;  // discard
  c->in.append(scratch.data(), static_cast<size_t>(n));
  return drive(c);
}

// Moves the connection forward as far as it can go now: parses, hands complete requests over,
// writes what is queued, and after a finished response goes back to the next (pipelined) request.
bool Server::Impl::drive(Conn* c) {
  while (true) {
    const TimePoint now = Clock::now();
    if (c->state == ConnState::kReading) parse_input(c, now);
    if (!write_out(c, now)) return false;
    if (c->state == ConnState::kHandling && c->ex_done) {
      const bool close = c->ex_close || core->draining.load();
      c->ex.reset();
      c->ex_done = false;
      core->open_streams.fetch_sub(1, std::memory_order_relaxed);
      if (close) {
        start_linger(c, now);
        break;
      }
      c->state = ConnState::kReading;
      c->idle_since = now;
      c->req_started = c->headers_seen = false;
      continue;  // a pipelined request may be waiting in c->in
    }
    if (c->state == ConnState::kClosing && !c->out_pending) start_linger(c, now);
    break;
  }
  refresh(c);
  return true;
}

void Server::Impl::parse_input(Conn* c, TimePoint now) {
  while (c->state == ConnState::kReading && c->buffered() > 0) {
    const size_t avail = c->buffered();
    const size_t used = c->parser.feed(std::string_view(c->in.data() + c->in_off, avail));
    c->in_off += used;
    if (!c->req_started && c->parser.started()) {
      c->req_started = true;
      c->req_start = now;
    }
    if (c->parser.failed()) {
      core->bad_requests.fetch_add(1, std::memory_order_relaxed);
      reply_error(c, c->parser.error_status(), c->parser.error_message(), now);
      break;
    }
    if (c->parser.headers_complete() && !c->headers_seen) {
      c->headers_seen = true;
      c->body_start = now;
      if (c->parser.expects_continue() && !c->parser.complete()) c->own.append("HTTP/1.1 100 Continue\r\n\r\n");
    }
    if (c->parser.complete()) {
      dispatch(c);
      break;
    }
    if (used == avail) break;
  }
  if (c->in_off == c->in.size()) {
    c->in.clear();
    c->in_off = 0;
  } else if (c->in_off > kReadChunk && c->in_off * 2 > c->in.size()) {
    c->in.erase(0, c->in_off);
    c->in_off = 0;
  }
}

void Server::Impl::dispatch(Conn* c) {
  auto ex = std::make_shared<Exchange>();
  ex->core = core;
  ex->conn_id = c->id;
  ex->keep_alive = c->parser.keep_alive();
  Request req = c->parser.take_request();
  req.remote_addr = c->addr;
  req.remote_port = c->port;
  req.connection_id = c->id;
  ex->head = req.method == "HEAD";
  ex->minor = req.version_minor;
  c->ex = ex;
  c->ex_done = c->ex_close = false;
  c->state = ConnState::kHandling;
  core->requests_total.fetch_add(1, std::memory_order_relaxed);
  core->open_streams.fetch_add(1, std::memory_order_relaxed);
  auto res = std::make_shared<Response>(std::move(ex));
  pool.submit([this, req = std::move(req), res = std::move(res)]() mutable {
    try {
      handler(std::move(req), std::move(res));
    } catch (const std::exception& e) {
      core->log(std::string("loom_http: handler threw: ") + e.what());
    } catch (...) {
      core->log("loom_http: handler threw");
    }
  });
}

bool Server::Impl::write_out(Conn* c, TimePoint now) {
  bool progressed = false, failed = false, overflow = false;
  auto send_some = [&](const std::string& buf, size_t* off) {
    while (*off < buf.size()) {
      const ssize_t n = ::send(c->fd, buf.data() + *off, buf.size() - *off, MSG_NOSIGNAL);
      if (n > 0) {
        *off += static_cast<size_t>(n);
        progressed = true;
        core->bytes_sent.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) failed = true;
        return;
      }
    }
  };
  send_some(c->own, &c->own_off);
  if (c->own_off == c->own.size()) {
    c->own.clear();
    c->own_off = 0;
  }
  bool ex_pending = false;
  if (!failed && c->own.empty() && c->ex && !c->ex_done) {
    Exchange& ex = *c->ex;
    std::lock_guard lk(ex.mu);
    if (ex.overflow) {
      overflow = true;
    } else {
      send_some(ex.out, &ex.out_off);
      if (ex.out_off == ex.out.size()) {
        ex.out.clear();
        ex.out_off = 0;
      } else if (ex.out_off > kReadChunk && ex.out_off * 2 > ex.out.size()) {
        ex.out.erase(0, ex.out_off);
        ex.out_off = 0;
      }
      ex_pending = ex.pending() > 0;
      if (!failed && !ex_pending && ex.phase == Phase::kDone) {
        ex.completed = true;
        c->ex_done = true;
        c->ex_close = ex.close_after;
      }
    }
  }
  if (overflow || failed) {
    abort_conn(c, true);
    return false;
  }
  const bool pending = !c->own.empty() || ex_pending;
  if (pending && (progressed || !c->out_pending)) c->last_progress = now;
  c->out_pending = pending;
  return true;
}

void Server::Impl::reply_error(Conn* c, int status, std::string_view message, TimePoint now) {
  c->own += error_response(*core, status, message);
  c->state = ConnState::kClosing;
  c->close_start = now;
  c->in.clear();
  c->in_off = 0;
}

void Server::Impl::start_linger(Conn* c, TimePoint now) {
  ::shutdown(c->fd, SHUT_WR);
  c->state = ConnState::kLinger;
  c->close_start = now;
  c->in.clear();
  c->in_off = 0;
}

void Server::Impl::refresh(Conn* c) {
  uint32_t want = EPOLLRDHUP;
  switch (c->state) {
    case ConnState::kReading:
    case ConnState::kClosing:
    case ConnState::kLinger: want |= EPOLLIN; break;
    case ConnState::kHandling:
      // Pipelined bytes are kept up to the header limit; past it, only a close is noticed.
      if (c->buffered() < opts().max_header_bytes) want |= EPOLLIN;
      break;
  }
  if (c->out_pending) want |= EPOLLOUT;
  if (want != c->events) {
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &ev) == 0) c->events = want;
  }
  TimePoint t = TimePoint::max();
  switch (c->state) {
    case ConnState::kReading:
      if (!c->req_started) t = c->idle_since + opts().keepalive_timeout;
      else if (!c->headers_seen) t = c->req_start + opts().header_timeout;
      else t = c->body_start + opts().body_timeout;
      break;
    case ConnState::kClosing:
    case ConnState::kLinger: t = c->close_start + opts().linger_timeout; break;
    case ConnState::kHandling: break;
  }
  if (c->out_pending) t = std::min(t, c->last_progress + opts().write_timeout);
  set_deadline(c, t);
}

void Server::Impl::set_deadline(Conn* c, TimePoint t) {
  if (t == c->deadline) return;
  if (c->deadline != TimePoint::max()) timers.erase({c->deadline, c->id});
  c->deadline = t;
  if (t != TimePoint::max()) timers.insert({t, c->id});
}

void Server::Impl::run_timers() {
  const TimePoint now = Clock::now();
  if (accept_resume <= now) {
    accept_resume = TimePoint::max();
    if (!listen_fds.empty() && !listening) listening = watch_listeners();
  }
  std::vector<uint64_t> due;
  for (auto it = timers.begin(); it != timers.end() && it->first <= now; ++it) due.push_back(it->second);
  for (uint64_t id : due) {
    auto it = conns.find(id);
    if (it != conns.end()) on_timeout(it->second.get(), now);
  }
}

void Server::Impl::on_timeout(Conn* c, TimePoint now) {
  if (c->out_pending && now >= c->last_progress + opts().write_timeout) {
    core->timeouts.fetch_add(1, std::memory_order_relaxed);
    return abort_conn(c, true);
  }
  switch (c->state) {
    case ConnState::kReading:
      if (!c->req_started) {
        if (now >= c->idle_since + opts().keepalive_timeout) return close_conn(c);
      } else if (!c->headers_seen) {
        if (now >= c->req_start + opts().header_timeout) {
          core->timeouts.fetch_add(1, std::memory_order_relaxed);
          reply_error(c, 408, "request header timeout", now);
        }
      } else if (now >= c->body_start + opts().body_timeout) {
        core->timeouts.fetch_add(1, std::memory_order_relaxed);
        reply_error(c, 408, "request body timeout", now);
      }
      break;
    case ConnState::kClosing:
    case ConnState::kLinger:
      if (now >= c->close_start + opts().linger_timeout) return close_conn(c);
      break;
    case ConnState::kHandling: break;
  }
  drive(c);
}

void Server::Impl::abort_conn(Conn* c, bool count_disconnect) {
  if (c->ex) {
    Exchange& ex = *c->ex;
    std::function<void()> cb;
    bool cut = false;
    {
      std::lock_guard lk(ex.mu);
      if (!ex.completed) {
        cut = true;
        ex.gone = true;
        if (!ex.notified) {
          ex.notified = true;
          cb = std::move(ex.on_disconnect);
        }
      }
    }
    if (cut && count_disconnect) core->client_disconnects.fetch_add(1, std::memory_order_relaxed);
    core->open_streams.fetch_sub(1, std::memory_order_relaxed);
    c->ex.reset();
    if (cb) {
      try {
        cb();
      } catch (...) {
        core->log("loom_http: on_disconnect callback threw");
      }
    }
  }
  close_conn(c);
}

void Server::Impl::close_conn(Conn* c) {
  if (c->ex) {  // only abort_conn may drop an exchange in progress
    abort_conn(c, false);
    return;
  }
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  set_deadline(c, TimePoint::max());
  core->connections_open.fetch_sub(1, std::memory_order_relaxed);
  conns.erase(c->id);
}

// ---- Server -----------------------------------------------------------------------------------

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { shutdown(); }

namespace {

bool is_unix_socket_path(const std::string& host) {
  return host.size() > 5 && host.compare(host.size() - 5, 5, ".sock") == 0;
}

// A listening UNIX socket at path (a stale socket file left by an earlier run is replaced; any
// other file there is an error). -1 and *error on failure.
int listen_unix(const std::string& path, int backlog, std::string* error) {
  sockaddr_un sa{};
  if (path.size() >= sizeof sa.sun_path) {
    *error = "the socket path is longer than " + std::to_string(sizeof sa.sun_path - 1) + " bytes";
    return -1;
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      *error = "a file that is not a socket is in the way";
      return -1;
    }
    ::unlink(path.c_str());
  }
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::strerror(errno);
    return -1;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, backlog) != 0) {
    *error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

// A listening TCP socket on host:port (the first address that binds). -1 and *error on failure.
int listen_tcp(const std::string& host, uint16_t port, int backlog, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int gai = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (gai != 0) {
    *error = std::string("cannot resolve: ") + gai_strerror(gai);
    return -1;
  }
  int out = -1;
  *error = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      *error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, backlog) != 0) {
      *error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    out = fd;
    break;
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace

Result<std::unique_ptr<Server>> Server::listen(const std::string& host, uint16_t port, ServerOptions opts) {
  return listen(std::vector<std::string>{host}, port, std::move(opts));
}

Result<std::unique_ptr<Server>> Server::listen(const std::vector<std::string>& hosts, uint16_t port, ServerOptions opts) {
  using R = Result<std::unique_ptr<Server>>;
  if (hosts.empty()) return R::failure("no address to listen on");
  auto impl = std::make_unique<Impl>();
  const int backlog = opts.listen_backlog > 0 ? opts.listen_backlog : 511;
  // Port 0 picks a free port for the first TCP address; the others take the same one.
  uint16_t tcp_port = port;
  bool have_port = false;
  for (const std::string& host : hosts) {
    std::string error;
    const bool unix_socket = is_unix_socket_path(host);
    const int fd = unix_socket ? listen_unix(host, backlog, &error) : listen_tcp(host, tcp_port, backlog, &error);
    if (fd < 0) {
      return R::failure("cannot listen on " + (unix_socket ? host : host + ":" + std::to_string(tcp_port)) + ": " + error);
    }
    impl->listen_fds.push_back(fd);
    if (unix_socket) {
      impl->unix_paths.push_back(host);
    } else if (!have_port) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      tcp_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      impl->port = tcp_port;
      have_port = true;
    }
  }

  impl->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  impl->core->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->epoll_fd < 0 || impl->core->wake_fd < 0)
    return R::failure(std::string("epoll/eventfd: ") + std::strerror(errno));
  if (!impl->watch_listeners()) return R::failure(std::string("epoll_ctl: ") + std::strerror(errno));
  impl->listening = true;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  if (epoll_ctl(impl->epoll_fd, EPOLL_CTL_ADD, impl->core->wake_fd, &ev) != 0)
    return R::failure(std::string("epoll_ctl: ") + std::strerror(errno));
  if (opts.handler_threads == 0) opts.handler_threads = 1;
  impl->core->opts = std::move(opts);
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const { return impl_->port; }

void Server::start(Handler handler) {
  std::lock_guard lk(impl_->life_mu);
  if (impl_->started || impl_->shut) return;
  impl_->started = true;
  impl_->handler = std::move(handler);
  impl_->pool.start(impl_->opts().handler_threads);
  impl_->io = std::thread([impl = impl_.get()] { impl->run(); });
}

void Server::stop_accepting() {
  impl_->core->draining.store(true);
  impl_->core->stop_accept_requested.store(true);
  std::lock_guard lk(impl_->life_mu);
  if (impl_->started && !impl_->shut) {
    impl_->core->kick();
  } else if (!impl_->started) {
    impl_->close_listeners();
  }
}

size_t Server::open_streams() const { return static_cast<size_t>(impl_->core->open_streams.load()); }

bool Server::drain(std::chrono::milliseconds grace) {
  stop_accepting();
  const auto deadline = Clock::now() + grace;
  while (open_streams() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const bool clean = open_streams() == 0;
  shutdown();
  return clean;
}

void Server::shutdown() {
  std::lock_guard lk(impl_->life_mu);
  if (impl_->shut) return;
  impl_->shut = true;
  if (impl_->started) {
    impl_->core->shutdown_requested.store(true);
    impl_->core->kick();
    impl_->io.join();
    impl_->pool.stop();
  } else {
    std::lock_guard ck(impl_->core->mu);
    impl_->core->stopped = true;
  }
  impl_->close_listeners();
}

ServerStats Server::stats() const {
  const detail::Core& c = *impl_->core;
  ServerStats s;
  s.connections_open = c.connections_open.load();
  s.connections_total = c.connections_total.load();
  s.connections_rejected = c.connections_rejected.load();
  s.requests_total = c.requests_total.load();
  s.bad_requests = c.bad_requests.load();
  s.timeouts = c.timeouts.load();
  s.client_disconnects = c.client_disconnects.load();
  s.bytes_received = c.bytes_received.load();
  s.bytes_sent = c.bytes_sent.load();
  s.open_streams = c.open_streams.load();
  return s;
}

}  // namespace loom::http
