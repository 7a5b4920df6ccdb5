// The Jinja parser and renderer on arbitrary templates. Input: template source, then "\xff\xff",
// then the context as JSON (an object; anything else renders with a small default conversation).
// Parsing and rendering give a value or a Status, never a crash, a hang or runaway memory: the
// limits are set low here (RenderOptions) so that every input finishes quickly.
#include <nlohmann/json.hpp>

#include "jinja/template.h"
#include "fuzz_util.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const std::string_view source = in.until("\xff\xff");
  const std::string_view context_text = in.rest();
  auto t = jinja::Template::parse(source);
  if (!t) {
    LOOM_FUZZ_CHECK(!t.status().message().empty());
    return 0;
  }
  nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(context_text, nullptr, /*allow_exceptions=*/false);
  if (!ctx.is_object()) {
    ctx = nlohmann::ordered_json::parse(R"({"messages": [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
        "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})");
  }
  jinja::RenderOptions o;
  o.now_unix = 1700000000;
  o.max_steps = 20000;
  o.max_output_bytes = 1 << 16;
  o.max_total_bytes = 1 << 22;
  auto out = t->render(ctx, o);
  if (out) LOOM_FUZZ_CHECK(out->size() <= o.max_output_bytes);
  else LOOM_FUZZ_CHECK(!out.status().message().empty());
  return 0;
}
