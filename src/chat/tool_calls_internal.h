// Internals shared by the tool-call files (tool_calls*.cpp): text and JSON-prefix scanning,
// the per-format scanners and what parse_output needs of them. Not a public header.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_calls.h"

namespace loom::chat::detail {

using json = nlohmann::ordered_json;

// ---- text and JSON scanning, reasoning, call ids (tool_calls_text.cpp) ----

std::string_view lstrip(std::string_view s);
std::string_view rstrip(std::string_view s);
std::string_view strip(std::string_view s);
size_t skip_ws(std::string_view s, size_t pos);
// Whether `lit` is at s[pos].
bool at(std::string_view s, size_t pos, std::string_view lit);

// Where the JSON value starting at s[pos] ends (one past it), npos when it is cut off or cannot be
// a JSON value. Only the structure is checked here; json::parse checks the rest. *cut_off (when
// given) says whether the value runs into the end of `s` unfinished, so that more text could
// complete it: an open object, array or string, nothing at all yet, or a scalar that reaches the
// end (more digits may follow; such a scalar still ends at s.size() here).
size_t json_value_end(std::string_view s, size_t pos, bool* cut_off = nullptr);

// Partial parsing: whether the JSON value at s[pos] may still be completed by more text.
bool json_cut_off(std::string_view s, size_t pos);

// The JSON value at s[pos] and where it ends.
std::optional<json> json_at(std::string_view s, size_t pos, size_t* end);

bool is_hex(char c);

// The text of the JSON string that starts at s[pos] == '"', as far as `s` goes: up to its closing
// quote, or up to the end of `s` without an escape that is cut off there (a \u escape, or a high
// surrogate whose low half has not come yet) or malformed. nullopt when even that is not JSON
// (a raw control character).
std::optional<std::string> json_string_prefix(std::string_view s, size_t pos);

// Partial parsing: the compact text json::dump gives the JSON value at s[pos], as far as `s`
// determines it: structure and complete scalars as dump writes them, a string as far as it goes
// (escaped as dump escapes it, without an escape the end of `s` cuts off), no whitespace; it stops
// before a number or literal that more text may still extend, and at text that is not JSON (the
// full parse decides about that). So for the prefixes of one value, each result is a prefix of the
// next and of the complete value's dump.
std::string json_compact_prefix(std::string_view s, size_t pos);

// Arguments as compact JSON text: an object, or a string holding one.
std::optional<std::string> arguments_text(const json& a);

// {"name": ..., "arguments" | "parameters": ..., "id"?: ...}
std::optional<ToolCall> call_from_object(const json& o);

// Partial parsing: `s` without a tail that may be the beginning of one of `marks` (a proper,
// non-empty prefix of one), then without trailing whitespace. What is held back this way is shown
// once the text after it says what it is.
std::string_view hold_tail(std::string_view s, std::span<const std::string_view> marks);

// --- reasoning -----------------------------------------------------------------------------

struct ReasoningSplit {
  std::string reasoning;         // the block's text, whitespace stripped
  std::string_view open, close;  // its tags (empty: no block)
  bool closed = false;
  std::string_view body;  // the text after the block (all of it when there is none)
};

// Takes a leading reasoning block off `text`. partial: an unclosed block's text so far leaves out a
// tail that may be the start of its closing tag, and a message that so far is only the beginning
// of an opening tag ("<thi") is held back entirely (empty body).
ReasoningSplit split_reasoning(std::string_view text, bool forced_open, bool partial);

// `text`: the output up to the end of the call (Hermes: up to its start, so that the call keeps its
// id while it streams cut off), so that a call streamed by a partial parse keeps its id as the
// output grows.
std::string make_id(ToolCallFormat f, std::string_view text, size_t index, uint64_t seed);

// ---- the JSON formats' scanners (tool_calls_json.cpp) ----

// --- per-format parsers ----------------------------------------------------------------------
// Each returns the calls it read from `s` (already without reasoning) with where each ends, the
// content before the first call, and `rest`: the text after the last call read (malformed calls
// included). With `partial`, a call that the end of `s` cuts off (and a bare JSON reply that may
// yet be a call) is not read: `held` is where that text begins, and everything from there is held
// back from the content until more text decides it.

struct Scan {
  std::vector<ToolCall> calls;
  std::vector<size_t> ends;    // where each call ends in s
  std::vector<size_t> starts;  // where each call starts, when its id is made from the text before it
  // Partial (Hermes): the call the end of s cuts off, once its name is known, with the beginning of
  // its arguments (json_compact_prefix), and where it starts.
  std::optional<ToolCall> pending;
  size_t pending_start = 0;
  std::string_view before;
  std::string_view rest;
  size_t held = std::string_view::npos;

  // A call the end of s cuts off: the scan holds the text from `at` back, with the call so far
  // (pending, starting at pending_at) when its name is known.
  void hold(size_t at, std::optional<ToolCall> cut_call, size_t pending_at) {
    held = at;
    pending = std::move(cut_call);
    pending_start = pending_at;
  }
  // The calls' block starts at `start` in s (npos: s has none): `before` is the text ahead of it.
  // Returns start.
  size_t open_at(std::string_view s, size_t start) {
    before = start == std::string_view::npos ? s : s.substr(0, start);
    return start;
  }
  void add(ToolCall tc, size_t end, size_t start = std::string_view::npos) {
    calls.push_back(std::move(tc));
    ends.push_back(end);
    starts.push_back(start);
  }
};

// Whether the text from pos to the end is a beginning (possibly empty) of `lit`.
bool prefix_of(std::string_view s, size_t pos, std::string_view lit);

Scan scan_hermes(std::string_view s, bool partial);

Scan scan_llama31(std::string_view s, bool partial);

Scan scan_mistral(std::string_view s, bool partial);

// {"tool_call": {...}} / {"tool_calls": [...]} / {"response": ...}; `content` (when set) is the
// reply text. A reply that the end of the text cuts off ({"response": "Hel) is its text so far, in
// partial parsing and at the end alike, so that a streamed reply only grows.
Scan scan_generic(std::string_view s, std::optional<std::string>* content, bool partial);

// ---- Qwen XML (tool_calls_xml.cpp) ----

// --- kQwenXml ----------------------------------------------------------------------------------

// How a parameter's text becomes its value, from the function's schema (llama.cpp's rule).
enum class XmlValue { kJson, kString, kEither };

XmlValue xml_value_kind(const json& tools, const std::string& fn, const std::string& param);

// Compact JSON as dump writes it; text that is not UTF-8 (a raw parameter) gets U+FFFD, the same
// way in every partial parse and in the final one.
std::string compact(const json& v);

Scan scan_qwen_xml(std::string_view s, bool partial, const json& tools);

// ---- LFM2 and Gemma 4 (tool_calls_pythonic.cpp) ----

// --- kLfm2 -------------------------------------------------------------------------------------
// <|tool_call_start|>[name(key="value", n=1, d={"a": [1, 2]}), other()]<|tool_call_end|>: Python
// call syntax with Python or JSON literals (llama.cpp's python_style_tool_calls with
// allow_json_literals), converted to JSON arguments.

inline constexpr std::string_view kLfm2Start = "<|tool_call_start|>";
inline constexpr std::string_view kLfm2End = "<|tool_call_end|>";

Scan scan_lfm2(std::string_view s, bool partial);

// --- kGemma4 -----------------------------------------------------------------------------------
// <|tool_call>call:name{key:<|"|>text<|"|>,n:1,d:{a:[1,2]}}<tool_call|>: Gemma 4's own value
// syntax (llama.cpp's gemma4 parser), converted to JSON arguments.

inline constexpr std::string_view kGemma4Start = "<|tool_call>";
inline constexpr std::string_view kGemma4End = "<tool_call|>";
inline constexpr std::string_view kGemma4Quote = "<|\"|>";

Scan scan_gemma4(std::string_view s, bool partial);

inline constexpr std::string_view kChannelOpen = "<|channel>";
inline constexpr std::string_view kChannelClose = "<channel|>";

// Gemma 4's channel markers in the content (see the header): <|channel>...<channel|> blocks are
// taken out (a thought's text added to *reasoning), the content ends at a <channel|> that closes
// no block; partial: an unclosed block is held back, and with `hold_tail` (Gemma 4's output) a tail
// that may begin a marker.
void gemma_channels(std::string* content, std::string* reasoning, bool partial, bool hold_tail);

}  // namespace loom::chat::detail
