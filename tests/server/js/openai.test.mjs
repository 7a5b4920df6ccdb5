// The official OpenAI client library (npm `openai`) against loom serve, unchanged.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';

import OpenAI from 'openai';

import { sharedPath, startServer } from './harness.mjs';

let srv, emb;
before(async () => {
  [srv, emb] = await Promise.all([
    startServer(['-np', '4', '-c', '4096', '--api-key', 'sk-test', '--alias', 'stories']),
    startServer(['--embedding', '-c', '512'], { model: 'models/synth-bert-tiny-f32.gguf' }),
  ]);
});
after(async () => { await Promise.all([srv?.stop(), emb?.stop()]); });

const client = () => new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'sk-test', maxRetries: 0 });

test('chat completions', async () => {
  const r = await client().chat.completions.create({
    model: 'stories', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 20, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, 'stories');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.usage.completion_tokens, 20);
  assert.equal(r.choices[0].finish_reason, 'length');
});

test('streaming equals the whole reply', async () => {
  const params = { model: 'stories', messages: [{ role: 'user', content: 'The cat' }], max_tokens: 30, temperature: 0 };
  const whole = await client().chat.completions.create(params);
  const stream = await client().chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test('legacy completions and models', async () => {
  const r = await client().completions.create({ model: 'stories', prompt: 'Once upon a time', max_tokens: 10, temperature: 0 });
  assert.match(r.choices[0].text, /^, there was a little girl/);
  const models = await client().models.list();
  assert.equal(models.data[0].id, 'stories');
});

test('a wrong key is an AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(client().chat.completions.create({ model: 'x', messages: [] }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
});

test('tool calls: tool_choice required, named, and the result sent back', async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather', description: 'Weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] }, unit: { type: 'string', enum: ['C', 'F'] } }, required: ['city', 'unit'] },
    },
  }, {
    type: 'function',
    function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] } },
  }];
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const r = await client().chat.completions.create({ model: 'stories', messages, tools, tool_choice: 'required', max_tokens: 300, temperature: 0 });
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r));
  assert.equal(msg.tool_calls.length, 1);
  const call = msg.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.ok(call.id.length > 0);
  assert.ok(['get_weather', 'get_time'].includes(call.function.name));
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args, 'object');

  const named = await client().chat.completions.create({
    model: 'stories', messages, tools, tool_choice: { type: 'function', function: { name: 'get_time' } }, max_tokens: 300, temperature: 0.8, seed: 4,
  });
  assert.equal(named.choices[0].message.tool_calls[0].function.name, 'get_time');
  assert.ok(['UTC', 'CET'].includes(JSON.parse(named.choices[0].message.tool_calls[0].function.arguments).zone));

  // Streamed: the call arrives as tool_calls deltas: its id, type and name first, its arguments in
  // pieces as they are generated (as llama-server streams them), accumulated by index.
  const stream = await client().chat.completions.create({ model: 'stories', messages, tools, tool_choice: 'required', max_tokens: 300, temperature: 0, stream: true });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const tc of c.delta?.tool_calls ?? []) calls.push(tc);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls[0].function.name, call.function.name);
  assert.ok(calls[0].id && calls[0].type === 'function');
  assert.ok(calls.every((c) => c.index === 0));
  assert.ok(calls.slice(1).every((c) => c.id === undefined && c.function.name === undefined));
  assert.equal(calls.map((c) => c.function.arguments ?? '').join(''), call.function.arguments);
  assert.ok(calls.length > 2, `arguments streamed in pieces (${calls.length} deltas)`);

  // The assistant's call and a tool result go back in the history.
  const follow = await client().chat.completions.create({
    model: 'stories', tools, max_tokens: 10, temperature: 0,
    messages: [...messages, msg, { role: 'tool', tool_call_id: call.id, content: '{"temp": 21}' }],
  });
  assert.equal(follow.object, 'chat.completion');
});

test('embeddings (base64 by default in the client) match the golden vector', async () => {
  const g = JSON.parse(fs.readFileSync(sharedPath('golden/synth-bert-tiny-f32.json'), 'utf8'));
  const ec = new OpenAI({ baseURL: `${emb.url}/v1`, apiKey: 'none', maxRetries: 0 });
  const inputs = g.runs.map((r) => r.prompt_ids);
  const r = await ec.embeddings.create({ model: 'bert', input: inputs });
  assert.equal(r.data.length, inputs.length);
  r.data.forEach((d, i) => {
    const buf = fs.readFileSync(sharedPath('golden/' + g.runs[i].embedding_file));
    const want = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length));
    assert.equal(d.embedding.length, want.length);
    const got = d.embedding;
    let dot = 0, na = 0, nb = 0;
    for (let k = 0; k < want.length; k++) { dot += got[k] * want[k]; na += got[k] * got[k]; nb += want[k] * want[k]; }
    assert.ok(dot / Math.sqrt(na * nb) >= 0.9999, `cosine ${dot / Math.sqrt(na * nb)}`);
    assert.ok(Math.abs(na - 1) < 1e-4, 'normalized');
  });
  const f = await ec.embeddings.create({ model: 'bert', input: 'hello world', encoding_format: 'float' });
  assert.equal(f.data[0].embedding.length, g.runs[0].n_embd);
  assert.ok(f.usage.prompt_tokens > 0);
});
