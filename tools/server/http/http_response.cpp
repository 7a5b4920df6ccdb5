// loom_http's replies: the head of a response (status line, Date, framing, the caller's fields
// filtered against response splitting), reason phrases, the default error body, and Response,
// through which a handler answers from any thread (the bytes are queued on its Exchange and the I/O
// thread is woken to write them).
#include <cstdio>
#include <cstring>
#include <ctime>

#include "http_server_impl.h"

namespace loom::http {

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

}  // namespace

namespace detail {

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

std::string error_response(const Core& core, int status, std::string_view message) {
  const std::string body = core.error_body(status, message);
  std::string out;
  append_head(&out, status, core.opts.error_content_type, Framing::kLength, body.size(), true, 1, {});
  out += body;
  return out;
}

}  // namespace detail

namespace {

using detail::append_head;
using detail::Framing;

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

}  // namespace loom::http
