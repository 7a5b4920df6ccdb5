// Hostile input: random option objects and arguments of every type against every method. Each
// call must resolve, reject or throw — never take the process down — and the context must still
// give the golden greedy text afterwards.
import assert from 'node:assert/strict';
import { test, after } from 'node:test';
import { loadModel } from '../lib/index.js';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { stories, golden, tmpFile } from './helpers.mjs';

// Garbage strings passed as session paths are relative file names: they land in a folder of this
// run's own, not in the package.
process.chdir(fs.mkdtempSync(path.join(os.tmpdir(), 'loom-node-hostile-')));

const ctx = await loadModel({ model: stories, n_ctx: 1024, n_threads: 1 });
after(() => ctx.release());

let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (a) => a[Math.floor(rand() * a.length)];
const values = () => [
  undefined, null, true, false, 0, -1, 1, 2.5, -1e30, 1e30, NaN, Infinity, -Infinity, 2 ** 31, -(2 ** 31), 2 ** 53,
  '', 'x', 'root ::= "a"', '{"type": "object"}', '\u0000\uffff\ud800', 'a'.repeat(5000), [], [1, 2], [[1, 0.5]], [['a', 'b']],
  {}, { type: 'json_object' }, { type: 'json_schema', json_schema: { schema: { type: 'integer' } } }, () => 1, Symbol('s'),
  10n, new Int32Array([1, 2, 3]), new Float32Array(2),
];
const keys = [
  'prompt', 'messages', 'n_predict', 'temperature', 'top_k', 'top_p', 'min_p', 'typical_p', 'typ_p', 'penalty_last_n',
  'penalty_repeat', 'penalty_freq', 'penalty_present', 'mirostat', 'mirostat_tau', 'mirostat_eta', 'dry_multiplier',
  'dry_base', 'dry_allowed_length', 'dry_penalty_last_n', 'dry_sequence_breakers', 'xtc_probability', 'xtc_threshold',
  'seed', 'stop', 'grammar', 'json_schema', 'response_format', 'logit_bias', 'ignore_eos', 'n_probs', 'n_keep', 'tools',
  'tool_choice', 'chat_template', 'chat_template_kwargs', 'signal', 'max_tokens',
];

test('random completion options never crash; the context keeps working', async () => {
  let resolved = 0, rejected = 0;
  for (let i = 0; i < 300; i++) {
    const opts = { prompt: 'Once', n_predict: 4 };
    for (let k = 0; k < 1 + Math.floor(rand() * 4); k++) opts[pick(keys)] = pick(values());
    if (opts.n_predict === undefined || typeof opts.n_predict !== 'number' || opts.n_predict > 8) opts.n_predict = 4;
    if (Array.isArray(opts.messages) && opts.messages.length) opts.messages = [{ role: pick(['user', 5, null]), content: pick(values()) }];
    try {
      await ctx.completion(opts, pick([undefined, () => {}, 7]));
      resolved++;
    } catch (err) {
      assert.ok(err instanceof Error, `not an Error: ${String(err)}`);
      rejected++;
    }
  }
  assert.ok(resolved > 0 && rejected > 0, `${resolved} resolved, ${rejected} rejected`);
  const g = golden('stories260K.json').runs[0];
  const r = await ctx.completion({ prompt: g.prompt, n_predict: g.greedy_ids.length, temperature: 0 });
  assert.deepEqual([...r.tokens], g.greedy_ids);
});

test('garbage arguments to every method are errors, not crashes', async () => {
  const calls = [
    () => ctx.tokenize(pick(values())),
    () => ctx.detokenize(pick(values())),
    () => ctx.embedding(pick(values())),
    () => ctx.rerank(pick(values()), pick(values())),
    () => ctx.saveSession(pick(values())),
    () => ctx.loadSession(pick(values())),
    () => ctx.loadSession(tmpFile('garbage.bin')),
    () => ctx.applyLoraAdapters(pick(values())),
    () => ctx.bench(pick(values()), pick(values()), pick(values()), pick(values())),
    () => ctx.getFormattedChat(pick(values()), pick(values()), pick(values())),
    () => ctx.parallel.enable(pick(values())),
    () => ctx._native.submit(pick(values()), pick(values())),
    () => ctx._native.embed(pick(values())),
    () => ctx._native.tokenPiece(pick(values())),
    () => ctx._native.cancel(pick(values())),
    () => ctx._native.chatFormat(pick(values())),
  ];
  // Ids that name no request are ignored, whatever number they are (the ASan + UBSan suite once
  // caught -1e30 cast to an unsigned id: undefined behaviour).
  for (const id of [-1e30, 1e30, -1, 0.5, NaN, Infinity, -Infinity, 2 ** 60]) ctx._native.cancel(id);
  for (let i = 0; i < 400; i++) {
    try {
      await pick(calls)();
    } catch (err) {
      assert.ok(err instanceof Error, `not an Error: ${String(err)}`);
    }
  }
  if (ctx.parallel.isEnabled()) ctx.parallel.disable();
  const r = await ctx.completion({ prompt: 'Once upon a time', n_predict: 8, temperature: 0 });
  assert.equal(r.tokens_predicted, 8);
});
