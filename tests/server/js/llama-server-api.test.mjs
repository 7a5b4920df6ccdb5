// llama-server's own API shapes (issue 26): the native /completion, /completions and /infill, the
// chat stream's reasoning and tool-call deltas, as llama-server's clients read them.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import fs from 'node:fs';

import { golden, post, sharedPath, sse, startServer } from './harness.mjs';

let srv;
before(async () => { srv = await startServer(['-np', '4', '-c', '4096']); });
after(async () => { await srv?.stop(); });

test('/completion prints the golden story in llama-server\'s native shape, streamed or not', async () => {
  const g = golden();
  for (const run of g.runs) {
    const body = { prompt: run.prompt, n_predict: run.greedy_ids.length, temperature: 0, return_tokens: true };
    const r = await post(srv.url, '/completion', body);
    assert.equal(r.status, 200, r.text);
    const j = r.json;
    assert.equal(j.content, /^[,.]/.test(run.greedy_text) ? run.greedy_text : ' ' + run.greedy_text);
    assert.deepEqual(j.tokens, run.greedy_ids);
    assert.equal(j.stop, true);
    assert.equal(j.tokens_predicted, run.greedy_ids.length);
    assert.equal(j.tokens_evaluated, run.prompt_ids.length);
    assert.equal(j.prompt, run.prompt);
    assert.equal(j.stop_type, 'limit');
    assert.equal(j.stopping_word, '');
    assert.equal(j.generation_settings.n_predict, run.greedy_ids.length);
    assert.equal(j.generation_settings.temperature, 0);
    for (const k of ['index', 'id_slot', 'model', 'has_new_line', 'truncated', 'tokens_cached']) assert.ok(k in j, k);
    for (const k of ['prompt_n', 'cache_n', 'predicted_n', 'prompt_ms', 'predicted_ms', 'predicted_per_second']) assert.ok(k in j.timings, k);
    // /completions is the same endpoint (llama-server's meaning; OpenAI's is /v1/completions).
    assert.equal((await post(srv.url, '/completions', body)).json.content, j.content);
    // Streamed: partial objects (stop false) add up to the content, a final object ends the
    // stream, and no [DONE] follows (llama-server sends it on OpenAI streams only).
    const s = await sse(srv.url, '/completion', { ...body, stream: true });
    const ev = s.events;
    assert.ok(!ev.includes('[DONE]'));
    const fin = ev.at(-1);
    assert.equal(fin.stop, true);
    assert.deepEqual(fin.tokens, run.greedy_ids);
    const parts = ev.slice(0, -1);
    assert.ok(parts.every((e) => e.stop === false && e.tokens.length === 1));
    assert.equal(parts.map((e) => e.content).join('') + fin.content, j.content);
    assert.equal(parts.at(-1).tokens_predicted, run.greedy_ids.length);
  }
});

test('/completion: stop words, n_probs, token and mixed prompts, several prompts, bad input', async () => {
  const g = golden();
  const run = g.runs[0];
  const word = await post(srv.url, '/completion', { prompt: run.prompt, n_predict: 64, temperature: 0, stop: [run.greedy_text.split(' ')[3]] });
  assert.equal(word.json.stop_type, 'word');
  assert.ok(word.json.stopping_word.length > 0);
  const probs = await post(srv.url, '/completion', { prompt: run.prompt, n_predict: 3, temperature: 0, n_probs: 2 });
  assert.equal(probs.json.completion_probabilities.length, 3);
  const p0 = probs.json.completion_probabilities[0];
  assert.equal(p0.id, run.greedy_ids[0]);
  assert.ok(p0.logprob <= 0 && Array.isArray(p0.bytes) && typeof p0.token === 'string');
  assert.equal(p0.top_logprobs.length, 2);
  assert.equal(p0.top_logprobs[0].id, run.greedy_ids[0]);
  const post_ = await post(srv.url, '/completion', { prompt: run.prompt, n_predict: 2, temperature: 0, n_probs: 2, post_sampling_probs: true });
  assert.ok(post_.json.completion_probabilities[0].prob > 0 && post_.json.completion_probabilities[0].top_probs.length === 2);
  // Token ids, and ids mixed with text, are one prompt each.
  const ids = await post(srv.url, '/completion', { prompt: run.prompt_ids, n_predict: 8, temperature: 0 });
  const text = await post(srv.url, '/completion', { prompt: run.prompt, n_predict: 8, temperature: 0 });
  assert.equal(ids.json.content, text.json.content);
  const mixed = await post(srv.url, '/completion', { prompt: [...run.prompt_ids.slice(0, 2), 'upon a time'], n_predict: 4, temperature: 0 });
  assert.equal(mixed.status, 200, mixed.text);
  // Several prompts: an array of results in prompt order.
  const many = await post(srv.url, '/completion', { prompt: [g.runs[0].prompt, g.runs[1].prompt], n_predict: 6, temperature: 0 });
  assert.ok(Array.isArray(many.json));
  assert.deepEqual(many.json.map((x) => x.index), [0, 1]);
  assert.equal(many.json[0].content, (await post(srv.url, '/completion', { prompt: g.runs[0].prompt, n_predict: 6, temperature: 0 })).json.content);
  for (const bad of [{}, { prompt: 3 }, { prompt: 'x', n_predict: 'a' }, { prompt: [1, {}] }, { prompt: [999999] }]) {
    const r = await post(srv.url, '/completion', bad);
    assert.equal(r.status, 400, JSON.stringify(bad) + ' ' + r.text);
    assert.ok(r.json.error.message.length > 0);
  }
  // /infill needs the vocabulary's FIM tokens (stories260K has none): 501 with llama-server's words.
  const infill = await post(srv.url, '/infill', { input_prefix: 'a', input_suffix: 'b' });
  assert.equal(infill.status, 501);
  assert.match(infill.json.error.message, /Infill is not supported by this model/);
});

test('chat streams: first delta content null, reasoning streamed apart, tool calls as deltas without raw text', async () => {
  const messages = [{ role: 'user', content: 'Hi' }];
  // A reply forced by a grammar into <think>...</think> then an answer.
  const grammar = 'root ::= "<think>" [a-z ]{5,20} "</think>" [a-z ]{3,20}';
  const body = { messages, max_tokens: 60, temperature: 0, grammar };
  const whole = await post(srv.url, '/v1/chat/completions', body);
  const msg = whole.json.choices[0].message;
  assert.ok(msg.reasoning_content.length >= 5, whole.text);
  assert.ok(!msg.content.includes('<think>') && !msg.content.includes('</think>'));
  const s = await sse(srv.url, '/v1/chat/completions', { ...body, stream: true });
  const deltas = s.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.delta ?? {});
  assert.equal(deltas[0].role, 'assistant');
  assert.equal(deltas[0].content, null);
  const reasoning = deltas.filter((d) => d.reasoning_content).length;
  assert.ok(reasoning >= 2, 'reasoning streams in several deltas');
  assert.equal(deltas.map((d) => d.reasoning_content ?? '').join(''), msg.reasoning_content);
  assert.equal(deltas.map((d) => d.content ?? '').join(''), msg.content);
  assert.ok(deltas.every((d) => !(d.content ?? '').includes('think>')));
  // Reasoning all comes before the answer.
  const firstContent = deltas.findIndex((d) => d.content);
  const lastReasoning = deltas.findLastIndex((d) => d.reasoning_content);
  assert.ok(lastReasoning < firstContent);
  // reasoning_format none: the block stays in the content.
  const none = await post(srv.url, '/v1/chat/completions', { ...body, reasoning_format: 'none' });
  assert.match(none.json.choices[0].message.content, /^<think>/);

  // Tool calls: the call text never streams as content.
  const tools = [{ type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] } } }];
  const tb = { messages, tools, tool_choice: 'required', max_tokens: 200, temperature: 0 };
  const tw = await post(srv.url, '/v1/chat/completions', tb);
  const call = tw.json.choices[0].message.tool_calls[0];
  const ts = await sse(srv.url, '/v1/chat/completions', { ...tb, stream: true });
  const td = ts.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.delta ?? {});
  assert.ok(td.slice(1).every((d) => !d.content), JSON.stringify(td));
  const tc = td.flatMap((d) => d.tool_calls ?? []);
  assert.equal(tc[0].index, 0);
  assert.equal(tc[0].type, 'function');
  assert.equal(tc[0].function.name, call.function.name);
  assert.equal(tc.map((c) => c.function.arguments ?? '').join(''), call.function.arguments);
  assert.equal(ts.events.at(-2).choices[0].finish_reason, 'tool_calls');
});

test('a trailing assistant message is continued (prefill); continue_final_message rules are llama-server\'s', async () => {
  const user = { role: 'user', content: 'Tell me a story' };
  const prefill = await post(srv.url, '/apply-template', { messages: [user, { role: 'assistant', content: 'Once upon a' }] });
  assert.equal(prefill.status, 200, prefill.text);
  assert.ok(prefill.json.prompt.endsWith('Once upon a'), JSON.stringify(prefill.json.prompt));
  const open = await post(srv.url, '/apply-template', { messages: [user] });
  assert.ok(prefill.json.prompt.startsWith(open.json.prompt), 'the continued message sits where the reply would start');
  // The chat reply continues the text.
  const r = await post(srv.url, '/v1/chat/completions', { messages: [user, { role: 'assistant', content: 'Once upon a' }], max_tokens: 4, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  const cont = await post(srv.url, '/v1/chat/completions', { messages: [user, { role: 'assistant', content: 'Once upon a' }], continue_final_message: true, add_generation_prompt: false, max_tokens: 4, temperature: 0 });
  assert.equal(cont.json.choices[0].message.content, r.json.choices[0].message.content);
  for (const [body, re] of [
    [{ messages: [user, { role: 'assistant', content: 'a' }, { role: 'assistant', content: 'b' }] }, /2 or more assistant messages/],
    [{ messages: [user, { role: 'assistant', content: 'a' }], continue_final_message: true, add_generation_prompt: true }, /add_generation_prompt and continue_final_message/],
    [{ messages: [user], continue_final_message: true, add_generation_prompt: false }, /not an assistant message/],
    [{ messages: [user, { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] }], continue_final_message: 'content', add_generation_prompt: false }, /tool calls/],
    [{ messages: [user], continue_final_message: 3 }, /continue_final_message/],
  ]) {
    const bad = await post(srv.url, '/v1/chat/completions', { ...body, max_tokens: 2 });
    assert.equal(bad.status, 400, JSON.stringify(body) + bad.text);
    assert.match(bad.json.error.message, re);
  }
});

test('/metrics has llama-server\'s llamacpp:* names beside loom\'s; POST /props is refused as llama-server does', async () => {
  await post(srv.url, '/completion', { prompt: 'Once', n_predict: 4 });
  const text = await (await fetch(`${srv.url}/metrics`)).text();
  for (const name of ['llamacpp:prompt_tokens_total', 'llamacpp:tokens_predicted_total', 'llamacpp:prompt_seconds_total',
    'llamacpp:tokens_predicted_seconds_total', 'llamacpp:n_decode_total', 'llamacpp:n_tokens_max', 'llamacpp:requests_processing',
    'llamacpp:requests_deferred', 'llamacpp:n_busy_slots_per_decode', 'llamacpp:predicted_tokens_seconds', 'loom_prompt_tokens_total']) {
    assert.match(text, new RegExp(`^# TYPE ${name} `, 'm'), name);
  }
  assert.match(text, /^llamacpp:tokens_predicted_total [1-9]/m);
  const p = await post(srv.url, '/props', {});
  assert.equal(p.status, 501);
});

test('/lora-adapters lists the --lora adapters and sets their scales', async () => {
  const dir = sharedPath('golden/adapters');
  const base = JSON.parse(fs.readFileSync(`${dir}/lorabase.json`, 'utf8'));
  const withA = JSON.parse(fs.readFileSync(`${dir}/lorabase-A100.json`, 'utf8'));
  const s = await startServer(['--lora', `${dir}/lora-A.gguf`, '-np', '1'], { modelPath: `${dir}/${base.model_file}` });
  try {
    const run = base.runs[0];
    const ids = async () => (await post(s.url, '/completion', { prompt: run.prompt, n_predict: run.greedy_ids.length, temperature: 0, return_tokens: true, cache_prompt: false })).json.tokens;
    const list = (await (await fetch(`${s.url}/lora-adapters`)).json());
    assert.equal(list.length, 1);
    assert.equal(list[0].id, 0);
    assert.equal(list[0].scale, 1);
    assert.match(list[0].path, /lora-A\.gguf$/);
    assert.deepEqual(await ids(), withA.runs[0].greedy_ids);
    const off = await post(s.url, '/lora-adapters', [{ id: 0, scale: 0 }]);
    assert.deepEqual(off.json, { success: true });
    assert.deepEqual(await ids(), run.greedy_ids);
    assert.equal((await (await fetch(`${s.url}/lora-adapters`)).json())[0].scale, 0);
    await post(s.url, '/lora-adapters', [{ id: 0, scale: 1 }]);
    assert.deepEqual(await ids(), withA.runs[0].greedy_ids);
    for (const bad of [{}, [{ id: 5, scale: 1 }], [{ id: 0, scale: 'x' }], [3]]) {
      const r = await post(s.url, '/lora-adapters', bad);
      assert.equal(r.status, 400, JSON.stringify(bad));
    }
  } finally {
    await s.stop();
  }
});

test('/embedding and /embeddings answer in llama-server\'s native shape; /v1/embeddings stays OpenAI\'s', async () => {
  const s = await startServer(['--embedding'], { model: 'models/synth-bert-tiny-f32.gguf' });
  try {
    const input = ['hello world', 'a second one'];
    const oai = await post(s.url, '/v1/embeddings', { input });
    for (const path of ['/embedding', '/embeddings']) {
      const r = await post(s.url, path, { content: input });
      assert.equal(r.status, 200, r.text);
      assert.ok(Array.isArray(r.json));
      assert.deepEqual(r.json.map((x) => x.index), [0, 1]);
      for (let i = 0; i < 2; ++i) {
        const v = r.json[i].embedding;
        assert.equal(v.length, 1, 'one pooled row');
        const w = oai.json.data[i].embedding;
        assert.equal(v[0].length, w.length);
        for (let k = 0; k < w.length; ++k) assert.ok(Math.abs(v[0][k] - w[k]) < 1e-5);
      }
    }
    // embd_normalize -1: as the model gives it (not of norm 1).
    const raw = await post(s.url, '/embedding', { content: 'hello world', embd_normalize: -1 });
    const n = Math.hypot(...raw.json[0].embedding[0]);
    assert.ok(Math.abs(n - 1) > 1e-3, `norm ${n}`);
    assert.equal((await post(s.url, '/embedding', { content: 'x', embd_normalize: 'a' })).status, 400);
  } finally {
    await s.stop();
  }
});

test('serving renders templates as llama.cpp where Python Jinja2 raises (undefined functions, none | selectattr)', async () => {
  const tmpl = "{{ 'Functions: ' + functions }}{% set n = tools | selectattr('type', 'equalto', 'code') | list | length %}"
    + "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
  const s = await startServer(['--chat-template', tmpl]);
  try {
    const r = await post(s.url, '/apply-template', { messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.prompt, 'Functions: <user>hi<assistant>');
    const c = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    assert.equal(c.status, 200, c.text);
  } finally {
    await s.stop();
  }
});

test('/v1/chat/completions/control ends a running reasoning block (reasoning_control), as llama-server', async () => {
  const messages = [{ role: 'user', content: 'Hi' }];
  // A reply that may think for a long time, then answers: only a forced end closes it early.
  const grammar = 'root ::= "<think>" [a-z ]{0,3000} "</think>" [a-z ]{3,40}';
  const body = { messages, max_tokens: 2500, temperature: 0, grammar, stream: true };
  const control = (b) => post(srv.url, '/v1/chat/completions/control', b);
  // Uncontrolled, for comparison: how long it thinks.
  const free = await sse(srv.url, '/v1/chat/completions', body);
  const freeReasoning = free.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.delta?.reasoning_content ?? '').join('');
  assert.ok(freeReasoning.length > 300, `the model thinks long enough to be interrupted (${freeReasoning.length} bytes)`);

  // Ended after a few reasoning deltas: the block closes, with the budget message, and the answer follows.
  let asked = null;
  let seen = 0;
  const s = await sse(srv.url, '/v1/chat/completions', { ...body, reasoning_control: true, reasoning_budget_message: ' enough' }, {
    onEvent: (e) => {
      if (e === '[DONE]' || asked) return;
      if (e.choices[0]?.delta?.reasoning_content && ++seen === 3) asked = control({ id: e.id, action: 'reasoning_end' });
    },
  });
  const answer = await asked;
  assert.equal(answer.status, 200, answer.text);
  assert.deepEqual(answer.json, { success: true });
  const deltas = s.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.delta ?? {});
  const reasoning = deltas.map((d) => d.reasoning_content ?? '').join('');
  const content = deltas.map((d) => d.content ?? '').join('');
  assert.ok(reasoning.length < freeReasoning.length, `${reasoning.length} < ${freeReasoning.length}`);
  assert.match(reasoning, /enough$/);
  assert.ok(content.length >= 3, JSON.stringify(content));
  assert.ok(!content.includes('think>'));

  // Finished, unknown, or not armed: success false with llama-server's messages; malformed: 400.
  const done = await control({ id: s.events[0].id, action: 'reasoning_end' });
  assert.deepEqual(done.json, { success: false, message: 'no active completion for this id' });
  assert.equal((await control({ id: 'chatcmpl-nope', action: 'reasoning_end' })).json.success, false);
  let unarmed = null;
  await sse(srv.url, '/v1/chat/completions', body, {
    onEvent: (e) => { if (e !== '[DONE]' && !unarmed) unarmed = control({ id: e.id, action: 'reasoning_end' }); },
  });
  assert.deepEqual((await unarmed).json, { success: false, message: 'reasoning control not enabled for this completion' });
  assert.equal((await control({ action: 'reasoning_end' })).status, 400);
  assert.equal((await control({ id: 'x', action: 'pause' })).status, 400);
  assert.equal((await control('{"id": ')).status, 400);
});

test('/v1/chat/completions/input_tokens counts the prompt a chat completion gets; /reranking is routed', async () => {
  const body = { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me a story' }], max_tokens: 1, temperature: 0 };
  const real = await post(srv.url, '/v1/chat/completions', body);
  for (const p of ['/v1/chat/completions/input_tokens', '/chat/completions/input_tokens']) {
    const r = await post(srv.url, p, body);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, { object: 'response.input_tokens', input_tokens: real.json.usage.prompt_tokens });
  }
  assert.equal((await post(srv.url, '/responses/input_tokens', { input: 'hi' })).json.object, 'response.input_tokens');
  assert.equal((await post(srv.url, '/v1/chat/completions/input_tokens', { messages: 5 })).status, 400);
  // Not a reranker: the endpoint exists and says why it cannot answer (not a 404).
  assert.equal((await post(srv.url, '/reranking', { query: 'a', documents: ['b'] })).status, 501);
});
