// Generation endpoints against llama.cpp's golden story and against themselves.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { golden, post, sharedPath, sse, startServer } from './harness.mjs';

let srv;
before(async () => { srv = await startServer(['-np', '8', '-c', '4096']); });
after(async () => { await srv?.stop(); });

test('greedy /v1/completions prints the golden story', async () => {
  const g = golden();
  for (const run of g.runs) {
    const r = await post(srv.url, '/v1/completions', { prompt: run.prompt, max_tokens: run.greedy_ids.length, temperature: 0 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, 'text_completion');
    // The golden text is the ids detokenized on their own, where SentencePiece drops the first
    // token's leading space; a continuation keeps it (as llama-server prints it).
    assert.equal(r.json.choices[0].text, /^[,.]/.test(run.greedy_text) ? run.greedy_text : ' ' + run.greedy_text);
    assert.equal(r.json.usage.prompt_tokens, run.prompt_ids.length);
    assert.equal(r.json.usage.completion_tokens, run.greedy_ids.length);
    assert.equal(r.json.usage.total_tokens, run.prompt_ids.length + run.greedy_ids.length);
    assert.ok('cached_tokens' in r.json.usage.prompt_tokens_details);
    for (const k of ['prompt_n', 'cache_n', 'predicted_n', 'prompt_ms', 'predicted_ms', 'prompt_per_second', 'predicted_per_second']) {
      assert.ok(k in r.json.timings, k);
    }
  }
  // Token ids as the prompt, and a list of prompts (one choice each).
  const ids = await post(srv.url, '/v1/completions', { prompt: g.runs[0].prompt_ids, max_tokens: 16, temperature: 0 });
  assert.equal(ids.json.choices[0].text, (await post(srv.url, '/v1/completions', { prompt: g.runs[0].prompt, max_tokens: 16, temperature: 0 })).json.choices[0].text);
  const many = await post(srv.url, '/v1/completions', { prompt: [g.runs[0].prompt, g.runs[2].prompt], max_tokens: 64, temperature: 0 });
  assert.equal(many.json.choices.length, 2);
  assert.equal(many.json.choices[0].text, g.runs[0].greedy_text);
  assert.equal(many.json.choices[1].text, ' ' + g.runs[2].greedy_text);
});

test('prompt-lookup speculation (loom: lookup, speculative.n_max) prints the same story; bad values are 400', async () => {
  const g = golden();
  for (const run of g.runs) {
    const plain = await post(srv.url, '/v1/completions', { prompt: run.prompt, max_tokens: run.greedy_ids.length, temperature: 0 });
    const spec = await post(srv.url, '/v1/completions', { prompt: run.prompt, max_tokens: run.greedy_ids.length, temperature: 0,
      lookup: 3, 'speculative.n_max': 8 });
    assert.equal(spec.status, 200, spec.text);
    assert.equal(spec.json.choices[0].text, plain.json.choices[0].text);
  }
  const bad = await post(srv.url, '/v1/completions', { prompt: 'x', lookup: 100 });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /lookup/);
  const metrics = await (await fetch(`${srv.url}/metrics`)).text();
  assert.match(metrics, /loom_draft_tokens_total [1-9]/);
});

test('streamed completions equal the non-streamed result', async () => {
  const body = { prompt: 'Once upon a time', max_tokens: 40, temperature: 0 };
  const whole = await post(srv.url, '/v1/completions', body);
  const s = await sse(srv.url, '/v1/completions', { ...body, stream: true });
  assert.equal(s.status, 200);
  assert.match(s.headers.get('content-type'), /text\/event-stream/);
  assert.equal(s.events.at(-1), '[DONE]');
  const text = s.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0].text).join('');
  assert.equal(text, whole.json.choices[0].text);
  assert.equal(s.events.at(-2).choices[0].finish_reason, 'length');
  // echo: the stream starts with the prompt's text, and adds up to the non-streamed echo.
  const echoed = await post(srv.url, '/v1/completions', { ...body, echo: true });
  assert.ok(echoed.json.choices[0].text.startsWith('Once upon a time'));
  const se = await sse(srv.url, '/v1/completions', { ...body, echo: true, stream: true });
  const etext = se.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0].text).join('');
  assert.equal(etext, echoed.json.choices[0].text);
});

test('chat streaming equals non-streaming, with role, deltas, finish, usage and [DONE]', async () => {
  const body = { messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Once upon a time' }], max_tokens: 48, temperature: 0 };
  const whole = await post(srv.url, '/v1/chat/completions', body);
  assert.equal(whole.status, 200, whole.text);
  assert.equal(whole.json.object, 'chat.completion');
  assert.equal(whole.json.choices[0].message.role, 'assistant');
  const s = await sse(srv.url, '/v1/chat/completions', { ...body, stream: true, stream_options: { include_usage: true } });
  const ev = s.events;
  assert.equal(ev[0].object, 'chat.completion.chunk');
  assert.equal(ev[0].choices[0].delta.role, 'assistant');
  assert.equal(ev.at(-1), '[DONE]');
  const usage = ev.at(-2);
  assert.deepEqual(usage.choices, []);
  assert.equal(usage.usage.completion_tokens, whole.json.usage.completion_tokens);
  const fin = ev.at(-3);
  assert.equal(fin.choices[0].finish_reason, whole.json.choices[0].finish_reason);
  const text = ev.slice(1, -3).map((e) => e.choices[0].delta.content ?? '').join('');
  assert.equal(text, whole.json.choices[0].message.content);
});

test('8 concurrent greedy requests each equal their single-request result', async () => {
  const prompts = ['Once upon a time', 'The cat', 'Lily and Tom went to the park', 'One day, a big dog',
    'Tim had a red ball', 'The sun was hot', 'Mom said', 'A little bird'];
  const alone = [];
  for (const p of prompts) alone.push((await post(srv.url, '/v1/completions', { prompt: p, max_tokens: 48, temperature: 0, cache_prompt: false })).json.choices[0].text);
  const together = await Promise.all(prompts.map((p) => post(srv.url, '/v1/completions', { prompt: p, max_tokens: 48, temperature: 0 })));
  together.forEach((r, i) => assert.equal(r.json.choices[0].text, alone[i], prompts[i]));
});

test('stop strings, n choices, seeds, logprobs, grammar and json_schema', async () => {
  const g = golden();
  const full = g.runs[0].greedy_text;
  const stopped = await post(srv.url, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 64, temperature: 0, stop: ['Lily'] });
  assert.equal(stopped.json.choices[0].text, full.slice(0, full.indexOf('Lily')));
  assert.equal(stopped.json.choices[0].finish_reason, 'stop');

  const n = await post(srv.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], n: 3, max_tokens: 12, temperature: 1.5, seed: 7 });
  assert.equal(n.json.choices.length, 3);
  assert.deepEqual(n.json.choices.map((c) => c.index), [0, 1, 2]);
  const again = await post(srv.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], n: 3, max_tokens: 12, temperature: 1.5, seed: 7 });
  assert.deepEqual(again.json.choices.map((c) => c.message.content), n.json.choices.map((c) => c.message.content));

  const lp = await post(srv.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = lp.json.choices[0].logprobs.content;
  assert.equal(content.length, 5);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.ok(t.logprob <= 0);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token)]);
  }
  const legacy = await post(srv.url, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 4, temperature: 0, logprobs: 2 });
  assert.equal(legacy.json.choices[0].logprobs.tokens.length, 4);
  assert.equal(legacy.json.choices[0].logprobs.tokens.join(''), legacy.json.choices[0].text);

  const gr = await post(srv.url, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 20, grammar: 'root ::= "yes" | "no"' });
  assert.ok(['yes', 'no'].includes(gr.json.choices[0].text), gr.text);
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 8 }, age: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['name', 'age'] };
  const js = await post(srv.url, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'Who?' }], max_tokens: 60, temperature: 0.7, seed: 3,
    response_format: { type: 'json_schema', json_schema: { name: 'p', schema } },
  });
  assert.equal(js.status, 200, js.text);
  const obj = JSON.parse(js.json.choices[0].message.content);
  assert.equal(typeof obj.name, 'string');
  assert.ok(Number.isInteger(obj.age));
  const jo = await post(srv.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 80, seed: 1, response_format: { type: 'json_object' } });
  if (jo.json.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(jo.json.choices[0].message.content), 'object');
});

test('small endpoints: models, tokenize, detokenize, apply-template, props', async () => {
  const g = golden();
  const m = await (await fetch(`${srv.url}/v1/models`)).json();
  assert.equal(m.object, 'list');
  assert.equal(m.data[0].id, 'stories260K.gguf');
  const t = await post(srv.url, '/tokenize', { content: 'Once upon a time', add_special: true });
  assert.deepEqual(t.json.tokens, g.runs[0].prompt_ids);
  const d = await post(srv.url, '/detokenize', { tokens: g.runs[0].greedy_ids });
  assert.equal(d.json.content, g.runs[0].greedy_text);
  const a = await post(srv.url, '/apply-template', { messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(a.json.prompt, '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
  const p = await (await fetch(`${srv.url}/props`)).json();
  assert.equal(p.total_slots, 8);
});

test('a draft model (--draft-model) prints the same stories, streamed or not; a draft of another vocabulary is refused', async () => {
  const g = golden();
  const spec = await startServer(['-np', '2', '-c', '2048', '--draft-model', sharedPath('models/stories260K.gguf'),
    '--draft-max', '6', '--draft-p-min', '0']);
  try {
    for (const run of g.runs) {
      // As the first test: a continuation keeps the first token's leading space.
      const want = /^[,.]/.test(run.greedy_text) ? run.greedy_text : ' ' + run.greedy_text;
      const r = await post(spec.url, '/v1/completions', { prompt: run.prompt, max_tokens: run.greedy_ids.length, temperature: 0 });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].text, want);
      const s = await sse(spec.url, '/v1/completions', { prompt: run.prompt, max_tokens: run.greedy_ids.length, temperature: 0, stream: true });
      assert.equal(s.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0].text).join(''), want);
    }
    // n_max 0: no drafting for that request, the same text.
    const off = await post(spec.url, '/v1/completions', { prompt: g.runs[0].prompt, max_tokens: 16, temperature: 0, 'speculative.n_max': 0 });
    assert.equal(off.status, 200, off.text);
    const m = await (await fetch(`${spec.url}/metrics`)).text();
    const drafted = Number(m.match(/loom_draft_tokens_total (\d+)/)[1]);
    const accepted = Number(m.match(/loom_draft_accepted_total (\d+)/)[1]);
    assert.ok(drafted > 0 && accepted > drafted / 2, `drafted ${drafted}, accepted ${accepted}`);
  } finally {
    await spec.stop();
  }
  const bad = await startServer(['--draft-model', sharedPath('models/synth-bert-tiny-f32.gguf')], { waitReady: false });
  const code = await new Promise((r) => { if (bad.exited()) r(bad.exited().code); else bad.proc.once('exit', (c) => r(c)); });
  assert.notEqual(code, 0);
  assert.match(bad.stderr(), /differs/);
});
