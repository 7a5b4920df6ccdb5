// Tool calls: format detection and names, parsing a model's output into content, reasoning and
// calls (each format's scanner is in tool_calls_json.cpp, _xml.cpp, _pythonic.cpp), tool
// normalization. Grammars are in tool_calls_grammar.cpp.
#include "chat/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <span>

#include "chat/tool_calls_internal.h"

namespace loom::chat {
using namespace detail;  // the tool-call internals (tool_calls_internal.h)

namespace {

// What partial parsing holds back at the end of the content: the beginnings of a format's markers.
std::span<const std::string_view> hold_marks(ToolCallFormat f) {
  static constexpr std::string_view kHermes[] = {"<tool_call>", "<function="};
  static constexpr std::string_view kQwenXml[] = {"<tool_call>", "<function="};
  static constexpr std::string_view kLlama31[] = {"<|python_tag|>", "<|eom_id|>", "<|eot_id|>"};
  static constexpr std::string_view kMistral[] = {"[TOOL_CALLS]", "</s>"};
  static constexpr std::string_view kLfm2[] = {kLfm2Start};
  static constexpr std::string_view kGemma4[] = {kGemma4Start};
  switch (f) {
    case ToolCallFormat::kLfm2: return kLfm2;
    case ToolCallFormat::kGemma4: return kGemma4;
    case ToolCallFormat::kHermes: return kHermes;
    case ToolCallFormat::kQwenXml: return kQwenXml;
    case ToolCallFormat::kLlama31: return kLlama31;
    case ToolCallFormat::kMistral:
    case ToolCallFormat::kMistralArgs: return kMistral;
    case ToolCallFormat::kGeneric:
    case ToolCallFormat::kNone: break;
  }
  return {};
}

ParsedMessage parse_output(ToolCallFormat format, std::string_view text, const ParseOptions& opts) {
  ParsedMessage out;
  const bool partial = opts.partial;
  std::string_view body = text;
  std::string think;  // reasoning_in_content: the block, written back at the start of the content
  if (opts.reasoning_format != ReasoningFormat::kNone) {
    ReasoningSplit rs = split_reasoning(text, opts.thinking_forced_open, partial);
    body = rs.body;
    if (!opts.reasoning_in_content) {
      out.reasoning_content = std::move(rs.reasoning);
    } else if (!rs.reasoning.empty()) {
      think = std::string(rs.open) + rs.reasoning + (rs.closed ? std::string(rs.close) : std::string());
    }
  }
  if (!opts.tools_present || format == ToolCallFormat::kNone) {
    out.content = think + std::string(body);
    return out;
  }
  Scan scan;
  std::optional<std::string> reply;  // kGeneric: the reply's text
  switch (format) {
    case ToolCallFormat::kHermes: scan = scan_hermes(body, partial); break;
    case ToolCallFormat::kQwenXml: scan = scan_qwen_xml(body, partial, opts.tools); break;
    case ToolCallFormat::kLfm2: scan = scan_lfm2(body, partial); break;
    case ToolCallFormat::kGemma4: scan = scan_gemma4(body, partial); break;
    case ToolCallFormat::kLlama31: scan = scan_llama31(body, partial); break;
    case ToolCallFormat::kMistral:
    case ToolCallFormat::kMistralArgs: scan = scan_mistral(body, partial); break;
    case ToolCallFormat::kGeneric: scan = scan_generic(body, &reply, partial); break;
    case ToolCallFormat::kNone: break;
  }
  // Partial: what a view of `body` shows, without trailing whitespace (the full parse strips it
  // before a call). Text before held-back text, or before a stop token, is final; only a view that
  // reaches the end of the output also holds back the beginning of a marker.
  const auto shown = [&](std::string_view v) {
    if (v.empty()) return v;
    const char* end = v.data() + v.size();
    if (scan.held != std::string_view::npos && end > body.data() + scan.held) {
      const char* limit = body.data() + scan.held;
      if (v.data() >= limit) return std::string_view();
      return rstrip(v.substr(0, size_t(limit - v.data())));
    }
    return end == body.data() + body.size() ? hold_tail(v, hold_marks(format)) : rstrip(v);
  };
  const size_t base = size_t(body.data() - text.data());
  if (partial && scan.pending) {
    out.pending = std::move(scan.pending);
    out.pending->id = make_id(format, text.substr(0, base + scan.pending_start), scan.calls.size(), opts.id_seed);
  }
  if (scan.calls.empty()) {
    out.content = reply ? *reply : partial ? std::string(shown(body)) : std::string(body);
    out.content.insert(0, think);
    return out;
  }
  out.content = reply ? *reply : std::string(rstrip(scan.before));
  const std::string_view rest = partial ? shown(lstrip(scan.rest)) : strip(scan.rest);
  if (!rest.empty()) {
    if (!out.content.empty()) out.content += '\n';
    out.content += rest;
  }
  out.content.insert(0, think);
  for (size_t i = 0; i < scan.calls.size(); ++i) {
    ToolCall& tc = scan.calls[i];
    const size_t upto = scan.starts[i] != std::string_view::npos ? scan.starts[i] : scan.ends[i];
    if (tc.id.empty()) tc.id = make_id(format, text.substr(0, base + upto), i, opts.id_seed);
  }
  out.tool_calls = std::move(scan.calls);
  return out;
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kNone: return "none";
    case ToolCallFormat::kGeneric: return "generic";
    case ToolCallFormat::kLlama31: return "llama3.1";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kMistralArgs: return "mistral-args";
    case ToolCallFormat::kQwenXml: return "qwen3-coder";
    case ToolCallFormat::kLfm2: return "lfm2";
    case ToolCallFormat::kGemma4: return "gemma4";
  }
  return "?";
}

ToolCallFormat detect_tool_call_format(std::string_view src) {
  const auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  // LFM2 lists the tools between <|tool_list_start|> and <|tool_list_end|>, LFM2.5 as plain
  // "List of tools: [...]" (llama.cpp's two rules); LFM2.5-8B writes calls back in history.
  if ((has("<|tool_list_start|>") && has("<|tool_list_end|>")) || has("List of tools: [") || has("<|tool_call_start|>"))
    return ToolCallFormat::kLfm2;
  if (has("'<|tool_call>call:'")) return ToolCallFormat::kGemma4;
  if (has("<tool_call>") && has("<function=") && has("<parameter=") &&
      !has("'<tool_call><function=' ~ tool_call.name ~ '>'"))
    return ToolCallFormat::kQwenXml;
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("<|start_header_id|>ipython<|end_header_id|>")) return ToolCallFormat::kLlama31;
  if (has("[TOOL_CALLS]") && has("[ARGS]")) return ToolCallFormat::kMistralArgs;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  // SmolLM3 calls tools as Hermes does; the copy of its template llama.cpp ships (Unsloth's)
  // dropped the tools block, so only its system prompt names the model.
  if (has("named SmolLM")) return ToolCallFormat::kHermes;
  return ToolCallFormat::kGeneric;
}

json ParsedMessage::to_json() const {
  json m = json::object();
  m["role"] = "assistant";
  if (content.empty() && !tool_calls.empty()) m["content"] = nullptr;
  else m["content"] = content;
  if (!reasoning_content.empty()) m["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    json arr = json::array();
    for (const ToolCall& tc : tool_calls) {
      json c = json::object();
      c["id"] = tc.id;
      c["type"] = "function";
      c["function"] = json{{"name", tc.name}, {"arguments", tc.arguments}};
      arr.push_back(std::move(c));
    }
    m["tool_calls"] = std::move(arr);
  }
  return m;
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::kNone: return "none";
    case ReasoningFormat::kAuto: return "auto";
    case ReasoningFormat::kDeepSeek: return "deepseek";
    case ReasoningFormat::kDeepSeekLegacy: return "deepseek-legacy";
  }
  return "?";
}

Expected<ReasoningFormat> parse_reasoning_format(std::string_view name) {
  for (ReasoningFormat f :
       {ReasoningFormat::kNone, ReasoningFormat::kAuto, ReasoningFormat::kDeepSeek, ReasoningFormat::kDeepSeekLegacy})
    if (name == reasoning_format_name(f)) return f;
  std::string shown(name.substr(0, 40));
  if (name.size() > 40) shown += "...";
  return invalid_argument("reasoning_format: expected \"none\", \"auto\", \"deepseek\" or \"deepseek-legacy\", got \"" +
                          shown + "\"");
}

ParsedMessage parse_assistant_output(ToolCallFormat format, std::string_view text, const ParseOptions& opts) {
  // Gemma 4's model turn may be written out (llama.cpp's gemma4 parser skips it).
  constexpr std::string_view kModelTurn = "<|turn>model\n";
  if (text.starts_with(kModelTurn)) text.remove_prefix(kModelTurn.size());
  ParsedMessage out = parse_output(format, text, opts);
  if (opts.reasoning_format != ReasoningFormat::kNone && !opts.reasoning_in_content) {
    // Gemma 4's output (its format, or its markers seen): hold back what may begin one of them.
    const bool gemma = format == ToolCallFormat::kGemma4 || text.find(kChannelOpen) != std::string_view::npos ||
                       text.find(kChannelClose) != std::string_view::npos;
    gemma_channels(&out.content, &out.reasoning_content, opts.partial, gemma);
  }
  return out;
}

ToolCallSyntax tool_call_syntax(ToolCallFormat format) {
  ToolCallSyntax s;
  switch (format) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kQwenXml:
      s.triggers = {"<tool_call>", "<function="};
      s.preserved_tokens = {"<tool_call>", "</tool_call>", "<think>", "</think>"};
      break;
    case ToolCallFormat::kLlama31:
      s.stops = {"<|eom_id|>", "<|eot_id|>"};
      s.triggers = {"<|python_tag|>", "{"};
      s.preserved_tokens = {"<|python_tag|>"};
      break;
    case ToolCallFormat::kMistral:
      s.triggers = {"[TOOL_CALLS]"};
      s.preserved_tokens = {"[TOOL_CALLS]"};
      break;
    case ToolCallFormat::kMistralArgs:
      s.triggers = {"[TOOL_CALLS]"};
      s.preserved_tokens = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"};
      break;
    case ToolCallFormat::kGeneric: s.triggers = {"{"}; break;
    case ToolCallFormat::kLfm2:
      s.triggers = {std::string(kLfm2Start)};
      s.preserved_tokens = {std::string(kLfm2Start), std::string(kLfm2End), "<think>", "</think>"};
      break;
    case ToolCallFormat::kGemma4:
      s.triggers = {std::string(kGemma4Start)};
      s.preserved_tokens = {std::string(kGemma4Start),
                            std::string(kGemma4End),
                            std::string(kChannelOpen),
                            std::string(kChannelClose),
                            "<|turn>",
                            std::string(kGemma4Quote)};
      break;
    case ToolCallFormat::kNone: break;
  }
  return s;
}

Expected<json> normalize_tools(const json& tools) {
  if (tools.is_null()) return json(nullptr);
  if (!tools.is_array()) return invalid_argument("tools: expected an array of tools");
  if (tools.empty()) return json(nullptr);
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object()) return invalid_argument(where + ": expected an object");
    auto type = t.find("type");
    if (type == t.end()) return invalid_argument(where + ".type: missing (expected \"function\")");
    if (!type->is_string() || *type != "function")
      return invalid_argument(where + ".type: expected \"function\", got " + type->dump());
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) return invalid_argument(where + ".function: expected an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      return invalid_argument(where + ".function.name: expected a non-empty string");
    json desc = "";
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null()) {
      if (!d->is_string()) return invalid_argument(where + ".function.description: expected a string");
      desc = *d;
    }
    json params = json{{"type", "object"}, {"properties", json::object()}};
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
      if (!p->is_object()) return invalid_argument(where + ".function.parameters: expected a JSON schema object");
      params = *p;
    }
    for (size_t j = 0; j < out.size(); ++j)
      if (out[j]["function"]["name"] == *name)
        return invalid_argument(where + ".function.name: '" + name->get<std::string>() + "' is also tools[" +
                                std::to_string(j) + "]'s name");
    json f = json::object();
    f["name"] = *name;
    f["description"] = std::move(desc);
    f["parameters"] = std::move(params);
    out.push_back(json{{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

}  // namespace loom::chat
