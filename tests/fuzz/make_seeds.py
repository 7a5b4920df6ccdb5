#!/usr/bin/env python3
"""Writes the seed corpora (tests/fuzz/corpus/TARGET/) and dictionaries (tests/fuzz/dict/) of the
fuzz targets from the shared test data and a few hand-written inputs. Run from anywhere:
  python3 tests/fuzz/make_seeds.py [SHARED_DIR]
The state target's seeds come from the target itself (LOOM_FUZZ_SEED_DIR, see fuzz_state.cpp)."""
import json, os, random, re, shutil, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(here))
shared = sys.argv[1] if len(sys.argv) > 1 else os.environ.get('LOOM_SHARED', os.path.join(repo, '..', 'shared'))
corpus = os.path.join(here, 'corpus')
dicts = os.path.join(here, 'dict')

def put(target, name, data):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)

def read(rel):
    with open(os.path.join(shared, rel), 'rb') as f:
        return f.read()

def write_dict(name, words):
    os.makedirs(dicts, exist_ok=True)
    with open(os.path.join(dicts, name + '.dict'), 'w') as f:
        for w in sorted(set(words)):
            f.write('"' + ''.join(c if 32 <= ord(c) < 127 and c not in '"\\' else '\\x%02x' % ord(c)
                                  for c in w) + '"\n')

for t in os.listdir(corpus) if os.path.isdir(corpus) else []:
    if t != 'state':
        shutil.rmtree(os.path.join(corpus, t))

# ---- GGUF files: a control vector and a small LoRA (model seeds come from tests/data) ----
cvec = read('golden/adapters/control-vector.gguf')
lora_c = read('golden/adapters/lora-C-embd-output.gguf')
put('gguf', 'control-vector.gguf', cvec)
put('gguf', 'lora-C.gguf', lora_c)
put('model_load', 'control-vector.gguf', cvec)  # not a model: the refusal paths
put('adapter', 'lora-C', b'\x00' + lora_c)
put('adapter', 'lora-C-scaled', b'\x02' + lora_c)
put('adapter', 'cvec-L1-3', b'\x01' + cvec)
put('adapter', 'cvec-L2-5', bytes([1 | (1 << 2) | (3 << 4)]) + cvec)
src = open(os.path.join(repo, 'src/model/hparams.cpp')).read() + open(os.path.join(repo, 'src/vocab/vocab.cpp')).read() \
    + open(os.path.join(repo, 'src/model/model.cpp')).read() + open(os.path.join(repo, 'src/model/adapters.cpp')).read()
keys = set(re.findall(r'"([a-z0-9_]+(?:\.[a-z0-9_%]+)+)"', src))
keys |= {'GGUF', 'llama', 'qwen2', 'qwen3', 'phi3', 'gemma', 'gemma2', 'gemma3', 'bert', 'nomic-bert', 'gpt2',
         'general.alignment', 'direction.1', 'blk.0.', '.weight', 'lora_a', 'lora_b', 'adapter', 'lora', 'control_vector'}
for t in ('gguf', 'model_load', 'adapter'):
    write_dict(t, keys)

# ---- tokenizers: [vocab][flags] text ----
cases = open(os.path.join(shared, 'golden/vocab/tokenize-cases.txt'), encoding='utf-8').read().split('\n__case__\n')
rng = random.Random(14)
n_vocabs = 9 + 24  # kVocabFiles + one vocab per BPE preset (fuzz_tokenizer.cpp); then the 2 T5 vocabularies
for v in range(n_vocabs):
    picks = rng.sample(cases, 3) if v >= 9 else cases[:: max(1, len(cases) // 12)]
    for i, text in enumerate(picks):
        put('tokenizer', 'v%02d-%02d' % (v, i), bytes([v, rng.randrange(256)]) + text.encode())
put('tokenizer', 'special', bytes([2, 3]) + '<|begin_of_text|><|eot_id|><s></s>[CLS][SEP]<|endoftext|>'.encode())
put('tokenizer', 't5-charsmap', bytes([n_vocabs, 3]) + 'Ｈｅｌｌｏ　ﬁne e\u0301 <extra_id_0></s>\t\n  x'.encode() + b'\xff\xc3')
put('tokenizer', 't5encoder-userdef', bytes([n_vocabs + 1, 1]) + 'ＡＢＡＣ ＡＡ   plain  '.encode() + b'\xef\xbc')
put('tokenizer', 'invalid-utf8', bytes([0, 15]) + b'\xff\xfe\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80 abc \xe6\x97')

# ---- GBNF grammars with pieces ----
grammars = {
    'json': (r'''root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}''', ['{', '"a', '":', ' [1', ', 2.5e3', ']}']),
    'arith': ('root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= [0-9]+ | "(" expr ")"\n', ['(', '12', '+3', ')', '-4']),
    'chars': ('root ::= [a-zA-Z\\u00e9\\U0001F600]{2,5} [^x-z]* "!"?\n', ['ab', '\u00e9', '\U0001F600'.encode('utf-8')[:2].decode('latin-1'), 'q!']),
    'alts': ('root ::= ("yes" | "no" | "maybe") (" " root)?\n# comment\n', ['ye', 's ', 'no']),
    'rep': ('root ::= "a"{3} b* c+ d?\nb ::= "b"\nc ::= [c-e]\nd ::= "."\n', ['aa', 'abbc', 'de.']),
    'any': ('root ::= "<" . . ">" | [^]*\n', ['<', '\xc3', '\xa9x>']),
}
for name, (g, pieces) in grammars.items():
    data = g.encode() + b'\xff\xff' + b'\xff'.join(p.encode('latin-1') if all(ord(c) < 256 for c in p) else p.encode() for p in pieces)
    put('grammar', name, data)
write_dict('grammar', ['::=', '|', '(', ')', '*', '+', '?', '{', '}', '{0,', ',}', '[', ']', '[^', '"', '\\"', '\\x', '\\u',
                       '\\U', '\\n', '\\t', '\\\\', '.', '-', 'root', 'root ::= ', '\n', '#', '\xff', '\xff\xff'])

# ---- JSON schemas ----
schemas = [
    '{}', 'true', '{"type": "string", "minLength": 2, "maxLength": 5}',
    '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}',
    '{"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3}',
    '{"$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}}}, "$ref": "#/$defs/node"}',
    '{"type": "integer", "minimum": -15, "maximum": 2048}', '{"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 123}',
    '{"enum": ["red", 3, null, true, {"x": [1]}]}', '{"type": ["string", "null"]}',
    '{"type": "object", "additionalProperties": {"type": "integer"}}',
    '{"type": "array", "prefixItems": [{"const": 1}, {"type": "boolean"}], "items": false}',
    '{"type": "string", "format": "date-time"}', '{"type": "string", "format": "uuid"}',
    '{"allOf": [{"type": "object", "properties": {"x": {"type": "number", "minimum": 0}}}, {"properties": {"y": {"type": "string"}}}]}',
    '{"oneOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#"}}]}',
    '{"definitions": {"a": {"type": "boolean"}}, "properties": {"v": {"$ref": "#/definitions/a"}}}',
]
for i, s in enumerate(schemas):
    put('json_schema', 's%02d' % i, s)
json_words = ['"type"', '"string"', '"number"', '"integer"', '"boolean"', '"null"', '"object"', '"array"', '"enum"',
              '"const"', '"properties"', '"required"', '"additionalProperties"', '"items"', '"prefixItems"',
              '"minItems"', '"maxItems"', '"minLength"', '"maxLength"', '"format"', '"date"', '"time"', '"date-time"',
              '"uuid"', '"minimum"', '"maximum"', '"exclusiveMinimum"', '"exclusiveMaximum"', '"$ref"', '"#/$defs/"',
              '"$defs"', '"definitions"', '"anyOf"', '"oneOf"', '"allOf"', '"pattern"', 'true', 'false', 'null',
              '{', '}', '[', ']', ':', ',', '\\u0000', '\\ud800', '1e999', '-0', '9007199254740993']
write_dict('json_schema', json_words)

# ---- Jinja: template \xff\xff context ----
cj = json.load(open(os.path.join(shared, 'golden/chat-templates/cases.json')))
case_names = list(cj['cases'])
for tname, info in cj['templates'].items():
    src_t = read('golden/chat-templates/' + tname)
    for cname in info['cases'][:2] + [c for c in info['cases'] if 'tool' in c][:1]:
        ctx = dict(cj['cases'][cname]['context'])
        ctx['bos_token'] = info['bos_token']
        ctx['eos_token'] = info['eos_token']
        put('jinja', '%s-%s' % (tname.replace('.jinja', ''), cname), src_t + b'\xff\xff' + json.dumps(ctx).encode())
small_templates = [
    '{% for m in messages %}{{ m.role }}: {{ m.content | trim }}\n{% endfor %}',
    '{% macro f(x, y=2) %}{{ x * y }}{% if x > 0 %}{{ f(x - 1) }}{% endif %}{% endmacro %}{{ f(3) }}',
    '{% set ns = namespace(a=0) %}{% for i in range(5) if i % 2 %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}',
    '{{ "%s-%d" % ("a", 3) }}{{ [1, 2, 3] | join(",") }}{{ {"k": "v"} | tojson }}{{ "abc"[::-1] }}',
    '{%- if tools is defined and tools -%}{{ tools | tojson(indent=2) }}{%- endif -%}{{ raise_exception("x") if false }}',
    '{% filter upper %}{{ loop }}{% endfilter %}{% raw %}{{ not }}{% endraw %}{{ strftime_now("%Y-%m-%d") }}',
]
for i, t in enumerate(small_templates):
    put('jinja', 'small%02d' % i, t.encode() + b'\xff\xff{"messages": [{"role": "user", "content": " hi "}]}')
jinja_words = ['{%', '%}', '{{', '}}', '{#', '#}', '{%-', '-%}', '{{-', '-}}', 'for ', ' in ', 'endfor', 'if ', 'elif ',
               'else', 'endif', 'set ', 'endset', 'macro ', 'endmacro', 'call', 'endcall', 'caller()', 'filter ',
               'endfilter', 'with', 'endwith', 'do ', 'break', 'continue', 'raw', 'endraw', 'namespace(', 'range(',
               'loop.index', 'loop.first', 'loop.last', 'loop.cycle(', 'messages', 'message', 'role', 'content',
               'tool_calls', 'tools', 'add_generation_prompt', 'bos_token', 'eos_token', '| tojson', '| trim',
               '| length', '| join', '| map(', '| selectattr(', '| items', '| default(', 'is defined', 'is none',
               'is string', 'is mapping', 'not ', ' and ', ' or ', '~', '**', '//', '[::-1]', '.split(', '.strip(',
               '.startswith(', 'raise_exception(', 'strftime_now(', 'none', 'None', 'true', 'True', '\xff\xff']
write_dict('jinja', jinja_words)

# ---- chat templates: [template][flags] request ----
n_templates = len(cj['templates']) + 1
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
for t in range(n_templates):
    for cname in ('system_user', 'multi_turn', 'tool_call'):
        if cname not in cj['cases']:
            continue
        req = {'messages': cj['cases'][cname]['context']['messages']}
        if t % 2:
            req['tools'] = tools
            req['tool_choice'] = 'required' if t % 4 == 1 else 'auto'
            req['output'] = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        else:
            req['response_format'] = {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}} if t % 4 == 2 else {"type": "text"}
            req['output'] = '<think>hmm</think>The answer.'
        put('chat_template', 't%02d-%s' % (t, cname), bytes([t, 1]) + json.dumps(req).encode())
write_dict('chat_template', json_words + ['"messages"', '"role"', '"content"', '"system"', '"user"', '"assistant"',
           '"tool"', '"developer"', '"tool_calls"', '"function"', '"name"', '"arguments"', '"id"', '"tool_call_id"',
           '"tools"', '"tool_choice"', '"auto"', '"none"', '"required"', '"response_format"', '"json_object"',
           '"json_schema"', '"schema"', '"output"', '"chat_template_kwargs"', '"enable_thinking"', '"parameters"',
           '<tool_call>', '</tool_call>', '<think>', '</think>', '[TOOL_CALLS]', '[ARGS]', '<|python_tag|>',
           '{"name": ', '"text"', '"image_url"', '"reasoning_content"'])

# ---- server request bodies: [flags] body ----
bodies = [
    (0, {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0}),
    (0, {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "a"}]}],
         "stream": True, "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 3,
         "stop": ["\n", "END"], "seed": 42, "logit_bias": {"5": -100, "7": False}}),
    (2, {"messages": [{"role": "user", "content": "weather?"}], "tools": tools, "tool_choice": "required",
         "parallel_tool_calls": True}),
    (0, {"messages": [{"role": "user", "content": "json"}], "response_format": {"type": "json_object"}}),
    (1, {"prompt": "Once upon a time", "n_predict": 16, "samplers": "top_k;top_p;temperature", "n_probs": 5,
         "json_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}),
    (1, {"prompt": [[1, 2, 3], "text"], "n": 2, "echo": True, "logprobs": 2, "dry_multiplier": 0.5,
         "dry_sequence_breakers": ["\n"], "mirostat": 2, "grammar": "root ::= \"a\"+"}),
    (5, {"prompt": [1, 9, 33], "logit_bias": [[5, -1.5], [6, False]], "top_k": 0, "min_p": 0.1, "typical_p": 0.9}),
    # flags bits 3-5: the other endpoints (embeddings, rerank, tokenize, detokenize, apply-template)
    (1 << 3, {"input": ["hello world", [1, 2, 3]], "encoding_format": "base64"}),
    (1 << 3, {"content": "Once upon a time", "normalize": False}),
    (2 << 3, {"query": "what is a cat?", "documents": ["a cat is an animal", "paris"], "top_n": 1,
              "return_documents": True}),
    (3 << 3, {"content": "Once <s> upon a time", "add_special": True, "parse_special": True, "with_pieces": True}),
    (4 << 3, {"tokens": [1, 2, 300, 511]}),
    ((5 << 3) | 2, {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                    "add_generation_prompt": True, "tools": tools}),
]
for i, (flags, b) in enumerate(bodies):
    put('server_request', 'b%02d' % i, bytes([flags]) + json.dumps(b).encode())
write_dict('server_request', json_words + ['"messages"', '"prompt"', '"max_tokens"', '"max_completion_tokens"',
           '"n_predict"', '"temperature"', '"top_k"', '"top_p"', '"min_p"', '"typical_p"', '"repeat_penalty"',
           '"repeat_last_n"', '"frequency_penalty"', '"presence_penalty"', '"mirostat"', '"seed"', '"stop"', '"stream"',
           '"stream_options"', '"include_usage"', '"logprobs"', '"top_logprobs"', '"n_probs"', '"logit_bias"', '"n"',
           '"grammar"', '"json_schema"', '"response_format"', '"tools"', '"tool_choice"', '"samplers"', '"echo"',
           '"dry_multiplier"', '"dry_sequence_breakers"', '"xtc_probability"', '"n_keep"', '"cache_prompt"',
           '"ignore_eos"', '"min_keep"', '"parallel_tool_calls"', '"add_generation_prompt"', '"chat_template_kwargs"',
           '"input"', '"encoding_format"', '"base64"', '"normalize"', '"query"', '"documents"', '"top_n"',
           '"return_documents"', '"content"', '"add_special"', '"parse_special"', '"with_pieces"', '"tokens"'])

# ---- HTTP requests ----
reqs = [
    b'GET /health HTTP/1.1\r\nHost: x\r\n\r\n',
    b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}',
    b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\nX-T: 1\r\n\r\n',
    b'GET /a%20b?q=1 HTTP/1.0\r\nConnection: keep-alive\r\nExpect: 100-continue\r\n\r\n',
]
for i, r in enumerate(reqs):
    put('http_parser', 'r%02d' % i, bytes([3]) + r)
write_dict('http_parser', ['GET ', 'POST ', ' HTTP/1.1\r\n', ' HTTP/1.0\r\n', '\r\n', '\r\n\r\n', 'Host: ', 'Content-Length: ',
           'Transfer-Encoding: chunked', 'Connection: close', 'Expect: 100-continue', '%00', '%2F', '0\r\n\r\n', ':'])

# ---- C API programs: random bytes, and a few ops spelled out ----
for i in range(8):
    put('capi', 'random%d' % i, bytes(rng.randrange(256) for _ in range(rng.randrange(16, 200))))
# op 0 = decode: flags 0 (tokens, default positions), 5 tokens, logits for all, no abort
put('capi', 'decode', bytes([0, 0, 0, 0, 0, 0x00, 5]) + bytes([10, 1, 20, 1, 30, 1, 40, 1, 50, 1]) + bytes([1, 1]))
print('seeds written to', corpus)
