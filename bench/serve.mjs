#!/usr/bin/env node
// loom serve vs llama-server, side by side in one run, on loopback with bounded traffic.
//
//   node bench/serve.mjs MODEL.gguf [--llama-server PATH] [--slots 8] [--ctx 8192] [--threads 2]
//                        [--workloads streams,prefix,multiturn] [--streams 1,4,8] [--requests 3]
//                        [--max-tokens 128] [--json OUT.json]
//
// Both servers get the same model, slots (-np), total context (-c), threads and port kind; they
// run one after the other (never at the same time: 2 cores), each workload against both before
// the next one, and the table prints the ratio loom / llama-server.
// Workloads (all greedy, ignore_eos so every request generates max_tokens):
//   streams    N concurrent clients, each sending --requests (3) streamed completions back to back
//              (a ~48-token prompt each, different per request; client c starts c x stagger / N ms
//              late, --stagger-ms 1000): aggregate generated tok/s, p50/p95 time to first token and
//              inter-token latency (client side, from SSE chunks);
//   prefix     16 chat requests with one ~400-token system prompt and distinct questions, sent 4
//              at a time: mean / p95 time to first token, prefix tokens reused;
//   multiturn  a 6-turn chat that resends its history each turn: TTFT per turn, turn 4 against a cold
//              prefill of its whole prompt (cache_prompt false: turn4_ratio), and the fraction
//              of prompt tokens served from the cache (timings.cache_n / prompt tokens);
//   memory     resident size (VmRSS / VmHWM) of each server after the runs;
//   bandwidth  the machine's read bandwidth (loom bench's pass) and, for one stream, the decode GB/s
//              (weight bytes per step x tok/s) of both servers.
// llama-server is built by ../shared/tools/build-llama-cpp.sh (found in ~/.cache/loom-llama-cpp
// by default).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');

function parseArgs(argv) {
  const o = {
    model: null, llamaServer: path.join(os.homedir(), '.cache/loom-llama-cpp/build/bin/llama-server'),
    loom: process.env.LOOM || path.join(repo, 'build/bin/loom'), slots: 8, ctx: 8192, threads: 2,
    workloads: ['streams', 'prefix', 'multiturn'], streams: [1, 4, 8], requests: 3, maxTokens: 128, json: null, stagger: 1000,
    engines: ['loom', 'llama'],
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = () => argv[++i];
    if (a === '--llama-server') o.llamaServer = v();
    else if (a === '--loom') o.loom = v();
    else if (a === '--slots') o.slots = Number(v());
    else if (a === '--ctx') o.ctx = Number(v());
    else if (a === '--threads') o.threads = Number(v());
    else if (a === '--workloads') o.workloads = v().split(',');
    else if (a === '--streams') o.streams = v().split(',').map(Number);
    else if (a === '--requests') o.requests = Number(v());
    else if (a === '--max-tokens') o.maxTokens = Number(v());
    else if (a === '--json') o.json = v();
    else if (a === '--stagger-ms') o.stagger = Number(v());
    else if (a === '--engines') o.engines = v().split(',');
    else if (!o.model) o.model = a;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.model) {
    console.error('usage: node bench/serve.mjs MODEL.gguf [--llama-server PATH] [--slots 8] [--ctx 8192] [--threads 2] ...');
    process.exit(2);
  }
  return o;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * (s.length - 1) + 0.5))];
};
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

async function startEngine(kind, o) {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const common = ['-m', o.model, '--host', '127.0.0.1', '--port', String(port), '-np', String(o.slots), '-c', String(o.ctx),
    '-t', String(o.threads)];
  let bin, args;
  if (kind === 'loom') {
    bin = o.loom;
    args = ['serve', ...common];
  } else {
    bin = o.llamaServer;
    // Same settings: continuous batching and prompt caching are llama-server's defaults; -tb too.
    args = [...common, '-tb', String(o.threads), '--no-webui'];
  }
  if (!fs.existsSync(bin)) throw new Error(`${bin} not found${kind === 'llama' ? ' (build it with ../shared/tools/build-llama-cpp.sh)' : ''}`);
  const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; if (log.length > 1e6) log = log.slice(-5e5); });
  const url = `http://127.0.0.1:${port}`;
  const t0 = Date.now();
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`${kind} exited:\n${log.slice(-3000)}`);
    try {
      if ((await fetch(`${url}/health`)).status === 200) break;
    } catch { /* starting */ }
    if (Date.now() - t0 > 120000) throw new Error(`${kind} did not become healthy`);
    await sleep(100);
  }
  return {
    kind, url, proc,
    rss() {
      const s = fs.readFileSync(`/proc/${proc.pid}/status`, 'utf8');
      const kb = (k) => Number((s.match(new RegExp(`${k}:\\s+(\\d+)`)) || [0, 0])[1]);
      return { rss_mb: kb('VmRSS') / 1024, hwm_mb: kb('VmHWM') / 1024 };
    },
    async stop() {
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 15000);
      await new Promise((r) => proc.once('exit', r));
      clearTimeout(t);
    },
  };
}

// Calls onData(json) for every SSE data payload of a response (not "[DONE]").
async function readSSE(r, onData) {
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (line.startsWith('data: ') && line !== 'data: [DONE]') onData(JSON.parse(line.slice(6)));
    }
  }
}

// One streamed completion; returns client-side timings.
async function streamed(url, body) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }),
  });
  if (r.status !== 200) return { ok: false, status: r.status, text: await r.text() };
  let first = null, last = null, n = 0;
  const gaps = [];
  await readSSE(r, (j) => {
    const text = j.choices?.[0]?.text ?? j.content;
    if (!text) return;
    const now = performance.now();
    if (first === null) first = now;
    else gaps.push(now - last);
    last = now;
    n++;
  });
  return { ok: true, ttft: first === null ? NaN : first - t0, gaps, chunks: n, end: performance.now() - t0 };
}

async function chat(url, messages, max_tokens, extra = {}) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages, max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true }, ignore_eos: true, ...extra }),
  });
  if (r.status !== 200) return { ok: false, status: r.status };
  let first = null, text = '', usage = null, timings = null;
  await readSSE(r, (j) => {
    if (j.usage) usage = j.usage;
    if (j.timings) timings = j.timings;
    const d = j.choices?.[0]?.delta?.content;
    if (d) {
      if (first === null) first = performance.now();
      text += d;
    }
  });
  return { ok: true, ttft: first === null ? NaN : first - t0, text, usage, timings };
}

// Distinct 48-token-ish prompts (random words: the models have random weights).
const WORDS = 'the a cat dog park ball ran sat big small red blue tree house sun moon girl boy mom dad played jumped happy sad'.split(' ');
function prompt(seed, words = 40) {
  let x = seed * 2654435761 % 4294967296;
  const out = [];
  for (let i = 0; i < words; i++) { x = (x * 1103515245 + 12345) % 2147483648; out.push(WORDS[x % WORDS.length]); }
  return out.join(' ');
}

async function wlStreams(e, o, n) {
  let seed = 1000 * n;
  const t0 = performance.now();
  // Clients start staggered over the first request's expected duration (independent users do
  // not arrive in the same millisecond), so most requests arrive while other streams decode.
  const stagger = o.stagger / Math.max(1, n);
  const results = await Promise.all(Array.from({ length: n }, async (_, c) => {
    await sleep(c * stagger);
    const rs = [];
    for (let k = 0; k < o.requests; k++) {
      rs.push(await streamed(e.url, { prompt: prompt(++seed), max_tokens: o.maxTokens, temperature: 0, ignore_eos: true }));
    }
    return rs;
  }));
  const wall = (performance.now() - t0) / 1000;
  const all = results.flat();
  const ok = all.filter((r) => r.ok);
  const tokens = ok.reduce((s, r) => s + r.chunks, 0);
  return {
    failed: all.length - ok.length, tokens, wall_s: wall, agg_tps: tokens / wall,
    ttft_p50: pct(ok.map((r) => r.ttft), 0.5), ttft_p95: pct(ok.map((r) => r.ttft), 0.95),
    itl_p50: pct(ok.flatMap((r) => r.gaps), 0.5), itl_p95: pct(ok.flatMap((r) => r.gaps), 0.95),
  };
}

const SYSTEM = Array.from({ length: 8 }, (_, i) => prompt(77 + i, 40)).join('. ');  // ~400 tokens

async function wlPrefix(e) {
  const qs = Array.from({ length: 16 }, (_, i) => `Question ${i}: ${prompt(500 + i, 8)}?`);
  const out = [];
  let next = 0;
  await Promise.all(Array.from({ length: 4 }, async () => {
    while (next < qs.length) {
      const q = qs[next++];
      out.push(await chat(e.url, [{ role: 'system', content: SYSTEM }, { role: 'user', content: q }], 16));
    }
  }));
  const ok = out.filter((r) => r.ok);
  const cached = ok.reduce((s, r) => s + (r.timings?.cache_n ?? r.usage?.prompt_tokens_details?.cached_tokens ?? 0), 0);
  const prompt_tokens = ok.reduce((s, r) => s + (r.usage?.prompt_tokens ?? 0), 0);
  return { failed: out.length - ok.length, ttft_mean: mean(ok.map((r) => r.ttft)), ttft_p95: pct(ok.map((r) => r.ttft), 0.95),
    cached_tokens: cached, prompt_tokens };
}

async function wlMultiturn(e) {
  const messages = [{ role: 'system', content: 'You are a storyteller. ' + prompt(9, 30) }];
  const ttfts = [];
  let cached = 0, total = 0, failed = 0, turn4 = NaN, turn4_cold = NaN, turn4_prompt = 0, turn4_cached = 0;
  for (let t = 0; t < 6; t++) {
    messages.push({ role: 'user', content: `Turn ${t}: ${prompt(300 + t, 20)}` });
    const r = await chat(e.url, messages, 48);
    if (!r.ok) { failed++; break; }
    if (t === 3) {
      // Turn 4's whole prompt again without the cache: what the turn would cost cold.
      const cold = await chat(e.url, messages, 1, { cache_prompt: false });
      turn4 = r.ttft;
      turn4_cold = cold.ok ? cold.ttft : NaN;
      turn4_prompt = r.usage?.prompt_tokens ?? 0;
      turn4_cached = r.timings?.cache_n ?? r.usage?.prompt_tokens_details?.cached_tokens ?? 0;
    }
    messages.push({ role: 'assistant', content: r.text });
    ttfts.push(r.ttft);
    if (t > 0) {
      total += r.usage?.prompt_tokens ?? 0;
      cached += r.timings?.cache_n ?? r.usage?.prompt_tokens_details?.cached_tokens ?? 0;
    }
  }
  return { failed, ttft_mean: mean(ttfts), hit_rate: total ? cached / total : NaN, turn4_ttft: turn4,
           turn4_cold_ttft: turn4_cold, turn4_ratio: turn4 / turn4_cold, turn4_prompt, turn4_cached };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const load = fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  console.log(`model ${path.basename(o.model)}, slots ${o.slots}, ctx ${o.ctx}, threads ${o.threads}; load average before: ${load}`);
  const res = {};
  for (const kind of o.engines) res[kind] = {};
  const tasks = [];
  if (o.workloads.includes('streams')) for (const n of o.streams) tasks.push([`streams${n}`, (e) => wlStreams(e, o, n)]);
  if (o.workloads.includes('prefix')) tasks.push(['prefix', wlPrefix]);
  if (o.workloads.includes('multiturn')) tasks.push(['multiturn', wlMultiturn]);
  // Each workload on a fresh server of each engine, loom and llama-server alternately.
  for (const [name, fn] of tasks) {
    for (const kind of o.engines) {
      const e = await startEngine(kind, o);
      try {
        // Warm-up: page the weights in and settle the thread pool.
        await streamed(e.url, { prompt: 'warm up', max_tokens: 8, temperature: 0, ignore_eos: true });
        res[kind][name] = await fn(e);
        res[kind][name].mem = e.rss();
      } finally {
        await e.stop();
      }
      process.stdout.write(`  ${name} ${kind}: ${JSON.stringify(res[kind][name])}\n`);
    }
  }
  // The machine's read bandwidth, measured in the same run (loom bench's pass, same threads).
  let bw = null;
  try {
    const out = execFileSync(o.loom, ['bench', '-m', o.model, '-t', String(o.threads), '-p', '8', '-n', '8', '-r', '1', '--json'],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    bw = JSON.parse(out);
    console.log(`memory read bandwidth ${bw.mem_bw_gbps} GB/s (${o.threads} threads, ${bw.mem_bw_kernel}); weights ${(bw.weight_bytes_per_token / 1e6).toFixed(1)} MB per decode step`);
  } catch (err) {
    console.log(`(no bandwidth pass: ${err.message.split('\n')[0]})`);
  }
  const L = res.loom, P = res.llama;
  const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '-');
  const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b ? (a / b).toFixed(2) + 'x' : '-');
  console.log('\n| workload | metric | loom | llama-server | ratio |\n|---|---|---|---|---|');
  for (const [name] of tasks) {
    const l = L?.[name], p = P?.[name];
    if (!l) continue;
    const row = (metric, key, d = 1) => console.log(`| ${name} | ${metric} | ${f(l[key], d)} | ${f(p?.[key], d)} | ${ratio(l[key], p?.[key])} |`);
    if (name.startsWith('streams')) {
      row('aggregate tok/s', 'agg_tps');
      row('TTFT p50 ms', 'ttft_p50');
      row('TTFT p95 ms', 'ttft_p95');
      row('ITL p50 ms', 'itl_p50');
      row('ITL p95 ms', 'itl_p95');
      row('failed', 'failed', 0);
      // One stream reads every weight once per token: weights x tok/s is the decode bandwidth.
      if (name === 'streams1' && bw) {
        const gb = (x) => (x * bw.weight_bytes_per_token) / 1e9;
        console.log(`| ${name} | decode GB/s (weights x tok/s) | ${f(gb(l.agg_tps), 2)} | ${f(p ? gb(p.agg_tps) : NaN, 2)} | ${ratio(l.agg_tps, p?.agg_tps)} |`);
      }
    } else if (name === 'prefix') {
      row('mean TTFT ms', 'ttft_mean');
      row('TTFT p95 ms', 'ttft_p95');
      row('cached prompt tokens', 'cached_tokens', 0);
    } else {
      row('mean TTFT ms', 'ttft_mean');
      row('prefix hit rate', 'hit_rate', 3);
    }
    console.log(`| ${name} | RSS MB (peak) | ${f(l.mem?.hwm_mb)} | ${f(p?.mem?.hwm_mb)} | ${ratio(l.mem?.hwm_mb, p?.mem?.hwm_mb)} |`);
  }
  if (o.json) fs.writeFileSync(o.json, JSON.stringify({ options: o, load, results: res }, null, 2));
}

main().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
