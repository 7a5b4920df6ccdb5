// Fault injection at the server: clients that go away at every phase of a request leave nothing
// behind, and a bounded soak (N clients, loopback) leaves resident memory where it was.
// LOOM_SOAK_SECONDS sets the soak's length (default 20; docs/reliability.md has longer runs).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';

import { metrics, post, sleep, sse, startServer } from './harness.mjs';

const rssKiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);

// Opens a connection, sends `parts` (strings, or numbers = milliseconds to wait), then closes it
// (without waiting for any reply), or after `readBytes` bytes of the reply have arrived.
function dropAfter(port, parts, { readBytes = 0 } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = 0;
    const finish = () => { s.destroy(); resolve(); };
    s.on('error', finish);
    s.on('close', finish);
    s.on('data', (d) => { got += d.length; if (readBytes && got >= readBytes) finish(); });
    s.on('connect', async () => {
      for (const p of parts) {
        if (typeof p === 'number') await sleep(p);
        else s.write(p);
      }
      if (!readBytes) finish();
    });
    setTimeout(finish, 10000);
  });
}

async function waitIdle(url) {
  let m;
  for (let i = 0; i < 300; i++) {
    m = await metrics(url);
    // (The /metrics request itself is the one open stream.)
    if (m.loom_slots_busy === 0 && m.loom_num_requests_waiting === 0 && m.loom_http_open_streams <= 1) return m;
    await sleep(20);
  }
  assert.fail(`server not idle: ${JSON.stringify(m)}`);
}

const request = (body, extra = '') => {
  const b = JSON.stringify(body);
  return `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\n${extra}\r\n${b}`;
};

test('clients that disconnect at every phase of a request leave nothing running', async () => {
  const srv = await startServer(['-np', '2', '-c', '2048']);
  try {
    const long = { prompt: 'Once upon a time', max_tokens: 2000, temperature: 0, ignore_eos: true };
    const full = request(long), streamed = request({ ...long, stream: true });
    const phases = {
      'before sending anything': [],
      'inside the request line': ['POST /v1/compl'],
      'inside the headers': ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le'],
      'after the headers, before the body': [full.slice(0, full.indexOf('\r\n\r\n') + 4)],
      'inside the body': [full.slice(0, full.length - 10)],
      'right after the request (queued or in prefill)': [full],
      'while it generates (non-streaming)': [full, 150],
      'mid-stream': [streamed, 300],
    };
    for (let round = 0; round < 2; round++) {
      for (const [name, parts] of Object.entries(phases)) {
        // Several at once, so some wait in the queue while others run.
        await Promise.all([0, 1, 2].map(() => dropAfter(srv.port, parts)));
        await waitIdle(srv.url).catch((e) => assert.fail(`${name}: ${e.message}`));
      }
      // After the first bytes of a streamed reply arrived.
      await Promise.all([0, 1, 2].map(() => dropAfter(srv.port, [streamed], { readBytes: 200 })));
      await waitIdle(srv.url);
    }
    const m = await metrics(srv.url);
    assert.ok(m['loom_request_success_total{finished_reason="cancelled"}'] >= 10, JSON.stringify(m));
    assert.ok(m.loom_generation_tokens_total < 2000 * 10, 'cancelled requests stopped generating');
    // The server still answers, exactly.
    const r = await post(srv.url, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
    assert.equal(r.status, 200, r.text);
  } finally {
    const e = await srv.stop();
    assert.equal(e.code, 0);
  }
});

test('a bounded soak: many clients, then resident memory back to its level', async (t) => {
  const seconds = Number(process.env.LOOM_SOAK_SECONDS || 20);
  const srv = await startServer(['-np', '4', '-c', '2048', '--max-queue', '8']);
  try {
    const kinds = [
      () => post(srv.url, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 24, temperature: 0.7 }),
      () => post(srv.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'Tell a story' }], max_tokens: 16 }),
      () => post(srv.url, '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'json' }], max_tokens: 24,
        response_format: { type: 'json_schema', json_schema: { schema: { type: 'object', properties: { a: { type: 'integer' } } } } },
      }),
      () => sse(srv.url, '/v1/completions', { prompt: 'Lily', max_tokens: 32, stream: true }),
      async () => {
        const ac = new AbortController();
        let n = 0;
        await sse(srv.url, '/v1/completions', { prompt: 'Tom', max_tokens: 500, stream: true }, {
          signal: ac.signal, onEvent: () => { if (++n === 3) ac.abort(); },
        }).catch(() => {});
        return { status: 200 };
      },
      () => post(srv.url, '/v1/completions', '{"prompt": [1, 2, '),
      () => post(srv.url, '/v1/completions', { prompt: 'x', logprobs: 999 }),
      () => dropAfter(srv.port, [request({ prompt: 'Once', max_tokens: 100 })]).then(() => ({ status: 200 })),
    ];
    let i = 0;
    const statuses = {};
    const client = async (until) => {
      while (Date.now() < until) {
        const r = await kinds[i++ % kinds.length]();
        statuses[r.status] = (statuses[r.status] || 0) + 1;
      }
    };
    // Warm up (allocator pools, prefix cache, thread stacks), then measure.
    await Promise.all(Array.from({ length: 8 }, () => client(Date.now() + 3000)));
    await waitIdle(srv.url);
    const before = rssKiB(srv.proc.pid);
    await Promise.all(Array.from({ length: 8 }, () => client(Date.now() + seconds * 1000)));
    await waitIdle(srv.url);
    await sleep(200);
    const after = rssKiB(srv.proc.pid);
    const total = Object.values(statuses).reduce((a, b) => a + b, 0);
    t.diagnostic(`soak ${seconds} s: ${total} requests ${JSON.stringify(statuses)}, RSS ${before} KiB -> ${after} KiB`);
    for (const s of Object.keys(statuses)) assert.ok(['200', '400', '503'].includes(s), `status ${s}`);
    // Under AddressSanitizer (scripts/sanitize.sh sets ASAN_OPTIONS) freed memory waits in the
    // allocator's quarantine (up to 256 MiB), so resident memory says nothing there.
    if (!process.env.ASAN_OPTIONS) {
      assert.ok(after <= before * 1.1 + 8192, `resident memory grew from ${before} KiB to ${after} KiB`);
    }
  } finally {
    const e = await srv.stop();
    assert.equal(e.code, 0);
  }
});
