#include "chat/named_templates.h"

#include <algorithm>
#include <utility>

#include "chat/chat_request.h"

namespace loom::chat {
namespace {

// One Jinja source per llama.cpp built-in name, each rendering what llama.cpp's C++ formatting for
// that name writes (tests/chat/test_named_templates.cpp compares them with llama.cpp's outputs).
// Conventions: every tag trims the template text around it ({%- -%}, {{- -}}), so only the string
// literals reach the output; `|trim(' \t\n\v\f\r')` is C's isspace() set, what llama.cpp's trim()
// removes; roles a format does not know are skipped where llama.cpp skips them.
struct Named {
  const char* name;
  const char* source;  // nullptr: loom's ChatML (chatml_template_source())
};

// `|trim()" LOOM_WS R"()` below closes the raw string after "trim(", splices in the argument
// ' \t\n\v\f\r' (escapes the Jinja lexer resolves) and reopens it at ")".
#define LOOM_WS "' \\t\\n\\v\\f\\r'"

constexpr Named kNamed[] = {
    {"chatml", nullptr},
    {"llama2", R"({%- set ns = namespace(inside=true) -%}
{{- '[INST] ' -}}
{%- for message in messages -%}
{%- if not ns.inside -%}{%- set ns.inside = true -%}{{- '[INST] ' -}}{%- endif -%}
{%- if message['role'] == 'system' -%}{{- message['content'] + '\n' -}}
{%- elif message['role'] == 'user' -%}{{- message['content'] + ' [/INST]' -}}
{%- else -%}{{- message['content'] + '</s>' -}}{%- set ns.inside = false -%}
{%- endif -%}
{%- endfor -%})"},
    {"llama2-sys", R"({%- set ns = namespace(inside=true) -%}
{{- '[INST] ' -}}
{%- for message in messages -%}
{%- if not ns.inside -%}{%- set ns.inside = true -%}{{- '[INST] ' -}}{%- endif -%}
{%- if message['role'] == 'system' -%}{{- '<<SYS>>\n' + message['content'] + '\n<</SYS>>\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- message['content'] + ' [/INST]' -}}
{%- else -%}{{- message['content'] + '</s>' -}}{%- set ns.inside = false -%}
{%- endif -%}
{%- endfor -%})"},
    {"llama2-sys-bos", R"({%- set ns = namespace(inside=true) -%}
{{- '[INST] ' -}}
{%- for message in messages -%}
{%- if not ns.inside -%}{%- set ns.inside = true -%}{{- '<s>[INST] ' -}}{%- endif -%}
{%- if message['role'] == 'system' -%}{{- '<<SYS>>\n' + message['content'] + '\n<</SYS>>\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- message['content'] + ' [/INST]' -}}
{%- else -%}{{- message['content'] + '</s>' -}}{%- set ns.inside = false -%}
{%- endif -%}
{%- endfor -%})"},
    {"llama2-sys-strip", R"({%- set ns = namespace(inside=true) -%}
{{- '[INST] ' -}}
{%- for message in messages -%}
{%- set content = message['content']|trim()" LOOM_WS R"() -%}
{%- if not ns.inside -%}{%- set ns.inside = true -%}{{- '[INST] ' -}}{%- endif -%}
{%- if message['role'] == 'system' -%}{{- '<<SYS>>\n' + content + '\n<</SYS>>\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- content + ' [/INST]' -}}
{%- else -%}{{- content + '</s>' -}}{%- set ns.inside = false -%}
{%- endif -%}
{%- endfor -%})"},
    {"mistral-v1", R"({%- set ns = namespace(inside=false) -%}
{%- for message in messages -%}
{%- if not ns.inside -%}{{- ' [INST] ' -}}{%- set ns.inside = true -%}{%- endif -%}
{%- if message['role'] == 'system' -%}{{- message['content'] + '\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- message['content'] + ' [/INST]' -}}
{%- else -%}{{- ' ' + message['content'] + '</s>' -}}{%- set ns.inside = false -%}
{%- endif -%}
{%- endfor -%})"},
    {"mistral-v3", R"({%- set ns = namespace(inside=false) -%}
{%- for message in messages -%}
{%- if not ns.inside -%}{{- '[INST] ' -}}{%- set ns.inside = true -%}{%- endif -%}
{%- if message['role'] == 'system' -%}{{- message['content'] + '\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- message['content'] + '[/INST]' -}}
{%- else -%}{{- ' ' + message['content']|trim()" LOOM_WS R"() + '</s>' -}}{%- set ns.inside = false -%}
{%- endif -%}
{%- endfor -%})"},
    {"mistral-v3-tekken", R"({%- set ns = namespace(inside=false) -%}
{%- for message in messages -%}
{%- if not ns.inside -%}{{- '[INST]' -}}{%- set ns.inside = true -%}{%- endif -%}
{%- if message['role'] == 'system' -%}{{- message['content'] + '\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- message['content'] + '[/INST]' -}}
{%- else -%}{{- message['content'] + '</s>' -}}{%- set ns.inside = false -%}
{%- endif -%}
{%- endfor -%})"},
    {"mistral-v7", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' -}}
{%- elif message['role'] == 'user' -%}{{- '[INST] ' + message['content'] + '[/INST]' -}}
{%- else -%}{{- ' ' + message['content'] + '</s>' -}}
{%- endif -%}
{%- endfor -%})"},
    {"mistral-v7-tekken", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' -}}
{%- elif message['role'] == 'user' -%}{{- '[INST]' + message['content'] + '[/INST]' -}}
{%- else -%}{{- message['content'] + '</s>' -}}
{%- endif -%}
{%- endfor -%})"},
    {"phi3", R"({%- for message in messages -%}
{{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%})"},
    {"phi4", R"({%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant<|im_sep|>' -}}{%- endif -%})"},
    {"falcon3", R"({%- for message in messages -%}
{{- '<|' + message['role'] + '|>\n' + message['content'] + '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%})"},
    {"zephyr", R"({%- for message in messages -%}
{{- '<|' + message['role'] + '|>\n' + message['content'] + '<|endoftext|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%})"},
    {"monarch", R"({%- for message in messages -%}
{{- ('' if loop.first else '<s>') + message['role'] + '\n' + message['content'] + '</s>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<s>assistant\n' -}}{%- endif -%})"},
    {"gemma", R"({%- set ns = namespace(system='') -%}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}{%- set ns.system = ns.system + message['content']|trim()" LOOM_WS R"() -%}
{%- else -%}
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
{{- '<start_of_turn>' + role + '\n' -}}
{%- if ns.system != '' and role != 'model' -%}{{- ns.system + '\n\n' -}}{%- set ns.system = '' -%}{%- endif -%}
{{- message['content']|trim()" LOOM_WS R"() + '<end_of_turn>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%})"},
    {"orion", R"({%- set ns = namespace(system='') -%}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}{%- set ns.system = ns.system + message['content'] -%}
{%- elif message['role'] == 'user' -%}
{{- 'Human: ' -}}
{%- if ns.system != '' -%}{{- ns.system + '\n\n' -}}{%- set ns.system = '' -%}{%- endif -%}
{{- message['content'] + '\n\nAssistant: </s>' -}}
{%- else -%}{{- message['content'] + '</s>' -}}
{%- endif -%}
{%- endfor -%})"},
    {"openchat", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- message['content'] + '<|end_of_turn|>' -}}
{%- else -%}{{- 'GPT4 Correct ' + message['role'][:1]|upper + message['role'][1:] + ': ' + message['content'] + '<|end_of_turn|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'GPT4 Correct Assistant:' -}}{%- endif -%})"},
    {"vicuna", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- message['content'] + '\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- 'USER: ' + message['content'] + '\n' -}}
{%- elif message['role'] == 'assistant' -%}{{- 'ASSISTANT: ' + message['content'] + '</s>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'ASSISTANT:' -}}{%- endif -%})"},
    {"vicuna-orca", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- 'SYSTEM: ' + message['content'] + '\n' -}}
{%- elif message['role'] == 'user' -%}{{- 'USER: ' + message['content'] + '\n' -}}
{%- elif message['role'] == 'assistant' -%}{{- 'ASSISTANT: ' + message['content'] + '</s>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'ASSISTANT:' -}}{%- endif -%})"},
    {"deepseek", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- message['content'] -}}
{%- elif message['role'] == 'user' -%}{{- '### Instruction:\n' + message['content'] + '\n' -}}
{%- elif message['role'] == 'assistant' -%}{{- '### Response:\n' + message['content'] + '\n<|EOT|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '### Response:\n' -}}{%- endif -%})"},
    {"deepseek2", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- message['content'] + '\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- 'User: ' + message['content'] + '\n\n' -}}
{%- elif message['role'] == 'assistant' -%}{{- 'Assistant: ' + message['content'] + '<｜end▁of▁sentence｜>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%})"},
    {"deepseek3", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- message['content'] + '\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- '<｜User｜>' + message['content'] -}}
{%- elif message['role'] == 'assistant' -%}{{- '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<｜Assistant｜>' -}}{%- endif -%})"},
    {"deepseek-ocr", R"({%- for message in messages -%}{{- message['content'] -}}{%- endfor -%})"},
    {"command-r", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + message['content']|trim()" LOOM_WS
                  R"() + '<|END_OF_TURN_TOKEN|>' -}}
{%- elif message['role'] == 'user' -%}{{- '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + message['content']|trim()" LOOM_WS
                  R"() + '<|END_OF_TURN_TOKEN|>' -}}
{%- elif message['role'] == 'assistant' -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' + message['content']|trim()" LOOM_WS
                  R"() + '<|END_OF_TURN_TOKEN|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}{%- endif -%})"},
    {"llama3", R"({%- for message in messages -%}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content']|trim()" LOOM_WS
               R"() + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%})"},
    {"chatglm3", R"({{- '[gMASK]sop' -}}
{%- for message in messages -%}{{- '<|' + message['role'] + '|>\n ' + message['content'] -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%})"},
    {"chatglm4", R"({{- '[gMASK]<sop>' -}}
{%- for message in messages -%}{{- '<|' + message['role'] + '|>\n' + message['content'] -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%})"},
    {"glmedge", R"({%- for message in messages -%}{{- '<|' + message['role'] + '|>\n' + message['content'] -}}{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%})"},
    {"minicpm", R"({%- for message in messages -%}
{%- if message['role'] == 'user' -%}{{- '<用户>' + message['content']|trim()" LOOM_WS R"() + '<AI>' -}}
{%- else -%}{{- message['content']|trim()" LOOM_WS R"() -}}
{%- endif -%}
{%- endfor -%})"},
    {"exaone3", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- '[|system|]' + message['content']|trim()" LOOM_WS R"() + '[|endofturn|]\n' -}}
{%- elif message['role'] == 'user' -%}{{- '[|user|]' + message['content']|trim()" LOOM_WS R"() + '\n' -}}
{%- elif message['role'] == 'assistant' -%}{{- '[|assistant|]' + message['content']|trim()" LOOM_WS
                R"() + '[|endofturn|]\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '[|assistant|]' -}}{%- endif -%})"},
    {"exaone4", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- '[|system|]' + message['content']|trim()" LOOM_WS R"() + '[|endofturn|]\n' -}}
{%- elif message['role'] == 'user' -%}{{- '[|user|]' + message['content']|trim()" LOOM_WS R"() + '\n' -}}
{%- elif message['role'] == 'assistant' -%}{{- '[|assistant|]' + message['content']|trim()" LOOM_WS
                R"() + '[|endofturn|]\n' -}}
{%- elif message['role'] == 'tool' -%}{{- '[|tool|]' + message['content']|trim()" LOOM_WS R"() + '[|endofturn|]\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '[|assistant|]' -}}{%- endif -%})"},
    {"exaone-moe", R"({%- for message in messages -%}
{%- if message['role'] in ['system', 'user', 'assistant', 'tool'] -%}
{{- '<|' + message['role'] + '|>\n' + message['content']|trim()" LOOM_WS R"() + '<|endofturn|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%})"},
    {"rwkv-world", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- 'System: ' + message['content']|trim()" LOOM_WS R"() + '\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- 'User: ' + message['content']|trim()" LOOM_WS R"() + '\n\n' -}}
{%- if loop.last -%}{{- 'Assistant:' -}}{%- endif -%}
{%- elif message['role'] == 'assistant' -%}{{- 'Assistant: ' + message['content']|trim()" LOOM_WS R"() + '\n\n' -}}
{%- endif -%}
{%- endfor -%})"},
    {"granite", R"({%- for message in messages -%}
{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' -}}
{%- if message['role'] == 'assistant_tool_call' -%}{{- '<|tool_call|>' -}}{%- endif -%}
{{- message['content'] + '<|end_of_text|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_of_role|>assistant<|end_of_role|>' -}}{%- endif -%})"},
    {"granite-4.0", R"({%- for message in messages -%}
{%- if message['role'] == 'assistant_tool_call' -%}{{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' -}}
{%- else -%}{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' -}}
{%- endif -%}
{{- message['content'] + '<|end_of_text|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_of_role|>assistant<|end_of_role|>' -}}{%- endif -%})"},
    {"granite-4.1", R"({%- for message in messages -%}
{%- if message['role'] == 'assistant_tool_call' -%}{{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' -}}
{%- else -%}{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' -}}
{%- endif -%}
{{- message['content'] + '<|end_of_text|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_of_role|>assistant<|end_of_role|>' -}}{%- endif -%})"},
    {"gigachat", R"({%- set has_system = messages|length > 0 and messages[0]['role'] == 'system' -%}
{{- '<s>' -}}
{%- if has_system -%}{{- messages[0]['content'] + '<|message_sep|>' -}}{%- endif -%}
{%- for message in messages -%}
{%- if not (loop.first and has_system) -%}
{%- if message['role'] == 'user' -%}{{- 'user<|role_sep|>' + message['content'] + '<|message_sep|>available functions<|role_sep|>[]<|message_sep|>' -}}
{%- elif message['role'] == 'assistant' -%}{{- 'assistant<|role_sep|>' + message['content'] + '<|message_sep|>' -}}
{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'assistant<|role_sep|>' -}}{%- endif -%})"},
    {"megrez", R"({%- for message in messages -%}
{{- '<|role_start|>' + message['role'] + '<|role_end|>' + message['content'] + '<|turn_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|role_start|>assistant<|role_end|>' -}}{%- endif -%})"},
    {"yandex", R"({%- for message in messages -%}
{%- if message['role'] == 'user' -%}{{- ' Пользователь: ' + message['content'] + '\n\n' -}}
{%- elif message['role'] == 'assistant' -%}{{- ' Ассистент: ' + message['content'] + '\n\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- ' Ассистент:[SEP]' -}}{%- endif -%})"},
    {"bailing", R"({%- for message in messages -%}
{{- '<role>' + ('HUMAN' if message['role'] == 'user' else message['role']|upper) + '</role>' + message['content'] -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<role>ASSISTANT</role>' -}}{%- endif -%})"},
    {"bailing-think", R"({%- for message in messages -%}
{{- '<role>' + ('HUMAN' if message['role'] == 'user' else message['role']|upper) + '</role>' + message['content'] -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<role>ASSISTANT</role><think>' -}}{%- endif -%})"},
    {"bailing2", R"({%- if not (messages|length > 0 and messages[0]['role'] == 'system') -%}
{{- '<role>SYSTEM</role>detailed thinking off<|role_end|>' -}}
{%- endif -%}
{%- for message in messages -%}
{{- '<role>' + ('HUMAN' if message['role'] == 'user' else message['role']|upper) + '</role>' + message['content'] + '<|role_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<role>ASSISTANT</role>' -}}{%- endif -%})"},
    {"llama4", R"({%- for message in messages -%}
{{- '<|header_start|>' + message['role'] + '<|header_end|>\n\n' + message['content']|trim()" LOOM_WS R"() + '<|eot|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|header_start|>assistant<|header_end|>\n\n' -}}{%- endif -%})"},
    {"smolvlm", R"({{- '<|im_start|>' -}}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- message['content'] + '\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- 'User: ' + message['content'] + '<end_of_utterance>\n' -}}
{%- else -%}{{- 'Assistant: ' + message['content'] + '<end_of_utterance>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%})"},
    {"hunyuan-moe", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- '<|startoftext|>' + message['content'] + '<|extra_4|>' -}}
{%- elif message['role'] == 'assistant' -%}{{- message['content'] + '<|eos|>' -}}
{%- else -%}{{- '<|startoftext|>' + message['content'] + '<|extra_0|>' -}}
{%- endif -%}
{%- endfor -%})"},
    {"gpt-oss", R"({%- for message in messages -%}
{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + ('<|return|>' if message['role'] == 'assistant' else '<|end|>') -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%})"},
    {"hunyuan-dense", R"({%- for message in messages -%}
{%- if loop.first and message['role'] == 'system' -%}{{- message['content'] + '<｜hy_place▁holder▁no▁3｜>' -}}{%- endif -%}
{%- if message['role'] == 'assistant' -%}{{- '<｜hy_Assistant｜>' + message['content'] + '<｜hy_place▁holder▁no▁2｜>' -}}
{%- elif message['role'] == 'user' -%}{{- '<｜hy_User｜>' + message['content'] + '<｜hy_Assistant｜>' -}}
{%- endif -%}
{%- endfor -%})"},
    {"hunyuan-vl", R"({{- '<｜hy_begin▁of▁sentence｜>' -}}
{%- for message in messages -%}
{%- if loop.first and message['role'] == 'system' -%}{{- message['content'] + '<｜hy_place▁holder▁no▁3｜>' -}}
{%- elif message['role'] == 'user' -%}{{- message['content'] + '<｜hy_User｜>' -}}
{%- elif message['role'] == 'assistant' -%}{{- message['content'] + '<｜hy_Assistant｜>' -}}
{%- endif -%}
{%- endfor -%})"},
    {"kimi-k2", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- '<|im_system|>system<|im_middle|>' -}}
{%- elif message['role'] == 'user' -%}{{- '<|im_user|>user<|im_middle|>' -}}
{%- elif message['role'] == 'assistant' -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}
{%- elif message['role'] == 'tool' -%}{{- '<|im_system|>tool<|im_middle|>' -}}
{%- endif -%}
{{- message['content'] + '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}{%- endif -%})"},
    {"seed_oss", R"({%- for message in messages -%}
{{- '<seed:bos>' + message['role'] + '\n' -}}
{{- (message['content']|trim()" LOOM_WS R"() if message['role'] == 'assistant' else message['content']) + '<seed:eos>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<seed:bos>assistant\n' -}}{%- endif -%})"},
    {"grok-2", R"({%- for message in messages -%}
{%- if message['role'] == 'system' -%}{{- 'System: ' + message['content']|trim()" LOOM_WS R"() + '<|separator|>\n\n' -}}
{%- elif message['role'] == 'user' -%}{{- 'Human: ' + message['content']|trim()" LOOM_WS R"() + '<|separator|>\n\n' -}}
{%- elif message['role'] == 'assistant' -%}{{- 'Assistant: ' + message['content'] + '<|separator|>\n\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%})"},
    {"pangu-embedded",
     R"({%- set names = {'system': '系统', 'user': '用户', 'assistant': '助手', 'tool': '工具', 'function': '方法'} -%}
{%- for message in messages -%}
{%- if loop.first and message['role'] != 'system' -%}{{- '[unused9]系统：[unused10]' -}}{%- endif -%}
{%- if message['role'] in names -%}{{- '[unused9]' + names[message['role']] + '：' + message['content'] + '[unused10]' -}}{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '[unused9]助手：' -}}{%- endif -%})"},
    {"solar-open", R"({%- for message in messages -%}
{{- '<|begin|>' + message['role'] + '<|content|>' + message['content'] + '<|end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|begin|>assistant' -}}{%- endif -%})"},
};

#undef LOOM_WS

}  // namespace

const std::vector<std::string>& named_template_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Named& n : kNamed) v.emplace_back(n.name);
    return v;
  }();
  return names;
}

const std::string* named_template_source(std::string_view name) {
  static const std::vector<std::pair<std::string, std::string>> table = [] {
    std::vector<std::pair<std::string, std::string>> t;
    for (const Named& n : kNamed) t.emplace_back(n.name, n.source ? n.source : chatml_template_source());
    return t;
  }();
  for (const auto& [n, src] : table)
    if (n == name) return &src;
  return nullptr;
}

bool looks_like_jinja(std::string_view s) {
  return s.find("{%") != std::string_view::npos || s.find("{{") != std::string_view::npos;
}

Expected<std::string> resolve_chat_template(std::string_view s) {
  if (looks_like_jinja(s)) return std::string(s);
  constexpr std::string_view kWs = " \t\r\n";
  const size_t b = s.find_first_not_of(kWs);
  const std::string_view name =
      b == std::string_view::npos ? std::string_view() : s.substr(b, s.find_last_not_of(kWs) - b + 1);
  if (const std::string* src = named_template_source(name)) return *src;
  size_t cut = std::min<size_t>(name.size(), 64);
  while (cut < name.size() && cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8
  std::string shown(name.substr(0, cut));
  if (cut < name.size()) shown += "... (" + std::to_string(name.size()) + " bytes)";
  std::string known;
  for (const std::string& n : named_template_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("chat_template: '" + shown +
                          "' is neither a Jinja template (no {% or {{) nor a built-in template name (known: " + known + ")");
}

}  // namespace loom::chat
