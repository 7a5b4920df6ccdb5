// The 14 real chat templates (../shared/golden/chat-templates) and loom's ChatML with random request
// JSON: message checking, the probes' adaptations, rendering, prepare_chat (tool_choice,
// response_format, tool-call grammars, which must parse) and parsing a model's reply (whole and
// partial, with every reasoning_format).
// Input: [template selector] [flags] request JSON: {"messages", "tools", "chat_template_kwargs",
// "tool_choice", "response_format", "output", "named_template"} ("output" is parsed as the
// assistant's reply; "named_template", an unsigned integer, picks one of llama.cpp's built-in
// template names instead of the selector's template).
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <vector>

#include "chat/chat_request.h"
#include "chat/named_templates.h"
#include "chat/tool_calls.h"
#include "fuzz_util.h"
#include "sample/grammar.h"

using namespace loom;
using json = nlohmann::ordered_json;

namespace {

std::vector<chat::ChatTemplate>* g_templates = nullptr;
std::vector<chat::ChatTemplate>* g_named = nullptr;  // llama.cpp's built-in names

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_templates = new std::vector<chat::ChatTemplate>;
  // Every template of the conformance data, with its model's BOS / EOS texts.
  const json cases = json::parse(read_text(fuzz::shared_file("golden/chat-templates/cases.json")));
  for (const auto& [name, info] : cases.at("templates").items()) {
    auto t = chat::ChatTemplate::parse(read_text(fuzz::shared_file("golden/chat-templates/" + name)),
                                       info.at("bos_token").get<std::string>(), info.at("eos_token").get<std::string>());
    LOOM_FUZZ_CHECK(t.has_value());
    g_templates->push_back(*t);
  }
  auto chatml = chat::ChatTemplate::parse(chat::chatml_template_source(), "", "<|im_end|>");
  LOOM_FUZZ_CHECK(chatml.has_value());
  g_templates->push_back(*chatml);
  g_named = new std::vector<chat::ChatTemplate>;
  for (const std::string& n : chat::named_template_names()) {
    auto t = chat::ChatTemplate::parse(*chat::named_template_source(n), "<s>", "</s>");
    LOOM_FUZZ_CHECK(t.has_value());
    g_named->push_back(*t);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const chat::ChatTemplate* picked = &(*g_templates)[in.u8() % g_templates->size()];
  const uint8_t flags = in.u8();
  const json req = json::parse(in.rest(), nullptr, /*allow_exceptions=*/false);
  if (!req.is_object()) return 0;
  if (auto it = req.find("named_template"); it != req.end() && it->is_number_unsigned())
    picked = &(*g_named)[it->get<uint64_t>() % g_named->size()];
  const chat::ChatTemplate& tmpl = *picked;

  chat::ChatInputs ci;
  if (auto it = req.find("messages"); it != req.end()) ci.messages = *it;
  if (auto it = req.find("tools"); it != req.end()) ci.tools = *it;
  if (auto it = req.find("chat_template_kwargs"); it != req.end() && it->is_object()) ci.extra = *it;
  ci.add_generation_prompt = flags & 1;
  chat::RenderOptions ro;
  ro.now_unix = 1700000000;
  ro.max_steps = 200000;
  ro.max_output_bytes = 1 << 18;
  ro.max_total_bytes = 1 << 24;

  auto prompt = tmpl.render(ci, ro);
  if (!prompt) LOOM_FUZZ_CHECK(!prompt.status().message().empty());

  chat::ChatRequestOptions co;
  co.render = ro;
  co.parallel_tool_calls = flags & 2;
  if (auto it = req.find("tool_choice"); it != req.end()) {
    auto tc = chat::parse_tool_choice(*it);
    if (!tc) return 0;
    co.tool_choice = *tc;
  }
  if (auto it = req.find("response_format"); it != req.end()) co.response_format = *it;
  auto prepared = chat::prepare_chat(tmpl, ci, co);
  if (!prepared) {
    LOOM_FUZZ_CHECK(!prepared.status().message().empty());
    return 0;
  }
  if (!prepared->grammar.empty()) {
    auto g = Grammar::parse(prepared->grammar);
    if (!g && g.status().message().find("too large") == std::string::npos) {
      std::fprintf(stderr, "grammar:\n%s\nerror: %s\n", prepared->grammar.c_str(), g.status().message().c_str());
      LOOM_FUZZ_CHECK(!"prepare_chat's grammar must parse");
    }
  }
  if (auto it = req.find("output"); it != req.end() && it->is_string()) {
    const chat::ParsedMessage pm =
        chat::parse_assistant_output(prepared->format, it->get<std::string>(), prepared->parse_options(flags));
    (void)pm.to_json().dump(-1, ' ', false, json::error_handler_t::replace);
    // Streaming: the partial parse of the reply and of its first half, with every reasoning_format.
    const std::string& out = it->get_ref<const std::string&>();
    chat::ParseOptions po = prepared->parse_options(flags);
    for (int rf = 0; rf < 4; ++rf) {
      po.reasoning_format = static_cast<chat::ReasoningFormat>(rf);
      po.reasoning_in_content = rf == int(chat::ReasoningFormat::kDeepSeekLegacy);
      for (bool partial : {false, true}) {
        po.partial = partial;
        for (size_t len : {out.size(), out.size() / 2}) {
          const chat::ParsedMessage p =
              chat::parse_assistant_output(prepared->format, std::string_view(out).substr(0, len), po);
          (void)p.to_json().dump(-1, ' ', false, json::error_handler_t::replace);
        }
      }
    }
  }
  return 0;
}
