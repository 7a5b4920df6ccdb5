// loom_http's client: blocking HTTP/1.1 over a UNIX socket or TCP, one request at a time on one
// connection. Made for `loom serve`'s router (router.cpp), which relays each request to the child
// server of its model and each response back as it arrives, so the body is handed to a callback
// piece by piece (Content-Length, chunked, or up to the close), never collected first.
//
//   auto c = loom::http::ClientConnection::connect_unix("/tmp/x/0.sock", {});
//   auto head = (*c)->send("POST", "/v1/completions", {{"Content-Type", "application/json"}}, body);
//   if (head) (*c)->read_body([&](std::string_view piece) { return res->write(piece); });
//
// Every wait is bounded (connect_timeout, io_timeout between two reads or writes), and abort() from
// any other thread (a client of the router went away) makes a blocked call return at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "http_parser.h"
#include "http_server.h"  // Result

namespace loom::http {

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{5'000};
  // Longest wait for the next bytes of the response, or for the socket to take the next bytes of
  // the request (an LLM server may think for a while before its first byte: be generous).
  std::chrono::milliseconds io_timeout{600'000};
  size_t max_header_bytes = 64 * 1024;  // status line + headers of a response
};

struct ClientResponse {
  int status = 0;
  std::string reason;
  int version_minor = 1;
  Headers headers;  // names lower-cased, values trimmed, in the order received
  // First header with this name (any case), or nullptr.
  const std::string* header(std::string_view name) const;
};

class ClientConnection {
 public:
  static Result<std::unique_ptr<ClientConnection>> connect_unix(const std::string& path, ClientOptions opts = {});
  // host: a numeric IPv4/IPv6 address or a name (resolved with getaddrinfo).
  static Result<std::unique_ptr<ClientConnection>> connect_tcp(const std::string& host, uint16_t port,
                                                               ClientOptions opts = {});
  ~ClientConnection();
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  // Writes the request (the body framed by Content-Length; Host: localhost unless `headers` has
  // one; Content-Length and Transfer-Encoding of `headers` are dropped) and reads the response's
  // status line and headers (interim 1xx responses are skipped). A malformed status line or
  // header, a close or a timeout before the headers end: an error.
  Result<ClientResponse> send(std::string_view method, std::string_view target, const Headers& headers,
                              std::string_view body);
  // Reads the body of the response send() returned, handing each piece to on_data as it arrives
  // (de-chunked). Returns the body's size once it is complete; an error for a truncated body (the
  // peer closed inside a Content-Length or chunked body), a bad chunk, a timeout, abort(), or
  // on_data returning false ("stopped by the reader"). After an error the connection is unusable.
  Result<uint64_t> read_body(const std::function<bool(std::string_view)>& on_data);
  // send() + read_body() collecting the body (at most max_body bytes, else an error).
  Result<std::pair<ClientResponse, std::string>> request(std::string_view method, std::string_view target,
                                                         const Headers& headers, std::string_view body,
                                                         size_t max_body = 64 << 20);

  // From any thread, any time: every blocked or later call fails ("aborted") at once.
  void abort();
  bool aborted() const { return aborted_.load(); }
  // The response may be followed by another request on this connection (complete body, keep-alive).
  bool reusable() const { return reusable_; }

 private:
  ClientConnection(int fd, ClientOptions opts);
  enum class Wait { kReady, kTimeout, kAborted, kError };
  Wait wait(short events);
  // Reads more bytes into buf_; 0 at the peer's close, -1 on error (why in *err).
  long fill(std::string* err);
  // The steps of send() and read_body(); each returns the error, empty when it went well.
  using OnData = std::function<bool(std::string_view)>;
  std::string send_all(const std::string& out);
  std::string read_head(std::string* head);  // up to the blank line, which is consumed
  std::string choose_framing(const ClientResponse& r);
  static bool deliver(std::string_view piece, const OnData& on_data, uint64_t* total);
  // `left` bytes of body; at a close before them, `truncated` (or the count of bytes missing).
  std::string read_exactly(uint64_t left, const OnData& on_data, uint64_t* total, const char* truncated);
  std::string read_to_close(const OnData& on_data, uint64_t* total);
  std::string read_line(std::string* line, const char* what);  // a chunked body's line, without CRLF
  std::string read_chunked(const OnData& on_data, uint64_t* total);

  int fd_ = -1;
  ClientOptions opts_;
  std::atomic<bool> aborted_{false};
  std::mutex fd_mu_;  // abort() against the destructor's close
  std::string buf_;   // received, not yet consumed
  // The framing of the response whose body is next.
  enum class Framing { kNone, kLength, kChunked, kClose } framing_ = Framing::kNone;
  uint64_t length_ = 0;
  bool reusable_ = false;
  bool head_request_ = false;
  bool keep_alive_ = true;
};

}  // namespace loom::http
