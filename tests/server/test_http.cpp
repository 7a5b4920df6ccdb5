// loom_http: RequestParser alone, then the Server over raw sockets on 127.0.0.1 (ephemeral ports).
// Timing assertions are generous (a loaded 2-core machine) but still far below the timeouts they
// are told apart from.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "http_parser.h"
#include "http_server.h"

using namespace loom::http;
using namespace std::chrono_literals;
using namespace std::string_literals;
using Clock = std::chrono::steady_clock;

namespace {

// "Prompt" bounds are loose, and looser still in the sanitizer builds (several times slower).
#ifdef LOOM_HTTP_SANITIZER
constexpr double kSlack = 3;
#else
constexpr double kSlack = 1;
#endif

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// ---- RequestParser ------------------------------------------------------------------------------

struct Parsed {
  bool complete = false;
  bool failed = false;
  int status = 0;
  size_t consumed = 0;
  Request req;
};

// Feeds `in` in pieces of `piece` bytes (0: all at once), as a server would after each read.
Parsed parse(std::string_view in, size_t piece = 0, ParserLimits limits = {}) {
  RequestParser p(limits);
  Parsed r;
  if (piece == 0) piece = in.size() + 1;
  while (r.consumed < in.size() && !p.complete() && !p.failed()) {
    const std::string_view part = in.substr(r.consumed, piece);
    const size_t used = p.feed(part);
    r.consumed += used;
    if (used < part.size()) break;
  }
  r.complete = p.complete();
  r.failed = p.failed();
  r.status = p.error_status();
  r.req = p.request();
  return r;
}

// Feeds in random-sized pieces (1..max_piece) from a seed.
Parsed parse_random_split(std::string_view in, uint32_t seed, size_t max_piece = 9) {
  RequestParser p;
  std::mt19937 rng(seed);
  Parsed r;
  while (r.consumed < in.size() && !p.complete() && !p.failed()) {
    const size_t n = 1 + rng() % max_piece;
    const std::string_view part = in.substr(r.consumed, n);
    const size_t used = p.feed(part);
    r.consumed += used;
    if (used < part.size()) break;
  }
  r.complete = p.complete();
  r.failed = p.failed();
  r.status = p.error_status();
  r.req = p.request();
  return r;
}

void expect_same(const Parsed& a, const Parsed& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.complete, b.complete);
  EXPECT_EQ(a.failed, b.failed);
  EXPECT_EQ(a.status, b.status);
  if (!a.complete || !b.complete) return;
  EXPECT_EQ(a.consumed, b.consumed);
  EXPECT_EQ(a.req.method, b.req.method);
  EXPECT_EQ(a.req.target, b.req.target);
  EXPECT_EQ(a.req.path, b.req.path);
  EXPECT_EQ(a.req.decoded_path, b.req.decoded_path);
  EXPECT_EQ(a.req.query, b.req.query);
  EXPECT_EQ(a.req.version_minor, b.req.version_minor);
  EXPECT_EQ(a.req.headers, b.req.headers);
  EXPECT_EQ(a.req.body, b.req.body);
}

TEST(HttpParser, SimpleGet) {
  const Parsed r = parse(
      "GET /v1/a%20b/c?x=1&y=%41 HTTP/1.1\r\nHost: localhost:8080\r\nX-Thing:  spaced value \t\r\n"
      "ACCEPT: */*\r\n\r\n");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.req.method, "GET");
  EXPECT_EQ(r.req.target, "/v1/a%20b/c?x=1&y=%41");
  EXPECT_EQ(r.req.path, "/v1/a%20b/c");
  EXPECT_EQ(r.req.decoded_path, "/v1/a b/c");
  EXPECT_EQ(r.req.query, "x=1&y=%41");
  EXPECT_EQ(r.req.version_major, 1);
  EXPECT_EQ(r.req.version_minor, 1);
  ASSERT_EQ(r.req.headers.size(), 3u);
  EXPECT_EQ(r.req.headers[0].first, "host");
  EXPECT_EQ(r.req.headers[2].first, "accept");
  ASSERT_NE(r.req.header("X-THING"), nullptr);
  EXPECT_EQ(*r.req.header("x-thing"), "spaced value");
  EXPECT_EQ(r.req.header("missing"), nullptr);
  EXPECT_TRUE(r.req.body.empty());
}

TEST(HttpParser, BodiesAndForms) {
  Parsed r = parse("POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloEXTRA");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.req.body, "hello");
  EXPECT_EQ(r.consumed, std::string("POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello").size());

  r = parse(
      "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n"
      "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer-A: x\r\n\r\n");
  ASSERT_TRUE(r.complete) << r.status;
  EXPECT_EQ(r.req.body, "hello world");
  EXPECT_EQ(r.req.header("trailer-a"), nullptr);  // trailers are not merged

  r = parse("GET http://example.com:80/abs/p?q=2 HTTP/1.1\nHost: example.com\n\n");  // bare LF
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.req.path, "/abs/p");
  EXPECT_EQ(r.req.query, "q=2");

  r = parse("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.req.path, "*");

  r = parse("\r\n\r\nGET / HTTP/1.0\r\n\r\n");  // empty lines first; HTTP/1.0 needs no Host
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.req.version_minor, 0);

  r = parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\nabc");  // same value twice
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.req.body, "abc");
}

TEST(HttpParser, ConnectionSemantics) {
  RequestParser p;
  p.feed("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_TRUE(p.keep_alive());
  p.reset();
  p.feed("GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, Close\r\n\r\n");
  EXPECT_FALSE(p.keep_alive());
  p.reset();
  p.feed("GET / HTTP/1.0\r\n\r\n");
  EXPECT_FALSE(p.keep_alive());
  p.reset();
  p.feed("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  EXPECT_TRUE(p.keep_alive());
}

TEST(HttpParser, ExpectContinueAndHeadersComplete) {
  RequestParser p;
  const std::string head = "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n";
  EXPECT_EQ(p.feed(head.substr(0, 10)), 10u);
  EXPECT_TRUE(p.started());
  EXPECT_FALSE(p.headers_complete());
  EXPECT_EQ(p.feed(head.substr(10)), head.size() - 10);
  EXPECT_TRUE(p.headers_complete());
  EXPECT_TRUE(p.expects_continue());
  EXPECT_FALSE(p.complete());
  EXPECT_EQ(p.content_length(), 4u);
  p.feed("ab");
  p.feed("cd");
  ASSERT_TRUE(p.complete());
  EXPECT_EQ(p.take_request().body, "abcd");
  EXPECT_FALSE(p.started());  // reset for the next request
  // Empty lines alone do not start a request (the idle timeout still applies).
  p.feed("\r\n");
  EXPECT_FALSE(p.started());
}

TEST(HttpParser, Pipelined) {
  const std::string a = "GET /one HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::string b = "POST /two HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nok";
  const std::string both = a + b;
  RequestParser p;
  const size_t used = p.feed(both);
  EXPECT_EQ(used, a.size());
  ASSERT_TRUE(p.complete());
  EXPECT_EQ(p.feed("more"), 0u);  // nothing more until take_request
  EXPECT_EQ(p.take_request().path, "/one");
  EXPECT_EQ(p.feed(std::string_view(both).substr(used)), b.size());
  ASSERT_TRUE(p.complete());
  const Request r = p.take_request();
  EXPECT_EQ(r.path, "/two");
  EXPECT_EQ(r.body, "ok");
}

TEST(HttpParser, Errors) {
  const std::string big_header = "GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(20000, 'a') + "\r\n\r\n";
  const struct {
    std::string in;
    int status;
  } cases[] = {
      {"garbage\r\n\r\n", 400},
      {"GET /\r\n\r\n", 400},                       // HTTP/0.9
      {"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400},  // two spaces
      {"GET / HTTP/1.1 \r\nHost: h\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET /a\x01 HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET / http/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET / HTTP/1.10\r\nHost: h\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505},
      {"GET / HTTP/1.2\r\nHost: h\r\n\r\n", 505},
      {"GET / HTTP/0.9\r\n\r\n", 505},
      {"GET a/b HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET /%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET /%4 HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET /%00 HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n\r\n", 400},  // no Host
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"GET / HTTP/1.1\rHost: h\r\n\r\n", 400},  // bare CR
      {"GET / HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nBad@Name: v\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nName : v\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nA: b\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nA: b\0c\r\n\r\n"s, 400},
      {"GET / HTTP/1.1\r\nHost: h\r\nA: b\x7f\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 6\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 8388609\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nfffffff\r\n", 413},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nbad trailer\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: h\r\nExpect: something\r\n\r\n", 417},
      {big_header, 431},
      {std::string(20000, '\n'), 431},
  };
  for (const auto& c : cases) {
    for (size_t piece : {size_t{0}, size_t{1}, size_t{7}}) {
      const Parsed r = parse(c.in, piece);
      EXPECT_TRUE(r.failed) << "piece " << piece << ": " << c.in.substr(0, 120);
      EXPECT_EQ(r.status, c.status) << "piece " << piece << ": " << c.in.substr(0, 120);
    }
  }
}

TEST(HttpParser, LimitsAreExact) {
  const ParserLimits small{64, 10};
  const std::string req = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";  // 27 bytes
  std::string at_limit = "GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(64 - 27 - 5, 'a') + "\r\n\r\n";
  ASSERT_EQ(at_limit.size(), 64u);
  EXPECT_TRUE(parse(at_limit, 0, small).complete);
  at_limit.insert(30, "a");
  EXPECT_EQ(parse(at_limit, 0, small).status, 431);
  EXPECT_TRUE(parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789", 0, small).complete);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n", 0, small).status, 413);
  EXPECT_TRUE(parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n",
                    0, ParserLimits{128, 10})
                  .complete);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "5\r\n01234\r\n6\r\n",
                  0, ParserLimits{128, 10})
                .status,
            413);
  (void)req;
}

const std::vector<std::string>& sample_requests() {
  static const std::vector<std::string> v = {
      "GET / HTTP/1.1\r\nHost: h\r\n\r\n",
      "GET /a%2Fb?q=%20 HTTP/1.1\r\nHost: h\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\r\n",
      "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
      "Content-Length: 27\r\n\r\n{\"messages\":[],\"n\":1234567}",
      "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "a;name=value\r\n0123456789\r\n1\r\nx\r\n0\r\nExpires: never\r\n\r\n",
      "GET /lf HTTP/1.1\nHost: h\nX: y\n\n",
      "\r\n\nHEAD /h HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
      "PUT http://host:1/p?x HTTP/1.1\r\nHost: host:1\r\nContent-Length: 0\r\n\r\n",
      "GET /pipe HTTP/1.1\r\nHost: h\r\n\r\nGET /second HTTP/1.1\r\nHost: h\r\n\r\n",
  };
  return v;
}

TEST(HttpParser, IncrementalEqualsWhole) {
  for (const std::string& in : sample_requests()) {
    const Parsed whole = parse(in);
    ASSERT_TRUE(whole.complete) << in;
    expect_same(whole, parse(in, 1), "byte by byte: " + in);
    expect_same(whole, parse(in, 2), "pairs: " + in);
    for (uint32_t seed = 0; seed < 20; ++seed) expect_same(whole, parse_random_split(in, seed), "random split: " + in);
  }
}

// Random bytes and mutated requests: never a crash (ASan build), always an allowed status, and the
// outcome never depends on how the bytes were split.
TEST(HttpParser, RandomInputs) {
  std::mt19937 rng(12345);
  const int allowed[] = {400, 413, 417, 431, 501, 505};
  int failed = 0, complete = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::string in;
    if (iter % 2 == 0) {
      const size_t n = rng() % 300;
      for (size_t i = 0; i < n; ++i) in.push_back(static_cast<char>(rng()));
      if (iter % 4 == 0) in = "GET / HTTP/1.1\r\n" + in;
    } else {
      in = sample_requests()[rng() % sample_requests().size()];
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !in.empty(); ++e) {
        const size_t pos = rng() % in.size();
        switch (rng() % 3) {
          case 0: in[pos] = static_cast<char>(rng()); break;
          case 1: in.erase(pos, 1 + rng() % 3); break;
          default: in.insert(pos, 1, "\r\n:; \t0aZ%\x00\xff"[rng() % 13]); break;
        }
      }
    }
    const Parsed whole = parse(in, 0, ParserLimits{1024, 4096});
    if (whole.failed) {
      ++failed;
      EXPECT_NE(std::find(std::begin(allowed), std::end(allowed), whole.status), std::end(allowed)) << whole.status;
    }
    if (whole.complete) ++complete;
    RequestParser p(ParserLimits{1024, 4096});
    Parsed bytewise;
    while (bytewise.consumed < in.size() && !p.complete() && !p.failed())
      bytewise.consumed += p.feed(std::string_view(in).substr(bytewise.consumed, 1));
    bytewise.complete = p.complete();
    bytewise.failed = p.failed();
    bytewise.status = p.error_status();
    bytewise.req = p.request();
    expect_same(whole, bytewise, "random input " + std::to_string(iter));
    if (HasFailure()) break;
  }
  EXPECT_GT(failed, 1000);
  EXPECT_GT(complete, 100);
}

// ---- a raw-socket client ------------------------------------------------------------------------

struct Reply {
  int status = 0;
  Headers headers;  // lower-cased names
  std::string body;
  std::vector<std::string> chunks;
  bool chunked = false;
  const std::string* header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return &v;
    return nullptr;
  }
};

class Client {
 public:
  explicit Client(int port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() { close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send(std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until pred(buffer) holds, EOF or the deadline. Returns pred(buffer).
  bool read_until(const std::function<bool(const std::string&)>& pred, Clock::time_point deadline) {
    while (!pred(buf_)) {
      if (eof_) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char tmp[65536];
      const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) eof_ = true;
      else buf_.append(tmp, static_cast<size_t>(n));
    }
    return true;
  }
  // True when the server closed (EOF or reset) before the deadline; what came first is kept.
  bool wait_closed(std::chrono::milliseconds timeout = 5s) {
    read_until([](const std::string&) { return false; }, Clock::now() + timeout);
    return eof_;
  }
  // One response (after skipping nothing: a "100 Continue" is a response too).
  std::optional<Reply> read_response(std::chrono::milliseconds timeout = 5s, bool head = false) {
    const auto deadline = Clock::now() + timeout;
    size_t hend = 0;
    if (!read_until([&](const std::string& b) { return (hend = b.find("\r\n\r\n")) != b.npos; }, deadline))
      return std::nullopt;
    Reply r;
    const std::string head_text = buf_.substr(0, hend);
    size_t line_end = head_text.find("\r\n");
    const std::string status_line = head_text.substr(0, line_end);
    if (status_line.size() < 12 || status_line.compare(0, 9, "HTTP/1.1 ") != 0) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const size_t start = line_end + 2;
      line_end = head_text.find("\r\n", start);
      const std::string line = head_text.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      r.headers.emplace_back(name, line.substr(v));
    }
    size_t pos = hend + 4;
    const std::string* te = r.header("transfer-encoding");
    const std::string* cl = r.header("content-length");
    if (head || r.status < 200 || r.status == 204 || r.status == 304) {
      // no body
    } else if (te && *te == "chunked") {
      r.chunked = true;
      while (true) {
        size_t le = 0;
        if (!read_until([&](const std::string& b) { return (le = b.find("\r\n", pos)) != b.npos; }, deadline))
          return std::nullopt;
        const size_t size = std::stoul(buf_.substr(pos, le - pos), nullptr, 16);
        if (!read_until([&](const std::string& b) { return b.size() >= le + 2 + size + 2; }, deadline)) return std::nullopt;
        if (size == 0) {
          pos = le + 4;
          break;
        }
        r.chunks.push_back(buf_.substr(le + 2, size));
        r.body += r.chunks.back();
        pos = le + 2 + size + 2;
      }
    } else if (cl) {
      const size_t n = std::stoul(*cl);
      if (!read_until([&](const std::string& b) { return b.size() >= pos + n; }, deadline)) return std::nullopt;
      r.body = buf_.substr(pos, n);
      pos += n;
    } else {
      wait_closed(timeout);
      r.body = buf_.substr(pos);
      pos = buf_.size();
    }
    buf_.erase(0, pos);
    return r;
  }
  std::string& buffer() { return buf_; }
  bool eof() const { return eof_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

std::string get(std::string_view path, std::string_view extra = "") {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + std::string(extra) + "\r\n";
}
std::string post(std::string_view path, std::string_view body, std::string_view extra = "") {
  return "POST " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + std::string(extra) + "\r\n" + std::string(body);
}

// "METHOD path?query|body" and the connection id in a header.
void echo(Request&& req, std::shared_ptr<Response> res) {
  std::string body = req.method + " " + req.decoded_path;
  if (!req.query.empty()) body += "?" + req.query;
  body += "|" + req.body;
  res->send(200, "text/plain", std::move(body), {{"X-Conn", std::to_string(req.connection_id)}});
}

std::unique_ptr<Server> start_server(Handler h, ServerOptions opts = {}) {
  auto s = Server::listen("127.0.0.1", 0, std::move(opts));
  EXPECT_TRUE(s.has_value()) << s.status().message();
  if (!s.has_value()) return nullptr;
  std::unique_ptr<Server> server = std::move(s).value();
  EXPECT_GT(server->port(), 0);
  server->start(std::move(h));
  return server;
}

// A one-shot signal between a handler thread and the test.
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  bool set = false;
  void open() {
    std::lock_guard lk(mu);
    set = true;
    cv.notify_all();
  }
  bool wait(std::chrono::milliseconds t = 5s) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, t, [&] { return set; });
  }
};

template <typename F>
bool eventually(F&& pred, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// ---- Server -------------------------------------------------------------------------------------

TEST(HttpServer, GetAndPost) {
  auto server = start_server(echo);
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send(get("/hello%20world?x=1")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "GET /hello world?x=1|");
  ASSERT_NE(r->header("content-type"), nullptr);
  EXPECT_EQ(*r->header("content-type"), "text/plain");
  EXPECT_NE(r->header("date"), nullptr);
  ASSERT_TRUE(c.send(post("/p", std::string(100000, 'z'))));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "POST /p|" + std::string(100000, 'z'));
  server->shutdown();
}

TEST(HttpServer, RequestFields) {
  std::promise<Request> got;
  auto server = start_server([&](Request&& req, std::shared_ptr<Response> res) {
    res->send(204, "", "");
    got.set_value(std::move(req));
  });
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(
      c.send("PUT /a%2Fb/c?k=v&w HTTP/1.1\r\nHost: x\r\nX-Mixed-Case: Value\r\n"
             "Content-Length: 3\r\n\r\nabc"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->header("content-length"), nullptr);
  auto fut = got.get_future();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  const Request req = fut.get();
  EXPECT_EQ(req.method, "PUT");
  EXPECT_EQ(req.target, "/a%2Fb/c?k=v&w");
  EXPECT_EQ(req.path, "/a%2Fb/c");
  EXPECT_EQ(req.decoded_path, "/a/b/c");
  EXPECT_EQ(req.query, "k=v&w");
  EXPECT_EQ(req.version_minor, 1);
  ASSERT_NE(req.header("x-mixed-case"), nullptr);
  EXPECT_EQ(*req.header("X-Mixed-Case"), "Value");
  EXPECT_EQ(req.headers[1].first, "x-mixed-case");
  EXPECT_EQ(req.body, "abc");
  EXPECT_EQ(req.remote_addr, "127.0.0.1");
  EXPECT_NE(req.remote_port, 0);
  EXPECT_NE(req.connection_id, 0u);
  server->shutdown();
}

TEST(HttpServer, KeepAliveManyRequestsOneConnection) {
  auto server = start_server(echo);
  ASSERT_TRUE(server);
  Client c(server->port());
  std::string conn_id;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(c.send(post("/n", std::to_string(i))));
    auto r = c.read_response();
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->body, "POST /n|" + std::to_string(i));
    ASSERT_NE(r->header("x-conn"), nullptr);
    if (i == 0) conn_id = *r->header("x-conn");
    EXPECT_EQ(*r->header("x-conn"), conn_id);
    EXPECT_EQ(r->header("connection"), nullptr);
  }
  // Connection: close is honoured: the reply says so and the server closes.
  ASSERT_TRUE(c.send(get("/last", "Connection: close\r\n")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  ASSERT_NE(r->header("connection"), nullptr);
  EXPECT_EQ(*r->header("connection"), "close");
  EXPECT_TRUE(c.wait_closed());
  EXPECT_GE(server->stats().requests_total, 21u);
  server->shutdown();
}

TEST(HttpServer, PipelinedRequestsInOrderOneAtATime) {
  std::atomic<int> active{0}, max_active{0};
  auto server = start_server([&](Request&& req, std::shared_ptr<Response> res) {
    const int now = ++active;
    max_active = std::max(max_active.load(), now);
    if (req.path == "/slow") std::this_thread::sleep_for(150ms);
    --active;
    echo(std::move(req), std::move(res));
  });
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.send(get("/slow") + post("/b", "body") + get("/c")));
  auto a = c.read_response();
  auto b = c.read_response();
  auto d = c.read_response();
  ASSERT_TRUE(a && b && d);
  EXPECT_EQ(a->body, "GET /slow|");
  EXPECT_EQ(b->body, "POST /b|body");
  EXPECT_EQ(d->body, "GET /c|");
  EXPECT_EQ(max_active.load(), 1);  // the second was not started before the first was answered
  server->shutdown();
}

// Pipelined requests larger than what the server buffers while one is being handled: it stops
// reading (the client's send blocks) and resumes after each response.
TEST(HttpServer, PipelinedLargeBodies) {
  ServerOptions o;
  o.max_header_bytes = 4096;  // also the most kept while a response is in progress
  auto server = start_server(
      [](Request&& req, std::shared_ptr<Response> res) {
        std::this_thread::sleep_for(20ms);
        res->send(200, "text/plain", std::to_string(req.body.size()) + req.body.substr(0, 1));
      },
      o);
  ASSERT_TRUE(server);
  Client c(server->port());
  std::string all;
  for (char ch : std::string("abcde")) all += post("/p", std::string(300000, ch));
  std::thread sender([&] { EXPECT_TRUE(c.send(all)); });
  for (char ch : std::string("abcde")) {
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "300000" + std::string(1, ch));
  }
  sender.join();
  server->shutdown();
}

TEST(HttpServer, ChunkedRequestBody) {
  auto server = start_server(echo);
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(
      c.send("POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             "4\r\nWiki\r\n5;foo=bar\r\npedia\r\n"));
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(c.send("E\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "POST /chunked|Wikipedia in\r\n\r\nchunks.");
  server->shutdown();
}

TEST(HttpServer, ExpectContinue) {
  auto server = start_server(echo);
  ASSERT_TRUE(server);
  const std::string body(2000, 'b');
  {
    Client c(server->port());
    ASSERT_TRUE(c.send("POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2000\r\n\r\n"));
    auto cont = c.read_response(2s);
    ASSERT_TRUE(cont);
    EXPECT_EQ(cont->status, 100);
    ASSERT_TRUE(c.send(body));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "POST /up|" + body);
  }
  {
    Client c(server->port());
    const auto t0 = Clock::now();
    ASSERT_TRUE(
        c.send("POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
               "Content-Length: 100000000000\r\n\r\n"));
    auto r = c.read_response(2s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);  // instead of 100 Continue
    EXPECT_LT(ms_since(t0), 1000 * kSlack);
    EXPECT_TRUE(c.wait_closed());
  }
  server->shutdown();
}

TEST(HttpServer, TooLargeBodyRejectedWithoutReadingIt) {
  std::atomic<int> calls{0};
  ServerOptions o;
  o.max_body_bytes = 1 << 20;
  auto server = start_server(
      [&](Request&& req, std::shared_ptr<Response> res) {
        ++calls;
        echo(std::move(req), std::move(res));
      },
      o);
  ASSERT_TRUE(server);
  Client c(server->port());
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.send("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n"));
  auto r = c.read_response(2s);  // no body byte was sent
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_LT(ms_since(t0), 1000 * kSlack);
  ASSERT_NE(r->header("connection"), nullptr);
  EXPECT_EQ(*r->header("connection"), "close");
  EXPECT_NE(r->body.find("\"code\":413"), std::string::npos) << r->body;
  EXPECT_TRUE(c.wait_closed());

  // A chunked body that grows past the limit is cut off too.
  Client d(server->port());
  ASSERT_TRUE(d.send("POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = "80000\r\n" + std::string(0x80000, 'c') + "\r\n";
  ASSERT_TRUE(d.send(chunk));
  ASSERT_TRUE(d.send(chunk));  // exactly the limit so far
  d.send(chunk);               // past it; may fail once the server has answered
  r = d.read_response(3s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(calls.load(), 0);
  server->shutdown();
}

TEST(HttpServer, HugeHeaders431) {
  ServerOptions o;
  o.max_header_bytes = 8192;
  auto server = start_server(echo, o);
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(9000, 'h')));  // no end yet
  auto r = c.read_response(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_TRUE(c.wait_closed());
  server->shutdown();
}

TEST(HttpServer, MalformedRequests) {
  auto server = start_server(echo);
  ASSERT_TRUE(server);
  const struct {
    std::string in;
    int status;
  } cases[] = {
      {"GARBAGE\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505},
      {"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nnothex\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: br\r\n\r\n", 501},
  };
  for (const auto& k : cases) {
    Client c(server->port());
    ASSERT_TRUE(c.send(k.in));
    auto r = c.read_response(3s);
    ASSERT_TRUE(r) << k.in;
    EXPECT_EQ(r->status, k.status) << k.in;
    EXPECT_TRUE(c.wait_closed()) << k.in;
  }
  // Random bytes from many seeds: an error reply (or a close), never a crash or a hang.
  for (uint32_t seed = 0; seed < 150; ++seed) {
    std::mt19937 rng(seed);
    std::string junk;
    const size_t n = 1 + rng() % 400;
    for (size_t i = 0; i < n; ++i) junk.push_back(static_cast<char>(rng()));
    junk += "\r\n\r\n";
    Client c(server->port());
    c.send(junk);
    ASSERT_TRUE(c.wait_closed(3s)) << "seed " << seed;
    if (!c.buffer().empty()) {
      const int status = std::stoi(c.buffer().substr(9, 3));
      EXPECT_TRUE(status == 400 || status == 505 || status == 431 || status == 413 || status == 501 || status == 417)
          << "seed " << seed << ": " << c.buffer().substr(0, 40);
    }
  }
  EXPECT_GE(server->stats().bad_requests, 150u);
  Client ok(server->port());  // still serving
  ASSERT_TRUE(ok.send(get("/ok")));
  auto r = ok.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  server->shutdown();
}

// The failure mode of a thread-per-connection server: more header tricklers than it has threads.
// Here each is one deadline: all get 408 when their total header time is up, however steadily
// they send, and meanwhile other clients are served at once.
TEST(HttpServer, SlowHeadersTimeOutWithoutDelayingOthers) {
  ServerOptions o;
  o.header_timeout = 1000ms;
  o.handler_threads = 2;
  auto server = start_server(echo, o);
  ASSERT_TRUE(server);

  constexpr int kSlow = 16;
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < kSlow; ++i) slow.push_back(std::make_unique<Client>(server->port()));
  const std::string trickle = "GET /slow HTTP/1.1\r\nHost: x\r\nX-Trickle: " + std::string(1000, 't');
  std::atomic<bool> stop{false};
  const auto t0 = Clock::now();
  std::thread trickler([&] {
    for (char ch : trickle) {
      for (auto& c : slow)
        if (!stop) c->send(std::string_view(&ch, 1));  // fails once the server has closed: fine
      if (stop) return;
      std::this_thread::sleep_for(100ms);  // steadily, never idle long
    }
  });
  struct Joiner {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Joiner() {
      stop = true;
      t.join();
    }
  } joiner{stop, trickler};

  // Meanwhile another client's requests are answered at once, on one connection and on new ones.
  double worst = 0;
  Client fast(server->port());
  int answered = 0;
  while (ms_since(t0) < 800) {
    const auto t = Clock::now();
    ASSERT_TRUE(fast.send(get("/fast")));
    auto r = fast.read_response(2s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    Client fresh(server->port());
    ASSERT_TRUE(fresh.send(get("/fresh")));
    ASSERT_TRUE(fresh.read_response(2s));
    worst = std::max(worst, ms_since(t));
    ++answered;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_LT(worst, 500 * kSlack) << "a fast client waited behind the slow ones";
  EXPECT_GT(answered, 5);

  double last = 0;
  for (int i = 0; i < kSlow; ++i) {
    auto r = slow[i]->read_response(5s);
    const double elapsed = ms_since(t0);
    last = std::max(last, elapsed);
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 408);
    EXPECT_GE(elapsed, 950);
    EXPECT_LT(elapsed, 3000 * kSlack);
    EXPECT_TRUE(slow[i]->wait_closed());
  }
  EXPECT_GE(server->stats().timeouts, uint64_t{kSlow});
  std::printf(
      "[          ] worst fast-client latency %.1f ms over %d rounds; %d tricklers all 408 by"
      " %.0f ms\n",
      worst, answered, kSlow, last);
  server->shutdown();
}

TEST(HttpServer, BodyAndIdleTimeouts) {
  ServerOptions o;
  o.body_timeout = 300ms;
  o.keepalive_timeout = 300ms;
  auto server = start_server(echo, o);
  ASSERT_TRUE(server);
  Client body(server->port());
  ASSERT_TRUE(body.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"));
  auto r = body.read_response(3s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);

  Client idle(server->port());  // never sends a byte: closed quietly
  const auto t0 = Clock::now();
  EXPECT_TRUE(idle.wait_closed(3s));
  EXPECT_TRUE(idle.buffer().empty());
  EXPECT_GE(ms_since(t0), 250);

  Client kept(server->port());  // idle after a request: closed quietly too
  ASSERT_TRUE(kept.send(get("/")));
  ASSERT_TRUE(kept.read_response());
  EXPECT_TRUE(kept.wait_closed(3s));
  EXPECT_TRUE(kept.buffer().empty());
  server->shutdown();
}

TEST(HttpServer, StreamingChunksArriveIncrementally) {
  Latch first_seen;
  auto server = start_server([&](Request&& req, std::shared_ptr<Response> res) {
    if (req.path == "/again") return res->send(200, "text/plain", "again");
    ASSERT_TRUE(res->begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}));
    EXPECT_TRUE(res->write("data: first\n\n"));
    first_seen.wait();  // the client must see the first chunk while the stream is still open
    EXPECT_TRUE(res->write("data: second\n\n"));
    EXPECT_TRUE(res->write(""));  // nothing, and in particular not a terminating chunk
    res->end();
    EXPECT_FALSE(res->write("late"));
  });
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.send(get("/stream")));
  ASSERT_TRUE(c.read_until([](const std::string& b) { return b.find("data: first") != b.npos; }, Clock::now() + 3s));
  EXPECT_EQ(c.buffer().find("data: second"), std::string::npos);
  first_seen.open();
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->chunked);
  ASSERT_EQ(r->chunks.size(), 2u);
  EXPECT_EQ(r->chunks[0], "data: first\n\n");
  EXPECT_EQ(r->chunks[1], "data: second\n\n");
  ASSERT_NE(r->header("cache-control"), nullptr);
  // The connection is reusable after a streamed response.
  ASSERT_TRUE(c.send(get("/again")));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "again");
  server->shutdown();
}

TEST(HttpServer, StreamFromAnotherThread) {
  std::mutex mu;
  std::vector<std::shared_ptr<Response>> kept;
  auto server = start_server([&](Request&&, std::shared_ptr<Response> res) {
    res->begin_stream(200, "text/event-stream");
    std::lock_guard lk(mu);
    kept.push_back(std::move(res));  // the "scheduler" writes later
  });
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.send(get("/s")));
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lk(mu);
    return kept.size() == 1;
  }));
  std::thread scheduler([&] {
    std::shared_ptr<Response> res;
    {
      std::lock_guard lk(mu);
      res = std::move(kept[0]);
      kept.clear();
    }
    for (int i = 0; i < 50; ++i) EXPECT_TRUE(res->write("tok" + std::to_string(i) + " "));
    res->end();
  });
  auto r = c.read_response();
  scheduler.join();
  ASSERT_TRUE(r);
  std::string want;
  for (int i = 0; i < 50; ++i) want += "tok" + std::to_string(i) + " ";
  EXPECT_EQ(r->body, want);
  // The client can have the last byte before the I/O thread has noted the response complete.
  EXPECT_TRUE(eventually([&] { return server->open_streams() == 0; }));
  server->shutdown();
}

TEST(HttpServer, ClientDisconnectMidStreamIsNoticedAtOnce) {
  std::atomic<int> fired{0};
  std::atomic<int64_t> fired_at{0};
  std::shared_ptr<Response> kept;
  Latch ready;
  auto server = start_server([&](Request&&, std::shared_ptr<Response> res) {
    res->begin_stream(200, "text/event-stream");
    res->write("data: hello\n\n");
    res->on_disconnect([&] {
      fired_at = Clock::now().time_since_epoch().count();
      ++fired;
    });
    kept = res;
    ready.open();
  });
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.send(get("/s")));
  ASSERT_TRUE(c.read_until([](const std::string& b) { return b.find("hello") != b.npos; }, Clock::now() + 3s));
  ASSERT_TRUE(ready.wait());
  // The stream is idle (the "model" is thinking): the close must be noticed without a write.
  const auto closed_at = Clock::now();
  c.close();
  ASSERT_TRUE(eventually([&] { return fired.load() > 0; }, 3s));
  const double latency =
      std::chrono::duration<double, std::milli>(Clock::duration(fired_at.load()) - closed_at.time_since_epoch()).count();
  EXPECT_LT(latency, 500 * kSlack);
  std::printf("[          ] on_disconnect %.2f ms after the client closed\n", latency);
  EXPECT_TRUE(kept->client_gone());
  EXPECT_FALSE(kept->write("data: more\n\n"));
  kept->end();
  std::atomic<int> late{0};
  kept->on_disconnect([&] { ++late; });  // gone already: runs at once
  EXPECT_EQ(late.load(), 1);
  EXPECT_EQ(fired.load(), 1);  // exactly once
  EXPECT_EQ(server->open_streams(), 0u);
  EXPECT_GE(server->stats().client_disconnects, 1u);
  kept.reset();
  server->shutdown();
}

TEST(HttpServer, SlowReaderPastOutputCapIsDropped) {
  ServerOptions o;
  o.max_output_bytes = 1 << 20;
  std::atomic<int> fired{0};
  std::atomic<bool> failed{false};
  std::atomic<size_t> written{0};
  auto server = start_server(
      [&](Request&&, std::shared_ptr<Response> res) {
        res->on_disconnect([&] { ++fired; });
        res->begin_stream(200, "text/event-stream");
        const std::string chunk(64 * 1024, 'x');
        for (int i = 0; i < 4000; ++i) {  // at most 256 MiB
          if (!res->write(chunk)) {
            failed = true;
            return;
          }
          written += chunk.size();
        }
      },
      o);
  ASSERT_TRUE(server);
  Client c(server->port(), 4096);  // a small receive window, and it never reads
  ASSERT_TRUE(c.send(get("/flood")));
  ASSERT_TRUE(eventually([&] { return failed.load(); }, 10s));
  EXPECT_TRUE(eventually([&] { return fired.load() == 1; }, 2s));
  EXPECT_LT(written.load(), size_t{64} << 20);  // dropped near the cap plus the socket buffers
  EXPECT_EQ(server->open_streams(), 0u);
  EXPECT_TRUE(c.wait_closed(3s));
  server->shutdown();
}

TEST(HttpServer, StalledReaderHitsWriteTimeout) {
  ServerOptions o;
  o.write_timeout = 300ms;
  std::atomic<int> fired{0};
  std::shared_ptr<Response> kept;
  Latch ready;
  auto server = start_server(
      [&](Request&&, std::shared_ptr<Response> res) {
        res->on_disconnect([&] { ++fired; });
        res->begin_stream(200, "application/octet-stream");
        const std::string chunk(64 * 1024, 'y');
        for (int i = 0; i < 128; ++i) res->write(chunk);  // 8 MiB: more than the socket buffers hold
        kept = res;
        ready.open();
      },
      o);
  ASSERT_TRUE(server);
  Client c(server->port(), 4096);
  ASSERT_TRUE(c.send(get("/stall")));
  ASSERT_TRUE(ready.wait());
  const auto t0 = Clock::now();
  ASSERT_TRUE(eventually([&] { return fired.load() == 1; }, 5s));
  EXPECT_LT(ms_since(t0), 3000 * kSlack);
  EXPECT_TRUE(kept->client_gone());
  EXPECT_FALSE(kept->write("z"));
  EXPECT_GE(server->stats().timeouts, 1u);
  kept.reset();
  server->shutdown();
}

TEST(HttpServer, TwoHundredConcurrentConnections) {
  ServerOptions o;
  o.handler_threads = 4;
  auto server = start_server(echo, o);
  ASSERT_TRUE(server);
  constexpr int kN = 200;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kN; ++i) {
    clients.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(clients.back()->connected()) << i;
  }
  for (int i = 0; i < kN; ++i) ASSERT_TRUE(clients[i]->send(post("/c", std::to_string(i))));
  std::set<std::string> ids;
  for (int i = 0; i < kN; ++i) {
    auto r = clients[i]->read_response(10s);
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->body, "POST /c|" + std::to_string(i));
    ids.insert(*r->header("x-conn"));
  }
  EXPECT_EQ(ids.size(), size_t{kN});
  EXPECT_EQ(server->stats().connections_open, uint64_t{kN});
  clients.clear();
  EXPECT_TRUE(eventually([&] { return server->stats().connections_open == 0; }));
  server->shutdown();
}

TEST(HttpServer, MaxConnections) {
  ServerOptions o;
  o.max_connections = 2;
  auto server = start_server(echo, o);
  ASSERT_TRUE(server);
  Client a(server->port()), b(server->port());
  ASSERT_TRUE(a.send(get("/a")) && b.send(get("/b")));
  ASSERT_TRUE(a.read_response() && b.read_response());
  Client extra(server->port());
  EXPECT_TRUE(extra.wait_closed(3s));
  if (!extra.buffer().empty()) {
    EXPECT_EQ(extra.buffer().substr(0, 12), "HTTP/1.1 503");
  }
  EXPECT_GE(server->stats().connections_rejected, 1u);
  ASSERT_TRUE(a.send(get("/again")));
  EXPECT_TRUE(a.read_response());
  server->shutdown();
}

TEST(HttpServer, DroppedResponseGives500AndThrowingHandlerToo) {
  std::atomic<int> logged{0};
  ServerOptions o;
  o.log = [&](std::string_view) { ++logged; };
  auto server = start_server(
      [](Request&& req, std::shared_ptr<Response>) {
        if (req.path == "/throw") throw std::runtime_error("boom");
        // else: returns without replying
      },
      o);
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.send(get("/drop")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_NE(r->body.find("\"type\":\"server_error\""), std::string::npos) << r->body;
  ASSERT_TRUE(c.send(get("/throw")));  // same connection: still usable
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_TRUE(eventually([&] { return logged.load() == 1; }));  // logged after the 500 went out
  server->shutdown();
}

TEST(HttpServer, HeadAndHttp10) {
  auto server = start_server([](Request&& req, std::shared_ptr<Response> res) {
    if (req.path == "/stream") {
      res->begin_stream(200, "text/plain");
      res->write("one ");
      res->write("two");
      res->end();
      return;
    }
    res->send(200, "text/plain", "0123456789");
  });
  ASSERT_TRUE(server);
  {
    Client c(server->port());
    ASSERT_TRUE(c.send("HEAD / HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = c.read_response(5s, true);
    ASSERT_TRUE(r);
    EXPECT_EQ(*r->header("content-length"), "10");
    ASSERT_TRUE(c.send(get("/")));  // no stray body came before this reply
    r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "0123456789");
  }
  {
    Client c(server->port());
    ASSERT_TRUE(c.send("GET / HTTP/1.0\r\n\r\n"));  // closes by default
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "0123456789");
    EXPECT_TRUE(c.wait_closed());
  }
  {
    Client c(server->port());
    ASSERT_TRUE(c.send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(*r->header("connection"), "keep-alive");
    ASSERT_TRUE(c.send("GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    r = c.read_response();  // no chunked encoding for 1.0: the body ends with the connection
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->chunked);
    EXPECT_EQ(r->body, "one two");
    EXPECT_TRUE(c.eof());
  }
  server->shutdown();
}

TEST(HttpServer, CustomErrorBody) {
  ServerOptions o;
  o.error_body = [](int status, std::string_view msg) {
    std::string out = "E";  // (not "E" + ...: GCC 12 warns falsely, -Wrestrict)
    out.append(std::to_string(status)).append(":").append(msg);
    return out;
  };
  o.error_content_type = "text/plain";
  auto server = start_server([](Request&&, std::shared_ptr<Response> res) { res->send_error(404, "no such model"); }, o);
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.send(get("/x")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, "E404:no such model");
  EXPECT_EQ(*r->header("content-type"), "text/plain");
  Client bad(server->port());
  ASSERT_TRUE(bad.send("BAD\r\n\r\n"));
  r = bad.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body.substr(0, 5), "E400:");
  EXPECT_EQ(default_error_body(400, "a \"quoted\"\n"),
            "{\"error\":{\"message\":\"a \\\"quoted\\\"\\u000a\",\"type\":\"invalid_request_error\",\"code\":400}}");
  server->shutdown();
}

TEST(HttpServer, ResponseHeadersCannotBeSplit) {
  auto server = start_server([](Request&&, std::shared_ptr<Response> res) {
    res->send(200, "text/plain", "ok",
              {{"X-Good", "1"}, {"X-Bad", "a\r\nInjected: yes"}, {"Content-Length", "999"}, {"Bad Name", "v"}});
  });
  ASSERT_TRUE(server);
  Client c(server->port());
  ASSERT_TRUE(c.send(get("/")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "ok");
  EXPECT_NE(r->header("x-good"), nullptr);
  EXPECT_EQ(r->header("injected"), nullptr);
  EXPECT_EQ(r->header("x-bad"), nullptr);
  EXPECT_EQ(*r->header("content-length"), "2");
  server->shutdown();
}

TEST(HttpServer, DrainWaitsForResponsesInFlight) {
  std::thread late;
  std::atomic<bool> slow_started{false};
  auto server = start_server([&](Request&& req, std::shared_ptr<Response> res) {
    if (req.path != "/slow") return echo(std::move(req), std::move(res));
    slow_started = true;
    late = std::thread([res] {
      std::this_thread::sleep_for(200ms);
      res->send(200, "text/plain", "finally");
    });
  });
  ASSERT_TRUE(server);
  const int port = server->port();
  Client idle(port);
  ASSERT_TRUE(idle.send(get("/")));
  ASSERT_TRUE(idle.read_response());
  Client c(port);
  ASSERT_TRUE(c.send(get("/slow")));
  // (Not open_streams() == 1: the first exchange may still count until the I/O thread has seen
  // its last byte go out, and a request not yet received when drain() starts is cut off.)
  ASSERT_TRUE(eventually([&] { return slow_started.load(); }));
  EXPECT_EQ(server->open_streams(), 1u);
  const auto t0 = Clock::now();
  EXPECT_TRUE(server->drain(5s));
  EXPECT_LT(ms_since(t0), 3000 * kSlack);
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "finally");
  ASSERT_NE(r->header("connection"), nullptr);
  EXPECT_EQ(*r->header("connection"), "close");
  EXPECT_TRUE(idle.wait_closed());  // idle keep-alive connections were closed
  Client refused(port);
  EXPECT_FALSE(refused.connected() && refused.send(get("/")) && refused.read_response(1s));
  late.join();
}

TEST(HttpServer, ShutdownWithOpenStreams) {
  std::atomic<int> handler_saw_failure{0}, disconnects{0};
  std::shared_ptr<Response> outliving;  // written to after the Server is gone
  std::mutex mu;
  auto server = start_server([&](Request&& req, std::shared_ptr<Response> res) {
    res->on_disconnect([&] { ++disconnects; });
    res->begin_stream(200, "text/event-stream");
    if (req.path == "/keep") {
      std::lock_guard lk(mu);
      outliving = res;
      return;
    }
    // A handler that streams on its pool thread until the client is gone.
    for (int i = 0; i < 100000; ++i) {
      if (!res->write("data: tick\n\n")) {
        ++handler_saw_failure;
        return;
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<Client>> clients;
  for (const char* path : {"/a", "/b", "/c", "/keep"}) {
    clients.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(clients.back()->send(get(path)));
  }
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(clients[i]->read_until([](const std::string& b) { return b.find("tick") != b.npos; }, Clock::now() + 3s));
  ASSERT_TRUE(eventually([&] { return server->open_streams() == 4; }));
  // Requests handed over but not yet picked up by a pool thread would be dropped by shutdown():
  // wait for the fourth handler to have run.
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lk(mu);
    return outliving != nullptr;
  }));
  server->stop_accepting();
  EXPECT_TRUE(eventually(
      [&] {
        Client late(server->port());
        return !late.connected();
      },
      2s));
  EXPECT_EQ(server->open_streams(), 4u);  // streams keep going while not accepting
  const auto t0 = Clock::now();
  server->shutdown();
  EXPECT_LT(ms_since(t0), 2000 * kSlack);
  EXPECT_EQ(handler_saw_failure.load(), 3);
  EXPECT_EQ(disconnects.load(), 4);
  for (auto& c : clients) EXPECT_TRUE(c->wait_closed(2s));
  server.reset();
  std::lock_guard lk(mu);
  ASSERT_TRUE(outliving);
  EXPECT_TRUE(outliving->client_gone());
  EXPECT_FALSE(outliving->write("after the server is gone"));
  outliving->end();
  outliving.reset();
}

TEST(HttpServer, ListenErrors) {
  auto a = Server::listen("127.0.0.1", 0);
  ASSERT_TRUE(a.has_value());
  auto b = Server::listen("127.0.0.1", static_cast<uint16_t>((*a)->port()));
  EXPECT_FALSE(b.has_value());  // in use
  auto c = Server::listen("no-such-host.invalid", 0);
  EXPECT_FALSE(c.has_value());
  (*a)->shutdown();  // never started: fine
}

}  // namespace
