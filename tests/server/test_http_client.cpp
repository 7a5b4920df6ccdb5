// loom_http's client (http_client.h) against loom_http's own server (TCP and UNIX socket), and
// against a raw socket peer that answers with hostile bytes: truncated bodies, garbage status
// lines, early closes, silence.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "http_client.h"
#include "http_server.h"

using namespace loom::http;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::unique_ptr<Server> start(const std::vector<std::string>& hosts, Handler h) {
  auto s = Server::listen(hosts, 0, {});
  EXPECT_TRUE(s.has_value()) << s.status().message();
  if (!s.has_value()) return nullptr;
  auto server = std::move(s).value();
  server->start(std::move(h));
  return server;
}

// "METHOD target|body|header x-test"
void echo(Request&& req, std::shared_ptr<Response> res) {
  const std::string* x = req.header("x-test");
  res->send(200, "text/plain", req.method + " " + req.target + "|" + req.body + "|" + (x ? *x : ""), {{"X-Reply", "yes"}});
}

// A peer on 127.0.0.1 that reads one request (up to the end of its headers) and then runs `act`
// on the connection.
class RawPeer {
 public:
  explicit RawPeer(std::function<void(int fd)> act) : act_(std::move(act)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 4);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    t_ = std::thread([this] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string got;
      char buf[4096];
      while (got.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, size_t(n));
      }
      act_(c);
      ::close(c);
    });
  }
  ~RawPeer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    t_.join();
  }
  uint16_t port() const { return port_; }

 private:
  std::function<void(int)> act_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread t_;
};

void send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    s.remove_prefix(size_t(n));
  }
}

// One request to a raw peer: the head's result and, when it came, the body's.
struct Outcome {
  bool head_ok = false;
  std::string head_error;
  int status = 0;
  bool body_ok = false;
  std::string body_error;
  std::string body;
};

Outcome ask(uint16_t port, ClientOptions co = {}) {
  Outcome o;
  auto c = ClientConnection::connect_tcp("127.0.0.1", port, co);
  EXPECT_TRUE(c.has_value()) << c.status().message();
  if (!c) return o;
  auto head = (*c)->send("GET", "/x", {}, "");
  o.head_ok = head.has_value();
  if (!head) {
    o.head_error = head.status().message();
    return o;
  }
  o.status = head->status;
  auto body = (*c)->read_body([&](std::string_view p) {
    o.body.append(p);
    return true;
  });
  o.body_ok = body.has_value();
  if (!body) o.body_error = body.status().message();
  return o;
}

}  // namespace

TEST(HttpClient, GetAndPostOverTcp) {
  auto server = start({"127.0.0.1"}, echo);
  ASSERT_TRUE(server);
  auto c = ClientConnection::connect_tcp("127.0.0.1", uint16_t(server->port()));
  ASSERT_TRUE(c.has_value()) << c.status().message();
  auto r = (*c)->request("GET", "/a?b=1", {{"X-Test", "t1"}}, "");
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(r->first.status, 200);
  EXPECT_EQ(r->second, "GET /a?b=1||t1");
  ASSERT_NE(r->first.header("X-REPLY"), nullptr);
  EXPECT_EQ(*r->first.header("x-reply"), "yes");
  EXPECT_TRUE((*c)->reusable());
  // A second request on the same connection (keep-alive), with a large body.
  const std::string big(300000, 'q');
  r = (*c)->request("POST", "/p", {{"Content-Type", "text/plain"}}, big);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(r->second, "POST /p|" + big + "|");
  server->shutdown();
}

TEST(HttpClient, UnixSocketAndStreamedBodyArrivesInPieces) {
  const std::string sock =
      (std::filesystem::temp_directory_path() / ("loom-client-" + std::to_string(getpid()) + ".sock")).string();
  std::atomic<bool> release{false};
  auto server = start({sock}, [&](Request&&, std::shared_ptr<Response> res) {
    std::thread([res, &release] {
      res->begin_stream(200, "text/event-stream");
      res->write("data: 1\n\n");
      // The second piece only after the client has seen the first: the body is not collected first.
      const auto t0 = Clock::now();
      while (!release && Clock::now() - t0 < 5s) std::this_thread::sleep_for(1ms);
      res->write("data: 2\n\n");
      res->end();
    }).detach();
  });
  ASSERT_TRUE(server);
  auto c = ClientConnection::connect_unix(sock);
  ASSERT_TRUE(c.has_value()) << c.status().message();
  auto head = (*c)->send("POST", "/s", {}, "{}");
  ASSERT_TRUE(head.has_value()) << head.status().message();
  EXPECT_EQ(head->status, 200);
  ASSERT_NE(head->header("transfer-encoding"), nullptr);
  std::vector<std::string> pieces;
  auto body = (*c)->read_body([&](std::string_view p) {
    pieces.emplace_back(p);
    if (pieces.size() == 1) release = true;
    return true;
  });
  ASSERT_TRUE(body.has_value()) << body.status().message();
  ASSERT_GE(pieces.size(), 2u);
  EXPECT_EQ(pieces[0], "data: 1\n\n");
  std::string all;
  for (auto& p : pieces) all += p;
  EXPECT_EQ(all, "data: 1\n\ndata: 2\n\n");
  server->shutdown();
}

TEST(HttpClient, ErrorStatusesAndHead) {
  auto server = start({"127.0.0.1"}, [](Request&& req, std::shared_ptr<Response> res) {
    if (req.method == "HEAD") return res->send(200, "text/plain", "not sent for HEAD");
    res->send_error(404, "nothing here");
  });
  ASSERT_TRUE(server);
  auto c = ClientConnection::connect_tcp("127.0.0.1", uint16_t(server->port()));
  ASSERT_TRUE(c.has_value());
  auto r = (*c)->request("GET", "/none", {}, "");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first.status, 404);
  EXPECT_NE(r->second.find("nothing here"), std::string::npos);
  auto c2 = ClientConnection::connect_tcp("127.0.0.1", uint16_t(server->port()));
  ASSERT_TRUE(c2.has_value());
  r = (*c2)->request("HEAD", "/h", {}, "");
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_EQ(r->first.status, 200);
  EXPECT_EQ(r->second, "");
  server->shutdown();
}

TEST(HttpClient, ConnectFailures) {
  auto c = ClientConnection::connect_unix("/nonexistent/loom/x.sock");
  EXPECT_FALSE(c.has_value());
  // A port nobody listens on: take a free one and close it.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  auto t = ClientConnection::connect_tcp("127.0.0.1", ntohs(a.sin_port));
  EXPECT_FALSE(t.has_value());
}

TEST(HttpClient, GarbageStatusLine) {
  for (const char* reply : {"HTTP/2 200 OK\r\n\r\n", "hello world\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n",
                            "HTTP/1.1 200OK\r\n\r\n", "\x01\x02\x03\r\n\r\n", "HTTP/1.1 099 Low\r\n\r\n"}) {
    RawPeer peer([&](int fd) { send_all(fd, reply); });
    const Outcome o = ask(peer.port());
    EXPECT_FALSE(o.head_ok) << reply;
    EXPECT_NE(o.head_error.find("malformed status line"), std::string::npos) << o.head_error;
  }
}

TEST(HttpClient, BadHeaders) {
  for (const char* reply :
       {"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"}) {
    RawPeer peer([&](int fd) { send_all(fd, reply); });
    const Outcome o = ask(peer.port());
    EXPECT_FALSE(o.head_ok) << reply;
  }
}

TEST(HttpClient, PeerClosesEarly) {
  {
    RawPeer peer([](int) {});  // closes without a byte
    const Outcome o = ask(peer.port());
    EXPECT_FALSE(o.head_ok);
    EXPECT_NE(o.head_error.find("without answering"), std::string::npos) << o.head_error;
  }
  {
    RawPeer peer([](int fd) { send_all(fd, "HTTP/1.1 200 OK\r\nContent-Le"); });  // inside the headers
    const Outcome o = ask(peer.port());
    EXPECT_FALSE(o.head_ok);
    EXPECT_NE(o.head_error.find("inside the response headers"), std::string::npos) << o.head_error;
  }
  {
    RawPeer peer([](int fd) { send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345"); });  // short body
    const Outcome o = ask(peer.port());
    ASSERT_TRUE(o.head_ok) << o.head_error;
    EXPECT_FALSE(o.body_ok);
    EXPECT_EQ(o.body, "12345");
    EXPECT_NE(o.body_error.find("truncated body"), std::string::npos) << o.body_error;
  }
}

TEST(HttpClient, ChunkedBodies) {
  {
    RawPeer peer([](int fd) {
      send_all(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\n");
      std::this_thread::sleep_for(20ms);
      send_all(fd, "5\r\nworld\r\n0\r\nTrailer: x\r\n\r\n");
    });
    const Outcome o = ask(peer.port());
    ASSERT_TRUE(o.body_ok) << o.body_error;
    EXPECT_EQ(o.body, "hello world");
  }
  // Truncated: the peer closes inside a chunk, in a size line, and before the last chunk.
  for (const char* reply : {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly part",
                            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
                            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1"}) {
    RawPeer peer([&](int fd) { send_all(fd, reply); });
    const Outcome o = ask(peer.port());
    ASSERT_TRUE(o.head_ok) << o.head_error;
    EXPECT_FALSE(o.body_ok) << reply;
    EXPECT_NE(o.body_error.find("truncated chunked body"), std::string::npos) << o.body_error;
  }
  // Malformed: a size that is not hex, a chunk not followed by CRLF.
  for (const char* reply : {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
                            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n"}) {
    RawPeer peer([&](int fd) { send_all(fd, reply); });
    const Outcome o = ask(peer.port());
    ASSERT_TRUE(o.head_ok) << o.head_error;
    EXPECT_FALSE(o.body_ok) << reply;
  }
}

TEST(HttpClient, BodyUntilCloseAndInterimResponses) {
  RawPeer peer([](int fd) {
    send_all(fd, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of ");
    std::this_thread::sleep_for(10ms);
    send_all(fd, "it");
  });
  const Outcome o = ask(peer.port());
  ASSERT_TRUE(o.body_ok) << o.body_error;
  EXPECT_EQ(o.status, 200);
  EXPECT_EQ(o.body, "all of it");
}

TEST(HttpClient, TimeoutAndAbort) {
  {
    // A silent peer: the head times out after io_timeout.
    RawPeer peer([](int) { std::this_thread::sleep_for(1000ms); });
    ClientOptions co;
    co.io_timeout = 200ms;
    const auto t0 = Clock::now();
    const Outcome o = ask(peer.port(), co);
    EXPECT_FALSE(o.head_ok);
    EXPECT_NE(o.head_error.find("timed out"), std::string::npos) << o.head_error;
    EXPECT_LT(Clock::now() - t0, 900ms);
  }
  {
    // abort() from another thread wakes a read blocked in the middle of a stream at once.
    RawPeer peer([](int fd) {
      send_all(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
      std::this_thread::sleep_for(1000ms);
    });
    auto c = ClientConnection::connect_tcp("127.0.0.1", peer.port());
    ASSERT_TRUE(c.has_value());
    ClientConnection* conn = c->get();
    auto head = conn->send("GET", "/", {}, "");
    ASSERT_TRUE(head.has_value()) << head.status().message();
    std::thread aborter([conn] {
      std::this_thread::sleep_for(100ms);
      conn->abort();
    });
    const auto t0 = Clock::now();
    std::string got;
    auto body = conn->read_body([&](std::string_view p) {
      got.append(p);
      return true;
    });
    aborter.join();
    EXPECT_FALSE(body.has_value());
    EXPECT_EQ(got, "abc");
    EXPECT_EQ(body.status().message(), "aborted");
    EXPECT_LT(Clock::now() - t0, 800ms);
    EXPECT_FALSE(conn->send("GET", "/", {}, "").has_value());
  }
}

TEST(HttpClient, ReaderStops) {
  RawPeer peer([](int fd) { send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabcdef"); });
  auto c = ClientConnection::connect_tcp("127.0.0.1", peer.port());
  ASSERT_TRUE(c.has_value());
  ASSERT_TRUE((*c)->send("GET", "/", {}, "").has_value());
  auto body = (*c)->read_body([](std::string_view) { return false; });
  EXPECT_FALSE(body.has_value());
  EXPECT_EQ(body.status().message(), "stopped by the reader");
  EXPECT_FALSE((*c)->reusable());
}

TEST(HttpClient, OversizedHeaders) {
  RawPeer peer([](int fd) { send_all(fd, "HTTP/1.1 200 OK\r\nX-Big: " + std::string(100000, 'a') + "\r\n\r\n"); });
  const Outcome o = ask(peer.port());
  EXPECT_FALSE(o.head_ok);
  EXPECT_NE(o.head_error.find("larger than"), std::string::npos) << o.head_error;
}
