// loom_http's I/O thread (Server::Impl): one epoll loop over the listeners, every connection and
// the wake-up eventfd. It accepts, reads and parses requests, hands complete ones to the handler
// pool, writes what the Responses queued, and enforces every limit and deadline
// (http_server_impl.h holds the state it works on).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "http_server_impl.h"

namespace loom::http {

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

}  // namespace loom::http
