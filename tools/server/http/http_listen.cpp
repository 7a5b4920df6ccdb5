// loom_http's listening sockets (TCP addresses, UNIX socket files) and the Server's life: listen,
// start, stop_accepting, drain, shutdown, and the counters of stats().
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstring>

#include "http_server_impl.h"

namespace loom::http {

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
