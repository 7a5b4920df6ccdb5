#include "http_parser.h"

#include <algorithm>
#include <cstring>

namespace loom::http {
namespace {

// tchar (RFC 9110 5.6.2): the characters of a method or a header name.
bool is_tchar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

// field-vchar, SP or HTAB (obs-text 0x80-0xFF allowed): what a header value may contain.
bool is_field_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  return true;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls fn(element) for each comma-separated element of a list header value, trimmed; empty
// elements (RFC 9110 5.6.1 allows "a, , b") are skipped.
template <typename F>
void for_each_element(std::string_view v, F&& fn) {
  while (true) {
    const size_t comma = v.find(',');
    std::string_view e = trim_ows(v.substr(0, comma));
    if (!e.empty()) fn(e);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = ascii_lower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

constexpr size_t kMaxChunkLine = 4096;  // chunk-size line with extensions

}  // namespace

const std::string* Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return &v;
  return nullptr;
}

bool percent_decode(std::string_view s, std::string* out) {
  out->clear();
  out->reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;
    const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    const char c = static_cast<char>(hi * 16 + lo);
    if (c == '\0') return false;
    out->push_back(c);
    i += 2;
  }
  return true;
}

RequestParser::RequestParser(ParserLimits limits) : limits_(limits) {}

void RequestParser::reset() {
  state_ = State::kRequestLine;
  req_ = Request{};
  line_.clear();
  header_bytes_ = trailer_bytes_ = chunk_line_bytes_ = 0;
  remaining_ = content_length_ = 0;
  started_ = headers_complete_ = expect_continue_ = chunked_ = false;
  keep_alive_ = true;
  error_status_ = 0;
  error_message_.clear();
}

Request RequestParser::take_request() {
  Request r = std::move(req_);
  reset();
  return r;
}

void RequestParser::fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
}

bool RequestParser::take_line(std::string_view data, size_t* i, size_t* counter, size_t limit, int status,
                              const char* what) {
  const char* begin = data.data() + *i;
  const size_t avail = data.size() - *i;
  const void* nl = std::memchr(begin, '\n', avail);
  const size_t take = nl ? static_cast<size_t>(static_cast<const char*>(nl) - begin) + 1 : avail;
  if (take > limit - *counter) {  // *counter <= limit always holds
    fail(status, what);
    return false;
  }
  *counter += take;
  *i += take;
  line_.append(begin, nl ? take - 1 : take);
  if (!nl) return false;
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  return true;
}

size_t RequestParser::feed(std::string_view data) {
  size_t i = 0;
  while (i < data.size() && state_ != State::kComplete && state_ != State::kError) {
    switch (state_) {
      case State::kRequestLine: {
        const bool whole =
            take_line(data, &i, &header_bytes_, limits_.max_header_bytes, 431, "request header fields too large");
        if (!started_ && line_.find_first_not_of('\r') != std::string::npos) started_ = true;
        if (!whole) break;
        if (!line_.empty()) on_request_line();  // empty lines before a request are ignored
        line_.clear();
        break;
      }
      case State::kHeaders:
      case State::kTrailers: {
        const bool trailer = state_ == State::kTrailers;
        if (!take_line(data, &i, trailer ? &trailer_bytes_ : &header_bytes_, limits_.max_header_bytes, 431,
                       trailer ? "trailer fields too large" : "request header fields too large"))
          break;
        if (line_.empty()) {
          if (trailer) state_ = State::kComplete;
          else on_headers_end();
        } else {
          on_header_line(trailer);
        }
        line_.clear();
        break;
      }
      case State::kChunkSize: {
        if (!take_line(data, &i, &chunk_line_bytes_, kMaxChunkLine, 400, "chunk size line too long")) break;
        on_chunk_size_line();
        line_.clear();
        chunk_line_bytes_ = 0;
        break;
      }
      case State::kChunkDataEnd: {
        // Exactly CRLF (or a bare LF) after the chunk data.
        if (!take_line(data, &i, &chunk_line_bytes_, 2, 400, "bad chunk terminator")) break;
        if (!line_.empty()) fail(400, "bad chunk terminator");
        else state_ = State::kChunkSize;
        line_.clear();
        chunk_line_bytes_ = 0;
        break;
      }
      case State::kBody:
      case State::kChunkData: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, static_cast<uint64_t>(data.size() - i)));
        req_.body.append(data.data() + i, take);
        i += take;
        remaining_ -= take;
        if (remaining_ == 0) state_ = state_ == State::kBody ? State::kComplete : State::kChunkDataEnd;
        break;
      }
      case State::kComplete:
      case State::kError: break;
    }
  }
  return i;
}

void RequestParser::on_request_line() {
  const std::string_view line = line_;
  if (line.find('\r') != std::string_view::npos) return fail(400, "bare CR in request line");
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return fail(400, "malformed request line");
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return fail(400, "malformed request line");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || target.empty() || version.find(' ') != std::string_view::npos)
    return fail(400, "malformed request line");
  for (unsigned char c : method)
    if (!is_tchar(c)) return fail(400, "invalid character in method");
  for (unsigned char c : target)
    if (c < 0x21 || c > 0x7e) return fail(400, "invalid character in request target");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[5] < '0' || version[5] > '9' || version[6] != '.' ||
      version[7] < '0' || version[7] > '9')
    return fail(400, "malformed HTTP version");
  req_.version_major = version[5] - '0';
  req_.version_minor = version[7] - '0';
  if (req_.version_major != 1 || req_.version_minor > 1) return fail(505, "HTTP version not supported");

  // origin-form "/p?q", absolute-form "http://host/p?q", asterisk-form "*" (OPTIONS only).
  std::string_view path_query;
  if (target[0] == '/') {
    path_query = target;
  } else if (target == "*") {
    if (method != "OPTIONS") return fail(400, "'*' target is only allowed with OPTIONS");
    path_query = target;
  } else {
    const size_t scheme_end = target.find("://");
    if (scheme_end == std::string_view::npos ||
        !(iequals(target.substr(0, scheme_end), "http") || iequals(target.substr(0, scheme_end), "https")))
      return fail(400, "unsupported request target form");
    const std::string_view rest = target.substr(scheme_end + 3);
    const size_t path_start = rest.find_first_of("/?");
    const std::string_view authority = rest.substr(0, path_start);
    if (authority.empty()) return fail(400, "empty authority in request target");
    if (path_start == std::string_view::npos) path_query = "/";
    else path_query = rest.substr(path_start);
  }
  const size_t q = path_query.find('?');
  req_.path = std::string(path_query.substr(0, q));
  if (req_.path.empty()) req_.path.push_back('/');  // "http://host?q"
  if (q != std::string_view::npos) req_.query = std::string(path_query.substr(q + 1));
  if (!percent_decode(req_.path, &req_.decoded_path)) return fail(400, "malformed percent-encoding in path");
  req_.method = std::string(method);
  req_.target = std::string(target);
  state_ = State::kHeaders;
}

void RequestParser::on_header_line(bool trailer) {
  const std::string_view line = line_;
  if (line[0] == ' ' || line[0] == '\t') return fail(400, "obsolete line folding in header");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return fail(400, "malformed header line");
  const std::string_view name = line.substr(0, colon);
  for (unsigned char c : name)
    if (!is_tchar(c)) return fail(400, "invalid character in header name");
  const std::string_view value = trim_ows(line.substr(colon + 1));
  for (unsigned char c : value)
    if (!is_field_char(c)) return fail(400, "invalid character in header value");
  if (trailer) return;  // checked, then dropped: trailers never become headers (RFC 9110 6.5.1)
  std::string lname(name);
  for (char& c : lname) c = ascii_lower(c);
  req_.headers.emplace_back(std::move(lname), std::string(value));
}

void RequestParser::on_headers_end() {
  int hosts = 0;
  bool have_te = false, have_cl = false, cl_too_big = false, close = false, ka = false;
  std::string te;
  const std::string* expect = nullptr;
  uint64_t cl = 0;
  for (const auto& [name, value] : req_.headers) {
    if (name == "host") {
      ++hosts;
    } else if (name == "transfer-encoding") {
      if (have_te) te += ',';
      te += value;
      have_te = true;
    } else if (name == "content-length") {
      bool ok = true, any = false;
      for_each_element(value, [&](std::string_view e) {
        uint64_t v = 0;
        bool big = false;
        for (char c : e) {
          if (c < '0' || c > '9') {
            ok = false;
            return;
          }
          if (v > (UINT64_MAX - 9) / 10) big = true;
          else v = v * 10 + static_cast<uint64_t>(c - '0');
        }
        if (any || have_cl) {
          if (big != cl_too_big || (!big && v != cl)) ok = false;  // conflicting lengths
        }
        any = true;
        cl = v;
        cl_too_big = big;
      });
      if (!ok || !any) return fail(400, "invalid Content-Length");
      have_cl = true;
    } else if (name == "connection") {
      for_each_element(value, [&](std::string_view e) {
        if (iequals(e, "close")) close = true;
        else if (iequals(e, "keep-alive")) ka = true;
      });
    } else if (name == "expect") {
      expect = &value;
    }
  }
  if (req_.version_minor >= 1 && hosts == 0) return fail(400, "missing Host header");
  if (hosts > 1) return fail(400, "multiple Host headers");
  if (have_te) {
    if (have_cl) return fail(400, "both Content-Length and Transfer-Encoding");
    int codings = 0;
    bool only_chunked = true;
    for_each_element(te, [&](std::string_view e) {
      ++codings;
      if (!iequals(e, "chunked")) only_chunked = false;
    });
    if (codings != 1 || !only_chunked) return fail(501, "unsupported Transfer-Encoding");
    chunked_ = true;
  }
  keep_alive_ = req_.version_minor >= 1 ? !close : (ka && !close);
  if (expect && req_.version_minor >= 1) {
    if (!iequals(*expect, "100-continue")) return fail(417, "unsupported expectation");
    expect_continue_ = true;
  }
  if (have_cl && (cl_too_big || cl > limits_.max_body_bytes)) return fail(413, "request body too large");
  content_length_ = have_cl ? cl : 0;
  headers_complete_ = true;
  if (chunked_) {
    state_ = State::kChunkSize;
  } else if (content_length_ > 0) {
    remaining_ = content_length_;
    state_ = State::kBody;
    // Not all of it up front: a client that declares 8 MiB and sends nothing must not cost 8 MiB.
    req_.body.reserve(static_cast<size_t>(std::min<uint64_t>(content_length_, 64 * 1024)));
  } else {
    state_ = State::kComplete;
  }
}

void RequestParser::on_chunk_size_line() {
  const std::string_view line = line_;
  size_t n = 0;
  uint64_t size = 0;
  int digits = 0;
  for (; n < line.size(); ++n) {
    const int h = hex_value(line[n]);
    if (h < 0) break;
    if (size != 0 || h != 0) ++digits;
    if (digits > 15) return fail(400, "chunk size too large");
    size = size * 16 + static_cast<uint64_t>(h);
  }
  if (n == 0) return fail(400, "invalid chunk size");
  // chunk-ext: BWS ';' ... ; skipped after checking it holds no control characters.
  std::string_view ext = line.substr(n);
  while (!ext.empty() && (ext.front() == ' ' || ext.front() == '\t')) ext.remove_prefix(1);
  if (!ext.empty() && ext.front() != ';') return fail(400, "invalid chunk size");
  for (unsigned char c : ext)
    if (!is_field_char(c)) return fail(400, "invalid character in chunk extension");
  if (size == 0) {
    state_ = State::kTrailers;
    return;
  }
  if (size > limits_.max_body_bytes - req_.body.size()) return fail(413, "request body too large");
  remaining_ = size;
  state_ = State::kChunkData;
}

}  // namespace loom::http
