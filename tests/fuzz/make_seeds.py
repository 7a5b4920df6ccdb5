#!/usr/bin/env python3
"""Writes the seed corpora (tests/fuzz/corpus/TARGET/) and dictionaries (tests/fuzz/dict/) of the
fuzz targets from the shared test data and a few hand-written inputs. Run from anywhere:
  python3 tests/fuzz/make_seeds.py [SHARED_DIR]
The state target's seeds come from the target itself (LOOM_FUZZ_SEED_DIR, see fuzz_state.cpp)."""
import json, os, random, re, shutil, struct, subprocess, sys

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

# ---- GGUF files holding each weight type of issue 27 (gguf: one small tensor file per type;
# model_load: a one-layer llama, n_embd 256, a 64-token vocabulary, every matrix in the type).
# Blocks are random bytes with finite scales (any grid index, sign, trit or E2M1 code is valid). ----
def gguf_str(v):
    b = v.encode()
    return struct.pack('<Q', len(b)) + b

def gguf_kv(key, vtype, payload):
    return gguf_str(key) + struct.pack('<I', vtype) + payload

def kv_u32(key, v): return gguf_kv(key, 4, struct.pack('<I', v))
def kv_f32(key, v): return gguf_kv(key, 6, struct.pack('<f', v))
def kv_bool(key, v): return gguf_kv(key, 7, struct.pack('<B', 1 if v else 0))
def kv_str(key, v): return gguf_kv(key, 8, gguf_str(v))
def kv_arr(key, etype, items, pack):
    return gguf_kv(key, 9, struct.pack('<IQ', etype, len(items)) + b''.join(pack(x) for x in items))

def gguf_image(kvs, tensors):  # tensors: (name, [ne0, ne1, ...], type id, bytes)
    infos, data = b'', b''
    for name, ne, tid, raw in tensors:
        infos += gguf_str(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', n) for n in ne)
        infos += struct.pack('<IQ', tid, len(data))
        data += raw + b'\0' * (-len(raw) % 32)
    out = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs)) + b''.join(kvs) + infos
    return out + b'\0' * (-len(out) % 32) + data

def f32_bytes(vals): return b''.join(struct.pack('<f', v) for v in vals)

# name: (type id, elements per block, bytes per block, where the scale is)
NEW_TYPES = {
    'iq2_xxs': (16, 256, 66, 'f16@0'), 'iq2_xs': (17, 256, 74, 'f16@0'), 'iq3_xxs': (18, 256, 98, 'f16@0'),
    'iq1_s': (19, 256, 50, 'f16@0'), 'iq3_s': (21, 256, 110, 'f16@0'), 'iq2_s': (22, 256, 82, 'f16@0'),
    'iq1_m': (29, 256, 56, 'iq1_m'), 'tq1_0': (34, 256, 54, 'f16@52'), 'tq2_0': (35, 256, 66, 'f16@64'),
    'mxfp4': (39, 32, 17, 'e8m0'), 'q1_0': (41, 128, 18, 'f16@0'), 'q2_0': (42, 64, 18, 'f16@0'),
}
trng = random.Random(27)

def random_blocks(tname, n_elements):
    tid, bs, bb, scale = NEW_TYPES[tname]
    out = bytearray()
    for _ in range(n_elements // bs):
        b = bytearray(trng.randrange(256) for _ in range(bb))
        h = (trng.randrange(2) << 15) | (trng.randrange(4, 14) << 10) | trng.randrange(1024)  # f16 2^-11..2^-1
        if scale == 'e8m0':
            b[0] = trng.randrange(115, 127)
        elif scale == 'iq1_m':  # d is the top nibbles of the four u16 scale words at 48..55
            for k in range(4):
                b[49 + 2 * k] = (b[49 + 2 * k] & 0x0f) | (((h >> (4 * k)) & 0x0f) << 4)
        else:
            off = int(scale.split('@')[1])
            b[off:off + 2] = struct.pack('<H', h)
        out += b
    return bytes(out)

seed_tokens = ['<unk>', '<s>', '</s>'] + ['\u2581' + c for c in 'abcdefghijklmnopqrstuvwxyz'] + \
    list('abcdefghijklmnopqrstuvwxyz') + ['\u2581', '.', ',', '!', '?', ' ', '\u2581the', '\u2581a\u2581', '\n']
assert len(seed_tokens) == 64
for tname, (tid, bs, bb, _) in sorted(NEW_TYPES.items()):
    # gguf: two tensors of the type (2 x 1 block, 256 x 3 elements) and a little metadata.
    kvs = [kv_str('general.architecture', 'llama'), kv_str('general.name', 'seed-' + tname)]
    tensors = [('a.weight', [bs, 2], tid, random_blocks(tname, 2 * bs)),
               ('b.weight', [256, 3], tid, random_blocks(tname, 768))]
    put('gguf', 'type-%s.gguf' % tname, gguf_image(kvs, tensors))
    # model_load: a one-layer llama with every matrix of the type.
    E, F, V, H, HKV, D = 256, 256, len(seed_tokens), 4, 2, 64
    kvs = [kv_str('general.architecture', 'llama'), kv_str('general.name', 'seed-llama-' + tname),
           kv_u32('llama.context_length', 256), kv_u32('llama.embedding_length', E), kv_u32('llama.block_count', 1),
           kv_u32('llama.feed_forward_length', F), kv_u32('llama.attention.head_count', H),
           kv_u32('llama.attention.head_count_kv', HKV), kv_f32('llama.attention.layer_norm_rms_epsilon', 1e-5),
           kv_f32('llama.rope.freq_base', 10000.0), kv_u32('llama.rope.dimension_count', D),
           kv_u32('llama.vocab_size', V), kv_str('tokenizer.ggml.model', 'llama'),
           kv_arr('tokenizer.ggml.tokens', 8, seed_tokens, gguf_str),
           kv_arr('tokenizer.ggml.scores', 6, [-float(i) for i in range(V)], lambda x: struct.pack('<f', x)),
           kv_arr('tokenizer.ggml.token_type', 5, [2, 3, 3] + [1] * (V - 3), lambda x: struct.pack('<i', x)),
           kv_u32('tokenizer.ggml.unknown_token_id', 0), kv_u32('tokenizer.ggml.bos_token_id', 1),
           kv_u32('tokenizer.ggml.eos_token_id', 2)]
    ones = f32_bytes([1.0] * E)
    mat = lambda name, cols, rows: (name, [cols, rows], tid, random_blocks(tname, cols * rows))
    tensors = [mat('token_embd.weight', E, V), ('output_norm.weight', [E], 0, ones), mat('output.weight', E, V),
               ('blk.0.attn_norm.weight', [E], 0, ones), mat('blk.0.attn_q.weight', E, H * D),
               mat('blk.0.attn_k.weight', E, HKV * D), mat('blk.0.attn_v.weight', E, HKV * D),
               mat('blk.0.attn_output.weight', H * D, E), ('blk.0.ffn_norm.weight', [E], 0, ones),
               mat('blk.0.ffn_gate.weight', E, F), mat('blk.0.ffn_up.weight', E, F), mat('blk.0.ffn_down.weight', F, E)]
    put('model_load', 'llama-%s.gguf' % tname, gguf_image(kvs, tensors))

# ---- C API programs: random bytes, and a few ops spelled out ----
for i in range(8):
    put('capi', 'random%d' % i, bytes(rng.randrange(256) for _ in range(rng.randrange(16, 200))))
# op 0 = decode: flags 0 (tokens, default positions), 5 tokens, logits for all, no abort
put('capi', 'decode', bytes([0, 0, 0, 0, 0, 0x00, 5]) + bytes([10, 1, 20, 1, 30, 1, 40, 1, 50, 1]) + bytes([1, 1]))
print('seeds written to', corpus)
