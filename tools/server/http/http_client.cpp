// loom_http's blocking client (http_client.h). Blocking sockets, every wait a poll() with the
// timeout left; abort() shuts the socket down, which wakes any poll() at once.
#include "http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace loom::http {

namespace {

using Clock = std::chrono::steady_clock;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool has_token(std::string_view list, std::string_view token) {
  const std::string l = lower(list);
  size_t i = 0;
  while (i <= l.size()) {
    size_t j = l.find(',', i);
    if (j == std::string::npos) j = l.size();
    if (trim(std::string_view(l).substr(i, j - i)) == token) return true;
    i = j + 1;
  }
  return false;
}

// A connect() with a deadline on a socket made non-blocking for it, then blocking again.
std::string connect_with_timeout(int fd, const sockaddr* addr, socklen_t len, std::chrono::milliseconds timeout) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int rc = ::connect(fd, addr, len);
  if (rc != 0 && errno != EINPROGRESS && errno != EAGAIN) return std::strerror(errno);
  if (rc != 0) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, int(timeout.count()));
    if (rc == 0) return "connect timed out";
    if (rc < 0) return std::strerror(errno);
    int err = 0;
    socklen_t el = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) return std::strerror(err);
  }
  fcntl(fd, F_SETFL, flags);
  return std::string();
}

}  // namespace

const std::string* ClientResponse::header(std::string_view name) const {
  const std::string n = lower(name);
  for (const auto& [k, v] : headers) {
    if (k == n) return &v;
  }
  return nullptr;
}

ClientConnection::ClientConnection(int fd, ClientOptions opts) : fd_(fd), opts_(opts) {}

ClientConnection::~ClientConnection() {
  std::lock_guard<std::mutex> l(fd_mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<std::unique_ptr<ClientConnection>> ClientConnection::connect_unix(const std::string& path, ClientOptions opts) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    return Result<std::unique_ptr<ClientConnection>>::failure("socket path too long: " + path);
  std::memcpy(a.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Result<std::unique_ptr<ClientConnection>>::failure(std::string("socket: ") + std::strerror(errno));
  const std::string err = connect_with_timeout(fd, reinterpret_cast<sockaddr*>(&a), sizeof a, opts.connect_timeout);
  if (!err.empty()) {
    ::close(fd);
    return Result<std::unique_ptr<ClientConnection>>::failure("connect to unix:" + path + ": " + err);
  }
  return std::unique_ptr<ClientConnection>(new ClientConnection(fd, opts));
}

Result<std::unique_ptr<ClientConnection>> ClientConnection::connect_tcp(const std::string& host, uint16_t port,
                                                                        ClientOptions opts) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list); rc != 0) {
    return Result<std::unique_ptr<ClientConnection>>::failure("resolve " + host + ": " + gai_strerror(rc));
  }
  std::string last = "no address";
  for (addrinfo* ai = list; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    last = connect_with_timeout(fd, ai->ai_addr, ai->ai_addrlen, opts.connect_timeout);
    if (last.empty()) {
      ::freeaddrinfo(list);
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return std::unique_ptr<ClientConnection>(new ClientConnection(fd, opts));
    }
    ::close(fd);
  }
  ::freeaddrinfo(list);
  return Result<std::unique_ptr<ClientConnection>>::failure("connect to " + host + ":" + service + ": " + last);
}

void ClientConnection::abort() {
  aborted_ = true;
  std::lock_guard<std::mutex> l(fd_mu_);
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);  // wakes a poll() or recv() blocked on it
}

ClientConnection::Wait ClientConnection::wait(short events) {
  const auto deadline = Clock::now() + opts_.io_timeout;
  for (;;) {
    if (aborted_) return Wait::kAborted;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Wait::kTimeout;
    pollfd p{fd_, events, 0};
    const int rc = ::poll(&p, 1, int(std::min<long long>(left, 1 << 30)));
    if (aborted_) return Wait::kAborted;
    if (rc > 0) return Wait::kReady;  // readable, writable, or hung up: the next call says which
    if (rc < 0 && errno != EINTR) return Wait::kError;
  }
}

long ClientConnection::fill(std::string* err) {
  switch (wait(POLLIN)) {
    case Wait::kReady: break;
    case Wait::kTimeout: *err = "timed out waiting for the response"; return -1;
    case Wait::kAborted: *err = "aborted"; return -1;
    case Wait::kError: *err = std::strerror(errno); return -1;
  }
  char tmp[16384];
  for (;;) {
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n > 0) {
      buf_.append(tmp, size_t(n));
      return long(n);
    }
    if (n == 0) {
      if (aborted_) {
        *err = "aborted";
        return -1;
      }
      return 0;
    }
    if (errno == EINTR) continue;
    *err = aborted_ ? std::string("aborted") : std::string(std::strerror(errno));
    return -1;
  }
}

namespace {

// The request's bytes: the request line, the caller's headers (less Content-Length,
// Transfer-Encoding and any that would break the framing), Host when missing, the body's length.
std::string request_bytes(std::string_view method, std::string_view target, const Headers& headers, std::string_view body) {
  std::string out;
  out.reserve(256 + body.size());
  out.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  bool host = false;
  for (const auto& [k, v] : headers) {
    const std::string n = lower(k);
    if (n == "content-length" || n == "transfer-encoding") continue;
    if (k.find_first_of("\r\n:") != std::string::npos || v.find_first_of("\r\n") != std::string::npos) continue;
    host |= n == "host";
    out.append(k).append(": ").append(v).append("\r\n");
  }
  if (!host) out.append("Host: localhost\r\n");
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    out.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  }
  out.append("\r\n");
  out.append(body);
  return out;
}

// HTTP/1.x SP 3DIGIT [SP reason] into r; the error otherwise.
std::string parse_status_line(std::string_view line, ClientResponse* r) {
  auto bad_status = [&] {
    std::string shown(line.substr(0, 80));
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    return "malformed status line: '" + shown + "'";
  };
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ')
    return bad_status();
  for (int i = 9; i < 12; ++i) {
    if (line[i] < '0' || line[i] > '9') return bad_status();
  }
  if (line.size() > 12 && line[12] != ' ') return bad_status();
  r->version_minor = line[7] - '0';
  r->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
  if (r->status < 100) return bad_status();
  r->reason = line.size() > 13 ? std::string(line.substr(13)) : std::string();
  return std::string();
}

// The status line and the header lines of a response head (without its blank line) into r.
std::string parse_response_head(const std::string& head, ClientResponse* r) {
  size_t pos = head.find('\n');
  if (std::string e = parse_status_line(trim(std::string_view(head).substr(0, pos)), r); !e.empty()) return e;
  while (pos != std::string::npos) {
    const size_t next = head.find('\n', pos + 1);
    std::string_view h =
        std::string_view(head).substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    pos = next;
    if (!h.empty() && h.back() == '\r') h.remove_suffix(1);
    if (h.empty()) continue;
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0 || h[0] == ' ' || h[0] == '\t') {
      return "malformed response header line: '" + std::string(h.substr(0, 80)) + "'";
    }
    const std::string_view name = h.substr(0, colon);
    if (name.find_first_of(" \t") != std::string_view::npos)
      return "malformed response header name: '" + std::string(name) + "'";
    r->headers.emplace_back(lower(name), std::string(trim(h.substr(colon + 1))));
  }
  return std::string();
}

// A chunk size line's hexadecimal size (extensions after ';' ignored); false when malformed.
bool parse_chunk_size(const std::string& line, uint64_t* size) {
  const std::string_view size_part = trim(std::string_view(line).substr(0, line.find(';')));
  if (size_part.empty() || size_part.size() > 15) return false;
  *size = 0;
  for (char ch : size_part) {
    int d;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
    else return false;
    *size = *size * 16 + uint64_t(d);
  }
  return true;
}

}  // namespace

std::string ClientConnection::send_all(const std::string& out) {
  size_t sent = 0;
  while (sent < out.size()) {
    const Wait w = wait(POLLOUT);
    if (w == Wait::kAborted) return "aborted";
    if (w == Wait::kTimeout) return "timed out sending the request";
    if (w == Wait::kError) return std::string("poll: ") + std::strerror(errno);
    const ssize_t n = ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return aborted_ ? std::string("aborted") : std::string("send: ") + std::strerror(errno);
    }
    sent += size_t(n);
  }
  return std::string();
}

std::string ClientConnection::read_head(std::string* head) {
  size_t end = std::string::npos, sep = 0;
  for (;;) {
    const size_t crlf = buf_.find("\r\n\r\n");
    const size_t lf = buf_.find("\n\n");
    if (crlf != std::string::npos && (lf == std::string::npos || crlf < lf)) end = crlf, sep = 4;
    else if (lf != std::string::npos) end = lf, sep = 2;
    if (end != std::string::npos) break;
    if (buf_.size() > opts_.max_header_bytes)
      return "response headers larger than " + std::to_string(opts_.max_header_bytes) + " bytes";
    std::string err;
    const long n = fill(&err);
    if (n < 0) return err + (buf_.empty() ? "" : " (inside the response headers)");
    if (n == 0)
      return buf_.empty() ? "the server closed the connection without answering"
                          : "the server closed the connection inside the response headers";
  }
  if (end > opts_.max_header_bytes)
    return "response headers larger than " + std::to_string(opts_.max_header_bytes) + " bytes";
  *head = buf_.substr(0, end);
  buf_.erase(0, end + sep);
  return std::string();
}

std::string ClientConnection::choose_framing(const ClientResponse& r) {
  keep_alive_ = r.version_minor == 1;
  if (const std::string* c = r.header("connection")) {
    if (has_token(*c, "close")) keep_alive_ = false;
    if (has_token(*c, "keep-alive")) keep_alive_ = true;
  }
  const std::string* te = r.header("transfer-encoding");
  const std::string* cl = r.header("content-length");
  if (head_request_ || r.status == 204 || r.status == 304) {
    framing_ = Framing::kNone;
    length_ = 0;
  } else if (te) {
    if (!has_token(*te, "chunked")) return "unsupported transfer-encoding: " + *te;
    framing_ = Framing::kChunked;
  } else if (cl) {
    uint64_t n = 0;
    if (cl->empty() || cl->size() > 18) return "bad content-length: '" + *cl + "'";
    for (char ch : *cl) {
      if (ch < '0' || ch > '9') return "bad content-length: '" + *cl + "'";
      n = n * 10 + uint64_t(ch - '0');
    }
    framing_ = Framing::kLength;
    length_ = n;
  } else {
    framing_ = Framing::kClose;
    keep_alive_ = false;
  }
  if (framing_ == Framing::kNone) reusable_ = keep_alive_ && buf_.empty();
  else reusable_ = false;
  return std::string();
}

Result<ClientResponse> ClientConnection::send(std::string_view method, std::string_view target, const Headers& headers,
                                              std::string_view body) {
  using R = Result<ClientResponse>;
  if (aborted_) return R::failure("aborted");
  if (framing_ != Framing::kNone || !buf_.empty()) return R::failure("the previous response was not read to its end");
  head_request_ = method == "HEAD";
  if (std::string e = send_all(request_bytes(method, target, headers, body)); !e.empty()) return R::failure(e);

  // The response head; interim 1xx responses (100 Continue) are skipped.
  for (;;) {
    std::string head;
    if (std::string e = read_head(&head); !e.empty()) return R::failure(e);
    ClientResponse r;
    if (std::string e = parse_response_head(head, &r); !e.empty()) return R::failure(e);
    if (r.status < 200) continue;  // interim
    // The body's framing (RFC 9112, 6.3).
    if (std::string e = choose_framing(r); !e.empty()) return R::failure(e);
    return r;
  }
}

bool ClientConnection::deliver(std::string_view piece, const OnData& on_data, uint64_t* total) {
  *total += piece.size();
  return piece.empty() || on_data(piece);
}

std::string ClientConnection::read_exactly(uint64_t left, const OnData& on_data, uint64_t* total, const char* truncated) {
  std::string err;
  while (left > 0) {
    if (buf_.empty()) {
      const long n = fill(&err);
      if (n < 0) return err;
      if (n == 0) {
        if (truncated) return truncated;
        return "truncated body: the server closed the connection " + std::to_string(left) + " bytes before its end";
      }
    }
    const size_t take = size_t(std::min<uint64_t>(left, buf_.size()));
    const std::string piece = buf_.substr(0, take);
    buf_.erase(0, take);
    left -= take;
    if (!deliver(piece, on_data, total)) return "stopped by the reader";
  }
  return std::string();
}

std::string ClientConnection::read_to_close(const OnData& on_data, uint64_t* total) {
  std::string err;
  if (!buf_.empty()) {
    const std::string piece = std::move(buf_);
    buf_.clear();
    if (!deliver(piece, on_data, total)) return "stopped by the reader";
  }
  for (;;) {
    const long n = fill(&err);
    if (n < 0) return err;
    if (n == 0) break;
    const std::string piece = std::move(buf_);
    buf_.clear();
    if (!deliver(piece, on_data, total)) return "stopped by the reader";
  }
  return std::string();
}

std::string ClientConnection::read_line(std::string* line, const char* what) {
  std::string err;
  for (;;) {
    const size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      *line = buf_.substr(0, nl);
      if (!line->empty() && line->back() == '\r') line->pop_back();
      buf_.erase(0, nl + 1);
      return std::string();
    }
    if (buf_.size() > 4096) return std::string("bad chunked body: ") + what + " line too long";
    const long n = fill(&err);
    if (n < 0) return err;
    if (n == 0) return std::string("truncated chunked body: the server closed the connection in a ") + what + " line";
  }
}

std::string ClientConnection::read_chunked(const OnData& on_data, uint64_t* total) {
  for (;;) {
    std::string line;
    if (std::string e = read_line(&line, "chunk size"); !e.empty()) return e;
    uint64_t size = 0;
    if (!parse_chunk_size(line, &size)) return "bad chunk size line: '" + line.substr(0, 40) + "'";
    if (size == 0) {
      // Trailers up to the empty line, dropped.
      for (;;) {
        if (std::string e = read_line(&line, "trailer"); !e.empty()) return e;
        if (line.empty()) break;
      }
      return std::string();
    }
    if (std::string e =
            read_exactly(size, on_data, total, "truncated chunked body: the server closed the connection inside a chunk");
        !e.empty())
      return e;
    if (std::string e = read_line(&line, "chunk end"); !e.empty()) return e;
    if (!line.empty()) return "bad chunked body: a chunk is not followed by CRLF";
  }
}

Result<uint64_t> ClientConnection::read_body(const OnData& on_data) {
  using R = Result<uint64_t>;
  uint64_t total = 0;
  std::string err;
  switch (framing_) {
    case Framing::kNone: return R(uint64_t(0));
    case Framing::kLength: err = read_exactly(length_, on_data, &total, nullptr); break;
    case Framing::kClose: err = read_to_close(on_data, &total); break;
    case Framing::kChunked: err = read_chunked(on_data, &total); break;
  }
  if (!err.empty()) {
    framing_ = Framing::kNone;
    reusable_ = false;
    aborted_ = true;  // unusable from here on
    return R::failure(std::move(err));
  }
  framing_ = Framing::kNone;
  reusable_ = keep_alive_ && buf_.empty() && !aborted_;
  return R(total);
}

Result<std::pair<ClientResponse, std::string>> ClientConnection::request(std::string_view method, std::string_view target,
                                                                         const Headers& headers, std::string_view body,
                                                                         size_t max_body) {
  using R = Result<std::pair<ClientResponse, std::string>>;
  auto head = send(method, target, headers, body);
  if (!head) return R::failure(head.status().message());
  std::string out;
  auto got = read_body([&](std::string_view piece) {
    if (out.size() + piece.size() > max_body) return false;
    out.append(piece);
    return true;
  });
  if (!got) {
    if (got.status().message() == "stopped by the reader")
      return R::failure("response body larger than " + std::to_string(max_body) + " bytes");
    return R::failure(got.status().message());
  }
  return std::make_pair(std::move(*head), std::move(out));
}

}  // namespace loom::http
