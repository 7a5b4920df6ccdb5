// Embeddings and reranking through loom-node against llama.cpp's goldens.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fs from 'node:fs';
import path from 'node:path';
import { loadModel } from '../lib/index.js';
import { model, golden, goldenF32, repo } from './helpers.mjs';

const cosine = (a, b) => {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / Math.sqrt(aa * bb);
};

test('BERT mean-pooled embeddings match llama.cpp (cosine >= 0.9999), normalized as asked', async () => {
  const g = golden('synth-bert-tiny-f32.json');
  const ctx = await loadModel({ model: model('synth-bert-tiny-f32.gguf'), embedding: true, n_ctx: 512, n_threads: 1 });
  try {
    for (const run of g.runs) {
      const want = goldenF32(run.embedding_file);
      const { embedding } = await ctx.embedding(run.prompt);
      assert.ok(embedding instanceof Float32Array);
      assert.equal(embedding.length, run.n_embd);
      assert.ok(cosine(embedding, want) >= 0.9999, `cosine ${cosine(embedding, want)} for ${run.prompt}`);
      // Default: L2-normalized (llama.node's embd_normalize 2).
      const norm = Math.sqrt(embedding.reduce((s, x) => s + x * x, 0));
      assert.ok(Math.abs(norm - 1) < 1e-5);
      const raw = (await ctx.embedding(run.prompt, { embd_normalize: -1 })).embedding;
      const rawNorm = Math.sqrt(want.reduce((s, x) => s + x * x, 0));
      for (let i = 0; i < raw.length; i++) assert.ok(Math.abs(raw[i] - want[i]) <= 1e-3 * rawNorm);
    }
    await assert.rejects(ctx.completion({ prompt: 'x', n_predict: 2 }), /embedding|generation|unsupported/i);
    await assert.rejects(ctx.embedding(42), TypeError);
  } finally {
    await ctx.release();
  }
});

test('rerank scores match llama.cpp\'s (raw and sigmoid), sorted best first', async () => {
  const gpath = path.join(repo, 'tests', 'data', 'synth-bert-rank-tiny-f32.json');
  const g = JSON.parse(fs.readFileSync(gpath, 'utf8'));
  const ctx = await loadModel({
    model: path.join(repo, 'tests', 'data', 'synth-bert-rank-tiny-f32.gguf'),
    embedding: true,
    pooling_type: 'rank',
    n_ctx: 512,
    n_threads: 1,
  });
  try {
    const docs = g.runs.map((r) => r.document);
    const raw = await ctx.rerank(g.query, docs);
    assert.equal(raw.length, docs.length);
    for (let k = 1; k < raw.length; k++) assert.ok(raw[k - 1].score >= raw[k].score);
    for (const r of raw) {
      assert.equal(r.document, docs[r.index]);
      assert.ok(Math.abs(r.score - g.runs[r.index].score_raw[0]) < 1e-3, `${r.score} vs ${g.runs[r.index].score_raw[0]}`);
    }
    const sig = await ctx.rerank(g.query, docs, { normalize: 1 });
    for (const r of sig) assert.ok(Math.abs(r.score - g.runs[r.index].score_sigmoid) < 1e-3);
    assert.deepEqual(await ctx.rerank(g.query, []), []);
    await assert.rejects(ctx.rerank(g.query, [1, 2]), TypeError);
  } finally {
    await ctx.release();
  }
});
