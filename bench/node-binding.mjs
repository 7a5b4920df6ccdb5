// loom-node's cost over the engine, and its peer, side by side in one run:
//   - `loom generate` (the CLI, no JavaScript) — the binding must be within 3 % of it;
//   - loom-node's completion() (bindings/node) on the same model, threads and length, without and
//     with a token callback (streaming);
//   - node-llama-cpp's LlamaCompletion (the peer JavaScript users run today; its prebuilt
//     llama.cpp from ../shared/bench/peer-bench.mjs's install in $LOOM_PEER_DIR, when present);
// plus the event loop's timer lag while loom-node generates (a 1 ms interval timer), and the
// decode bandwidth (weight bytes per token x tok/s) against the machine's read bandwidth measured
// in the same run by `loom bench`.
//
//   node bench/node-binding.mjs MODEL.gguf [--threads 2] [--tokens 256] [--reps 3] [--ctx 2048]
//
// Greedy; loom-node and node-llama-cpp ignore EOS so every run generates --tokens tokens (loom
// generate has no such switch: its tok/s is over what it generated, printed beside it).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const model = args.find((a) => !a.startsWith('--'));
if (!model) {
  console.error('usage: node bench/node-binding.mjs MODEL.gguf [--threads 2] [--tokens 256] [--reps 3] [--ctx 2048]');
  process.exit(2);
}
const opt = (k, d) => {
  const i = args.indexOf(`--${k}`);
  return i >= 0 ? Number(args[i + 1]) : d;
};
const threads = opt('threads', 2), tokens = opt('tokens', 256), reps = opt('reps', 3), nCtx = opt('ctx', 2048);
const prompt = 'Once upon a time, there was a little girl who lived in a village near the forest.';
const loomBin = process.env.LOOM || path.join(repo, 'build', 'bin', 'loom');
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

// Bandwidth: loom bench's pass (same threads) and the bytes one decode step reads.
const bw = JSON.parse(execFileSync(loomBin, ['bench', '-m', model, '-t', String(threads), '-p', '8', '-n', '8', '-r', '1', '--json'],
  { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
const gbs = (tps) => (tps * bw.weight_bytes_per_token) / 1e9;

// The three engines run interleaved, one repetition of each in turn (a noisy machine then slows
// all of them alike); the first repetition warms caches and is not counted.
function runCli() {
  const out = JSON.parse(execFileSync(loomBin, ['generate', '-m', model, '-t', String(threads), '-c', String(nCtx), '-n', String(tokens),
    '--temp', '0', '-p', prompt, '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
  // gen_wall_tps: from the prompt's end to the last token, sampling and detokenizing included,
  // which is what completion()'s predicted_per_second measures; gen_tps counts decode time only.
  return { tps: out.timings.gen_wall_tps, decode: out.timings.gen_tps, n: out.ids.length };
}

const { loadModel } = await import(pathToFileURL(path.join(repo, 'bindings', 'node', 'lib', 'index.js')).href);
const ctx = await loadModel({ model, n_ctx: nCtx, n_threads: threads });
const lags = [];
// Speed runs have nothing else on the event loop (as the CLI has nothing else); a separate run
// measures the timer lag with a 1 ms interval timer beside the generation.
async function runNode(withTimer = false, streaming = false) {
  let last = performance.now();
  const timer = withTimer
    ? setInterval(() => {
        const now = performance.now();
        lags.push(now - last - 1);
        last = now;
      }, 1)
    : null;
  const t0 = performance.now();
  let streamed = 0;
  const onToken = streaming ? (t) => { streamed += t.token.length; } : undefined;
  const res = await ctx.completion({ prompt, n_predict: tokens, temperature: 0, ignore_eos: true, cache_prompt: false }, onToken);
  const wall = (performance.now() - t0) / 1000;
  if (timer) clearInterval(timer);
  return { tps: res.timings.predicted_per_second, wall: res.tokens_predicted / wall };
}

// node-llama-cpp (the peer), when installed.
let peer = null;
const peerDir = process.env.LOOM_PEER_DIR || path.join(os.homedir(), '.cache', 'loom-peer');
const peerPkg = path.join(peerDir, 'node_modules', 'node-llama-cpp');
let runPeer = null;
if (fs.existsSync(peerPkg)) {
  try {
    const nlc = await import(pathToFileURL(path.join(peerPkg, 'dist', 'index.js')).href);
    const llama = await nlc.getLlama({ gpu: false, logLevel: 'error' });
    const m = await llama.loadModel({ modelPath: model });
    const c = await m.createContext({ contextSize: nCtx, threads, batchSize: 512 });
    const seq = c.getSequence();
    peer = { version: JSON.parse(fs.readFileSync(path.join(peerPkg, 'package.json'), 'utf8')).version, runs: [], dispose: async () => { await c.dispose(); await m.dispose(); } };
    runPeer = async () => {
      await seq.clearHistory();
      const comp = new nlc.LlamaCompletion({ contextSequence: seq });
      let n = 0, tFirst = 0;
      await comp.generateCompletion(prompt, {
        maxTokens: tokens, temperature: 0, customStopTriggers: [],
        onToken: (t) => {
          if (n === 0) tFirst = performance.now();
          n += t.length;
        },
      });
      // Generation rate after the first token (the prompt is not counted), as loom's timings.
      return n > 1 ? (n - 1) / ((performance.now() - tFirst) / 1000) : NaN;
    };
  } catch (err) {
    peer = { error: err.message };
  }
}

const cli = [], cliDecode = [], node = [], nodeWall = [], nodeStream = [];
let cliTokens = 0;
for (let r = 0; r < reps + 1; r++) {
  const c = runCli();
  const n = await runNode();
  const ns = await runNode(false, true);
  const p = runPeer ? await runPeer() : NaN;
  if (r === 0) continue;
  cli.push(c.tps);
  cliDecode.push(c.decode);
  cliTokens = c.n;
  node.push(n.tps);
  nodeWall.push(n.wall);
  nodeStream.push(ns.tps);
  if (runPeer) peer.runs.push(p);
}
const lagRun = await runNode(true);
let maxLag = 0;
for (const l of lags) maxLag = Math.max(maxLag, l);
const p99 = [...lags].sort((a, b) => a - b)[Math.floor(lags.length * 0.99)] ?? 0;
await ctx.release();
if (peer?.runs) {
  peer.tps = median(peer.runs);
  await peer.dispose();
}

const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '-');
console.log(`model ${path.basename(model)}, ${threads} threads, ${tokens} tokens, median of ${reps}; ` +
  `read bandwidth ${bw.mem_bw_gbps} GB/s (${bw.mem_bw_kernel}), ${(bw.weight_bytes_per_token / 1e6).toFixed(1)} MB of weights per token`);
console.log('| engine | tg tok/s | decode GB/s | vs loom generate |');
console.log('|---|---|---|---|');
const cliT = median(cli);
console.log(`| loom generate (CLI, ${cliTokens} tokens) | ${f(cliT)} | ${f(gbs(cliT), 2)} | 1.00x |`);
const cliD = median(cliDecode);
console.log(`| loom generate, decode time only (no sampling) | ${f(cliD)} | ${f(gbs(cliD), 2)} | ${f(cliD / cliT, 3)}x |`);
const nT = median(node), nW = median(nodeWall);
console.log(`| loom-node completion() | ${f(nT)} | ${f(gbs(nT), 2)} | ${f(nT / cliT, 3)}x |`);
console.log(`| loom-node, wall clock incl. prompt and JS | ${f(nW)} | ${f(gbs(nW), 2)} | ${f(nW / cliT, 3)}x |`);
const nS = median(nodeStream);
console.log(`| loom-node completion() streaming (onToken per token) | ${f(nS)} | ${f(gbs(nS), 2)} | ${f(nS / cliT, 3)}x |`);
if (peer?.tps) console.log(`| node-llama-cpp ${peer.version} LlamaCompletion | ${f(peer.tps)} | ${f(gbs(peer.tps), 2)} | ${f(peer.tps / cliT, 3)}x |`);
else console.log(`| node-llama-cpp | - | - | ${peer?.error ? `error: ${peer.error}` : `not installed (node ../shared/bench/peer-bench.mjs installs it in ${peerDir})`} |`);
console.log(`event loop while loom-node generates: timer lag p99 ${f(p99, 2)} ms, max ${f(maxLag, 2)} ms ` +
  `(1 ms interval, ${lags.length} ticks; that run: ${f(lagRun.tps)} tok/s)`);
