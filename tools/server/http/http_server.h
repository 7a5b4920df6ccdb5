// loom_http: a small event-driven HTTP/1.1 server for `loom serve` (see README.md here).
//
// One I/O thread runs epoll over the listening socket, every connection and an eventfd; it
// accepts, reads, parses, writes and enforces every deadline, and never runs code that may block.
// Complete requests go to a pool of handler threads. A handler answers through a thread-safe
// Response it may keep and stream from any thread; the bytes are queued and the I/O thread is woken
// to write them.
//
//   auto server = loom::http::Server::listen("127.0.0.1", 8080, {});
//   (*server)->start([](loom::http::Request&& req, std::shared_ptr<loom::http::Response> res) {
//     res->send(200, "text/plain", "hello\n");
//   });
//   ...  // on SIGTERM:
//   (*server)->drain(std::chrono::seconds(10));
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <string_view>
#include <utility>

#include "http_parser.h"

namespace loom::http {

// A value or the message saying why there is none: the HTTP layer's own result type, so that it
// depends on no loom library (the server above it uses only loom's public headers).
template <typename T>
class Result {
 public:
  struct Error {
    std::string text;
    const std::string& message() const { return text; }
  };
  Result(T v) : v_(std::move(v)) {}  // NOLINT: implicit
  static Result failure(std::string why) { return Result(Error{std::move(why)}); }
  bool has_value() const { return v_.has_value(); }
  explicit operator bool() const { return has_value(); }
  T& value() & { return *v_; }
  T&& value() && { return std::move(*v_); }
  T& operator*() { return *v_; }
  T* operator->() { return &*v_; }
  const Error& status() const { return err_; }

 private:
  explicit Result(Error e) : err_(std::move(e)) {}
  std::optional<T> v_;
  Error err_;
};

namespace detail {
struct Exchange;
struct Core;
}  // namespace detail

// The reply to one request. Every method may be called from any thread, concurrently. Exactly one
// of send() or begin_stream() takes effect; later calls are ignored (and return false).
class Response {
 public:
  // Made by the server only (detail::Exchange is not part of the API).
  explicit Response(std::shared_ptr<detail::Exchange> ex);
  // Without a reply sent, queues a 500 (error_body); with a stream begun but not ended, the queued
  // chunks are still written and then the connection is closed without the terminating chunk, so
  // the client sees the response as truncated rather than complete.
  ~Response();
  Response(const Response&) = delete;
  Response& operator=(const Response&) = delete;

  // A complete response with Content-Length. extra: more header fields; Content-Length,
  // Transfer-Encoding and Connection are the server's and dropped from it, as is any field with a
  // CR, LF or NUL. No body goes out for HEAD, 1xx, 204 and 304.
  void send(int status, std::string_view content_type, std::string body, const Headers& extra = {});
  // A header field for whichever reply goes out (send, send_error or begin_stream), e.g. CORS
  // fields set before routing; a reply already started does not get it.
  void set_header(std::string name, std::string value);
  // send() with the server's error body (ServerOptions::error_body) and content type.
  void send_error(int status, std::string_view message);

  // Starts a streamed response: chunked for HTTP/1.1 clients, delimited by closing the connection
  // for HTTP/1.0 ones. False when the client is gone or a reply was already started.
  bool begin_stream(int status, std::string_view content_type, const Headers& extra = {});
  // Queues data as one chunk (an empty write queues nothing). False once the client is gone, when
  // no stream is open, or when this write would take the bytes queued for the connection past
  // ServerOptions::max_output_bytes: the client is then disconnected (on_disconnect fires).
  bool write(std::string_view data);
  // Ends the stream (terminating chunk). Further writes return false.
  void end();

  // The connection was closed before the response was completely written: peer close or reset,
  // write timeout, output cap, server shutdown.
  bool client_gone() const;
  // cb runs exactly once, when the connection closes before the response is completely written
  // (from the I/O thread: it must not block; it may call this Response). If the client is already
  // gone, it runs at once on the calling thread. Never runs once the response is complete. A
  // second registration replaces the first.
  void on_disconnect(std::function<void()> cb);

  bool started() const;         // send() or begin_stream() has taken effect
  size_t queued_bytes() const;  // bytes queued and not yet written to the socket
  uint64_t connection_id() const;

 private:
  std::shared_ptr<detail::Exchange> ex_;
};

using Handler = std::function<void(Request&&, std::shared_ptr<Response>)>;

struct ServerOptions {
  size_t max_header_bytes = 16 * 1024;      // request line + headers: 431 beyond
  size_t max_body_bytes = 8 * 1024 * 1024;  // 413 beyond (at once for a declared Content-Length)
  // Total time from the first byte of a request to the end of its headers (408 after it), however
  // steadily the bytes trickle in.
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};      // total, from the end of the headers
  std::chrono::milliseconds keepalive_timeout{5'000};  // idle before a request (first one too)
  // A connection whose queued output makes no progress for this long is dropped.
  std::chrono::milliseconds write_timeout{60'000};
  // After the last response on a connection (or an error reply) the server half-closes and reads
  // and discards what the client still sends, for at most this long, so that a client busy
  // sending gets to read the reply instead of a reset.
  std::chrono::milliseconds linger_timeout{2'000};
  size_t max_connections = 1024;  // beyond: accepted, answered 503 if possible, and closed
  size_t handler_threads = 4;
  // Bytes queued and not yet written per connection; write() past it drops the client.
  size_t max_output_bytes = 16 * 1024 * 1024;
  int listen_backlog = 511;
  // Body of every error reply the server makes (400, 408, 413, 431, 500 for a dropped Response,
  // ..., and Response::send_error). Default: default_error_body().
  std::function<std::string(int status, std::string_view message)> error_body;
  std::string error_content_type = "application/json";
  // Diagnostics (a handler threw, accept failed); none by default. Called from any thread.
  std::function<void(std::string_view)> log;
};

// {"error":{"message":"...","type":"invalid_request_error" (4xx) or "server_error","code":status}}
std::string default_error_body(int status, std::string_view message);
// "OK", "Not Found", ...; "Unknown" for codes it does not list.
std::string_view reason_phrase(int status);

// Counters for /metrics; all since listen().
struct ServerStats {
  uint64_t connections_open = 0;
  uint64_t connections_total = 0;     // accepted
  uint64_t connections_rejected = 0;  // past max_connections
  uint64_t requests_total = 0;        // handed to the handler
  uint64_t bad_requests = 0;          // error replies for what a client sent (4xx/5xx by the parser)
  uint64_t timeouts = 0;              // 408s and write timeouts
  uint64_t client_disconnects = 0;    // connections gone before their response was complete
  uint64_t bytes_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t open_streams = 0;  // as open_streams()
};

class Server {
 public:
  // Binds and listens (host: an address or name, e.g. "127.0.0.1", "::", "localhost"; port 0 picks
  // a free one). Connections queue in the backlog until start().
  static Result<std::unique_ptr<Server>> listen(const std::string& host, uint16_t port, ServerOptions opts = {});
  // Several listeners served alike: TCP addresses (port 0 picks one free port for the first, the
  // others take it) and UNIX sockets (a host ending in ".sock" is a socket file path; a stale socket
  // file is replaced, the file is removed when the server goes). port() is the TCP port (0 when
  // there are only UNIX sockets).
  static Result<std::unique_ptr<Server>> listen(const std::vector<std::string>& hosts, uint16_t port,
                                                ServerOptions opts = {});
  ~Server();  // shutdown()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  // Starts the I/O thread and the handler pool. Once only.
  void start(Handler handler);
  // Closes the listening socket and idle keep-alive connections; requests in progress are still
  // served, each with "Connection: close".
  void stop_accepting();
  // Requests handed to the handler whose response is not yet completely written.
  size_t open_streams() const;
  // The orderly stop: stop_accepting(), wait up to grace for open_streams() to reach 0, shutdown().
  // True when nothing was cut off.
  bool drain(std::chrono::milliseconds grace);
  // Closes every connection (pending responses see client_gone(), writes fail, on_disconnect
  // fires), joins the I/O thread, then the handler threads (requests not yet started are
  // dropped). Handlers still running are waited for. Idempotent. Never call it (or drain()) from
  // a handler or an on_disconnect callback: it joins the threads those run on.
  void shutdown();
  ServerStats stats() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::http
