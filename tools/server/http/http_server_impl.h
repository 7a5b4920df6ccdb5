// loom_http's internals shared by its three files (not a public header): http_response.cpp
// (the head of a reply, the Response a handler answers through), http_server.cpp (the I/O
// thread's event loop over the connections) and http_listen.cpp (the listening sockets, start and
// stop). Holds what the I/O thread shares with the Responses (Core, Exchange), the handler pool,
// a connection's state (Conn) and Server::Impl.
#pragma once

#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "http_server.h"

namespace loom::http {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

namespace detail {

enum class Framing { kLength, kChunked, kNoBody, kUntilClose };

// Status line and header fields, up to and including the empty line (http_response.cpp).
void append_head(std::string* out, int status, std::string_view content_type, Framing framing, uint64_t length, bool close,
                 int minor, const Headers& extra);

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

inline constexpr uint64_t kListenId = UINT64_MAX;
inline constexpr uint64_t kWakeId = UINT64_MAX - 1;
inline constexpr size_t kReadChunk = 64 * 1024;
inline constexpr auto kAcceptPause = std::chrono::milliseconds(100);

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

// A complete error reply that closes the connection, with the server's error body.
std::string error_response(const Core& core, int status, std::string_view message);

}  // namespace detail

using detail::Conn;
using detail::ConnState;
using detail::error_response;
using detail::Exchange;
using detail::HandlerPool;
using detail::kAcceptPause;
using detail::kListenId;
using detail::kReadChunk;
using detail::kWakeId;
using detail::Phase;

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

}  // namespace loom::http
