// llama.node 1.7's contract where apps depend on it, in our own words: what its test suite
// (test/parallel.test.ts, test/index.test.ts) asserts, and what llama.node 1.7.15 was seen to do on
// the same models (README.md, "llama.node's own tests"). Each test names the behaviour it pins.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fs from 'node:fs';
import path from 'node:path';
import loom, {
  loadModel,
  loadModule,
  initLlama,
  loadLlamaModelInfo,
  toggleNativeLog,
  isNativeLogEnabled,
  BuildInfo,
} from '../lib/index.mjs';
import { model, shared, golden, repo, stories, tmpFile, greedy, gemma3n, withChatTemplate } from './helpers.mjs';

const llama2 = model('llama-2-tiny-random.gguf');
const data = (name) => path.join(repo, 'tests', 'data', name);

// A Hermes-style template (tools in the system turn, calls as <tool_call>{json}</tool_call>).
const hermes = `{%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for t in tools %}
{{ t | tojson }}
{%- endfor %}
</tools>
For each function call, return a json object within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}
{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}`;

const tools = [
  {
    type: 'function',
    function: { name: 'calc', description: 'Calculates.', parameters: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] } },
  },
];

const RESULT_KEYS = [
  'chat_format', 'context_full', 'interrupted', 'stopped_eos', 'stopped_limited', 'stopped_words', 'stopping_word', 'text',
  'timings', 'tokens_evaluated', 'tokens_predicted', 'truncated',
];
const TIMING_KEYS = [
  'predicted_ms', 'predicted_n', 'predicted_per_second', 'predicted_per_token_ms', 'prompt_ms', 'prompt_n', 'prompt_per_second', 'prompt_per_token_ms',
];

// ---- the parallel API (llama.node's test/parallel.test.ts) --------------------------------------

test('parallel: enable / disable / re-enable; enable beyond loadModel\'s n_parallel rejects', async () => {
  const ctx = await loadModel({ model: stories, n_ctx: 512, n_threads: 1, n_parallel: 4 });
  try {
    assert.equal(await ctx.parallel.enable(), true); // 2 slots by default
    assert.equal(ctx.parallel.isEnabled(), true);
    assert.equal(ctx.parallel.getStatus().n_parallel, 2);
    ctx.parallel.disable();
    assert.equal(ctx.parallel.isEnabled(), false);
    assert.equal(await ctx.parallel.enable({ n_parallel: 2, n_batch: 256 }), true);
    assert.equal(await ctx.parallel.enable({ n_parallel: 3 }), true);
    assert.equal(ctx.parallel.getStatus().n_parallel, 3);
    await assert.rejects(ctx.parallel.enable({ n_parallel: 100 }), /n_seq_max \(4\).*n_parallel >= 100/);
  } finally {
    await ctx.release();
  }
  // loadModel's default is one slot, as llama.node's: enable()'s default of 2 is refused.
  const one = await loadModel({ model: stories, n_ctx: 256, n_threads: 1 });
  try {
    await assert.rejects(one.parallel.enable(), /n_parallel >= 2/);
    assert.equal(await one.parallel.enable({ n_parallel: 1 }), true);
  } finally {
    await one.release();
  }
});

test('parallel: ids are numbers > 0, unique over completions, embeddings and reranks; stop() rejects "Request cancelled"', async () => {
  const ctx = await loadModel({ model: stories, n_ctx: 1024, n_threads: 1, n_parallel: 4 });
  try {
    await assert.rejects(ctx.parallel.completion({ prompt: 'Test', max_tokens: 5 }), /Parallel mode is not enabled/);
    assert.throws(() => ctx.parallel.getStatus(), /Parallel mode is not enabled/);
    assert.throws(() => ctx.parallel.subscribeToStatus(() => {}), /Parallel mode is not enabled/);
    await ctx.parallel.enable({ n_parallel: 3 });
    await assert.rejects(ctx.parallel.completion({ prompt: '', max_tokens: 5 }), /Prompt is required/);
    const streamed = [];
    const c = await ctx.parallel.completion({ prompt: 'Hello', max_tokens: 3, ...greedy }, (id, t) => streamed.push([id, t]));
    const e = await ctx.parallel.embedding('Test text');
    const r = await ctx.parallel.rerank('Query', ['Doc1', 'Doc2']);
    const ids = [c.requestId, e.requestId, r.requestId];
    for (const id of ids) assert.ok(Number.isInteger(id) && id > 0, `id ${id}`);
    assert.equal(new Set(ids).size, 3);
    const res = await c.promise;
    assert.equal(res.requestId, c.requestId);
    assert.ok(streamed.length > 0 && streamed.every(([id, t]) => id === c.requestId && t.requestId === c.requestId && typeof t.token === 'string'));
    // llama.node's parallel result fields (and its timings with cache_n).
    assert.deepEqual(Object.keys(res).sort(), ['chat_format', 'context_full', 'requestId', 'stopped_eos', 'stopped_limit', 'stopped_word', 'text', 'timings', 'tokens_evaluated', 'tokens_predicted']);
    assert.equal(res.content, res.text); // readable, not listed: llama.node parses chat requests only
    assert.equal(typeof res.timings.cache_n, 'number');
    // Embeddings on a context loaded without embedding: true: llama.node's n_embd zeros, as an array.
    const emb = await e.promise;
    assert.equal(emb.requestId, e.requestId);
    assert.ok(Array.isArray(emb.embedding) && emb.embedding.length === ctx.getModelInfo().nEmbd);
    // Reranking on a model that is not a reranker: llama.node's failure score for every document.
    assert.deepEqual((await r.promise).map((x) => x.score), [-1000000, -1000000]);
    const long = await ctx.parallel.completion({ prompt: 'Long text that should be stopped', max_tokens: 100 });
    long.stop();
    await assert.rejects(long.promise, /^Error: Request cancelled$/);
    const [a, b] = await Promise.all([ctx.parallel.completion({ prompt: 'One', max_tokens: 3 }), ctx.parallel.completion({ prompt: 'Two', max_tokens: 3 })]);
    assert.notEqual(a.requestId, b.requestId);
    await Promise.all([a.promise, b.promise]);
  } finally {
    await ctx.release();
  }
});

test('parallel: status snapshots and subscriptions', async () => {
  const ctx = await loadModel({ model: stories, n_ctx: 1024, n_threads: 1, n_parallel: 2 });
  try {
    await ctx.parallel.enable({ n_parallel: 2 });
    assert.deepEqual(ctx.parallel.getStatus(), { n_parallel: 2, active_slots: 0, queued_requests: 0, requests: [] });
    // No fixed sleeps: stories260K writes a thousand tokens in a fraction of a second on a quiet
    // machine, so the snapshot is taken at the first streamed token, and the first subscription
    // update is polled for (its timer is unref'd: it alone does not keep the event loop alive).
    const updates = [];
    const sub = ctx.parallel.subscribeToStatus((s) => updates.push(s));
    while (updates.length === 0) await new Promise((r) => setTimeout(r, 20));
    let snapshot;
    const taken = new Promise((r) => (snapshot = r));
    const req = await ctx.parallel.completion({ prompt: 'Hello world', max_tokens: 2000, ignore_eos: true }, () => snapshot(ctx.parallel.getStatus()));
    const s = await taken;
    assert.equal(s.requests.length, 1);
    const q = s.requests[0];
    assert.equal(q.request_id, req.requestId);
    assert.equal(q.type, 'completion');
    assert.ok(['queued', 'processing_prompt', 'generating', 'done'].includes(q.state));
    for (const k of ['prompt_length', 'tokens_generated', 'prompt_ms', 'generation_ms', 'tokens_per_second']) assert.equal(typeof q[k], 'number');
    req.stop();
    await req.promise.catch(() => {});
    sub.remove();
    const n = updates.length;
    assert.ok(n > 0 && updates.every((u) => u.n_parallel === 2 && Array.isArray(u.requests)));
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(updates.length, n);
  } finally {
    await ctx.release();
  }
});

// ---- completions (llama.node's test/index.test.ts) ----------------------------------------------

test('completion: streamed tokens make the text; content is the text; the result has llama.node\'s fields', async () => {
  const ctx = await loadModel({ model: llama2, n_ctx: 512, n_threads: 1 });
  try {
    let tokens = '';
    const events = [];
    const r = await ctx.completion({ prompt: 'My name is Merve and my favorite', temperature: 0, n_predict: 10, seed: 0 }, (d) => {
      assert.equal(typeof d.token, 'string');
      tokens += d.token;
      events.push(d);
    });
    assert.equal(tokens, r.text);
    assert.equal(r.content, r.text);
    // Each event's content is the text so far (llama.node's content-only parse), not the piece.
    for (const d of events) assert.equal(d.content, d.accumulated_text);
    assert.equal(events.at(-1).content, r.text);
    assert.deepEqual(Object.keys(r).sort(), [...RESULT_KEYS, 'content'].sort());
    assert.deepEqual(Object.keys(r.timings).sort(), TIMING_KEYS);
    assert.equal(JSON.stringify(Object.keys(JSON.parse(JSON.stringify(r))).sort()), JSON.stringify([...RESULT_KEYS, 'content'].sort()));
    // loom's additions stay readable.
    assert.equal(r.tokens.length, 10);
    assert.equal(typeof r.timings.cache_n, 'number');
    assert.equal(r.stopped_limited, true);
    const file = tmpFile('contract.sess');
    await ctx.saveSession(file);
    await ctx.loadSession(file);
    // An empty prompt is refused, as llama.node's.
    await assert.rejects(ctx.completion({ prompt: '' }), /Prompt is required/);
  } finally {
    await ctx.release();
  }
});

test('completion: response_format json_schema and json_object (an object) constrain the text', async () => {
  const ctx = await loadModel({ model: llama2, n_ctx: 512, n_threads: 1 });
  try {
    const schema = { type: 'object', properties: { name: { type: 'string' }, age: { type: 'number' } }, required: ['name', 'age'] };
    const a = await ctx.completion({ prompt: 'My name is Merve and my favorite', temperature: 0, n_predict: 5, response_format: { type: 'json_schema', json_schema: { schema, strict: true } } });
    assert.match(a.text, /^\{\s*"name"/);
    const b = await ctx.completion({ prompt: 'My name is Merve and my favorite', temperature: 0, n_predict: 5, response_format: { type: 'json_object' } });
    assert.match(b.text, /^\{/);
  } finally {
    await ctx.release();
  }
});

test('completion: n_probs gives completion_probabilities (streamed and final); none without it', async () => {
  const ctx = await loadModel({ model: stories, n_ctx: 512, n_threads: 1 });
  try {
    const streamed = [];
    const r = await ctx.completion({ prompt: 'Once upon a time', n_predict: 5, n_probs: 3, ...greedy }, (d) => streamed.push(d));
    assert.equal(r.completion_probabilities.length, 5);
    for (const p of r.completion_probabilities) {
      assert.equal(typeof p.content, 'string');
      assert.ok(p.probs.length > 0 && p.probs.length <= 3);
      for (const q of p.probs) assert.ok(typeof q.tok_str === 'string' && q.prob >= 0 && q.prob <= 1);
    }
    assert.ok(streamed.some((d) => d.completion_probabilities));
    const none = [];
    const r2 = await ctx.completion({ prompt: 'Once upon a time', n_predict: 5, ...greedy }, (d) => none.push(d));
    assert.equal(r2.completion_probabilities, undefined);
    assert.ok(none.every((d) => d.completion_probabilities === undefined));
  } finally {
    await ctx.release();
  }
});

test('completion: ctx_shift off ends at the context (context_full); on, it goes past it (truncated)', async () => {
  const off = await loadModel({ model: llama2, n_ctx: 20, ctx_shift: false, n_threads: 1 });
  const on = await loadModel({ model: llama2, n_ctx: 20, ctx_shift: true, n_threads: 1 });
  try {
    const r1 = await off.completion({ prompt: 'Testing context full with a fairly long prompt to ensure we trigger the context_full flag', n_predict: 100 });
    assert.equal(r1.context_full, true);
    assert.equal(r1.truncated, false);
    const r2 = await on.completion({ prompt: 'Testing context shifting with a fairly long prompt that should continue generating', n_predict: 20 });
    assert.equal(r2.context_full, false);
    assert.equal(r2.truncated, true);
  } finally {
    await off.release();
    await on.release();
  }
});

test('vocab_only: model info without desc, tokenize as llama.node, completion resolves empty', async () => {
  const ctx = await loadModel({ model: llama2, vocab_only: true });
  try {
    assert.equal(ctx.getModelInfo().desc, '');
    const t = await ctx.tokenize('Once upon a time');
    assert.deepEqual(Object.keys(t).sort(), ['has_media', 'tokens']);
    assert.deepEqual([...t.tokens], [9038, 2501, 263, 931]);
    assert.deepEqual(t.bitmap_hashes, []); // declared by llama.node's types: readable, not listed
    const r = await ctx.completion({ prompt: 'Once upon a time' });
    assert.deepEqual(Object.keys(r).sort(), RESULT_KEYS);
    assert.equal(r.text, '');
    assert.equal(r.stopped_limited, true);
    assert.equal(r.tokens_predicted, 0);
  } finally {
    await ctx.release();
  }
});

// ---- chat formatting, templates, streamed parsing ------------------------------------------------

test('getFormattedChat: llama-chat without the model\'s own template (messages only); template names', async () => {
  const ctx = await loadModel({ model: llama2, n_ctx: 512, n_threads: 1 });
  try {
    assert.equal(ctx.isJinjaSupported(), false);
    const messages = [{ role: 'user', content: 'Hello' }, { role: 'bot', content: 'Hi' }];
    const f = ctx.getFormattedChat(messages);
    assert.deepEqual(f, { type: 'llama-chat', prompt: '<|im_start|>user\nHello<|im_end|>\n<|im_start|>bot\nHi<|im_end|>\n<|im_start|>assistant\n', has_media: false, media_paths: [] });
    // llama.node's plain formatting has no tools.
    assert.deepEqual(ctx.getFormattedChat(messages, '', { tools, tool_choice: 'auto' }), f);
    // Built-in template names, as llama.cpp's llama_chat_apply_template knows them.
    const l3 = ctx.getFormattedChat([{ role: 'user', content: 'Hi' }], 'llama3', { jinja: false });
    assert.equal(l3.prompt, '<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n');
    assert.match(ctx.getFormattedChat([{ role: 'user', content: 'Hi' }], 'chatml').prompt, /^<\|im_start\|>user\nHi<\|im_end\|>/);
    const info = ctx.getModelInfo();
    assert.deepEqual(info.chatTemplates, {
      llamaChat: false,
      jinja: { default: false, defaultCaps: { tools: false, toolCalls: false, systemRole: true, parallelToolCalls: false }, toolUse: false },
    });
    assert.equal(info.isChatTemplateSupported, false);
    // completion's chat_template takes a name too; an unknown one is an error.
    const r = await ctx.completion({ messages: [{ role: 'user', content: 'Hi' }], chat_template: 'llama3', n_predict: 2 });
    assert.equal(r.tokens_evaluated, (await ctx.tokenize(l3.prompt)).tokens.length + 1); // + BOS
    await assert.rejects(ctx.completion({ messages: [{ role: 'user', content: 'Hi' }], chat_template: 'no-such-template', n_predict: 2 }), /chatml/);
  } finally {
    await ctx.release();
  }
  const named = await loadModel({ model: llama2, n_ctx: 256, n_threads: 1, chat_template: 'llama3' });
  try {
    assert.match(named.getFormattedChat([{ role: 'user', content: 'Hi' }]).prompt, /^<\|start_header_id\|>user/);
  } finally {
    await named.release();
  }
});

test('getFormattedChat with the model\'s template and tools: jinja result, lazy tool-call grammar, word triggers', async () => {
  const file = withChatTemplate(stories, hermes);
  const ctx = await loadModel({ model: file, n_ctx: 2048, n_threads: 1 });
  try {
    assert.equal(ctx.isJinjaSupported(), true);
    const info = ctx.getModelInfo();
    assert.equal(info.chatTemplates.jinja.default, true);
    assert.equal(info.chatTemplates.jinja.defaultCaps.tools, true);
    assert.equal(info.metadata['tokenizer.chat_template'], hermes);
    const f = ctx.getFormattedChat([{ role: 'user', content: 'What is 1+2?' }], undefined, { tools });
    assert.equal(f.type, 'jinja');
    assert.match(f.prompt, /<tools>[\s\S]*"calc"[\s\S]*<\|im_start\|>assistant\n$/);
    assert.equal(f.grammar_lazy, true);
    assert.match(f.grammar, /calc/);
    assert.ok(f.grammar_triggers.some((t) => t.type === 1 && t.value.startsWith('<tool_call>') && t.token === -1));
    assert.ok(f.preserved_tokens.includes('<tool_call>'));
    assert.equal(JSON.parse(f.chat_parser).format, 'hermes');
    const plain = ctx.getFormattedChat([{ role: 'user', content: 'Hi' }]);
    assert.equal(plain.grammar, '');
    assert.equal(plain.grammar_lazy, false);
    // jinja: false gives the plain result.
    assert.equal(ctx.getFormattedChat([{ role: 'user', content: 'Hi' }], undefined, { jinja: false }).type, 'llama-chat');
    // A lazy grammar passed back to completion() is not applied from the first token.
    const r = await ctx.completion({ prompt: f.prompt, grammar: f.grammar, grammar_lazy: true, n_predict: 8, ...greedy });
    assert.doesNotMatch(r.text, /^<tool_call>/);
  } finally {
    await ctx.release();
  }
});

test('token callback: content / reasoning_content / tool_calls are the parse of the text so far', async () => {
  const file = withChatTemplate(stories, hermes);
  const ctx = await loadModel({ model: file, n_ctx: 2048, n_threads: 1 });
  try {
    const messages = [{ role: 'user', content: 'What is 1+2?' }];
    const events = [];
    const r = await ctx.completion({ messages, tools, tool_choice: 'required', n_predict: 300, ...greedy }, (d) => events.push(d));
    assert.equal(r.tool_calls.length, 1, r.text);
    assert.equal(r.tool_calls[0].function.name, 'calc');
    assert.equal(r.content, undefined);
    // Raw <tool_call> text never arrives as content; the call arrives in a token event, parsed.
    assert.ok(events.every((d) => !(d.content || '').includes('<tool_call>')));
    const withCall = events.filter((d) => d.tool_calls);
    assert.ok(withCall.length > 0);
    assert.deepEqual(withCall.at(-1).tool_calls, r.tool_calls);
    assert.ok(events.every((d) => typeof d.accumulated_text === 'string'));
    assert.equal(events.at(-1).accumulated_text, r.text);
    // Plain chat: each event's content is the text so far and only grows.
    const plain = [];
    const p = await ctx.completion({ messages, n_predict: 12, ...greedy }, (d) => plain.push(d));
    let last = '';
    for (const d of plain) {
      assert.ok((d.content ?? '').startsWith(last), `${JSON.stringify(d.content)} after ${JSON.stringify(last)}`);
      last = d.content ?? last;
    }
    assert.equal(last, p.content);
    // reasoning_format: llama.node's default 'none' keeps <think> in the content; 'auto' splits it.
    const think = { messages, grammar: 'root ::= "<think>I think so</think>Hello there"', n_predict: 40, ...greedy };
    const none = [];
    const rn = await ctx.completion(think, (d) => none.push(d));
    assert.equal(rn.content, '<think>I think so</think>Hello there');
    assert.equal(rn.reasoning_content, undefined);
    assert.equal(none.at(-1).content, rn.content);
    const auto = [];
    const ra = await ctx.completion({ ...think, reasoning_format: 'auto' }, (d) => auto.push(d));
    assert.equal(ra.content, 'Hello there');
    assert.equal(ra.reasoning_content, 'I think so');
    assert.equal(auto.at(-1).reasoning_content, 'I think so');
    assert.ok(auto.some((d) => d.reasoning_content && !d.content));
    assert.throws(() => ctx.getFormattedChat(messages, undefined, { reasoning_format: 'sometimes' }), TypeError);
  } finally {
    await ctx.release();
  }
});

// ---- model info -----------------------------------------------------------------------------

test('getModelInfo metadata and loadLlamaModelInfo as llama.node gives them', async () => {
  const ctx = await loadModel({ model: stories, n_ctx: 256, n_threads: 1 });
  try {
    const m = ctx.getModelInfo().metadata;
    for (const k of ['tokenizer.ggml.tokens', 'tokenizer.ggml.scores', 'tokenizer.ggml.token_type']) assert.equal(m[k], undefined);
    assert.equal(m['llama.rope.freq_base'], '10000.000000');
    assert.equal(m['llama.attention.layer_norm_rms_epsilon'], '0.000010');
    assert.equal(m['tokenizer.ggml.add_bos_token'], 'true');
    assert.ok(JSON.stringify(m).length < 2000);
    assert.equal(ctx.getModelInfo().chatTemplates.jinja.defaultCaps.tools, false);
  } finally {
    await ctx.release();
  }
  const info = await loadLlamaModelInfo(stories);
  assert.equal(info.version, 3);
  assert.equal(info.alignment, 32);
  assert.equal(info.data_offset, 14304);
  assert.equal(info['general.architecture'], 'llama');
  assert.equal(info['llama.embedding_length'], '64');
  assert.equal(info['tokenizer.ggml.tokens'], undefined);
});

// ---- embeddings and reranking --------------------------------------------------------------

test('embedding(): n_embd zeros without embedding: true; a causal LM without pooling_type pools', async () => {
  const plain = await loadModel({ model: stories, n_ctx: 256, n_threads: 1 });
  try {
    const { embedding } = await plain.embedding('Once upon a time');
    assert.ok(embedding instanceof Float32Array);
    assert.equal(embedding.length, 64);
    assert.ok(embedding.every((x) => x === 0));
    await assert.rejects(plain.rerank('q', ['a']), /reranking not supported/);
  } finally {
    await plain.release();
  }
  const emb = await loadModel({ model: stories, embedding: true, n_ctx: 256, n_threads: 1 });
  try {
    const a = (await emb.embedding('Once upon a time')).embedding;
    const b = (await emb.embedding('Hello')).embedding;
    assert.equal(a.length, 64);
    assert.ok(Math.abs(Math.hypot(...a) - 1) < 1e-5);
    assert.ok(a.some((x, i) => Math.abs(x - b[i]) > 1e-3), 'different texts, different vectors');
    // The same as asking for mean pooling.
    const mean = await loadModel({ model: stories, embedding: true, pooling_type: 'mean', n_ctx: 256, n_threads: 1 });
    const m = (await mean.embedding('Once upon a time')).embedding;
    await mean.release();
    assert.deepEqual([...a], [...m]);
  } finally {
    await emb.release();
  }
  const none = await loadModel({ model: stories, embedding: true, pooling_type: 'none', n_ctx: 256, n_threads: 1 });
  try {
    await assert.rejects(none.embedding('x'), /pooling_type 'none'.*'mean'/);
  } finally {
    await none.release();
  }
});

// ---- synchronous cache and LoRA calls ----------------------------------------------------------

test('clearCache / applyLoraAdapters / removeLoraAdapters return at once and apply to the next request', async () => {
  const dir = `${shared}/golden/adapters`;
  const base = golden('adapters/lorabase.json');
  const withA = golden('adapters/lorabase-A100.json');
  const c = await loadModel({ model: `${dir}/${base.model_file}`, n_ctx: 256, n_threads: 1 });
  try {
    const run = base.runs[0];
    const ids = (r) => [...r.tokens];
    // Not awaited: the completion started right after the call gets the adapter.
    assert.equal(c.applyLoraAdapters([{ path: `${dir}/lora-A.gguf`, scaled: 1 }]), undefined);
    const a = c.completion({ prompt: run.prompt, n_predict: run.greedy_ids.length, ...greedy });
    assert.equal(c.removeLoraAdapters(), undefined);
    const b = c.completion({ prompt: run.prompt, n_predict: run.greedy_ids.length, ...greedy });
    assert.deepEqual(ids(await a), withA.runs[0].greedy_ids);
    assert.deepEqual(ids(await b), run.greedy_ids);
    assert.deepEqual(c.getLoadedLoraAdapters(), []);
    // A file that cannot be used throws at the call, and changes nothing.
    assert.throws(() => c.applyLoraAdapters([{ path: `${dir}/missing.gguf`, scaled: 1 }]), /missing\.gguf/);
    assert.throws(() => c.applyLoraAdapters([{ path: `${dir}/control-vector.gguf`, scaled: 1 }]), /adapter/);
    assert.deepEqual(c.getLoadedLoraAdapters(), []);
    // clearCache: the prefix cache is empty for the request started after it.
    await c.completion({ prompt: run.prompt, n_predict: 4, ...greedy });
    const again = await c.completion({ prompt: run.prompt, n_predict: 4, ...greedy });
    assert.ok(again.timings.cache_n > 0);
    assert.equal(c.clearCache(), undefined);
    const cleared = await c.completion({ prompt: run.prompt, n_predict: 4, ...greedy });
    assert.equal(cleared.timings.cache_n, 0);
  } finally {
    await c.release();
  }
});

// ---- every model kind: encoder-decoder (T5) and recurrent (Mamba) run as the others do ----------

test('T5, Mamba, hybrid (LFM2, Qwen3.5), mixture-of-experts and this year\'s dense models complete, also several requests at once', async () => {
  const files = [['synth-flan-t5-tiny-f32.gguf', 't5'], ['synth-mamba-tiny-f32.gguf', 'mamba'],
    ['synth-lfm2-tiny-f32.gguf', 'lfm2'], ['synth-qwen35-tiny-f32.gguf', 'qwen35'],
    ['synth-smollm3-tiny-f32.gguf', 'smollm3'], ['synth-granite-tiny-f32.gguf', 'granite'],
    ['synth-gemma4-tiny-f32.gguf', 'gemma4'], ['synth-qwen3moe-tiny-f32.gguf', 'qwen3moe'],
    ['synth-lfm2moe-tiny-f32.gguf', 'lfm2moe'], ['synth-gemma4moe-tiny-f32.gguf', 'gemma4'],
    ['synth-qwen3next-tiny-f32.gguf', 'qwen3next'], ['synth-gpt-oss-tiny-mxfp4.gguf', 'gpt-oss']].map(([f, arch]) => [data(f), arch]);
  files.push([gemma3n(), 'gemma3n']);  // 23 MB, not committed: made by the build's make_arch_variant
  for (const [file, arch] of files) {
    const c = await loadModel({ model: file, n_ctx: 512, n_parallel: 2 });
    try {
      assert.equal(c.getModelInfo().is_recurrent, arch === 'mamba');
      const one = await c.completion({ prompt: 'Once upon a time', n_predict: 8, ignore_eos: true, ...greedy });
      assert.equal(one.tokens_predicted, 8);
      assert.ok(one.text.length > 0);
      // Two at once give the same text as one at a time (greedy).
      const [a, b] = await Promise.all([
        c.completion({ prompt: 'Once upon a time', n_predict: 8, ignore_eos: true, ...greedy }),
        c.completion({ prompt: 'The quick brown fox', n_predict: 8, ignore_eos: true, ...greedy }),
      ]);
      assert.equal(a.text, one.text);
      const alone = await c.completion({ prompt: 'The quick brown fox', n_predict: 8, ignore_eos: true, ...greedy });
      assert.equal(b.text, alone.text);
    } finally {
      await c.release();
    }
    // Its metadata reads without loading the weights.
    assert.equal((await loadLlamaModelInfo(file))['general.architecture'], arch);
  }
});

// ---- module exports --------------------------------------------------------------------------

test('isNativeLogEnabled, BuildInfo, loadModule / initLlama as llama.node exports them', async () => {
  assert.equal(isNativeLogEnabled(), false);
  await toggleNativeLog(true);
  assert.equal(isNativeLogEnabled(), true);
  await toggleNativeLog(false);
  assert.equal(isNativeLogEnabled(), false);
  assert.match(BuildInfo.number, /^\d+\.\d+/);
  assert.equal(typeof BuildInfo.commit, 'string');
  const mod = await loadModule();
  assert.equal(await initLlama('default'), mod);
  assert.throws(() => new mod.LlamaContext({ model: stories }), /loadModel/);
  assert.equal((await mod.LlamaContext.loadModelInfo(stories, ['general.name']))['general.name'], undefined);
  assert.equal(JSON.parse(mod.LlamaContext.getBackendDevicesInfo())[0].type, 'cpu');
  assert.equal(loom.loadModule, loadModule);
});
