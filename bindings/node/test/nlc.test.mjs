// node-llama-cpp's API (loom-node/node-llama-cpp): the apps of test/nlc/apps.mjs run against the
// real node-llama-cpp 3.x (installed from npm into $LOOM_PEER_DIR, default ~/.cache/loom-peer, as
// ../shared/bench/peer-bench.mjs installs it; its prebuilt CPU binaries, never a source build) and
// against loom-node's entry point, and must agree.
//
// Bounded for CI: each package runs its apps in ONE process (getLlama and the model load once), on
// one thread (apps.mjs: node-llama-cpp's default thread count on a 2-core machine makes llama.cpp's
// thread pool spin, 40 s a prompt), under a total timeout ($LOOM_NLC_TIMEOUT_S, default 240 s).
// Every app: getting started, streaming, chat with history and JSON schema (the same greedy text
// token for token), a chat longer than its context (context shift), sequence state files, the chat
// wrapper classes and LlamaText (the same prompts and tokens), function calling (also streamed),
// embeddings search (within 1e-3 cosine) and ranking; LlamaChat; models with a chat template (the
// wrapper node-llama-cpp picks, its prompt and answers); LOOM_NLC_FULL=0 keeps the first nine only. Skipped, with the reason, when npm cannot
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
const APPS = ['gettingStarted', 'chatWithHistory', 'streaming', 'jsonSchemaOutput', 'contextShift', 'stateFile', 'chatWrappers', 'llamaChat', 'templatedModel',
  ...(FULL ? ['functionCalling', 'functionStreaming', 'embeddingsSearch', 'ranking', 'fallbackWrappers'] : [])];
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
  for (const k of ['answer', 'joined', 'nTokens', 'text', 'cjoined', 'longInput']) assert.deepEqual(l.streaming[k], p.streaming[k], k);
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

test('context shift: a chat longer than the context goes on, as node-llama-cpp\'s does', { skip: skipNlc || false }, () => {
  for (const [who, r] of [['node-llama-cpp', getPeer()], ['loom', getLoom()]]) {
    const c = r.contextShift;
    assert.equal(c.error, undefined, `${who}: ${c.error}`);
    assert.equal(c.answers.length, 8, who);
    for (const a of c.answers) assert.ok(a.length > 0, `${who}: an empty answer`);
    assert.deepEqual(c.stopReasons, Array(8).fill('maxTokens'), who);
    assert.equal(c.historyLength, 17, `${who}: the whole chat stays in the history`);
    assert.deepEqual(c.firstKept, { type: 'system', text: 'You tell stories.' }, `${who}: the system prompt is kept`);
    // one answer of 400 tokens on a 256-token context: generation went on past the context's end
    assert.equal(c.longTokens, 400, who);
    assert.equal(c.longStop, 'maxTokens', who);
    // the custom strategy was called with contextSize - size tokens to fit, and the chat went on
    assert.ok(c.strategyCalls.length > 0, `${who}: the custom strategy was not called`);
    for (const n of c.strategyCalls) assert.equal(n, 256 - 40, who);
    assert.equal(c.customAnswers.length, 6, who);
    for (const a of c.customAnswers) assert.ok(a.length > 0, `${who}: an empty answer after a custom shift`);
  }
  const p = getPeer().contextShift;
  const l = getLoom().contextShift;
  // before the first shift the answers are the same token for token; the one the first shift
  // cut (node-llama-cpp's and loom's default strategies cut the same characters there) too
  assert.deepEqual(l.answers.slice(0, 3), p.answers.slice(0, 3));
  // loom: after a shift the next prompts start from the shifted window, whose prefix stays cached
  assert.ok(l.cached.slice(3).some((n) => n > 50), `cached prompt tokens per prompt: ${l.cached}`);
  assert.deepEqual(l.customAnswers.slice(0, 2), p.customAnswers.slice(0, 2));
});

test('sequence state files: saved, loaded into a fresh context, the chat goes on with the same greedy text', { skip: skipNlc || false }, () => {
  const p = getPeer().stateFile;
  const l = getLoom().stateFile;
  for (const [who, r] of [['node-llama-cpp', p], ['loom', l]]) {
    assert.equal(r.error, undefined, `${who}: ${r.error}`);
    assert.equal(r.a2loaded, r.a2, `${who}: the answer after loading differs`);
    assert.ok(r.fileSize > 0, who);
    assert.equal(r.loadedTokens, r.savedTokens, who);
    assert.equal(r.refused, 'Error', `${who}: a load without acceptRisk must throw`);
  }
  for (const k of ['a1', 'a2', 'a2loaded', 'savedTokens', 'loadedTokens']) assert.deepEqual(l[k], p[k], k);
  // loom: the loaded cells served the prompt's prefix (not evaluated again)
  assert.ok(l.cached >= l.loadedTokens - 1, `loom evaluated the loaded tokens again (cached ${l.cached})`);
});

test('chat wrapper classes and LlamaText: node-llama-cpp\'s prompts, tokens and JSON', { skip: skipNlc || false }, () => {
  const p = getPeer().chatWrappers;
  const l = getLoom().chatWrappers;
  assert.equal(l.error, undefined, l.error);
  for (const k of Object.keys(p.wrappers)) assert.deepEqual(l.wrappers[k], p.wrappers[k], k);
  assert.ok(l.wrappers.subclass.answer.length > 0);
  for (const k of ['a1', 'a2', 'chatMLPromptStart', 'resolved', 'resolvedChatML']) assert.deepEqual(l[k], p[k], k);
  assert.deepEqual(l.text, p.text);
});

test('function calling streams text per token and the calls\' parameters in chunks', { skip: skipNlc || (FULL ? false : 'LOOM_NLC_FULL=0 skips it') }, () => {
  for (const [who, r] of [['node-llama-cpp', getPeer()], ['loom', getLoom()]]) {
    const f = r.functionStreaming;
    assert.equal(f.error, undefined, `${who}: ${f.error}`);
    assert.equal(f.free.chunks.join(''), f.free.responseText, who);
    assert.ok(f.free.chunks.length > 20, `${who}: text came in ${f.free.chunks.length} chunks`);
    assert.ok(f.free.tokenCalls.length > 20, `${who}: tokens came in ${f.free.tokenCalls.length} calls`);
  }
  // loom (a call forced on this tiny model): every call's parameter chunks add up to its parameters
  const f = getLoom().functionStreaming.forced;
  assert.ok(f.functionCalls.length > 0);
  f.functionCalls.forEach((c, i) => {
    const p = f.params[i];
    assert.equal(p.name, c.name);
    assert.ok(p.done && p.chunks > 1, `call ${i}: ${p.chunks} chunks, done ${p.done}`);
    assert.deepEqual(JSON.parse(p.text), c.params);
  });
});

test('LlamaChat: generateResponse answers, continues a response, streams, as node-llama-cpp\'s', { skip: skipNlc || false }, () => {
  const p = getPeer().llamaChat;
  const l = getLoom().llamaChat;
  assert.equal(l.error, undefined, l.error);
  assert.equal(p.error, undefined, p.error);
  for (const k of ['r1', 'r1Stop', 'r1History', 'cont', 'r2', 'r2Joined', 's1', 'disposed']) assert.deepEqual(l[k], p[k], k);
  assert.equal(l.r1, l.s1, 'LlamaChat and LlamaChatSession give the same first answer');
  // loom: a forced call comes back as functionCalls (stopReason "functionCalls"), its handler not run
  assert.ok(l.functionCalls.length > 0);
  assert.equal(l.fcStop, 'functionCalls');
  assert.equal(l.ran, 0);
  for (const c of l.functionCalls) {
    assert.equal(c.functionName, 'getWeather');
    assert.equal(typeof c.params.city, 'string');
  }
});

test('a model with a chat template: node-llama-cpp\'s wrapper for it, its prompt, stops and greedy answers', { skip: skipNlc || false }, () => {
  const p = getPeer().templatedModel;
  const l = getLoom().templatedModel;
  assert.equal(l.error, undefined, l.error);
  assert.equal(p.error, undefined, p.error);
  for (const name of ['chatML', 'custom', 'noSystem', 'llama3', 'gemma']) {
    for (const k of ['wrapper', 'resolved', 'text', 'tokens', 'stops', 'transformed', 'promptStart']) assert.deepEqual(l[name][k], p[name][k], `${name}.${k}`);
    // chatML's chat (256-token context) shifts from the fourth prompt on, where the strategies' cuts differ
    const n = name === 'chatML' ? 3 : l[name].answers.length;
    assert.deepEqual(l[name].answers.slice(0, n), p[name].answers.slice(0, n), `${name}.answers`);
    for (const a of l[name].answers) assert.ok(a.length > 0, `${name}: an empty answer`);
  }
  assert.equal(l.chatML.wrapper, 'ChatML');
  assert.equal(l.custom.wrapper, 'JinjaTemplate');
  assert.equal(l.noSystem.transformed, true);
  assert.equal(l.gemma.wrapper, 'Gemma');
  assert.equal(l.llama3.wrapper, 'Llama 3');
});

test('models without a chat template get node-llama-cpp\'s fallback wrapper', { skip: skipNlc || (FULL ? false : 'LOOM_NLC_FULL=0 skips it') }, () => {
  const p = getPeer().fallbackWrappers;
  const l = getLoom().fallbackWrappers;
  assert.equal(l.error, undefined, l.error);
  assert.deepEqual(l, { ...p, ms: l.ms });
});
