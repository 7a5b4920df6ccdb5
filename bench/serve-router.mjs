#!/usr/bin/env node
// Router mode: loom serve vs llama-server, both as routers over the same three small models with
// --models-max 2, one after the other, in one run.
//
//   node bench/serve-router.mjs [MODEL_A.gguf MODEL_B.gguf MODEL_C.gguf] [--llama-server PATH]
//                               [--threads 1] [--ctx 2048] [--swaps 6] [--engines loom,llama] [--json OUT]
//
// Models default to ../shared/models' stories260K, llama-2-tiny-random and synth-llama-tiny-q8_0
// (symlinked into a temporary --models-dir). For each engine:
//   load       the first request to each model in turn (max_tokens 1): its latency is the cold
//              load (process start, model load, first token); the third one also unloads the least
//              recently used model first (a swap). Then the same request again, warm: the
//              difference is the load. Repeated --swaps times over B and C to get a mean swap.
//   swap       one client sends short completions (max_tokens 8) to model A back to back while
//              another alternates B and C (each a swap, since A stays busy and --models-max is 2):
//              A's requests served per second during the swaps against A alone, and the swaps'
//              mean latency.
//   relay      200 short requests to a loaded model, one at a time: p50 latency through the router
//              (the cost of the extra hop).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const shared = process.env.LOOM_SHARED || path.resolve(repo, '../shared');

function parseArgs(argv) {
  const o = {
    models: [], llamaServer: path.join(os.homedir(), '.cache/loom-llama-cpp/build/bin/llama-server'),
    loom: process.env.LOOM || path.join(repo, 'build/bin/loom'), threads: 1, ctx: 2048, swaps: 6, swapSeconds: 0,
    engines: ['loom', 'llama'], json: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = () => argv[++i];
    if (a === '--llama-server') o.llamaServer = v();
    else if (a === '--loom') o.loom = v();
    else if (a === '--threads') o.threads = Number(v());
    else if (a === '--ctx') o.ctx = Number(v());
    else if (a === '--swaps') o.swaps = Number(v());
    else if (a === '--engines') o.engines = v().split(',');
    else if (a === '--json') o.json = v();
    else if (a.startsWith('--')) throw new Error(`unknown argument ${a}`);
    else o.models.push(a);
  }
  if (o.models.length === 0) {
    o.models = ['stories260K.gguf', 'llama-2-tiny-random.gguf', 'synth-llama-tiny-q8_0.gguf'].map((f) => path.join(shared, 'models', f));
  }
  if (o.models.length !== 3) throw new Error('give three models (or none for the defaults)');
  return o;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now();
const pct = (xs, p) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function startRouter(engine, o, dir) {
  const port = await freePort();
  const common = ['--models-dir', dir, '--models-max', '2', '-c', String(o.ctx), '-np', '2', '-t', String(o.threads),
    '--host', '127.0.0.1', '--port', String(port)];
  const [bin, args] = engine === 'loom' ? [o.loom, ['serve', ...common]] : [o.llamaServer, common];
  const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr.on('data', (d) => { err += d.toString(); if (err.length > 1e6) err = err.slice(-1e5); });
  const url = `http://127.0.0.1:${port}`;
  const t0 = now();
  for (;;) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) break;
    } catch { /* not yet */ }
    if (proc.exitCode !== null) throw new Error(`${engine} exited:\n${err}`);
    if (now() - t0 > 30000) throw new Error(`${engine} did not start:\n${err}`);
    await sleep(20);
  }
  return {
    url, proc, stderr: () => err,
    async stop() {
      const done = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 20000);
      await done;
      clearTimeout(t);
    },
  };
}

async function complete(url, model, maxTokens) {
  const t0 = now();
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: maxTokens, temperature: 0 }),
  });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`${model}: ${r.status} ${text}`);
  return now() - t0;
}

async function waitUnloaded(url, model) {
  for (let i = 0; i < 400; ++i) {
    const j = await (await fetch(`${url}/models`)).json();
    const m = j.data.find((e) => e.id === model);
    if (m && m.status.value === 'unloaded') return;
    await sleep(25);
  }
}

async function runEngine(engine, o, dir, ids) {
  const srv = await startRouter(engine, o, dir);
  const out = { engine };
  try {
    const [A, B, C] = ids;
    // load: cold first requests, then warm ones.
    const cold = [];
    for (const id of [A, B]) cold.push(await complete(srv.url, id, 1));
    const warmA = await complete(srv.url, A, 1);  // A becomes the most recently used: C unloads B
    const coldSwap = await complete(srv.url, C, 1);
    const warm = [];
    for (let i = 0; i < 5; ++i) warm.push(await complete(srv.url, C, 1));
    out.first_load_ms = mean(cold);
    out.warm_ms = pct(warm, 50);
    out.first_swap_ms = coldSwap;
    // Repeated swaps between B and C while A stays the most recently used.
    const swaps = [];
    for (let i = 0; i < o.swaps; ++i) {
      await complete(srv.url, A, 1);
      swaps.push(await complete(srv.url, i % 2 === 0 ? B : C, 1));
    }
    out.swap_ms_mean = mean(swaps);
    out.swap_ms_p50 = pct(swaps, 50);
    out.load_ms = out.swap_ms_p50 - out.warm_ms;
    void warmA;

    // swap: A's throughput alone, then during swaps of B and C.
    const runA = async (ms) => {
      const lat = [];
      const t0 = now();
      while (now() - t0 < ms) lat.push(await complete(srv.url, A, 8));
      return { n: lat.length, secs: (now() - t0) / 1000, lat };
    };
    const alone = await runA(2000);
    out.a_alone_rps = alone.n / alone.secs;
    let stop = false;
    const swapLat = [];
    const swapper = (async () => {
      let i = 0;
      while (!stop) swapLat.push(await complete(srv.url, i++ % 2 === 0 ? B : C, 1));
    })();
    const during = await runA(4000);
    stop = true;
    await swapper;
    out.a_during_swaps_rps = during.n / during.secs;
    out.a_during_swaps_p95_ms = pct(during.lat, 95);
    out.swaps_during = swapLat.length;
    out.swap_ms_during = mean(swapLat);

    // relay: one at a time to a loaded model.
    const rel = [];
    for (let i = 0; i < 200; ++i) rel.push(await complete(srv.url, A, 1));
    out.relay_p50_ms = pct(rel, 50);
  } finally {
    await srv.stop();
  }
  return out;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-bench-router-'));
  const ids = [];
  for (const m of o.models) {
    const base = path.basename(m);
    fs.symlinkSync(path.resolve(m), path.join(dir, base));
    ids.push(base.replace(/\.gguf$/, ''));
  }
  const results = [];
  try {
    for (const e of o.engines) {
      if (e === 'llama' && !fs.existsSync(o.llamaServer)) {
        console.error(`no llama-server at ${o.llamaServer}: skipped`);
        continue;
      }
      results.push(await runEngine(e, o, dir, ids));
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const rows = [
    ['first load: request latency (ms)', 'first_load_ms'],
    ['warm request, max_tokens 1 (ms, p50)', 'warm_ms'],
    ['swap (unload LRU + load), request latency (ms, p50)', 'swap_ms_p50'],
    ['  of which the load (ms)', 'load_ms'],
    ['model A alone: requests/s (max_tokens 8)', 'a_alone_rps'],
    ['model A during B/C swaps: requests/s', 'a_during_swaps_rps'],
    ['model A during swaps: p95 latency (ms)', 'a_during_swaps_p95_ms'],
    ['swaps done meanwhile (mean ms each)', 'swaps_during'],
    ['relay: 1-token request p50 (ms)', 'relay_p50_ms'],
  ];
  const names = results.map((r) => r.engine === 'llama' ? 'llama-server' : 'loom');
  console.log(`models: ${ids.join(', ')}; --models-max 2, -c ${o.ctx}, -np 2, -t ${o.threads}`);
  console.log(`| | ${names.join(' | ')} |${results.length === 2 ? ' ratio |' : ''}`);
  console.log(`|---|${names.map(() => '---|').join('')}${results.length === 2 ? '---|' : ''}`);
  for (const [label, k] of rows) {
    const vals = results.map((r) => r[k]);
    const cells = vals.map((v, i) => (k === 'swaps_during' ? `${v} (${results[i].swap_ms_during.toFixed(1)})` : v.toFixed(1)));
    const ratio = results.length === 2 && k !== 'swaps_during' ? ` ${(vals[0] / vals[1]).toFixed(2)}× |` : (results.length === 2 ? ' |' : '');
    console.log(`| ${label} | ${cells.join(' | ')} |${ratio}`);
  }
  if (o.json) fs.writeFileSync(o.json, JSON.stringify(results, null, 2));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
