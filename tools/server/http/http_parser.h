// HTTP/1.1 request parser (RFC 9112), pure: bytes in, a Request or an error status out. No I/O,
// no clocks, no allocation beyond the Request it builds, so it can be unit-tested byte by byte and
// fuzzed (fuzz_http_parser.cpp). Lenient only where nginx is (bare LF ends a line like CRLF,
// empty lines before a request line are skipped), strict everywhere else: anything it cannot frame
// unambiguously is an error with the status the server should answer before closing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::http {

// Header fields in the order received. In a Request the names are lower-cased.
using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;        // case-sensitive token as sent: "GET", "POST", ...
  std::string target;        // request-target as sent: "/v1/chat/completions?x=1"
  std::string path;          // path part of the target, raw (still percent-encoded); "*" for OPTIONS *
  std::string decoded_path;  // path with %XX decoded (never contains NUL; '+' is left alone)
  std::string query;         // after the first '?', raw, without the '?'; "" when none
  int version_major = 1;
  int version_minor = 1;       // 0 or 1
  Headers headers;             // names lower-cased, values without surrounding whitespace
  std::string body;            // de-chunked
  std::string remote_addr;     // peer IP ("127.0.0.1", "::1"); set by the server
  uint16_t remote_port = 0;    // set by the server
  uint64_t connection_id = 0;  // set by the server; the same for every request of one connection

  // First header with this name (any case), or nullptr.
  const std::string* header(std::string_view name) const;
};

struct ParserLimits {
  size_t max_header_bytes = 16 * 1024;      // request line + headers (and, again, the trailers)
  size_t max_body_bytes = 8 * 1024 * 1024;  // de-chunked body
};

// Percent-decodes s into *out. False for a malformed escape ("%", "%4", "%zz") or an encoded NUL.
bool percent_decode(std::string_view s, std::string* out);

class RequestParser {
 public:
  explicit RequestParser(ParserLimits limits = {});

  // Consumes bytes of the current request and returns how many it used. It stops right after the
  // last byte of a complete request (the rest belongs to the next, pipelined one) and at the first
  // error; in both states it consumes nothing more until take_request() or reset().
  size_t feed(std::string_view data);

  // A byte of a request, other than the empty lines allowed before it, has been seen.
  bool started() const { return started_; }
  // The empty line ending the headers has been seen and the headers are acceptable: from here on
  // the server may answer "100 Continue" (expects_continue()) and times the body.
  bool headers_complete() const { return headers_complete_; }
  bool complete() const { return state_ == State::kComplete; }
  bool failed() const { return state_ == State::kError; }
  // When failed(): the status to answer (400, 413, 417, 431, 501, 505) and a short reason.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

  // Valid once headers_complete().
  bool expects_continue() const { return expect_continue_; }
  bool keep_alive() const { return keep_alive_; }  // per version and Connection header
  bool chunked() const { return chunked_; }
  uint64_t content_length() const { return content_length_; }  // 0 when chunked or absent

  const Request& request() const { return req_; }
  // The complete request; resets the parser for the next request on the same connection.
  Request take_request();
  void reset();

 private:
  enum class State {
    kRequestLine,
    kHeaders,
    kBody,
    kChunkSize,
    kChunkData,
    kChunkDataEnd,
    kTrailers,
    kComplete,
    kError,
  };
  // Appends bytes up to and including the next '\n' to line_ (without it). True when a whole line
  // is there, with one trailing CR removed. Fails with `status` once *counter would pass `limit`.
  bool take_line(std::string_view data, size_t* i, size_t* counter, size_t limit, int status, const char* what);
  void fail(int status, std::string message);
  void on_request_line();
  void on_header_line(bool trailer);
  void on_headers_end();
  void on_chunk_size_line();

  ParserLimits limits_;
  State state_ = State::kRequestLine;
  Request req_;
  std::string line_;
  size_t header_bytes_ = 0;
  size_t trailer_bytes_ = 0;
  size_t chunk_line_bytes_ = 0;
  uint64_t remaining_ = 0;  // of the Content-Length body or the current chunk
  uint64_t content_length_ = 0;
  bool started_ = false;
  bool headers_complete_ = false;
  bool expect_continue_ = false;
  bool keep_alive_ = true;
  bool chunked_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace loom::http
