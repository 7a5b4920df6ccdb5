// loom-node's cost over the engine, and its peers, side by side in one run:
//   - `loom generate` (the CLI, no JavaScript): loom-node's completion() must be within 3 % of it;
//   - loom-node (bindings/node): completion() without and with a token callback (streaming);
//   - llama.node (@fugood/llama.node, the package whose API loom-node implements): the same calls;
//   - node-llama-cpp (the other JavaScript binding of llama.cpp) and loom-node's own node-llama-cpp
//     API (loom-node/node-llama-cpp, engine loom-nlc), the same code on both: completion is
//     LlamaCompletion.generateCompletion, streaming is LlamaChatSession.prompt with onTextChunk
//     (greedy, repeatPenalty false; both stop at EOS, so their token counts are reported);
// each at 1 and at N requests at once (--parallel 1,4): loom-node as N concurrent completion()
// calls on a context loaded with n_parallel N and through its parallel API (parallel.enable +
// parallel.completion), llama.node through its parallel API, node-llama-cpp as N LlamaCompletion
// on the N sequences of one context; `loom generate --parallel N` beside them for reference.
// For each: tokens/s, the decode bandwidth (weight bytes per token x tok/s, 1 request) against the
// read bandwidth `loom bench` measures in the same run, and the event loop's timer lag (p99 / max
// of a 1 ms interval timer) while it generates.
//
//   node bench/node-binding.mjs MODEL.gguf [--threads 2] [--tokens 256] [--reps 3] [--ctx 2048]
//        [--parallel 1,4] [--engines cli,loom-node,loom-nlc,llama.node,node-llama-cpp] [--no-install]
//        [--json] [--verbose] [--logs]
//   --engines: which to run (cli is `loom generate`); --json: one JSON object on stdout;
//   --verbose: every run's figures on stderr; --logs: the engines' own logs (llama.node's on stdout).
//
// Every engine runs in a process of its own (a worker: node-llama-cpp and llama.node each carry
// their own llama.cpp, llama.node prints its log on stdout, and each event loop's lag is then
// its own); the parent interleaves them, one repetition of each in turn in a rotating order, so
// that a noisy machine slows all of them alike (loom generate and loom-node's completion() back to
// back, their ratio taken per round); the first round warms up and is not counted.
// Greedy (temperature 0, XTC off), EOS ignored where the engine can (loom-node, llama.node;
// `loom generate` and node-llama-cpp cannot, so their token counts are reported).
//
// tok/s is always tokens after the first over the time from the first token to the last (the
// span of llama.cpp's and loom-node's timings.predicted_per_second and of loom generate's
// gen_wall_tps): from the engine's own timings where it has them (loom generate, loom-node,
// llama.node; with N requests, their tokens over the union of their spans), measured in
// JavaScript from the token callbacks otherwise (node-llama-cpp, which has no timings and runs
// its sampling loop in JavaScript with or without a callback). The wall clock of each whole call,
// prompt included, is in the JSON too.
//
// Peers not installed are installed on first use, outside the repo, pinned (--no-install: not):
//   llama.node 1.7.15 into $LOOM_LLAMANODE_DIR (default ~/.cache/loom-peer-llamanode, ~22 MB:
//     the package and its CPU build for this platform; its CUDA/Vulkan variants are left out);
//   node-llama-cpp 3.22.1 into $LOOM_PEER_DIR (default ~/.cache/loom-peer, ~85 MB, the same
//     install as ../shared/bench/peer-bench.mjs).
// An engine that cannot be installed or loaded is reported as skipped. loom-node's addon:
// $LOOM_NODE_ADDON, default build/bin/loom_node.node; the CLI: $LOOM, default build/bin/loom.
import { execFileSync, fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const self = fileURLToPath(import.meta.url);
const repo = path.resolve(path.dirname(self), '..');
const LLAMANODE_VERSION = '1.7.15';
const NLC_VERSION = '3.22.1';
const prompt = 'Once upon a time, there was a little girl who lived in a village near the forest.';

// ---- statistics ---------------------------------------------------------------------------------

function median(v) {
  const s = v.filter(Number.isFinite).sort((a, b) => a - b);
  if (!s.length) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
const stats = (v) => {
  const f = v.filter(Number.isFinite);
  return { median: median(f), min: f.length ? Math.min(...f) : NaN, max: f.length ? Math.max(...f) : NaN, runs: v };
};

// ---- worker: one engine, one request count ----------------------------------------------------

async function worker(spec) {
  const send = (m) => new Promise((resolve) => process.send(m, resolve));
  let engine;
  try {
    engine = await openEngine(spec);
  } catch (err) {
    await send({ type: 'skip', reason: String(err?.message || err).split('\n')[0] });
    process.exit(0);
  }
  await send({ type: 'ready', version: engine.version, system_info: engine.systemInfo, detail: engine.detail });
  process.on('disconnect', () => process.exit(0)); // the parent is gone
  process.on('message', async (msg) => {
    if (msg.op === 'close') {
      try {
        await engine.close();
      } catch {
        // exiting anyway
      }
      process.exit(0);
    }
    try {
      await send({ type: 'result', result: await measure(engine, spec, msg) });
    } catch (err) {
      await send({ type: 'error', error: String(err?.message || err) });
    }
  });
}

// One timed run: P requests at once, with or without a token callback, with or without the 1 ms
// lag timer. Each request reports {n, first, last, end, predN, predMs} (times from performance.now()).
async function measure(engine, spec, { stream, lag }) {
  const lags = [];
  let timer = null;
  if (lag) {
    let last = performance.now();
    timer = setInterval(() => {
      const now = performance.now();
      lags.push(now - last - 1);
      last = now;
    }, 1);
  }
  await engine.reset();
  const t0 = performance.now();
  const reqs = await engine.run(stream);
  if (timer) clearInterval(timer);
  const P = reqs.length;
  const n = reqs.reduce((a, r) => a + r.n, 0);
  const end = Math.max(...reqs.map((r) => r.end));
  const first = Math.min(...reqs.map((r) => r.first ?? NaN));
  const last = Math.max(...reqs.map((r) => r.last ?? NaN));
  const out = {
    n,
    n_min: Math.min(...reqs.map((r) => r.n)),
    wall_tps: n / ((end - t0) / 1000),
    js_tps: Number.isFinite(first) && last > first ? (n - P) / ((last - first) / 1000) : NaN,
  };
  if (reqs.every((r) => Number.isFinite(r.predMs))) {
    // N requests: their tokens over the union of their spans, each span ending when its promise
    // resolved (requests that ran one after another then count as such).
    const from = Math.min(...reqs.map((r) => r.end - r.predMs));
    out.engine_tps = P === 1 ? reqs[0].predTps : reqs.reduce((a, r) => a + r.predN, 0) / ((end - from) / 1000);
  }
  out.tps = Number.isFinite(out.engine_tps) ? out.engine_tps : out.js_tps;
  if (lag) {
    const s = [...lags].sort((a, b) => a - b);
    out.lag = { p99: s[Math.floor(s.length * 0.99)] ?? 0, max: s.length ? s[s.length - 1] : 0, ticks: s.length };
  }
  return out;
}

// A request of loom-node or llama.node (the same API): the promise of its result and the callback
// times; onToken is called with (data) for completion() and (id, data) for parallel.completion().
function llamaNodeStyleRequest(start, stream) {
  const rec = { n: 0, first: undefined, last: undefined };
  const onToken = stream
    ? () => {
        const t = performance.now();
        if (rec.first === undefined) rec.first = t;
        rec.last = t;
      }
    : undefined;
  return start(onToken).then((res) => {
    rec.end = performance.now();
    rec.n = res.tokens_predicted;
    rec.predN = res.timings?.predicted_n;
    rec.predMs = res.timings?.predicted_ms;
    rec.predTps = res.timings?.predicted_per_second;
    return rec;
  });
}

async function openEngine(spec) {
  const { engine, api, parallel: P, model, threads, ctx: nCtx, tokens } = spec;
  const base = { prompt, n_predict: tokens, temperature: 0, xtc_probability: 0, ignore_eos: true };
  if (engine === 'loom-node' || engine === 'llama.node') {
    let mod, version;
    if (engine === 'loom-node') {
      const addon = path.join(repo, 'build', 'bin', 'loom_node.node');
      if (!process.env.LOOM_NODE_ADDON && fs.existsSync(addon)) process.env.LOOM_NODE_ADDON = addon;
      mod = await import(pathToFileURL(path.join(repo, 'bindings', 'node', 'lib', 'index.js')).href);
      version = JSON.parse(fs.readFileSync(path.join(repo, 'bindings', 'node', 'package.json'), 'utf8')).version;
    } else {
      const require = createRequire(path.join(spec.dir, 'package.json'));
      mod = require('@fugood/llama.node');
      version = require('@fugood/llama.node/package.json').version;
    }
    const opts = { model, n_ctx: nCtx, n_threads: threads };
    if (P > 1) opts.n_parallel = P;
    const ctx = await mod.loadModel(opts);
    if (api === 'parallel') await ctx.parallel.enable({ n_parallel: P });
    // loom-node: no prompt cache, as the CLI (llama.node has no such option: clearCache instead)
    const options = engine === 'loom-node' ? { ...base, cache_prompt: false } : base;
    const one = (stream) =>
      api === 'parallel'
        ? llamaNodeStyleRequest(async (onToken) => (await ctx.parallel.completion(options, onToken)).promise, stream)
        : llamaNodeStyleRequest((onToken) => ctx.completion(options, onToken), stream);
    return {
      version,
      systemInfo: ctx.getSystemInfo?.() ?? '',
      detail: engine === 'loom-node' ? { addon: process.env.LOOM_NODE_ADDON || '(default lookup)' } : {},
      reset: async () => ctx.clearCache?.(),
      run: (stream) => Promise.all(Array.from({ length: P }, () => one(stream))),
      close: async () => {
        if (api === 'parallel') ctx.parallel.disable();
        await ctx.release();
      },
    };
  }
  if (engine === 'node-llama-cpp' || engine === 'loom-nlc') {
    // node-llama-cpp itself, or loom-node's node-llama-cpp API (loom-node/node-llama-cpp): the same code.
    process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = 'true';
    let nlc, pkg;
    if (engine === 'loom-nlc') {
      const addon = path.join(repo, 'build', 'bin', 'loom_node.node');
      if (!process.env.LOOM_NODE_ADDON && fs.existsSync(addon)) process.env.LOOM_NODE_ADDON = addon;
      pkg = path.join(repo, 'bindings', 'node');
      nlc = (await import(pathToFileURL(path.join(pkg, 'lib', 'node-llama-cpp.js')).href)).default;
    } else {
      pkg = path.join(spec.dir, 'node_modules', 'node-llama-cpp');
      nlc = await import(pathToFileURL(path.join(pkg, 'dist', 'index.js')).href);
    }
    const llama = await nlc.getLlama({
      gpu: false, build: 'never', usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
      logLevel: nlc.LlamaLogLevel.error, maxThreads: threads,
    });
    const m = await llama.loadModel({ modelPath: model, gpuLayers: 0 });
    // contextSize is per sequence: the same KV cells in all as the other engines' n_ctx.
    const c = await m.createContext({ contextSize: Math.floor(nCtx / P), sequences: P, batchSize: 512, threads: { ideal: threads, min: threads } });
    const seqs = Array.from({ length: P }, () => c.getSequence());
    const one = async (seq, stream) => {
      const rec = { n: 0, first: undefined, last: undefined };
      // Greedy, repeat penalty off (loom's penalty window counts the prompt too: the same options,
      // the same text on both packages).
      const options = {
        maxTokens: tokens, temperature: 0, repeatPenalty: false,
        onToken: (t) => {
          const now = performance.now();
          if (rec.first === undefined) rec.first = now;
          rec.last = now;
          rec.n += t.length;
        },
      };
      if (!stream) {
        // completion: LlamaCompletion.generateCompletion. No callback-free path in node-llama-cpp
        // (its sampling loop is JavaScript either way): a token callback only takes the time.
        const comp = new nlc.LlamaCompletion({ contextSequence: seq });
        await comp.generateCompletion(prompt, { ...options, customStopTriggers: [] });
      } else {
        // streaming: a chat app's path, LlamaChatSession.prompt with onTextChunk (a new session
        // each time; the text streamed as an app shows it).
        const session = new nlc.LlamaChatSession({ contextSequence: seq });
        await session.prompt(prompt, { ...options, onTextChunk: (s) => { rec.text = (rec.text || 0) + s.length; } });
        session.dispose();
      }
      rec.end = performance.now();
      return rec;
    };
    return {
      version: JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')).version,
      systemInfo: llama.systemInfo,
      detail: { build_type: llama.buildType, llama_cpp: llama.llamaCppRelease },
      reset: async () => {
        for (const s of seqs) await s.clearHistory();
      },
      run: (stream) => Promise.all(seqs.map((s) => one(s, stream))),
      close: async () => {
        await c.dispose();
        await m.dispose();
        await llama.dispose();
      },
    };
  }
  throw new Error(`unknown engine ${engine}`);
}

// ---- parent ---------------------------------------------------------------------------------

function parseArgs(argv) {
  const o = { threads: 2, tokens: 256, reps: 3, ctx: 2048, parallel: [1, 4], engines: ['cli', 'loom-node', 'loom-nlc', 'llama.node', 'node-llama-cpp'],
    install: true, json: false, verbose: false, logs: false, model: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const num = () => {
      const v = Number(argv[++i]);
      if (!Number.isInteger(v) || v < 0) usage(`${a} needs a whole number`);
      return v;
    };
    if (a === '--threads' || a === '-t') o.threads = num();
    else if (a === '--tokens' || a === '-n') o.tokens = num();
    else if (a === '--reps') o.reps = num();
    else if (a === '--ctx' || a === '-c') o.ctx = num();
    else if (a === '--parallel') o.parallel = String(argv[++i]).split(',').map(Number);
    else if (a === '--engines') o.engines = String(argv[++i]).split(',');
    else if (a === '--no-install') o.install = false;
    else if (a === '--json') o.json = true;
    else if (a === '--verbose') o.verbose = true;
    else if (a === '--logs') o.logs = true;
    else if (a === '-h' || a === '--help') usage();
    else if (a.startsWith('-')) usage(`unknown option ${a}`);
    else o.model = a;
  }
  if (!o.model) usage('no model');
  if (!fs.existsSync(o.model)) usage(`model not found: ${o.model}`);
  if (o.parallel.some((p) => !Number.isInteger(p) || p < 1)) usage('--parallel takes request counts, e.g. 1,4');
  const known = ['cli', 'loom-node', 'loom-nlc', 'llama.node', 'node-llama-cpp'];
  for (const e of o.engines) if (!known.includes(e)) usage(`unknown engine ${e} (known: ${known.join(', ')})`);
  if (o.reps < 1) usage('--reps must be at least 1');
  return o;
}

function usage(msg) {
  if (msg) console.error(`node-binding.mjs: ${msg}`);
  console.error('usage: node bench/node-binding.mjs MODEL.gguf [--threads 2] [--tokens 256] [--reps 3] [--ctx 2048]\n' +
    '         [--parallel 1,4] [--engines cli,loom-node,loom-nlc,llama.node,node-llama-cpp] [--no-install] [--json] [--verbose]');
  process.exit(msg ? 2 : 0);
}

function cpuInfo() {
  const info = {};
  try {
    const txt = fs.readFileSync('/proc/cpuinfo', 'utf8').split('\n\n')[0];
    for (const line of txt.split('\n')) {
      const [k, v] = line.split(/\s*:\s*/);
      if (k === 'model name') info.name = v;
      else if (k === 'cpu family') info.family = Number(v);
      else if (k === 'model') info.model = Number(v);
      else if (k === 'flags') {
        const f = new Set(v.split(' '));
        info.isa = ['avx2', 'avx512f', 'avx512_vnni', 'avx512_bf16', 'avx512_fp16', 'amx_tile'].filter((x) => f.has(x));
      }
    }
  } catch {
    info.name = os.cpus()[0]?.model;
  }
  info.cores = os.cpus().length;
  return info;
}

// Installs a peer's pinned packages into its cache folder when its entry is missing.
function ensureInstalled(what, dir, entry, pkgs, o) {
  if (fs.existsSync(path.join(dir, entry))) return null;
  if (!o.install) return `not installed in ${dir} (--no-install)`;
  try {
    fs.mkdirSync(dir, { recursive: true });
    console.error(`installing ${pkgs.join(' ')} into ${dir} ...`);
    execFileSync('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund', '--omit=optional', '--ignore-scripts', ...pkgs],
      { stdio: ['ignore', 'ignore', o.verbose ? 'inherit' : 'pipe'], env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true' }, timeout: 600_000 });
  } catch (err) {
    const lines = String(err.stderr || err.message).trim().split('\n');
    return `${what}: npm install failed (${lines.find((l) => /error (code|network)|ERR!/.test(l)) || lines[0]})`;
  }
  return fs.existsSync(path.join(dir, entry)) ? null : `${what}: installed, but ${entry} is missing`;
}

class Worker {
  constructor(spec, o) {
    this.spec = spec;
    this.o = o;
    this.stderr = '';
  }

  start() {
    this.child = fork(self, ['--worker', JSON.stringify(this.spec)], { stdio: ['ignore', this.o.logs ? 'inherit' : 'ignore', this.o.logs ? 'inherit' : 'pipe', 'ipc'] });
    this.child.stderr?.on('data', (d) => {
      this.stderr = (this.stderr + d).slice(-4000);
    });
    this.pending = null;
    this.child.on('message', (m) => {
      const p = this.pending;
      this.pending = null;
      p?.resolve(m);
    });
    this.child.on('exit', (code, sig) => {
      this.dead = true;
      const p = this.pending;
      this.pending = null;
      const tail = this.stderr.trim().split('\n').slice(-1)[0] || '';
      p?.resolve({ type: 'error', error: `worker exited (${sig || code})${tail ? `: ${tail}` : ''}` });
    });
    return this.next();
  }

  next() {
    return new Promise((resolve) => {
      this.pending = { resolve };
    });
  }

  async run(stream, lag = false) {
    if (this.dead) return { type: 'error', error: 'worker is gone' };
    const p = this.next();
    this.child.send({ op: 'run', stream, lag });
    return p;
  }

  async close() {
    if (this.dead) return;
    const done = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.send({ op: 'close' });
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await done;
    clearTimeout(timer);
  }
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const log = (s) => console.error(s);
  const loomBin = process.env.LOOM || path.join(repo, 'build', 'bin', 'loom');
  const cpu = cpuInfo();
  const load0 = os.loadavg();
  const started = new Date();

  // Bandwidth: loom bench's pass (same threads) and the bytes one decode step reads.
  let bw = null;
  try {
    bw = JSON.parse(execFileSync(loomBin, ['bench', '-m', o.model, '-t', String(o.threads), '-p', '8', '-n', '8', '-r', '1', '--json'],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
  } catch (err) {
    log(`loom bench failed (${err.message.split('\n')[0]}): no bandwidth figures`);
  }
  const gbs = (tps) => (bw ? (tps * bw.weight_bytes_per_token) / 1e9 : NaN);

  // The rows: one per engine, API and request count.
  const rows = [];
  const skipped = new Map();
  const want = (e) => o.engines.includes(e);
  const llamaNodeDir = process.env.LOOM_LLAMANODE_DIR || path.join(os.homedir(), '.cache', 'loom-peer-llamanode');
  const nlcDir = process.env.LOOM_PEER_DIR || path.join(os.homedir(), '.cache', 'loom-peer');
  const plat = `${process.platform}-${process.arch}`;
  if (want('llama.node')) {
    const why = ensureInstalled('llama.node', llamaNodeDir, path.join('node_modules', '@fugood', 'llama.node', 'package.json'),
      [`@fugood/llama.node@${LLAMANODE_VERSION}`, `@fugood/node-llama-${plat}@${LLAMANODE_VERSION}`], o);
    if (why) skipped.set('llama.node', why);
  }
  if (want('node-llama-cpp')) {
    const why = ensureInstalled('node-llama-cpp', nlcDir, path.join('node_modules', 'node-llama-cpp', 'dist', 'index.js'),
      [`node-llama-cpp@${NLC_VERSION}`, `@node-llama-cpp/${plat}@${NLC_VERSION}`], o);
    if (why) skipped.set('node-llama-cpp', why);
  }
  for (const P of o.parallel) {
    const x = P > 1 ? ` ×${P}` : '';
    if (want('cli')) rows.push({ engine: 'cli', P, label: P > 1 ? `loom generate --parallel ${P} (one prompt, ${P} continuations)` : 'loom generate' });
    if (want('loom-node')) {
      rows.push({ engine: 'loom-node', api: 'completion', P, label: `loom-node completion()${x}` });
      if (P > 1) rows.push({ engine: 'loom-node', api: 'parallel', P, label: `loom-node parallel.completion()${x}` });
    }
    if (want('llama.node')) rows.push({ engine: 'llama.node', api: P > 1 ? 'parallel' : 'completion', P, dir: llamaNodeDir, label: `llama.node ${P > 1 ? 'parallel.completion()' : 'completion()'}${x}` });
    if (want('loom-nlc')) rows.push({ engine: 'loom-nlc', api: 'sequences', P, label: `loom-node/node-llama-cpp LlamaCompletion · LlamaChatSession${P > 1 ? ` ×${P} sequences` : ''}` });
    if (want('node-llama-cpp')) rows.push({ engine: 'node-llama-cpp', api: 'sequences', P, dir: nlcDir, label: `node-llama-cpp LlamaCompletion · LlamaChatSession${P > 1 ? ` ×${P} sequences` : ''}` });
  }
  for (const r of rows) {
    r.completion = [];
    r.stream = [];
    r.n = [];
    r.wall = [];
    if (skipped.has(r.engine)) r.skipped = skipped.get(r.engine);
  }

  // Workers, loaded one after another.
  for (const r of rows) {
    if (r.engine === 'cli' || r.skipped) continue;
    log(`loading ${r.label} ...`);
    r.worker = new Worker({ engine: r.engine, api: r.api, parallel: r.P, dir: r.dir, model: path.resolve(o.model), threads: o.threads, ctx: o.ctx, tokens: o.tokens }, o);
    const m = await r.worker.start();
    if (m.type === 'ready') Object.assign(r, { version: m.version, system_info: m.system_info, detail: m.detail });
    else {
      r.skipped = m.reason || m.error;
      r.worker = null;
    }
  }

  const runCli = (P) => {
    const a = ['generate', '-m', o.model, '-t', String(o.threads), '-c', String(o.ctx), '-n', String(o.tokens), '--temp', '0', '-p', prompt, '--json'];
    if (P > 1) a.push('--parallel', String(P));
    const out = JSON.parse(execFileSync(loomBin, a, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], maxBuffer: 64 << 20 }));
    // gen_wall_tps: from the prompt's end to the last token, sampling and detokenizing included,
    // which is what completion()'s predicted_per_second measures; gen_tps counts decode time only.
    if (P > 1) return { tps: out.timings.aggregate_tps, n: out.sequences.reduce((a, s) => a + s.ids.length, 0) };
    return { tps: out.timings.gen_wall_tps, decode: out.timings.gen_tps, n: out.ids.length };
  };

  // Rounds: every row once (without and with a token callback), in a rotating order.
  // loom generate and loom-node's completion() with as many requests run back to back (their
  // ratio is the binding's cost: taken a moment apart, not a slow peer's run apart), the one or
  // the other first in turn.
  const units = [];
  for (const r of rows.filter((x) => !x.skipped)) {
    const cli = r.engine === 'loom-node' && r.api === 'completion' && units.find((u) => u[0].engine === 'cli' && u[0].P === r.P);
    if (cli) cli.push(r);
    else units.push([r]);
  }
  const loadRounds = [];
  for (let round = 0; round <= o.reps; round++) {
    loadRounds.push(Number(os.loadavg()[0].toFixed(2)));
    log(`round ${round}${round === 0 ? ' (warm-up)' : ''} of ${o.reps}, load ${os.loadavg()[0].toFixed(2)}`);
    const order = units.flatMap((_, i) => {
      const u = units[(i + round) % units.length];
      return round % 2 ? [...u].reverse() : u;
    });
    for (const r of order) {
      if (r.skipped) continue;
      if (r.engine === 'cli') {
        try {
          const c = runCli(r.P);
          if (o.verbose) log(`  ${r.label}: ${JSON.stringify(c)}`);
          if (round > 0) {
            r.completion.push(c.tps);
            r.n.push(c.n);
            if (c.decode) (r.decode ??= []).push(c.decode);
          }
        } catch (err) {
          r.skipped = `loom generate failed: ${err.message.split('\n')[0]}`;
        }
        continue;
      }
      for (const stream of [false, true]) {
        const m = await r.worker.run(stream);
        if (m.type !== 'result') {
          r.skipped = `failed: ${m.error}`;
          break;
        }
        if (o.verbose) log(`  ${r.label} ${stream ? 'streaming' : 'completion'}: ${JSON.stringify(m.result)}`);
        if (round === 0) continue;
        (stream ? r.stream : r.completion).push(m.result.tps);
        r.n.push(m.result.n);
        r.wall.push(m.result.wall_tps);
      }
    }
  }

  // Timer lag: one run of each row with a 1 ms interval timer, without and with a token callback.
  log('timer lag runs ...');
  for (const r of rows) {
    if (!r.worker || r.skipped) continue;
    r.lag = {};
    for (const stream of [false, true]) {
      const m = await r.worker.run(stream, true);
      if (m.type === 'result') r.lag[stream ? 'stream' : 'completion'] = { ...m.result.lag, tps: m.result.tps };
    }
  }
  for (const r of rows) if (r.worker) await r.worker.close();
  const load1 = os.loadavg();

  // loom-node completion() against loom generate, paired per round (the 3 % target).
  const cli1 = rows.find((r) => r.engine === 'cli' && r.P === 1 && !r.skipped);
  const ln1 = rows.find((r) => r.engine === 'loom-node' && r.P === 1 && !r.skipped);
  let check = null;
  if (cli1 && ln1 && cli1.completion.length && ln1.completion.length) {
    const k = Math.min(cli1.completion.length, ln1.completion.length);
    const ratios = Array.from({ length: k }, (_, i) => ln1.completion[i] / cli1.completion[i]);
    const st = stats(ratios);
    const ofMedians = median(ln1.completion) / median(cli1.completion);
    check = { target: 0.97, paired: st, of_medians: ofMedians, pass: st.median >= 0.97 };
  }

  const summary = (r) => ({
    label: r.label, engine: r.engine, api: r.api, parallel: r.P, version: r.version, system_info: r.system_info, detail: r.detail,
    skipped: r.skipped,
    completion_tps: stats(r.completion), stream_tps: r.engine === 'cli' ? undefined : stats(r.stream),
    decode_only_tps: r.decode ? stats(r.decode) : undefined, wall_tps_incl_prompt: r.wall.length ? stats(r.wall) : undefined,
    tokens_generated: r.n.length ? { min: Math.min(...r.n), max: Math.max(...r.n), asked: o.tokens * r.P } : undefined,
    decode_gbs: r.P === 1 ? gbs(median(r.completion)) : undefined, lag_ms: r.lag,
  });
  const report = {
    model: path.basename(o.model), threads: o.threads, tokens: o.tokens, reps: o.reps, ctx: o.ctx, parallel: o.parallel,
    date: started.toISOString(), seconds: Math.round((Date.now() - started) / 1000), cpu,
    load_avg: { start: load0, rounds: loadRounds, end: load1 },
    bandwidth: bw ? { read_gbps: bw.mem_bw_gbps, kernel: bw.mem_bw_kernel, weight_bytes_per_token: bw.weight_bytes_per_token } : null,
    rows: rows.map(summary), check,
  };
  if (o.json) {
    console.log(JSON.stringify(report, null, 2));
    return;
  }

  const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '-');
  const rng = (s) => (Number.isFinite(s.median) ? `${f(s.median)} (${f(s.min)}–${f(s.max)})` : '-');
  console.log(`model ${report.model}, ${o.threads} threads, ${o.tokens} tokens a request, median (min–max) of ${o.reps} after a warm-up; ` +
    `CPU ${cpu.name} (family ${cpu.family} model ${cpu.model}; ${cpu.isa?.join(' ')}), ${cpu.cores} cores, ` +
    `1-min load ${f(load0[0], 2)} at the start, ${loadRounds.map((l) => f(l, 2)).join(' / ')} at each round's start, ${f(load1[0], 2)} at the end`);
  if (bw) console.log(`read bandwidth ${bw.mem_bw_gbps} GB/s (${bw.mem_bw_kernel}), ${(bw.weight_bytes_per_token / 1e6).toFixed(1)} MB of weights per token`);
  console.log('| engine | completion tok/s | × loom generate | streaming tok/s | decode GB/s | timer lag p99 / max (ms), completion · streaming | tokens |');
  console.log('|---|---|---|---|---|---|---|');
  for (const P of o.parallel) {
    const ref = rows.find((r) => r.engine === 'cli' && r.P === P && !r.skipped);
    const refT = ref ? median(ref.completion) : NaN;
    for (const r of rows.filter((x) => x.P === P)) {
      const name = `${r.label}${r.version ? ` ${r.version}` : ''}`;
      if (r.skipped) {
        console.log(`| ${name} | skipped: ${r.skipped} | | | | | |`);
        continue;
      }
      const s = summary(r);
      const lag = (l) => (l ? `${f(l.p99, 2)} / ${f(l.max, 2)}` : '-');
      const lagCol = r.engine === 'cli' ? '-' : `${lag(r.lag?.completion)} · ${lag(r.lag?.stream)}`;
      const rel = median(r.completion) / refT;
      const ratio = r.engine === 'cli' ? '1.00×' : Number.isFinite(rel) ? `${f(rel, 3)}×` : '-';
      const n = s.tokens_generated ? (s.tokens_generated.min === s.tokens_generated.max ? `${s.tokens_generated.min}` : `${s.tokens_generated.min}–${s.tokens_generated.max}`) : '-';
      console.log(`| ${name} | ${rng(s.completion_tps)} | ${ratio} | ${s.stream_tps ? rng(s.stream_tps) : '-'} | ${f(s.decode_gbs, 2)} | ${lagCol} | ${n} |`);
      if (s.decode_only_tps) console.log(`| loom generate, decode time only (gen_tps) | ${rng(s.decode_only_tps)} | ${f(s.decode_only_tps.median / refT, 3)}× | - | ${f(gbs(s.decode_only_tps.median), 2)} | - | |`);
    }
  }
  if (check) {
    console.log(`loom-node completion() / loom generate, paired per round: ${f(check.paired.median, 3)}× (${f(check.paired.min, 3)}–${f(check.paired.max, 3)}); ` +
      `of the medians ${f(check.of_medians, 3)}×: ${check.pass ? 'within' : 'NOT within'} 3 %`);
  }
  for (const r of rows) {
    if (r.system_info && r.P === o.parallel[0]) console.log(`${r.engine} system info: ${String(r.system_info).trim().replace(/\s+/g, ' ')}`);
  }
}

// Last: the class above is not hoisted.
if (process.argv[2] === '--worker') await worker(JSON.parse(process.argv[3]));
else await main();
