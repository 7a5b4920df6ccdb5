// POST /v1/rerank on a reranker (tests/data/synth-bert-rank-tiny-f32: a BERT with a
// classification head, rank pooling): relevance scores are llama.cpp's raw head outputs
// (tests/data/synth-bert-rank-tiny-f32.json, made with node-llama-cpp's ranking API), sorted.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';

import { dataPath, post, sleep, startServer } from './harness.mjs';

const model = dataPath('synth-bert-rank-tiny-f32.gguf');
const golden = JSON.parse(fs.readFileSync(dataPath('synth-bert-rank-tiny-f32.json'), 'utf8'));
const docs = golden.runs.map((r) => r.document);
const want = golden.runs.map((r) => r.score_raw[0]);
// Within 1e-3 of the largest score (F32 K/V: llama.cpp runs BERT attention in F32, without a cache).
const tol = 1e-3 * Math.max(...want.map(Math.abs));

function assertError(r, status) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json && r.json.error, r.text);
  assert.equal(r.json.error.code, status);
}

test('rerank returns the reference scores, sorted, with top_n and return_documents', async () => {
  const srv = await startServer(['--embedding', '--pooling', 'rank', '-ctk', 'f32', '-ctv', 'f32'], { modelPath: model });
  try {
    const r = await post(srv.url, '/v1/rerank', { query: golden.query, documents: docs });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, 'list');
    const res = r.json.results;
    assert.equal(res.length, docs.length);
    const order = want.map((_, i) => i).sort((a, b) => want[b] - want[a]);
    assert.deepEqual(res.map((x) => x.index), order);
    for (const x of res) {
      assert.ok(Math.abs(x.relevance_score - want[x.index]) <= tol, `document ${x.index}: ${x.relevance_score} vs ${want[x.index]}`);
      assert.equal(x.document, undefined);  // return_documents defaults to false
    }
    for (let i = 1; i < res.length; i++) assert.ok(res[i - 1].relevance_score >= res[i].relevance_score);
    const nTokens = golden.runs.reduce((s, run) => s + run.ids.length, 0);
    assert.equal(r.json.usage.prompt_tokens, nTokens);

    // top_n and return_documents; documents as {text} objects; the /rerank alias.
    const top = await post(srv.url, '/rerank', {
      query: golden.query, documents: docs.map((text) => ({ text })), top_n: 2, return_documents: true,
    });
    assert.equal(top.status, 200, top.text);
    assert.equal(top.json.results.length, 2);
    for (const [k, x] of top.json.results.entries()) {
      assert.equal(x.index, order[k]);
      assert.equal(x.document.text, docs[x.index]);
      assert.ok(Math.abs(x.relevance_score - want[x.index]) <= tol);
    }
    // One document alone scores as it did among the others.
    const one = await post(srv.url, '/v1/rerank', { query: golden.query, documents: [docs[3]] });
    assert.equal(one.status, 200, one.text);
    assert.equal(one.json.results[0].index, 0);
    assert.equal(one.json.results[0].relevance_score, res.find((x) => x.index === 3).relevance_score);

    assertError(await post(srv.url, '/v1/rerank', { documents: docs }), 400);             // no query
    assertError(await post(srv.url, '/v1/rerank', { query: 'x', documents: [] }), 400);   // no documents
    assertError(await post(srv.url, '/v1/rerank', { query: 'x', documents: [5] }), 400);
    assertError(await post(srv.url, '/v1/rerank', { query: 'x', documents: docs, top_n: 0 }), 400);
    assert.equal(srv.exited(), null);
  } finally {
    await srv.stop();
  }
});

test('the default F16 K/V cache stays close to the reference', async () => {
  // The model's pooling_type is rank: no --pooling needed.
  const srv = await startServer(['--embedding'], { modelPath: model });
  try {
    const r = await post(srv.url, '/v1/rerank', { query: golden.query, documents: docs });
    assert.equal(r.status, 200, r.text);
    for (const x of r.json.results) assert.ok(Math.abs(x.relevance_score - want[x.index]) <= 2 * tol, `${x.index}`);
  } finally {
    await srv.stop();
  }
});

test('servers without rank pooling answer 501; rank pooling without a head does not start', async () => {
  const mean = await startServer(['--embedding', '--pooling', 'mean'], { modelPath: model });
  try {
    const r = await post(mean.url, '/v1/rerank', { query: 'x', documents: ['y'] });
    assertError(r, 501);
    assert.match(r.json.error.message, /rank pooling/);
    const e = await post(mean.url, '/v1/embeddings', { input: 'a little girl' });
    assert.equal(e.status, 200, e.text);
    assert.equal(e.json.data[0].embedding.length, 64);
  } finally {
    await mean.stop();
  }
  const gen = await startServer([]);
  try {
    assertError(await post(gen.url, '/v1/rerank', { query: 'x', documents: ['y'] }), 501);
  } finally {
    await gen.stop();
  }
  // stories260K has no classification head: the server says so and exits 1 after binding.
  const headless = await startServer(['--embedding', '--pooling', 'rank'], { waitReady: false });
  const t0 = Date.now();
  while (!(headless.exited() && /classification head/.test(headless.stderr())) && Date.now() - t0 < 30000) await sleep(20);
  assert.equal(headless.exited()?.code, 1, headless.stderr());
  assert.match(headless.stderr(), /classification head/);
});
