// llama.cpp's built-in chat template names ("chatml", "llama3", "mistral-v7", "gemma", ...), which
// llama_chat_apply_template and llama.node accept wherever a template is expected, as Jinja
// templates loom renders like any other.
//
//   std::string src = *resolve_chat_template("llama3");   // a Jinja source
//   std::string same = *resolve_chat_template("{{ messages[0].content }}");  // Jinja: as given
//
// Each name maps to a Jinja source written for loom that renders system / user / assistant (and
// the other roles the C++ formatting knows) exactly as llama.cpp's C++ formatting for that name
// does (src/llama-chat.cpp's llm_chat_apply_template), with add_generation_prompt as its add_ass.
// tests/chat/test_named_templates.cpp checks every name against llama.cpp's own outputs
// (tests/chat/data/llama_cpp_chat_builtins.json: the expected strings of llama.cpp's
// tests/test-chat-template.cpp and more conversations rendered by llama.cpp itself).
// "chatml" is loom's ChatML template (chatml_template_source(): the same text for plain
// conversations, plus tools in the Hermes syntax). The others describe no tools: with tools a
// request gets the generic JSON tool-call format (tool_calls.h), as for any template without a
// tool syntax. Like the C++ formatting, they ignore bos_token and eos_token (the tokenizer adds
// BOS), except where llama.cpp writes a marker such as "<s>" as text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom::chat {

// The names, in llama.cpp's order (LLM_CHAT_TEMPLATES in src/llama-chat.cpp, v0.5.0): 54 of them.
const std::vector<std::string>& named_template_names();

// The Jinja source for a built-in name (exact match), nullptr when `name` is not one.
const std::string* named_template_source(std::string_view name);

// Whether a template string is Jinja source rather than a name: it contains "{%" or "{{".
bool looks_like_jinja(std::string_view s);

// What a caller gave as a chat template (a scheduler's or a request's "chat_template", a CLI flag):
// Jinja source is returned as it is; a built-in name (surrounding whitespace ignored) becomes its
// source; anything else is kInvalidArgument: "chat_template: 'xyz' is neither a Jinja template
// nor a built-in template name (known: chatml, llama2, ...)" (a long string is shortened).
Expected<std::string> resolve_chat_template(std::string_view name_or_source);

}  // namespace loom::chat
