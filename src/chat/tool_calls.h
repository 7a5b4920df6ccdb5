// Tool calls: which syntax a chat template's model uses to call tools, parsing a generated
// assistant message back into OpenAI's {content, reasoning_content, tool_calls}, GBNF grammars that
// force a tool call (tool_choice "required" or a named function) or a JSON reply (response_format),
// and the stop / trigger strings a server configures per syntax.
//
//   ToolCallFormat f = detect_tool_call_format(template_source);   // or ChatTemplate::tool_call_format()
//   std::string g = *tool_call_grammar(f, tools, /*forced_name=*/nullptr, /*parallel=*/false);
//   ... generate with SamplerParams::grammar = g ...
//   ParsedMessage m = parse_assistant_output(f, generated_text, /*tools_present=*/true);
//   nlohmann::ordered_json reply = m.to_json();  // {"role":"assistant","content":...,"tool_calls":[...]}
//
// The syntaxes (what the model writes; "ARGS" is the arguments object):
//   kHermes       <tool_call>\n{"name": "f", "arguments": ARGS}\n</tool_call>, repeated for parallel
//                 calls (Hermes 2/3, Qwen 2.5, Qwen3, SmolLM3, Granite 4, loom's ChatML
//                 fallback). Also read:
//                 <function=f>ARGS</function> and a bare {"name": "f", "arguments": ARGS} reply.
//   kLlama31      {"name": "f", "parameters": ARGS}, optionally after <|python_tag|>, the message
//                 ending with <|eom_id|> or <|eot_id|> (Llama 3.1 / 3.2 / 3.3). Also read:
//                 "arguments" for "parameters", a leading "type": "function", the builtin-tool form
//                 <|python_tag|>brave_search.call(query="...") and raw code after <|python_tag|>
//                 (a call of "python" with {"code": ...}).
//   kMistral      [TOOL_CALLS][{"name": "f", "arguments": ARGS, "id": "abcDEF123"}, ...]
//                 (Mistral Nemo; ids are 9 alphanumerics, which its template requires).
//   kMistralArgs  [TOOL_CALLS]f[ARGS]ARGS, repeated for parallel calls (Mistral Small 3.2,
//                 Ministral, Devstral; the template's history form [TOOL_CALLS]f[CALL_ID]id[ARGS]ARGS
//                 is read too). Both Mistral formats read either form.
//   kQwenXml      <tool_call>\n<function=f>\n<parameter=k>\nVALUE\n</parameter>\n...</function>\n
//                 </tool_call> (Qwen3-Coder, Qwen3.5, Nemotron Nano 3): each parameter's text is a
//                 JSON value where the function's schema gives that parameter no "string" type,
//                 the raw text where it is only a string, and for a mix, JSON when it parses
//                 (ParseOptions::tools carries the schemas; without them a value is JSON when it
//                 parses, else text). Calls stream as they are written (`pending`), parameter by
//                 parameter, strings character by character.
//   kLfm2         <|tool_call_start|>[f(key="value", n=1), g()]<|tool_call_end|> (LFM2, LFM2.5):
//                 Python call syntax, values Python or JSON literals (strings in single or double
//                 quotes, numbers, True/False/None, true/false/null, dicts, lists), as llama.cpp's
//                 python_style_tool_calls reads them. Calls stream as they are written (`pending`),
//                 argument by argument, strings character by character. Its grammar writes the
//                 arguments in the schema's order, each value as its schema's JSON.
//   kGemma4       <|tool_call>call:f{key:VALUE,n:1}<tool_call|>, repeated for parallel calls
//                 (Gemma 4): VALUE is <|"|>text<|"|> (a string, raw: no escapes), a JSON number,
//                 true / false / null, {k:VALUE,...} (bare keys) or [VALUE,...], as llama.cpp's
//                 gemma4 parser reads them (None is read as null too: the template prints a null
//                 argument so). Calls stream as they are written (`pending`), argument by
//                 argument, strings character by character; a call is complete at its closing
//                 "}". Its grammar writes the arguments in the template's order (keys sorted as
//                 Jinja's dictsort sorts them, optional ones may be left out), strings and
//                 objects in Gemma's syntax, numbers / booleans / null as their schema's JSON.
//   kGeneric      llama.cpp's generic JSON reply for templates with no tool syntax of their own:
//                 {"tool_call": {"name": "f", "arguments": ARGS}} or
//                 {"tool_calls": [{"name": "f", "arguments": ARGS, "id": "..."}, ...]} or
//                 {"response": "text for the user"}.
//   kNone         no tool calls (no tools in the request, or tool_choice "none"): content only.
//
// Detection (detect_tool_call_format) looks for markers in the template source, in this order:
//   "<|tool_list_start|>" and "<|tool_list_end|>", "List of tools: [" or "<|tool_call_start|>"
//                                                   -> kLfm2 (llama.cpp's LFM2 and LFM2.5 rules)
//   "'<|tool_call>call:'"                           -> kGemma4 (llama.cpp's rule)
//   "<tool_call>", "<function=" and "<parameter="   -> kQwenXml (llama.cpp's rule: also no
//                                                      '<tool_call><function=' ~ name written together)
//   "<tool_call>"                                   -> kHermes
//   "<|start_header_id|>ipython<|end_header_id|>"   -> kLlama31
//   "[TOOL_CALLS]" and "[ARGS]"                     -> kMistralArgs (also Ministral 3, which thinks
//                                                      in [THINK]...[/THINK] first)
//   "[TOOL_CALLS]"                                  -> kMistral
//   "named SmolLM" (SmolLM3's system prompt)        -> kHermes (llama.cpp's copy has no tools block)
//   anything else                                   -> kGeneric
// Templates with a native syntax loom does not implement (Command-R, Functionary, Granite 3,
// DeepSeek R1) are kGeneric: the model is asked for, and parsed as, the generic JSON reply.
//
// Reasoning (ParseOptions::reasoning_format, llama.cpp's names): for every format, a leading
// <think>...</think> (or [THINK]...[/THINK], or Gemma 4's <|channel>thought...<channel|>) block is
// returned as reasoning_content. Gemma 4's markers are its own tokens, so for every format: a
// leading <|turn>model\n is dropped, later <|channel>...<channel|> blocks are taken out of the
// content (a thought's text added to reasoning_content), and the content ends at a <channel|>
// that closes no block, as llama.cpp's gemma4 parser does. With
// thinking_forced_open (the prompt ended inside <think>, as DeepSeek R1's does, or inside a
// continued reasoning block), everything up to the first closing tag (</think>, [/THINK] or
// <channel|>) is. "auto" and "deepseek" both mean that (in llama.cpp too). "deepseek-legacy" with
// reasoning_in_content (llama.cpp sets it while streaming) writes the block back at the start of
// the content as <think>text</think> instead. "none" leaves the text as it came, tags included, in
// the content (and thinking_forced_open is then ignored).
//
// Parsing never fails: text that is not a well-formed tool call stays content. Text before the
// first tool call is content (trailing whitespace removed); when a call is malformed or truncated,
// the calls before it are kept and the rest of the text is appended to content. Arguments come
// back as compact JSON text ({"a":1}); calls without an id get a generated one, deterministic for
// (the text up to the end of the call — up to its start for Hermes, whose calls stream while
// cut off — index, id_seed): "call_" + 24 alphanumerics, or 9
// alphanumerics for the Mistral formats. A kGeneric reply cut off inside its string
// ({"response": "Hel) is that string so far.
//
// Partial parsing (ParseOptions::partial, llama.cpp's is_partial): the text is the output so far,
// parsed after every token for a streaming client, which is shown the accumulated result each
// time. Reasoning in a block not yet closed is the reasoning so far; text that may still become a
// tool call is held back from the content: a marker's beginning at the end ("<tool_ca",
// "[TOOL_C"), a call not yet complete (Hermes: until </tool_call>), trailing whitespace (the full
// parse strips it before a call), a whole message that so far is a bare JSON call (Hermes
// {"name", "arguments"}, Mistral [{...}]: text after it would make it content, so these are only
// reported by the final, full parse) or the start of a reasoning tag. Completed calls are returned
// with the ids the full parse gives them; a kGeneric {"response": ...} streams its text. So,
// parsing prefixes of one output in order and then the whole output without `partial`: content
// and reasoning_content only grow (each is a prefix of the next) and tool_calls only get more
// entries, the last result being the full parse. (The exception: a kGeneric reply that turns out
// not to be one valid JSON object, which its grammar does not allow.) When the output ends cleanly
// (after a closed call, or on ordinary text without trailing whitespace), the partial parse of the
// whole output equals the full parse. Cost: one pass over the text (about 1 us for 8 KB), so
// reparsing after every token is O(n^2) in all but small: 3-6 ms for the 4,000 prefixes of a 16 KB
// output (test_tool_calls' PartialParse.LongOutputCost).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom::chat {

enum class ToolCallFormat : uint8_t { kNone, kGeneric, kLlama31, kHermes, kMistral, kMistralArgs, kQwenXml, kLfm2, kGemma4 };

// "none", "generic", "llama3.1", "hermes", "mistral", "mistral-args", "qwen3-coder", "lfm2",
// "gemma4".
const char* tool_call_format_name(ToolCallFormat f);

ToolCallFormat detect_tool_call_format(std::string_view template_source);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // compact JSON text, an object
  bool operator==(const ToolCall&) const = default;
};

struct ParsedMessage {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  // Partial parsing, Hermes, Qwen XML, LFM2 and Gemma 4 formats: the call the end of the text cuts
  // off, once its name is known and its arguments have begun: its final id and name, and the beginning
  // of its arguments as compact JSON (each partial parse's is a prefix of the next one's and of the complete call's
  // arguments, for a call its grammar keeps valid). Not part of to_json(); a streaming client sends
  // it as it grows (src/api/chat_stream.h).
  std::optional<ToolCall> pending;

  // The OpenAI assistant message: {"role": "assistant", "content": text or null (null when empty
  // and there are tool calls), "reasoning_content" (when not empty), "tool_calls": [{"id", "type":
  // "function", "function": {"name", "arguments"}}] (when any)}. It can be sent back in `messages`.
  nlohmann::ordered_json to_json() const;
};

// llama.cpp's reasoning_format values (see the file comment).
enum class ReasoningFormat : uint8_t { kNone, kAuto, kDeepSeek, kDeepSeekLegacy };
// "none", "auto", "deepseek", "deepseek-legacy".
const char* reasoning_format_name(ReasoningFormat f);
// The inverse; kInvalidArgument naming the accepted values otherwise.
Expected<ReasoningFormat> parse_reasoning_format(std::string_view name);

struct ParseOptions {
  // Without tools in the request, nothing is parsed as a tool call.
  bool tools_present = true;
  // kNone: a reasoning block stays in the content as generated; the others extract it.
  ReasoningFormat reasoning_format = ReasoningFormat::kAuto;
  // The extracted block is written back at the start of the content as <think>text</think>
  // (llama.cpp: deepseek-legacy while streaming) and reasoning_content stays empty.
  bool reasoning_in_content = false;
  // The text is an output so far, not the whole of it (see "Partial parsing" above).
  bool partial = false;
  // The prompt ended inside a reasoning block (ends with "<think>" or "<think>\n", or continues
  // one): the output's text up to the first closing tag ("</think>", "[/THINK]", "<channel|>") is
  // reasoning (all of it when none comes).
  bool thinking_forced_open = false;
  // Mixed into generated ids, so that a server passing e.g. a request counter gets ids that differ
  // between turns with identical outputs.
  uint64_t id_seed = 0;
  // kQwenXml: the request's tools (normalize_tools' form, or null), whose parameter schemas type
  // the parameters' text.
  nlohmann::ordered_json tools;
};

ParsedMessage parse_assistant_output(ToolCallFormat format, std::string_view text, const ParseOptions& opts);
inline ParsedMessage parse_assistant_output(ToolCallFormat format, std::string_view text, bool tools_present) {
  ParseOptions o;
  o.tools_present = tools_present;
  return parse_assistant_output(format, text, o);
}

// What a server configures for a format.
struct ToolCallSyntax {
  // Extra stop strings that end the message (besides the vocab's end-of-generation tokens). None of
  // them ends a tool call that could be followed by another: </tool_call> is not a stop for kHermes.
  std::vector<std::string> stops;
  // Texts that begin a tool call: a streaming server holds content back from here until the call
  // is parsed. kLlama31's and kGeneric's calls begin with "{" at the start of the message.
  std::vector<std::string> triggers;
  // Special tokens that carry the syntax: detokenize the output with special = true so that they
  // reach parse_assistant_output (they are control tokens in some vocabularies).
  std::vector<std::string> preserved_tokens;
};
ToolCallSyntax tool_call_syntax(ToolCallFormat format);

// Checks an OpenAI `tools` value and rebuilds it as llama.cpp passes it to templates: null (for
// null or an empty array) or [{"type": "function", "function": {"name", "description" ("" when
// absent), "parameters" ({"type": "object", "properties": {}} when absent)}}] (other keys, such
// as "strict", are dropped). kInvalidArgument naming the field (tools[1].function.name) otherwise.
Expected<nlohmann::ordered_json> normalize_tools(const nlohmann::ordered_json& tools);

// A GBNF grammar (root rule "root") that accepts exactly the tool calls of `format` for `tools`
// (an OpenAI tools array), each call's arguments constrained by its function's `parameters` schema
// (json_schema_to_grammar's subset; a `parameters` object schema without "properties" and
// "additionalProperties" accepts any object). forced_name: only that function (tool_choice
// {"type": "function", ...}); otherwise any of them (tool_choice "required"). parallel_tool_calls:
// one or more calls, else exactly one (kLlama31 always one: its template refuses several).
// allow_response (kGeneric only): also accept {"response": "..."}, llama.cpp's grammar for
// tool_choice "auto" with the generic format.
// Errors: kInvalidArgument for kNone, malformed or empty tools, an unknown forced_name;
// kUnsupported (with the JSON pointer) for a parameters schema outside the supported subset.
Expected<std::string> tool_call_grammar(ToolCallFormat format, const nlohmann::ordered_json& tools,
                                        const std::string* forced_name, bool parallel_tool_calls,
                                        bool allow_response = false);

// OpenAI's response_format as a GBNF grammar:
//   {"type": "json_object"}                                 any JSON object
//   {"type": "json_object", "schema": {...}}                that schema (llama.cpp's extension)
//   {"type": "json_schema", "json_schema": {"schema": ...}}  that schema
//   {"type": "text"} or null                                "" (no constraint)
// kInvalidArgument for anything else (naming the field), kUnsupported for a schema outside
// json_schema_to_grammar's subset.
Expected<std::string> response_format_grammar(const nlohmann::ordered_json& response_format);

// Renames every rule of a GBNF text (definitions and references) by prefixing it, so that several
// generated grammars can be combined into one. Comments are dropped.
std::string prefix_gbnf_rules(std::string_view gbnf, std::string_view prefix);

}  // namespace loom::chat
