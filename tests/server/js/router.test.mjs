// Router mode (`loom serve` without -m): three small models and a corrupt one in a temporary
// --models-dir with --models-max 2, one child process per model. Loads on demand, least recently
// used unloads, answers equal to single-model mode, a corrupt model and a killed child failing only
// their own requests, presets, /models and its events.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loomBin, sharedPath, golden, post, sleep } from './harness.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-router-test-'));
const modelsDir = path.join(tmp, 'models');
fs.mkdirSync(modelsDir);
fs.symlinkSync(sharedPath('models/stories260K.gguf'), path.join(modelsDir, 'stories260K.gguf'));
fs.symlinkSync(sharedPath('models/llama-2-tiny-random.gguf'), path.join(modelsDir, 'tiny-random.gguf'));
fs.symlinkSync(sharedPath('models/synth-llama-tiny-q8_0.gguf'), path.join(modelsDir, 'synth-q8.gguf'));
// A truncated copy: the child cannot load it.
fs.writeFileSync(path.join(modelsDir, 'corrupt.gguf'), fs.readFileSync(sharedPath('models/stories260K.gguf')).subarray(0, 100000));
// Not models: skipped.
fs.writeFileSync(path.join(modelsDir, 'notes.txt'), 'x');
fs.writeFileSync(path.join(modelsDir, 'mmproj-x.gguf'), 'x');

// Starts the router; resolves with { url, proc, stderr(), stop() } once it listens, or rejects
// with its stderr when it exits first (a preset that does not parse).
function startRouter(args, { env = {} } = {}) {
  const proc = spawn(loomBin, ['serve', '--host', '127.0.0.1', '--port', '0', '-t', '1', '-c', '256', ...args],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  let err = '';
  let exited = null;
  proc.on('exit', (code, signal) => { exited = { code, signal }; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`router did not start:\n${err}`)), 30000);
    proc.stderr.on('data', (d) => {
      err += d.toString();
      const m = err.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m && err.includes('loom: ready')) {
        clearTimeout(timer);
        resolve({
          url: `http://127.0.0.1:${m[1]}`, proc, stderr: () => err, exited: () => exited,
          async stop() {
            if (exited) return exited;
            const done = new Promise((r) => proc.once('exit', (code, sig) => r({ code, signal: sig })));
            proc.kill('SIGTERM');
            const t = setTimeout(() => proc.kill('SIGKILL'), 20000);
            const r = await done;
            clearTimeout(t);
            return r;
          },
        });
      }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(Object.assign(new Error(`router exited ${code}:\n${err}`), { code, stderr: err })); });
  });
}

async function models(url) {
  const r = await fetch(`${url}/models`);
  assert.equal(r.status, 200);
  const j = await r.json();
  return Object.fromEntries(j.data.map((m) => [m.id, m]));
}

// The golden continuation as /v1/completions returns it (see generation.test.mjs).
function goldenText(run) {
  return /^[,.]/.test(run.greedy_text) ? run.greedy_text : ' ' + run.greedy_text;
}

let srv;
const events = [];
let sseAbort;
let maxLoaded = 0;

before(async () => {
  srv = await startRouter(['--models-dir', modelsDir, '--models-max', '2']);
  // /models/sse: every status change; the models loaded at once never exceed --models-max.
  sseAbort = new AbortController();
  const r = await fetch(`${srv.url}/models/sse`, { signal: sseAbort.signal });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const loaded = new Set();
  (async () => {
    const dec = new TextDecoder();
    let buf = '';
    try {
      for await (const chunk of r.body) {
        buf += dec.decode(chunk, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (!block.startsWith('data: ')) continue;
          const ev = JSON.parse(block.slice(6));
          events.push(ev);
          if (ev.event === 'model_status' && ev.data.status === 'loaded') loaded.add(ev.model);
          if (ev.event === 'model_status' && ev.data.status === 'unloaded') loaded.delete(ev.model);
          maxLoaded = Math.max(maxLoaded, loaded.size);
        }
      }
    } catch { /* aborted at the end */ }
  })();
});

after(async () => {
  sseAbort?.abort();
  if (srv) {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.stderr());
    // Every child went with the router.
    assert.doesNotThrow(() => {
      for (const line of srv.stderr().split('\n')) {
        const m = line.match(/unix:(\/\S+\.sock)/);
        if (m) assert.ok(!fs.existsSync(m[1]), `${m[1]} left behind`);
      }
    });
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

test('the model list: every GGUF by file stem, companions and other files skipped, all unloaded', async () => {
  const h = await fetch(`${srv.url}/health`);
  assert.equal(h.status, 200);
  assert.deepEqual(await h.json(), { status: 'ok' });
  const m = await models(srv.url);
  assert.deepEqual(Object.keys(m).sort(), ['corrupt', 'stories260K', 'synth-q8', 'tiny-random']);
  for (const e of Object.values(m)) {
    assert.equal(e.object, 'model');
    assert.equal(e.source, 'models_dir');
    assert.ok(['unloaded', 'loading', 'loaded'].includes(e.status.value));
  }
  const v1 = await (await fetch(`${srv.url}/v1/models`)).json();
  assert.equal(v1.object, 'list');
  assert.equal(v1.data.length, 4);
  const props = await (await fetch(`${srv.url}/props`)).json();
  assert.equal(props.role, 'router');
  assert.equal(props.max_instances, 2);
});

test('concurrent requests to three models with --models-max 2: all answered, correctly, at most 2 loaded', async () => {
  const g = golden();
  const run = g.runs[0];
  const jobs = [];
  for (let round = 0; round < 2; ++round) {
    for (const model of ['stories260K', 'tiny-random', 'synth-q8']) {
      jobs.push(post(srv.url, '/v1/completions', { model, prompt: run.prompt, max_tokens: run.greedy_ids.length, temperature: 0 })
        .then((r) => ({ model, r })));
    }
  }
  const results = await Promise.all(jobs);
  for (const { model, r } of results) {
    assert.equal(r.status, 200, `${model}: ${r.text}`);
    assert.equal(r.json.model, model);
    if (model === 'stories260K') assert.equal(r.json.choices[0].text, goldenText(run));
  }
  // Each model's greedy answer is the same whichever child instance gave it.
  for (const model of ['tiny-random', 'synth-q8']) {
    const texts = new Set(results.filter((x) => x.model === model).map((x) => x.r.json.choices[0].text));
    assert.equal(texts.size, 1, model);
  }
  const m = await models(srv.url);
  const loaded = Object.values(m).filter((e) => e.status.value === 'loaded');
  assert.ok(loaded.length <= 2, JSON.stringify(loaded.map((e) => e.id)));
  assert.ok(maxLoaded <= 2, `${maxLoaded} models were loaded at once`);
  assert.ok(events.some((e) => e.event === 'model_status' && e.data.status === 'loading'));
  // Three models through two places: some model was unloaded to make room.
  assert.ok(events.some((e) => e.event === 'model_status' && e.data.status === 'unloaded'), JSON.stringify(events));
});

test('least recently used: loading a third model unloads the idle model used longest ago', async () => {
  const ask = (model) => post(srv.url, '/v1/completions', { model, prompt: 'Once', max_tokens: 2, temperature: 0 });
  assert.equal((await ask('stories260K')).status, 200);
  assert.equal((await ask('tiny-random')).status, 200);
  assert.equal((await ask('stories260K')).status, 200);  // tiny-random is now the least recently used
  assert.equal((await ask('synth-q8')).status, 200);
  for (let i = 0; i < 100; ++i) {
    const m = await models(srv.url);
    if (m['tiny-random'].status.value === 'unloaded') break;
    await sleep(50);
  }
  const m = await models(srv.url);
  assert.equal(m['tiny-random'].status.value, 'unloaded');
  assert.equal(m['stories260K'].status.value, 'loaded');
  assert.equal(m['synth-q8'].status.value, 'loaded');
  // A loaded model's entry carries its child's /v1/models metadata and command line.
  assert.ok(m['stories260K'].meta && m['stories260K'].meta.n_vocab > 0, JSON.stringify(m['stories260K']));
  assert.ok(m['stories260K'].status.args.includes('serve'));
  assert.ok(m['stories260K'].status.args.includes('256'), 'the router\'s -c reaches the children');
});

test('streams are relayed as they arrive and equal the whole answer; GET routes by ?model=', async () => {
  const body = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 24, temperature: 0 };
  const whole = await post(srv.url, '/v1/completions', body);
  assert.equal(whole.status, 200);
  const r = await fetch(`${srv.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }) });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  let text = '';
  let chunks = 0;
  let done = false;
  const dec = new TextDecoder();
  let buf = '';
  for await (const c of r.body) {
    ++chunks;
    buf += dec.decode(c, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const data = buf.slice(0, i).replace(/^data: /, '');
      buf = buf.slice(i + 2);
      if (data === '[DONE]') { done = true; continue; }
      text += JSON.parse(data).choices[0].text;
    }
  }
  assert.ok(done);
  assert.ok(chunks >= 1);
  assert.equal(text, whole.json.choices[0].text);

  const props = await fetch(`${srv.url}/props?model=stories260K`);
  assert.equal(props.status, 200);
  const pj = await props.json();
  assert.equal(pj.model_alias, 'stories260K');
  const metrics = await fetch(`${srv.url}/metrics?model=stories260K`);
  assert.equal(metrics.status, 200);
  assert.match(await metrics.text(), /llamacpp:/);
  const tok = await post(srv.url, '/tokenize', { model: 'stories260K', content: 'Once upon a time' });
  assert.equal(tok.status, 200);
  assert.deepEqual(tok.json.tokens, golden().runs[0].prompt_ids.slice(1));
});

// An unbounded stream's first chunk arrives while it runs: the router relays, it does not collect.
test('a client that leaves closes its child connection: the child cancels the request', async () => {
  const ac = new AbortController();
  const r = await fetch(`${srv.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'stories260K', prompt: 'Once', max_tokens: 100000, temperature: 1, ignore_eos: true, stream: true }),
    signal: ac.signal });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  await reader.read();
  ac.abort();
  let processing = -1;
  for (let i = 0; i < 100; ++i) {
    const t = await (await fetch(`${srv.url}/metrics?model=stories260K`)).text();
    processing = Number(t.match(/^llamacpp:requests_processing (\S+)/m)?.[1]);
    if (processing === 0) break;
    await sleep(50);
  }
  assert.equal(processing, 0);
});

test('errors: unknown model 404 with the list, no model 400, autoload=false, downloads refused, unknown path 404', async () => {
  const unknown = await post(srv.url, '/v1/chat/completions', { model: 'nope', messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(unknown.status, 404);
  for (const id of ['stories260K', 'tiny-random', 'synth-q8', 'corrupt']) assert.match(unknown.json.error.message, new RegExp(id));
  const none = await post(srv.url, '/v1/completions', { prompt: 'x' });
  assert.equal(none.status, 400);
  assert.match(none.json.error.message, /model name is missing/);
  const get = await fetch(`${srv.url}/metrics`);
  assert.equal(get.status, 400);
  // Anthropic's endpoint answers in Anthropic's error shape.
  const anth = await post(srv.url, '/v1/messages', { model: 'nope', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(anth.status, 404);
  assert.equal(anth.json.type, 'error');

  // Make sure tiny-random is not loaded, then ask without autoload.
  const m = await models(srv.url);
  if (m['tiny-random'].status.value !== 'unloaded') {
    await post(srv.url, '/models/unload', { model: 'tiny-random' });
    for (let i = 0; i < 100 && (await models(srv.url))['tiny-random'].status.value !== 'unloaded'; ++i) await sleep(50);
  }
  const noload = await post(srv.url, '/v1/completions?autoload=false', { model: 'tiny-random', prompt: 'x', max_tokens: 1 });
  assert.equal(noload.status, 400);
  assert.match(noload.json.error.message, /not loaded/);

  const dl = await post(srv.url, '/models', { model: 'ggml-org/x' });
  assert.equal(dl.status, 501);
  assert.match(dl.json.error.message, /downloads/);
  const del = await fetch(`${srv.url}/models?model=x`, { method: 'DELETE' });
  assert.equal(del.status, 501);
  const nopath = await post(srv.url, '/v2/whatever', { model: 'stories260K' });
  assert.equal(nopath.status, 404);
});

test('POST /models/load and /models/unload', async () => {
  assert.equal((await post(srv.url, '/models/load', { model: 'nope' })).status, 404);
  assert.equal((await post(srv.url, '/models/unload', { model: 'nope' })).status, 400);
  let m = await models(srv.url);
  if (m['tiny-random'].status.value !== 'unloaded') {
    assert.equal((await post(srv.url, '/models/unload', { model: 'tiny-random' })).status, 200);
    for (let i = 0; i < 100 && (await models(srv.url))['tiny-random'].status.value !== 'unloaded'; ++i) await sleep(50);
  }
  const notRunning = await post(srv.url, '/models/unload', { model: 'tiny-random' });
  assert.equal(notRunning.status, 400);
  assert.match(notRunning.json.error.message, /not running/);
  const load = await post(srv.url, '/models/load', { model: 'tiny-random' });
  assert.equal(load.status, 200);
  assert.deepEqual(load.json, { success: true });
  for (let i = 0; i < 200; ++i) {
    m = await models(srv.url);
    if (m['tiny-random'].status.value === 'loaded') break;
    await sleep(50);
  }
  assert.equal(m['tiny-random'].status.value, 'loaded');
  const again = await post(srv.url, '/models/load', { model: 'tiny-random' });
  assert.equal(again.status, 400);
  assert.match(again.json.error.message, /already running/);
  const un = await post(srv.url, '/models/unload', { model: 'tiny-random' });
  assert.deepEqual(un.json, { success: true });
});

test('a corrupt model: its requests get a 500 with the reason, the others keep serving', async () => {
  const [bad, good] = await Promise.all([
    post(srv.url, '/v1/completions', { model: 'corrupt', prompt: 'x', max_tokens: 2 }),
    post(srv.url, '/v1/completions', { model: 'stories260K', prompt: 'Once', max_tokens: 4, temperature: 0 }),
  ]);
  assert.equal(bad.status, 500);
  assert.match(bad.json.error.message, /corrupt/);
  assert.match(bad.json.error.message, /past the end of the file|truncated|too small|tensor/i);
  assert.equal(good.status, 200);
  const m = await models(srv.url);
  assert.equal(m.corrupt.status.value, 'unloaded');
  assert.equal(m.corrupt.status.failed, true);
  assert.equal(m.corrupt.status.exit_code, 1);
  assert.ok(m.corrupt.status.message.length > 0);
  // Asking again tries again (the file may have been fixed), and fails the same way.
  const bad2 = await post(srv.url, '/v1/completions', { model: 'corrupt', prompt: 'x', max_tokens: 2 });
  assert.equal(bad2.status, 500);
});

test('a child killed with SIGKILL fails only its own requests; the model loads again', async () => {
  const ok = await post(srv.url, '/v1/completions', { model: 'stories260K', prompt: 'Once', max_tokens: 2, temperature: 0 });
  assert.equal(ok.status, 200);
  let m = await models(srv.url);
  const pid = m.stories260K.status.pid;
  assert.ok(pid > 0, JSON.stringify(m.stories260K.status));
  // A long stream on it, and a request to another model, while it is killed.
  const r = await fetch(`${srv.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'stories260K', prompt: 'Once', max_tokens: 100000, ignore_eos: true, stream: true }) });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  await reader.read();
  process.kill(pid, 'SIGKILL');
  let cut = false;
  let sawDone = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (new TextDecoder().decode(value).includes('[DONE]')) sawDone = true;
    }
  } catch { cut = true; }
  assert.ok(cut || !sawDone, 'the stream of the killed child ends without [DONE]');
  const other = await post(srv.url, '/v1/completions', { model: 'synth-q8', prompt: 'Once', max_tokens: 2, temperature: 0 });
  assert.equal(other.status, 200, other.text);
  for (let i = 0; i < 100; ++i) {
    m = await models(srv.url);
    if (m.stories260K.status.value === 'unloaded') break;
    await sleep(50);
  }
  assert.equal(m.stories260K.status.value, 'unloaded');
  assert.equal(m.stories260K.status.failed, true);
  assert.match(m.stories260K.status.message, /signal 9/);
  // The next request starts it again.
  const g = golden().runs[0];
  const back = await post(srv.url, '/v1/completions', { model: 'stories260K', prompt: g.prompt, max_tokens: g.greedy_ids.length, temperature: 0 });
  assert.equal(back.status, 200, back.text);
  assert.equal(back.json.choices[0].text, goldenText(g));
});

test('presets: [*] defaults, per-model flags, a model by path, load-on-startup; --api-key checked at the router', async () => {
  const ini = path.join(tmp, 'presets.ini');
  fs.writeFileSync(ini, [
    'version = 1',
    '; defaults for every model',
    '[*]',
    'c = 512',
    '',
    '[stories260K]',
    'ctx-size = 384   ; this model\'s own',
    'LLAMA_ARG_N_PARALLEL = 2',
    '',
    '[story-by-path]',
    `model = ${sharedPath('models/stories260K.gguf')}`,
    'load-on-startup = true',
    'alias = ignored-the-router-names-it',
    '',
  ].join('\n'));
  const r = await startRouter(['--models-dir', modelsDir, '--models-preset', ini, '--models-max', '0', '--api-key', 'k1'],
  );
  try {
    const noKey = await fetch(`${r.url}/models`);
    assert.equal(noKey.status, 401);
    const auth = { authorization: 'Bearer k1' };
    assert.equal((await fetch(`${r.url}/health`)).status, 200);
    let m;
    for (let i = 0; i < 200; ++i) {
      m = Object.fromEntries((await (await fetch(`${r.url}/models`, { headers: auth })).json()).data.map((e) => [e.id, e]));
      if (m['story-by-path'].status.value === 'loaded') break;
      await sleep(50);
    }
    assert.equal(m['story-by-path'].status.value, 'loaded', 'load-on-startup');
    assert.equal(m['story-by-path'].source, 'preset');
    assert.equal(m.stories260K.source, 'models_dir');
    assert.match(m.stories260K.status.preset, /ctx-size = 384/);
    // The router's command line wins over the preset (llama-server's precedence): -c 256 here.
    const p1 = await fetch(`${r.url}/props?model=stories260K`, { headers: auth });
    assert.equal(p1.status, 200);
    const j1 = await p1.json();
    assert.equal(j1.total_slots, 2, 'the preset\'s LLAMA_ARG_N_PARALLEL');
    assert.equal(j1.n_ctx, 256);
    const p2 = await (await fetch(`${r.url}/props?model=story-by-path`, { headers: auth })).json();
    assert.equal(p2.model_alias, 'story-by-path');
    const bad = await post(r.url, '/v1/completions', { model: 'story-by-path', prompt: 'Once', max_tokens: 2 });
    assert.equal(bad.status, 401);
    const good = await post(r.url, '/v1/completions', { model: 'story-by-path', prompt: 'Once', max_tokens: 2 }, auth);
    assert.equal(good.status, 200, good.text);
    // CORS as in single-model mode.
    const pre = await fetch(`${r.url}/v1/completions`, { method: 'OPTIONS', headers: { origin: 'http://x.test', 'access-control-request-method': 'POST' } });
    assert.equal(pre.status, 200);
    assert.equal(pre.headers.get('access-control-allow-origin'), 'http://x.test');
    const withOrigin = await post(r.url, '/v1/completions', { model: 'story-by-path', prompt: 'Once', max_tokens: 2 }, { ...auth, origin: 'http://x.test' });
    assert.equal(withOrigin.headers.get('access-control-allow-origin'), 'http://x.test');
  } finally {
    assert.equal((await r.stop()).code, 0);
  }
});

test('--sleep-idle-seconds reaches the children: a sleeping child shows as sleeping, a request wakes it', async () => {
  const r = await startRouter(['--models-dir', modelsDir, '--sleep-idle-seconds', '1']);
  try {
    const ask = () => post(r.url, '/v1/completions', { model: 'stories260K', prompt: 'Once', max_tokens: 2, temperature: 0 });
    assert.equal((await ask()).status, 200);
    let m;
    for (let i = 0; i < 100; ++i) {
      m = await models(r.url);
      if (m.stories260K.status.value === 'sleeping') break;
      await sleep(50);
    }
    assert.equal(m.stories260K.status.value, 'sleeping');
    assert.equal((await ask()).status, 200);
    for (let i = 0; i < 40 && (await models(r.url)).stories260K.status.value !== 'loaded'; ++i) await sleep(25);
    assert.equal((await models(r.url)).stories260K.status.value, 'loaded');
    // A model never loaded shows the command line it will get.
    assert.ok((await models(r.url))['synth-q8'].status.args.includes('--sleep-idle-seconds'));
  } finally {
    assert.equal((await r.stop()).code, 0);
  }
});

test('a preset file that does not parse, or names an unknown flag, stops the start naming the line', async () => {
  const cases = [
    ['[ok]\nmodel = x.gguf\nthis line is wrong\n', /bad\.ini:3:/],
    ['[a]\nmodel = x.gguf\n[b\n', /bad\.ini:3:.*\]/],
    ['[a]\nmodel = x.gguf\nno-such-flag = 1\n', /bad\.ini:3:.*no-such-flag/],
    ['[a]\nctx-size = 5\n', /bad\.ini:1:.*names no model/],
  ];
  for (const [text, re] of cases) {
    const ini = path.join(tmp, 'bad.ini');
    fs.writeFileSync(ini, text);
    await assert.rejects(startRouter(['--models-preset', ini]), (e) => {
      assert.equal(e.code, 2, e.stderr);
      assert.match(e.stderr, re);
      return true;
    });
  }
  // Without -m and without a model source: refused, naming the options.
  await assert.rejects(startRouter([]), (e) => {
    assert.equal(e.code, 2);
    assert.match(e.stderr, /-m FILE.*--models-dir.*--models-preset/);
    return true;
  });
});

test('GET /models?reload=1 reads the sources again: new models appear, removed ones go, changed ones reload', async () => {
  const dir = fs.mkdtempSync(path.join(tmp, 'reload-'));
  fs.symlinkSync(sharedPath('models/stories260K.gguf'), path.join(dir, 'a.gguf'));
  fs.symlinkSync(sharedPath('models/stories260K.gguf'), path.join(dir, 'b.gguf'));
  const r = await startRouter(['--models-dir', dir]);
  try {
    const ask = (model) => post(r.url, '/v1/completions', { model, prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
    assert.equal((await ask('a')).status, 200);
    assert.equal((await ask('b')).status, 200);
    // c is added, b removed, a now points at another file: before the reload nothing changes.
    fs.symlinkSync(sharedPath('models/llama-2-tiny-random.gguf'), path.join(dir, 'c.gguf'));
    fs.rmSync(path.join(dir, 'b.gguf'));
    fs.rmSync(path.join(dir, 'a.gguf'));
    fs.symlinkSync(sharedPath('models/synth-llama-tiny-q8_0.gguf'), path.join(dir, 'a.gguf'));
    assert.deepEqual(Object.keys(await models(r.url)).sort(), ['a', 'b']);
    const reloaded = await fetch(`${r.url}/models?reload=1`);
    assert.equal(reloaded.status, 200);
    const list = Object.fromEntries((await reloaded.json()).data.map((m) => [m.id, m]));
    assert.deepEqual(Object.keys(list).sort(), ['a', 'c']);
    assert.equal(list.c.status.value, 'unloaded');
    assert.match(list.a.path, /a\.gguf$/);
    // b is gone (404 listing the models), c loads on demand, a serves its new file.
    const gone = await ask('b');
    assert.equal(gone.status, 404, gone.text);
    assert.match(gone.json.error.message, /a, c|c, a/);
    assert.equal((await ask('c')).status, 200);
    // a's file changed: its child was unloaded at the reload and the next request loads the new one.
    assert.notEqual(list.a.status.value, 'loaded');
    const a = await ask('a');
    assert.equal(a.status, 200, a.text);
    const meta = (await models(r.url)).a.meta;
    assert.equal(meta?.n_vocab, 32000, JSON.stringify(meta));  // synth-llama-tiny's vocabulary, not stories260K's 512
  } finally {
    assert.equal((await r.stop()).code, 0);
  }
});
