// The API dialects of src/api and the native planning of tools/server/request.h, on hostile
// bodies. Input: [mode] body. mode % 4:
//   0  anthropic_to_chat(body), then the chat body's shape checked;
//   1  responses_to_chat(body), the same;
//   2  body = an array of neutral deltas (anything): fed to an AnthropicStream and a ResponsesStream,
//      ended with a ChatResult whose message is the body's last element;
//   3  plan_native(body) and plan_infill(body) over a byte tokenizer.
// Only ApiError (modes 0-1) or HttpError with a 4xx/501 status (mode 3) may escape; the writers
// (mode 2) never throw; every output serializes.
#include <string>

#include "api/anthropic.h"
#include "api/responses.h"
#include "fuzz_util.h"
#include "json_fields.h"
#include "request.h"

namespace {

using loom::api::json;

void check_chat_body(const json& out) {
  LOOM_FUZZ_CHECK(out.is_object());
  LOOM_FUZZ_CHECK(out.contains("messages") && out["messages"].is_array());
  (void)out.dump(-1, ' ', false, json::error_handler_t::replace);
}

void check_events(const std::vector<loom::api::SseEvent>& ev) {
  for (const auto& e : ev) (void)e.data.dump(-1, ' ', false, json::error_handler_t::replace);
}

loom::server::Tokenizer byte_tokenizer(bool fim) {
  loom::server::Tokenizer t;
  t.tokenize = [](const std::string& s, bool add_special) {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(1);
    for (unsigned char c : s) ids.push_back(1000 + c);
    return ids;
  };
  t.detokenize = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += char(id & 0x7f);
    return s;
  };
  t.bos = 1;
  t.add_bos = true;
  if (fim) t.fim_pre = 11, t.fim_suf = 12, t.fim_mid = 13, t.fim_rep = 14, t.fim_sep = 15;
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 4;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  json body;
  try {
    body = loom::server::parse_any_body(text);
  } catch (const loom::server::HttpError& e) {
    LOOM_FUZZ_CHECK(e.status == 400);
    return 0;
  }
  switch (mode) {
    case 0:
    case 1: try { check_chat_body(mode == 0 ? loom::api::anthropic_to_chat(body) : loom::api::responses_to_chat(body));
      } catch (const loom::api::ApiError& e) {
        LOOM_FUZZ_CHECK((e.status >= 400 && e.status < 500) || e.status == 501);
        LOOM_FUZZ_CHECK(!e.message.empty());
      }
      break;
    case 2: {
      loom::api::AnthropicStream a("msg_1", "m", 5, 1);
      loom::api::ResponsesStream r("resp_1", "m", 1700000000);
      check_events(a.begin());
      check_events(r.begin());
      const json deltas = body.is_array() ? body : json::array({body});
      for (const json& d : deltas) {
        check_events(a.delta(d));
        check_events(r.delta(d));
      }
      loom::api::ChatResult res;
      res.id = "x";
      res.model = "m";
      res.message = deltas.empty() ? json() : deltas.back();
      res.finish_reason = (data[0] / 4) % 2 ? "length" : "stop";
      res.completion_tokens = 3;
      check_events(a.end(res));
      check_events(r.end(res));
      (void)loom::api::anthropic_response(res).dump(-1, ' ', false, json::error_handler_t::replace);
      (void)loom::api::responses_response(res).dump(-1, ' ', false, json::error_handler_t::replace);
      break;
    }
    case 3:
      for (int infill = 0; infill < 2; ++infill) {
        try {
          const auto p = infill ? loom::server::plan_infill(body, 16, byte_tokenizer((data[0] / 4) % 2), 512, 64)
                                : loom::server::plan_native(body, 16, byte_tokenizer(true));
          LOOM_FUZZ_CHECK(p.requests.size() == p.prompt_texts.size());
          for (const json& q : p.requests) (void)q.dump(-1, ' ', false, json::error_handler_t::replace);
        } catch (const loom::server::HttpError& e) {
          LOOM_FUZZ_CHECK((e.status >= 400 && e.status < 500) || e.status == 501);
        }
      }
      break;
  }
  return 0;
}
