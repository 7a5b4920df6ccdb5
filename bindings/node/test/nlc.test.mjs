// node-llama-cpp's API (loom-node/node-llama-cpp): the apps of test/nlc/apps.mjs run against the
// real node-llama-cpp 3.x (installed from npm into $LOOM_PEER_DIR, default ~/.cache/loom-peer, as
// ../shared/bench/peer-bench.mjs installs it; its prebuilt CPU binaries, never a source build) and
// against loom-node's entry point, and must agree.
//
// Bounded for CI: each package runs its apps in ONE process (getLlama and the model load once), on
// one thread (apps.mjs: node-llama-cpp's default thread count on a 2-core machine makes llama.cpp's
// thread pool spin, 40 s a prompt), under a total timeout ($LOOM_NLC_TIMEOUT_S, default 240 s).
// Every app: getting started, streaming, chat with history and JSON schema (the same greedy text
// token for token), function calling, embeddings search (within 1e-3 cosine) and ranking;
// LOOM_NLC_FULL=0 keeps the first four only. Skipped, with the reason, when npm cannot
// install node-llama-cpp or its prebuilt binary does not load here.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { stories } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const PEER_DIR = process.env.LOOM_PEER_DIR || path.join(os.homedir(), '.cache', 'loom-peer');
const NLC = path.join(PEER_DIR, 'node_modules', 'node-llama-cpp', 'dist', 'index.js');
const FULL = process.env.LOOM_NLC_FULL !== '0';  // all apps unless LOOM_NLC_FULL=0 (about 1.5 s more)
const TIMEOUT_MS = Number(process.env.LOOM_NLC_TIMEOUT_S || 240) * 1000;
const APPS = ['gettingStarted', 'chatWithHistory', 'streaming', 'jsonSchemaOutput', ...(FULL ? ['functionCalling', 'embeddingsSearch', 'ranking'] : [])];
const started = Date.now();

function ensureNlc() {
  if (fs.existsSync(NLC)) return null;
  try {
    fs.mkdirSync(PEER_DIR, { recursive: true });
    execFileSync('npm', ['install', '--prefix', PEER_DIR, '--no-audit', '--no-fund', '--omit=optional', 'node-llama-cpp@3.22.1', '@node-llama-cpp/linux-x64@3.22.1'],
      { stdio: ['ignore', 'ignore', 'pipe'], timeout: 180000, env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true' } });
  } catch (e) {
    return `node-llama-cpp could not be installed from npm into ${PEER_DIR} (${String(e.message).split('\n')[0]}): the comparison is skipped`;
  }
  return fs.existsSync(NLC) ? null : `node-llama-cpp is not at ${NLC} after npm install: the comparison is skipped`;
}

// One process per package, all apps in sequence; both packages at once (the loom run takes < 1 s).
function runApps(which, timeoutMs) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(here, 'nlc', 'run-apps.mjs'), which, stories, APPS.join(',')], {
      stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true' },
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (signal) return resolve({ fatal: `run-apps ${which} killed (${signal}) after ${timeoutMs / 1000} s (LOOM_NLC_TIMEOUT_S)`, timedOut: true });
      try {
        resolve(JSON.parse(out));
      } catch {
        resolve({ fatal: `run-apps ${which} exited ${code} without a result:\n${err.slice(-4000)}` });
      }
    });
  });
}

let skipNlc = ensureNlc();
const left = Math.max(10000, TIMEOUT_MS - (Date.now() - started));
const [loom, peer] = await Promise.all([runApps('loom', left), skipNlc ? null : runApps(NLC, left)]);
if (peer?.fatal && !peer.timedOut) skipNlc = `node-llama-cpp does not start here (${peer.fatal.split('\n')[0]}): the comparison is skipped`;
if (skipNlc) console.log(skipNlc);
console.log(`apps: ${APPS.join(', ')}${FULL ? '' : ' (LOOM_NLC_FULL=0 skipped the rest)'}; loom ${loom.totalMs ?? '?'} ms, node-llama-cpp ${peer?.totalMs ?? '-'} ms, ${Date.now() - started} ms in all`);
const getPeer = () => {
  assert.equal(peer.fatal, undefined, peer.fatal);
  return peer;
};
const getLoom = () => {
  assert.equal(loom.fatal, undefined, loom.fatal);
  return loom;
};

const cos = (a, b) => {
  let d = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { d += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return d / Math.sqrt(na * nb);
};

test('the apps run against loom-node/node-llama-cpp without errors', () => {
  const l = getLoom();
  for (const [k, v] of Object.entries(l)) if (k !== 'ranking' && v && typeof v === 'object') assert.equal(v.error ?? undefined, undefined, `${k}: ${v.error}`);
  assert.equal(l.streaming.joined, l.streaming.answer);
  assert.equal(l.streaming.cjoined, l.streaming.text);
  assert.equal(l.chatWithHistory.a2again, l.chatWithHistory.a2);
});

test('same greedy text as node-llama-cpp on stories260K (chat, history, streaming, completion)', { skip: skipNlc || false }, () => {
  const p = getPeer();
  const l = getLoom();
  assert.deepEqual(l.gettingStarted, { ...p.gettingStarted, ms: l.gettingStarted.ms });
  for (const k of ['a1', 'a2', 'a2again', 'history']) assert.deepEqual(l.chatWithHistory[k], p.chatWithHistory[k], k);
  for (const k of ['answer', 'joined', 'nTokens', 'text', 'cjoined']) assert.deepEqual(l.streaming[k], p.streaming[k], k);
});

test('JSON-schema output: the same text as node-llama-cpp, of the schema\'s shape', { skip: skipNlc || false }, () => {
  const p = getPeer();
  const l = getLoom();
  assert.equal(l.jsonSchemaOutput.text, p.jsonSchemaOutput.text);
  for (const [who, r] of [['node-llama-cpp', p], ['loom', l]]) {
    assert.equal(r.jsonSchemaOutput.error ?? null, null, `${who}: ${r.jsonSchemaOutput.error}`);
    const o = r.jsonSchemaOutput.parsed;
    assert.deepEqual(Object.keys(o).sort(), ['age', 'happy', 'name', 'tags'], who);
    assert.equal(typeof o.name, 'string');
    assert.ok(Number.isInteger(o.age));
    assert.equal(typeof o.happy, 'boolean');
    assert.ok(Array.isArray(o.tags) && o.tags.every((t) => typeof t === 'string'));
  }
});

test('function calling: every call made has parameters of its schema and a result, on both', { skip: skipNlc || (FULL ? false : 'LOOM_NLC_FULL=0 skips it') }, () => {
  for (const r of [getPeer(), getLoom()]) {
    const f = r.functionCalling;
    assert.equal(f.error, undefined, f.error);
    for (const c of f.functionCalls) {
      assert.equal(c.name, 'getWeather');
      assert.equal(typeof c.params.city, 'string');
      assert.deepEqual(c.result, { city: c.params.city, temperature: 21 });
    }
    assert.equal(f.calls.length, f.functionCalls.length);
  }
});

test('embeddings agree with node-llama-cpp\'s within 1e-3 cosine', { skip: skipNlc || (FULL ? false : 'LOOM_NLC_FULL=0 skips it') }, () => {
  const p = getPeer().embeddingsSearch;
  const l = getLoom().embeddingsSearch;
  assert.equal(p.error, undefined, p.error);
  assert.equal(l.vectors.length, p.vectors.length);
  for (let i = 0; i < p.vectors.length; i++) {
    const c = cos(l.vectors[i], p.vectors[i]);
    assert.ok(c > 1 - 1e-3, `document ${i}: cosine ${c}`);
  }
  assert.ok(cos(l.query, p.query) > 1 - 1e-3);
  assert.equal(l.best, p.best);
});

test('ranking: a model without a reranker head is refused by both', { skip: skipNlc || (FULL ? false : 'LOOM_NLC_FULL=0 skips it') }, () => {
  const p = getPeer().ranking;
  const l = getLoom().ranking;
  assert.ok(l.error, 'loom should refuse stories260K as a reranker');
  assert.ok(p.error || p.ranked, 'node-llama-cpp gave neither an error nor a ranking');
});
