// Bad input, bad clients and shutdown: clear errors in OpenAI's shape, nothing stops the server
// or disturbs other users.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import net from 'node:net';
import { test } from 'node:test';

import { metrics, post, rawRequest, sleep, sse, startServer } from './harness.mjs';

function assertOpenAIError(r, status) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json && r.json.error, r.text);
  assert.equal(typeof r.json.error.message, 'string');
  // What is wrong with the request, not which C function said so (loom_last_error's prefix).
  assert.doesNotMatch(r.json.error.message, /^loom_[a-z0-9_]+: /);
  assert.equal(typeof r.json.error.type, 'string');
  assert.equal(r.json.error.code, status);
}

test('every error case answers in OpenAI shape and the server keeps serving', async () => {
  const srv = await startServer(['-np', '2', '-c', '256', '--max-body', '65536']);
  try {
    const u = srv.url;
    assertOpenAIError(await post(u, '/v1/chat/completions', '{"messages": [}'), 400);
    assertOpenAIError(await post(u, '/v1/chat/completions', '[1,2]'), 400);
    assertOpenAIError(await post(u, '/v1/chat/completions', { messages: 'hi' }), 400);
    assertOpenAIError(await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 5 }] }), 400);
    const t = await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], temperature: 'hot' });
    assertOpenAIError(t, 400);
    assert.match(t.json.error.message, /^temperature/);
    // A response_format whose type is not a string is the client's error (it was a 500).
    assertOpenAIError(await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], response_format: { type: 5 } }), 400);
    assertOpenAIError(await post(u, '/v1/completions', { prompt: 'x', max_tokens: 'many' }), 400);
    assertOpenAIError(await post(u, '/v1/completions', { prompt: [1, 2, 999999] }), 400);
    assertOpenAIError(await post(u, '/v1/completions', { prompt: 'x', logit_bias: { abc: 1 } }), 400);
    assertOpenAIError(await post(u, '/v1/completions', { prompt: 'x', n: 0 }), 400);
    assertOpenAIError(await post(u, '/v1/completions', { prompt: 'x', grammar: 'root ::= (' }), 400);
    assertOpenAIError(await post(u, '/v1/completions', { prompt: 'x', top_logprobs: 3, logprobs: 500 }), 400);
    // A prompt longer than the context: 400 naming n_ctx.
    const long = await post(u, '/v1/completions', { prompt: 'Once upon a time '.repeat(200) });
    assertOpenAIError(long, 400);
    assert.match(long.json.error.message, /n_ctx/);
    // Body over --max-body: 413.
    assertOpenAIError(await post(u, '/v1/completions', { prompt: 'x'.repeat(70000) }), 413);
    // Unknown path and wrong method.
    assertOpenAIError(await post(u, '/v1/nothing', {}), 404);
    assert.equal((await fetch(`${u}/v1/completions`)).status, 405);
    // Embeddings without --embedding.
    assertOpenAIError(await post(u, '/v1/embeddings', { input: 'x' }), 501);
    // Random bytes, deep nesting, huge strings.
    for (let i = 0; i < 30; i++) {
      const r = await post(u, '/v1/chat/completions', crypto.randomBytes(1 + (i * 997) % 5000));
      assert.ok([400, 413].includes(r.status), `random body: ${r.status}`);
    }
    assertOpenAIError(await post(u, '/v1/chat/completions', '['.repeat(50000) + ']'.repeat(50000)), 413);
    assertOpenAIError(await post(u, '/v1/chat/completions', '{"a":'.repeat(5000) + '1' + '}'.repeat(5000)), 400);
    const huge = await post(u, '/v1/chat/completions', { messages: [{ role: 'user', content: 'é'.repeat(30000) }] });
    assertOpenAIError(huge, 400);
    const raw = await rawRequest(srv.port, 'GARBAGE / HTTP/9.9\r\n\r\n');
    assert.match(raw, /^HTTP\/1\.1 (400|505)/);
    // Still serving.
    const ok = await post(u, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
    assert.equal(ok.status, 200);
    assert.equal(srv.exited(), null);
  } finally {
    await srv.stop();
  }
});

// The llama-server dialects (issue 26): malformed bodies of every new endpoint get a 4xx with a
// message in the endpoint's error shape; random and hostile bytes never stop the server.
test('native, Anthropic and Responses endpoints: bad input is a 4xx, the server keeps serving', async () => {
  const srv = await startServer(['-np', '2', '-c', '256', '--max-body', '65536']);
  try {
    const u = srv.url;
    const openaiShaped = [
      ['/completion', { prompt: 5 }], ['/completion', { prompt: 'x', n_predict: 'a' }], ['/completion', { prompt: [1, null] }],
      ['/completion', { prompt: { prompt_string: 1 } }], ['/completions', { prompt: 'x', n_probs: -1 }],
      ['/infill', { input_prefix: 'a' }], ['/v1/responses', { input: 5 }], ['/v1/responses', { input: [{ type: 'nope' }] }],
      ['/v1/responses', { input: 'x', tools: [{ type: 'function' }] }], ['/v1/responses', { input: 'x', max_output_tokens: 'a' }],
      ['/lora-adapters', [{ id: 'a' }]], ['/v1/responses/input_tokens', { input: 3 }],
    ];
    for (const [path, body] of openaiShaped) {
      const r = await post(u, path, body);
      assert.ok(r.status >= 400 && r.status < 500 || r.status === 501, `${path} ${JSON.stringify(body)}: ${r.status}`);
      assert.ok(r.json?.error?.message, `${path}: ${r.text}`);
    }
    const anthropic = [
      { messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }], max_tokens: 4 },
      { messages: [{ role: 'robot', content: 'x' }], max_tokens: 4 }, { messages: [], max_tokens: 4 },
      { messages: [{ role: 'user', content: 'x' }], max_tokens: 4, tools: [{ name: 5 }] },
      { messages: [{ role: 'user', content: 'x' }], max_tokens: 4, thinking: { type: 'sometimes' } },
    ];
    for (const body of anthropic) {
      for (const path of ['/v1/messages', '/v1/messages/count_tokens']) {
        const r = await post(u, path, body);
        assert.equal(r.status, 400, `${path} ${JSON.stringify(body)}: ${r.text}`);
        assert.equal(r.json.type, 'error');
        assert.ok(r.json.error.message.length > 0);
      }
    }
    for (const path of ['/completion', '/infill', '/v1/messages', '/v1/responses', '/embedding', '/lora-adapters']) {
      for (let i = 0; i < 6; i++) {
        const r = await post(u, path, crypto.randomBytes(1 + (i * 1499) % 5000));
        assert.ok([400, 413, 501].includes(r.status), `${path} random body: ${r.status}`);
      }
      assert.equal((await post(u, path, '['.repeat(50000) + ']'.repeat(50000))).status, 413);
      const deep = await post(u, path, '{"a":'.repeat(5000) + '1' + '}'.repeat(5000));
      assert.ok([400, 501].includes(deep.status), `${path} deep: ${deep.status}`);
    }
    const ok = await post(u, '/completion', { prompt: 'Once upon a time', n_predict: 4, temperature: 0 });
    assert.equal(ok.status, 200);
    assert.equal(srv.exited(), null);
  } finally {
    await srv.stop();
  }
});

test('API keys: 401 without or with a wrong key, /health stays open', async () => {
  const srv = await startServer(['--api-key', 'k1,k2']);
  try {
    assert.equal((await fetch(`${srv.url}/health`)).status, 200);
    assertOpenAIError(await post(srv.url, '/v1/completions', { prompt: 'x', max_tokens: 1 }), 401);
    assertOpenAIError(await post(srv.url, '/v1/completions', { prompt: 'x', max_tokens: 1 }, { authorization: 'Bearer nope' }), 401);
    assert.equal((await fetch(`${srv.url}/metrics`)).status, 401);
    const ok = await post(srv.url, '/v1/completions', { prompt: 'x', max_tokens: 1 }, { authorization: 'Bearer k2' });
    assert.equal(ok.status, 200);
  } finally {
    await srv.stop();
  }
});

test('queue full: 503 with Retry-After; running requests are not disturbed', async () => {
  const srv = await startServer(['-np', '1', '-c', '2048', '--max-queue', '1']);
  try {
    const body = { prompt: 'Once upon a time', max_tokens: 400, temperature: 0, ignore_eos: true };
    const all = await Promise.all(Array.from({ length: 6 }, () => post(srv.url, '/v1/completions', body)));
    const refused = all.filter((r) => r.status === 503);
    const served = all.filter((r) => r.status === 200);
    assert.ok(refused.length >= 3, `refused ${refused.length}`);
    for (const r of refused) {
      assertOpenAIError(r, 503);
      assert.ok(r.headers.get('retry-after'));
    }
    for (const r of served) assert.equal(r.json.usage.completion_tokens, 400);
    const m = await metrics(srv.url);
    assert.ok(m.loom_requests_rejected_total >= 3);
  } finally {
    await srv.stop();
  }
});

test('a client that disconnects mid-stream frees its sequence', async () => {
  const srv = await startServer(['-np', '2', '-c', '4096']);
  try {
    const ac = new AbortController();
    let n = 0;
    await sse(srv.url, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 3000, temperature: 0, ignore_eos: true, stream: true }, {
      signal: ac.signal, onEvent: () => { if (++n === 5) ac.abort(); },
    }).catch(() => {});
    let m;
    for (let i = 0; i < 100; i++) {
      m = await metrics(srv.url);
      if (m.loom_slots_busy === 0) break;
      await sleep(20);
    }
    assert.equal(m.loom_slots_busy, 0);
    assert.equal(m['loom_request_success_total{finished_reason="cancelled"}'], 1);
    assert.ok(m.loom_generation_tokens_total < 3000);
  } finally {
    await srv.stop();
  }
});

test('a client sending its headers one byte a second is timed out without delaying others', async () => {
  const srv = await startServer(['--timeout', '2']);
  try {
    const slow = net.connect(srv.port, '127.0.0.1');
    let got = '';
    slow.on('data', (d) => { got += d; });
    slow.on('error', () => {});
    const closed = new Promise((r) => slow.on('close', r));
    const req = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}';
    let i = 0;
    const timer = setInterval(() => { if (i < req.length && !slow.destroyed) slow.write(req[i++]); }, 1000);
    const t0 = Date.now();
    // Meanwhile other requests are answered promptly.
    for (let k = 0; k < 5; k++) {
      const s = Date.now();
      const r = await post(srv.url, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
      assert.equal(r.status, 200);
      assert.ok(Date.now() - s < 1000, `request ${k} took ${Date.now() - s} ms`);
      await sleep(200);
    }
    await closed;
    clearInterval(timer);
    assert.match(got, /^HTTP\/1\.1 408/);
    assert.ok(Date.now() - t0 < 6000);
  } finally {
    await srv.stop();
  }
});

test('SIGTERM with clients connected: streams get a final event, the process exits 0', async () => {
  const srv = await startServer(['-np', '2', '-c', '8192', '--cache-dir', `/tmp/loom-sigterm-${process.pid}`]);
  let events = [];
  const stream = sse(srv.url, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 8000, temperature: 0, ignore_eos: true, stream: true }, {
    onEvent: (e) => events.push(e),
  }).catch((e) => ({ error: e }));
  const idle = net.connect(srv.port, '127.0.0.1');  // an idle keep-alive client
  idle.on('error', () => {});
  while (events.length < 3) await sleep(10);
  const t0 = Date.now();
  const st = await srv.stop('SIGTERM');
  await stream;
  assert.equal(st.code, 0, srv.stderr());
  assert.ok(Date.now() - t0 < 15000);
  assert.equal(events.at(-1), '[DONE]');
  const last = events.at(-2);
  assert.ok(last.error || last.choices?.[0]?.finish_reason, JSON.stringify(last));
  idle.destroy();
});
