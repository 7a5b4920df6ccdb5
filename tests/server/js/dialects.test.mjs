// Anthropic's /v1/messages and OpenAI's /v1/responses through their official npm clients, and
// CORS on every endpoint (issue 26).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { post, sse, startServer } from './harness.mjs';

let srv;
before(async () => { srv = await startServer(['-np', '4', '-c', '4096']); });
after(async () => { await srv?.stop(); });

const anthropic = () => new Anthropic({ baseURL: srv.url, apiKey: 'none', maxRetries: 0 });
const openai = () => new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'none', maxRetries: 0 });
const tools = [{ name: 'get_time', description: 'The time in a zone', input_schema: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] } }];

test('Anthropic client: messages, streaming equal to the whole, tool use and results, errors', async () => {
  const c = anthropic();
  const body = { model: 'stories', max_tokens: 24, temperature: 0, system: 'You tell stories.', messages: [{ role: 'user', content: 'Once upon a time' }] };
  const m = await c.messages.create(body);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.content[0].text.length > 0);
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.output_tokens, 24);
  assert.ok(m.usage.input_tokens > 0);
  // The same request streamed: the SDK assembles the same message.
  const stream = c.messages.stream(body);
  const pieces = [];
  stream.on('text', (t) => pieces.push(t));
  const fin = await stream.finalMessage();
  assert.equal(fin.content[0].text, m.content[0].text);
  assert.equal(pieces.join(''), m.content[0].text);
  assert.equal(fin.stop_reason, 'max_tokens');
  // count_tokens agrees with what the generation was given.
  const count = await c.messages.countTokens({ model: 'stories', system: body.system, messages: body.messages });
  assert.equal(count.input_tokens, m.usage.input_tokens);
  // Tool use: forced by tool_choice any, streamed as a tool_use block with input_json deltas.
  const tb = { model: 'stories', max_tokens: 200, temperature: 0, tools, tool_choice: { type: 'any' }, messages: [{ role: 'user', content: 'Time?' }] };
  const t = await c.messages.create(tb);
  assert.equal(t.stop_reason, 'tool_use');
  const use = t.content.find((b) => b.type === 'tool_use');
  assert.equal(use.name, 'get_time');
  assert.ok(['UTC', 'CET'].includes(use.input.zone));
  const ts = await c.messages.stream(tb).finalMessage();
  assert.deepEqual(ts.content.find((b) => b.type === 'tool_use').input, use.input);
  // The result goes back as a tool_result block.
  const follow = await c.messages.create({ model: 'stories', max_tokens: 8, temperature: 0, tools,
    messages: [...tb.messages, { role: 'assistant', content: t.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '12:00' }] }] });
  assert.equal(follow.type, 'message');
  // Malformed bodies: 400 in Anthropic's error shape, the SDK's BadRequestError.
  await assert.rejects(c.messages.create({ model: 'x', max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'bogus' }] }] }),
    (e) => e instanceof Anthropic.BadRequestError && /content\[0\]\.type/.test(e.message));
  for (const bad of [{}, { messages: 'x', max_tokens: 1 }, { messages: [{ role: 'user', content: 5 }], max_tokens: 1 },
    { messages: [{ role: 'user', content: 'x' }], max_tokens: 'a' }]) {
    const r = await post(srv.url, '/v1/messages', bad);
    assert.equal(r.status, 400, JSON.stringify(bad));
    assert.equal(r.json.type, 'error');
    assert.equal(r.json.error.type, 'invalid_request_error');
  }
});

test('Anthropic thinking: reasoning streams as a thinking block before the text', async () => {
  const grammar = 'root ::= "<think>" [a-z ]{5,20} "</think>" [a-z ]{3,20}';
  const body = { model: 'stories', max_tokens: 60, temperature: 0, grammar, messages: [{ role: 'user', content: 'Hi' }] };
  const whole = await post(srv.url, '/v1/messages', body);
  assert.deepEqual(whole.json.content.map((b) => b.type), ['thinking', 'text']);
  const s = await sse(srv.url, '/v1/messages', { ...body, stream: true });
  const names = s.named.map((e) => e.event);
  assert.equal(names[0], 'message_start');
  assert.equal(names.at(-1), 'message_stop');
  const starts = s.named.filter((e) => e.event === 'content_block_start').map((e) => e.data.content_block.type);
  assert.deepEqual(starts, ['thinking', 'text']);
  const thinking = s.named.filter((e) => e.data.delta?.type === 'thinking_delta').map((e) => e.data.delta.thinking).join('');
  assert.equal(thinking, whole.json.content[0].thinking);
  assert.ok(s.named.every((e) => e.data.type === e.event));
});

test('OpenAI client: responses, streamed events, function calls, input_tokens', async () => {
  const c = openai();
  const r = await c.responses.create({ model: 'stories', input: 'Once upon a time', instructions: 'You tell stories.', max_output_tokens: 20, temperature: 0 });
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'incomplete');
  assert.ok(r.output_text.length > 0);
  assert.equal(r.usage.output_tokens, 20);
  const stream = await c.responses.create({ model: 'stories', input: 'Once upon a time', instructions: 'You tell stories.', max_output_tokens: 20, temperature: 0, stream: true });
  let text = '';
  let done = null;
  for await (const ev of stream) {
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') done = ev.response;
  }
  assert.equal(text, r.output_text);
  assert.ok(done);
  // Function tools: a function_call item; its output goes back as function_call_output.
  const fn = [{ type: 'function', name: 'get_time', parameters: tools[0].input_schema }];
  const call = await c.responses.create({ model: 'stories', input: 'Time?', tools: fn, tool_choice: 'required', max_output_tokens: 200, temperature: 0 });
  const item = call.output.find((o) => o.type === 'function_call');
  assert.equal(item.name, 'get_time');
  assert.ok(['UTC', 'CET'].includes(JSON.parse(item.arguments).zone));
  const follow = await c.responses.create({ model: 'stories', tools: fn, max_output_tokens: 8, temperature: 0,
    input: [{ role: 'user', content: 'Time?' }, item, { type: 'function_call_output', call_id: item.call_id, output: '12:00' }] });
  assert.equal(follow.object, 'response');
  const it = await post(srv.url, '/v1/responses/input_tokens', { input: 'Once upon a time', instructions: 'You tell stories.' });
  assert.equal(it.json.input_tokens, r.usage.input_tokens);
  const bad = await post(srv.url, '/v1/responses', { input: [{ type: 'input_image' }] });
  assert.equal(bad.status, 400);
  const prev = await post(srv.url, '/v1/responses', { input: 'x', previous_response_id: 'resp_1' });
  assert.equal(prev.status, 400);
  assert.match(prev.json.error.message, /previous_response_id/);
});

test('CORS on every endpoint, errors included; preflight answered without credentials', async () => {
  for (const [method, path, body] of [['GET', '/health'], ['GET', '/v1/models'], ['POST', '/completion', { prompt: 'x', n_predict: 1 }],
    ['POST', '/v1/messages', {}], ['GET', '/nope'], ['GET', '/props']]) {
    const r = await fetch(srv.url + path, { method, headers: { origin: 'http://example.com', 'content-type': 'application/json' }, body: body ? JSON.stringify(body) : undefined });
    assert.equal(r.headers.get('access-control-allow-origin'), 'http://example.com', `${method} ${path}`);
    await r.arrayBuffer();
  }
  const pre = await fetch(`${srv.url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'http://example.com', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' } });
  assert.equal(pre.status, 200);
  assert.equal(pre.headers.get('access-control-allow-origin'), 'http://example.com');
  assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
  assert.equal(pre.headers.get('access-control-allow-headers'), 'authorization, content-type');
  // With --api-key, a preflight still passes (browsers send no key with it); the request needs it.
  const keyed = await startServer(['--api-key', 'k1', '--cors-origins', 'localhost']);
  try {
    const p = await fetch(`${keyed.url}/v1/models`, { method: 'OPTIONS', headers: { origin: 'http://localhost:3000' } });
    assert.equal(p.status, 200);
    assert.equal(p.headers.get('access-control-allow-origin'), 'http://localhost:3000');
    const far = await fetch(`${keyed.url}/v1/models`, { headers: { origin: 'http://example.com', authorization: 'Bearer k1' } });
    assert.equal(far.headers.get('access-control-allow-origin'), null);
    assert.equal((await fetch(`${keyed.url}/v1/models`)).status, 401);
  } finally {
    await keyed.stop();
  }
});

test('/props and /v1/models in llama-server\'s shape', async () => {
  const p = (await (await fetch(`${srv.url}/props`)).json());
  assert.equal(p.total_slots, 4);
  assert.equal(p.default_generation_settings.params.temperature, 0.8);
  assert.equal(p.default_generation_settings.n_ctx, 1024);
  assert.match(p.build_info, /^b\d+-/);
  assert.deepEqual(p.modalities, { vision: false, video: false, audio: false });
  assert.ok('bos_token' in p && 'eos_token' in p && typeof p.chat_template === 'string');
  const m = await (await fetch(`${srv.url}/v1/models`)).json();
  assert.equal(m.object, 'list');
  assert.equal(m.data[0].object, 'model');
  assert.equal(m.models[0].name, m.data[0].id);
  const chunk = (await sse(srv.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 1, stream: true })).events[0];
  assert.equal(chunk.system_fingerprint, p.build_info);
});
