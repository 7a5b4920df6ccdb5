// Issue 24's repros, each in a loop: release() racing work on the worker threads, a long prompt at
// the end of the context with context shift, the same conversation again with more tokens than fit
// ("regenerate"); then random interleavings of every method with release() and garbage collection
// in child processes (a crash there is a failed test, not a dead test runner). Every promise must
// settle, nothing may crash, and no answer may be lost.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { loadModel } from '../lib/index.js';
import { stories } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const story = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ';

// Resolves with the promise's outcome, or rejects when it does not settle within ms (a hang).
function settles(p, ms, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: did not settle within ${ms} ms`)), ms);
  });
  return Promise.race([p.then((v) => ({ ok: true, v }), (e) => ({ ok: false, e })), limit]).finally(() => clearTimeout(timer));
}

// A prompt of about n tokens (stories260K), as text.
async function promptOf(ctx, n) {
  const text = story.repeat(Math.ceil(n / 20) + 2);
  const { tokens } = await ctx.tokenize(text);
  return ctx.detokenize([...tokens.subarray(0, n)]);
}

test('release() while tokenize() of a long text runs on the worker pool', async () => {
  const text = story.repeat(20); // ~1,900 characters
  assert.ok(text.length >= 1800);
  for (let i = 0; i < 12; i++) {
    const ctx = await loadModel({ model: stories, n_ctx: 256, n_threads: 1 });
    const pending = [ctx.tokenize(text), ctx.tokenize(text), ctx.detokenize([1, 2, 3, 4])];
    if (i % 3 === 1) await new Promise((r) => setImmediate(r));
    const released = ctx.release();
    for (const p of pending) {
      const r = await settles(p, 10000, 'tokenize');
      if (r.ok && Array.isArray(r.v?.tokens)) assert.ok(r.v.tokens.length > 0);
    }
    await settles(released, 10000, 'release');
    await assert.rejects(ctx.tokenize('x'), /released/);
  }
});

test('release() shortly after an un-awaited parallel.enable()', async () => {
  for (let i = 0; i < 12; i++) {
    const ctx = await loadModel({ model: stories, n_ctx: 512, n_threads: 1, n_parallel: 4 });
    const enabling = ctx.parallel.enable({ n_parallel: 4 });
    if (i % 2) await new Promise((r) => setTimeout(r, i));
    const released = ctx.release();
    await settles(enabling, 10000, 'parallel.enable');
    await settles(released, 10000, 'release');
  }
});

test('a long prompt at the end of the context with context shift finishes (no livelock)', async () => {
  // n_ctx 4096, a 3,005-token prompt, n_predict 2000, ctx_shift on by default: llama.node finishes it;
  // loom-node used to stop at 1,091 tokens with the promise never settling.
  const ctx = await loadModel({ model: stories, n_ctx: 4096, n_threads: 2 });
  try {
    const prompt = await promptOf(ctx, 3005);
    for (let i = 0; i < 2; i++) {
      const r = await settles(ctx.completion({ prompt, n_predict: 2000, ignore_eos: true, temperature: 0 }), 120000, 'completion');
      assert.ok(r.ok, r.e && r.e.message);
      assert.equal(r.v.tokens_predicted, 2000);
      assert.equal(r.v.stopped_limited, true);
      assert.equal(r.v.interrupted, false);
    }
    // Without context shift the same request ends at the context's end, keeping what it generated.
    const tokens = (await ctx.tokenize(prompt)).tokens.length;
    assert.ok(tokens > 2900 && tokens <= 3010, `prompt of ${tokens} tokens`);
  } finally {
    await ctx.release();
  }
});

test('the same conversation again with more tokens than fit finishes (nothing lost on regenerate)', async () => {
  for (const ctx_shift of [true, false]) {
    const ctx = await loadModel({ model: stories, n_ctx: 2048, n_threads: 2, ctx_shift });
    try {
      const messages = [{ role: 'user', content: story.repeat(3) }];
      const first = await settles(ctx.completion({ messages, n_predict: 2000, ignore_eos: true, temperature: 0 }), 120000, 'first');
      assert.ok(first.ok, first.e && first.e.message);
      let streamed = 0;
      const again = await settles(
        ctx.completion({ messages, n_predict: 4000, ignore_eos: true, temperature: 0 }, () => streamed++),
        120000,
        'regenerate',
      );
      assert.ok(again.ok, `ctx_shift ${ctx_shift}: ${again.e && again.e.message}`);
      if (ctx_shift) {
        assert.equal(again.v.tokens_predicted, 4000);
      } else {
        // The context's end: finish reason "length", everything generated kept.
        assert.equal(again.v.context_full, true);
        assert.equal(again.v.tokens_predicted, 2048 - again.v.tokens_evaluated);
      }
      assert.ok(streamed > 0);
      // The first 1,000 tokens equal the first turn's (greedy, same prompt).
      assert.deepEqual([...again.v.tokens.subarray(0, 1000)], [...first.v.tokens.subarray(0, 1000)]);
    } finally {
      await ctx.release();
    }
  }
});

test('random interleavings of every method with release() and GC never crash or hang', () => {
  // Each seed runs in its own process (with --expose-gc): a crash is this test's failure.
  const seeds = (process.env.LOOM_MISUSE_SEEDS || '1,2,3,4').split(',').map(Number);
  for (const seed of seeds) {
    const r = spawnSync(process.execPath, ['--expose-gc', path.join(here, 'misuse-run.mjs'), String(seed)], {
      encoding: 'utf8',
      timeout: 180000,
      env: process.env,
    });
    assert.equal(r.signal, null, `seed ${seed}: killed by ${r.signal}\n${r.stderr.slice(-4000)}`);
    assert.equal(r.status, 0, `seed ${seed}: exit ${r.status}\n${r.stdout.slice(-2000)}\n${r.stderr.slice(-4000)}`);
    assert.match(r.stdout, /^misuse: \d+ operations, \d+ settled/m);
  }
});
