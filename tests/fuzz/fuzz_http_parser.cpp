// libFuzzer target for RequestParser (build with -DLOOM_FUZZ=ON under clang; README.md). Feeds the
// input twice, whole and in pieces whose sizes come from the input itself, and checks that both
// parses agree: the parser must not depend on how bytes are split across reads.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "http_parser.h"

namespace {

struct Outcome {
  bool complete, failed;
  int status;
  size_t consumed;
  loom::http::Request req;
};

Outcome parse(std::string_view data, size_t piece) {
  loom::http::RequestParser p(loom::http::ParserLimits{2048, 4096});
  size_t off = 0;
  while (off < data.size() && !p.complete() && !p.failed()) {
    const std::string_view part = data.substr(off, piece);
    const size_t used = p.feed(part);
    off += used;
    if (used < part.size()) break;  // stopped at the end of a request or an error
  }
  return {p.complete(), p.failed(), p.error_status(), off, p.request()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 7;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Outcome a = parse(in, in.size() + 1), b = parse(in, piece);
  if (a.complete != b.complete || a.failed != b.failed || a.status != b.status) std::abort();
  if (a.complete && (a.consumed != b.consumed || a.req.body != b.req.body || a.req.headers != b.req.headers ||
                     a.req.target != b.req.target))
    std::abort();
  return 0;
}
