// What a JavaScript developer expects: work off the event loop, stopping and aborting, queueing,
// parallel requests equal to single ones, clear errors for every misuse, nothing that crashes.
import assert from 'node:assert/strict';
import { test, after } from 'node:test';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModel } from '../lib/index.js';
import { stories, greedy, tmpFile } from './helpers.mjs';

const ctx = await loadModel({ model: stories, n_ctx: 4096, n_threads: 1 });
after(() => ctx.release());
const long = { prompt: 'Once upon a time', n_predict: 3000, ignore_eos: true, ...greedy };

test('stopCompletion stops a running completion mid-way', async () => {
  let n = 0;
  const p = ctx.completion(long, () => {
    if (++n === 20) ctx.stopCompletion();
  });
  const r = await p;
  assert.equal(r.interrupted, true);
  assert.ok(r.tokens_predicted < 3000 && r.tokens_predicted >= 20, `${r.tokens_predicted}`);
});

test('an AbortSignal stops a completion; an aborted one ends at once', async () => {
  const ac = new AbortController();
  let n = 0;
  const r = await ctx.completion({ ...long, signal: ac.signal }, () => {
    if (++n === 10) ac.abort();
  });
  assert.equal(r.interrupted, true);
  assert.ok(r.tokens_predicted < 3000);
  const done = new AbortController();
  done.abort();
  const r2 = await ctx.completion({ ...long, signal: done.signal });
  assert.equal(r2.interrupted, true);
  assert.ok(r2.tokens_predicted < 3000);
  await assert.rejects(ctx.completion({ prompt: 'x', signal: 'stop' }), TypeError);
});

test('a second completion while one runs is queued, not refused', async () => {
  const a = ctx.completion({ prompt: 'Lily and Tom', n_predict: 40, ...greedy });
  const b = ctx.completion({ prompt: 'The cat', n_predict: 40, ...greedy });
  const [ra, rb] = await Promise.all([a, b]);
  const sa = await ctx.completion({ prompt: 'Lily and Tom', n_predict: 40, ...greedy });
  const sb = await ctx.completion({ prompt: 'The cat', n_predict: 40, ...greedy });
  assert.equal(ra.text, sa.text);
  assert.equal(rb.text, sb.text);
});

test('parallel mode: 4 greedy completions at once equal their single results', async (t) => {
  // As llama.node's, parallel.enable() accepts up to loadModel's n_parallel slots.
  const pc = await loadModel({ model: stories, n_ctx: 4096, n_threads: 1, n_parallel: 4 });
  t.after(() => pc.release());
  await assert.rejects(pc.parallel.enable({ n_parallel: 5 }), /n_parallel >= 5/);
  const prompts = ['Once upon a time', 'Lily and Tom went to the park', 'The cat', 'One day, a little bird'];
  const single = [];
  for (const p of prompts) single.push((await pc.completion({ prompt: p, n_predict: 48, ...greedy })).text);
  assert.equal(await pc.parallel.enable({ n_parallel: 4 }), true);
  assert.equal(pc.parallel.getStatus().n_parallel, 4);
  const streamed = new Map();
  const reqs = await Promise.all(
    prompts.map((p) =>
      pc.parallel.completion({ prompt: p, n_predict: 48, ...greedy }, (id, t) => streamed.set(id, (streamed.get(id) || '') + t.token)),
    ),
  );
  const results = await Promise.all(reqs.map((r) => r.promise));
  results.forEach((r, i) => {
    assert.equal(r.text, single[i], prompts[i]);
    assert.equal(streamed.get(reqs[i].requestId), r.text);
    assert.equal(r.requestId, reqs[i].requestId);
  });
  // stop() of one request leaves the others alone.
  const a = await pc.parallel.completion(long);
  const b = await pc.parallel.completion({ prompt: 'The cat', n_predict: 30, ...greedy });
  a.stop(); // as llama.node's: the request's promise rejects at once
  await assert.rejects(a.promise, /Request cancelled/);
  const rb = await b.promise;
  assert.equal(rb.text, (await pc.completion({ prompt: 'The cat', n_predict: 30, ...greedy })).text);
  // llama.node's per-request state files: saved after one request, loaded before another.
  const file = tmpFile('parallel-state.bin');
  const first = await (await pc.parallel.completion({ prompt: prompts[1], n_predict: 16, save_state_path: file, ...greedy })).promise;
  pc.clearCache(); // synchronous (llama.node); the next request waits for it
  const again = await (await pc.parallel.completion({ prompt: prompts[1], n_predict: 16, load_state_path: file, ...greedy })).promise;
  assert.equal(again.text, first.text);
  assert.ok(again.timings.cache_n >= first.tokens_evaluated - 1, `cache_n ${again.timings.cache_n}`);
  await assert.rejects(pc.parallel.completion({ prompt: 'x', load_state_path: tmpFile('none.bin') }));
  pc.parallel.disable();
  await assert.rejects(pc.parallel.completion({ prompt: 'x' }), /not enabled/);
});

test('timers keep firing during generation (all model work is off the event loop)', async () => {
  let ticks = 0;
  let last = performance.now();
  let maxLag = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    maxLag = Math.max(maxLag, now - last - 5);
    last = now;
    ticks++;
  }, 5);
  const t0 = performance.now();
  const r = await ctx.completion({ ...long, n_predict: 2000 });
  const ms = performance.now() - t0;
  clearInterval(timer);
  console.log(`# generation ${ms.toFixed(0)} ms, ${r.tokens_predicted} tokens, ${ticks} timer ticks, max timer lag ${maxLag.toFixed(1)} ms`);
  // A blocked event loop would give (almost) no ticks while generating.
  assert.ok(ticks >= Math.floor(ms / 5 / 4), `${ticks} ticks in ${ms} ms`);
});

test('misuse gets TypeErrors and rejections with clear messages', async () => {
  await assert.rejects(loadModel({ model: 42 }), TypeError);
  await assert.rejects(loadModel({ model: stories, n_ctx: 'big' }), /n_ctx must be an integer/);
  await assert.rejects(loadModel({ model: stories, pooling_type: 'median' }), /pooling_type/);
  await assert.rejects(loadModel({ model: stories, cache_type_k: 'q3' }), /cache_type_k/);
  await assert.rejects(loadModel({ model: '/nonexistent/model.gguf' }), /nonexistent/);
  await assert.rejects(loadModel(null), TypeError);
  await assert.rejects(ctx.completion({ prompt: 5 }), TypeError);
  await assert.rejects(ctx.completion({ prompt: 'x', temperature: 'hot' }), /temperature/);
  await assert.rejects(ctx.completion({ prompt: 'x', top_k: 1.5 }), /top_k/);
  await assert.rejects(ctx.completion({}), /prompt/);
  await assert.rejects(ctx.completion({ prompt: 'x', grammar: 'root ::= (' }), /grammar|parse/i);
  await assert.rejects(ctx.completion({ prompt: 'x', logit_bias: [[99999, 1]] }), /vocabulary/);
  await assert.rejects(ctx.completion({ prompt: 'x' }, 'not a function'), TypeError);
  await assert.rejects(ctx.detokenize([1, -5]), RangeError);
  await assert.rejects(ctx.detokenize('abc'), TypeError);
  await assert.rejects(ctx.tokenize(7), TypeError);
  await assert.rejects(ctx.loadSession(tmpFile('missing.bin')), /missing|open|No such/i);
  await assert.rejects(ctx.bench(-1, 1, 1, 1), RangeError);
  assert.throws(() => ctx.getFormattedChat('hello'), TypeError);
  // A throwing token callback rejects that completion; the context goes on working.
  await assert.rejects(ctx.completion({ prompt: 'x', n_predict: 5 }, () => { throw new Error('boom'); }), /boom/);
  const ok = await ctx.completion({ prompt: 'Once', n_predict: 3, ...greedy });
  assert.equal(ok.tokens_predicted, 3);
});

test('release during a completion stops it cleanly; use after release is an error', async () => {
  const c = await loadModel({ model: stories, n_ctx: 4096, n_threads: 1 });
  let n = 0;
  let release;
  const p = c.completion(long, () => {
    if (++n === 5) release = c.release();
  });
  const r = await p;
  await release;
  assert.equal(r.interrupted, true);
  await assert.rejects(c.completion({ prompt: 'x' }), /released/);
  await assert.rejects(c.tokenize('x'), /released/);
  assert.throws(() => c.getModelInfo(), /released/);
  await c.release(); // twice is fine
});

test('contexts dropped without release() are freed by the garbage collector', () => {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const script = `
    const { loadModel } = require(${JSON.stringify(path.join(here, '..', 'lib', 'index.js'))});
    (async () => {
      const rss = () => process.memoryUsage().rss / 1e6;
      const once = async () => { const c = await loadModel({ model: ${JSON.stringify(stories)}, n_ctx: 16384, n_threads: 1 });
        await c.completion({ prompt: 'Once', n_predict: 4, temperature: 0 }); };
      await once(); global.gc(); const base = rss();
      for (let i = 0; i < 30; i++) { await once(); global.gc(); await new Promise((r) => setImmediate(r)); }
      global.gc(); await new Promise((r) => setTimeout(r, 50)); global.gc();
      console.log(JSON.stringify({ base, after: rss() }));
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const r = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 120000 });
  assert.equal(r.status, 0, r.stderr);
  const { base, after } = JSON.parse(r.stdout.trim().split('\n').pop());
  // Each context holds ~47 MB of KV cache (16384 cells): 30 leaked would be > 1 GB.
  assert.ok(after - base < 300, `RSS grew from ${base.toFixed(0)} MB to ${after.toFixed(0)} MB`);
});

test('native log messages reach listeners while enabled, and only then', async () => {
  const { toggleNativeLog, addNativeLogListener } = await import('../lib/index.js');
  const got = [];
  const sub = addNativeLogListener((level, text) => got.push({ level, text }));
  await toggleNativeLog(true);
  const c = await loadModel({ model: stories, n_ctx: 256 });
  await c.release();
  await new Promise((r) => setTimeout(r, 50));
  await toggleNativeLog(false);
  const n = got.length;
  assert.ok(got.some((m) => m.level === 'info' && m.text.includes('stories260K')), JSON.stringify(got));
  const c2 = await loadModel({ model: stories, n_ctx: 256 });
  await c2.release();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(got.length, n);
  sub.remove();
  assert.throws(() => addNativeLogListener('x'), TypeError);
});

test('the ESM entry point exports the same API', async () => {
  const esm = await import('loom-node');
  const cjs = await import('../lib/index.js');
  assert.equal(esm.loadModel, cjs.default.loadModel);
  assert.equal(typeof esm.loadLlamaModelInfo, 'function');
  assert.equal(typeof esm.default.LlamaContext, 'function');
});
