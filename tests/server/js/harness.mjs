// Starts `loom serve` on a free loopback port for a test and stops it afterwards.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '../../..');
export const loomBin = process.env.LOOM_BIN || path.join(repo, 'build/bin/loom');
export const shared = process.env.LOOM_SHARED || path.resolve(repo, '../shared');

export function sharedPath(rel) {
  const p = path.join(shared, rel);
  if (!fs.existsSync(p)) {
    throw new Error(`missing shared test data ${p}: put the shared folder at ../shared beside the repository or set LOOM_SHARED`);
  }
  return p;
}

// A file of the repository's own test data (tests/data).
export function dataPath(rel) {
  const p = path.join(repo, 'tests/data', rel);
  if (!fs.existsSync(p)) throw new Error(`missing test data ${p}`);
  return p;
}

// FNV-1a 64 of a file with the basis tests/model/model_test_util.h's generated_model uses, as a
// BigInt (two 32-bit halves: exact in doubles).
function fnv1a64(file) {
  const buf = fs.readFileSync(file);
  let hi = 0x14650fb0, lo = 0x739d0383;
  for (let i = 0; i < buf.length; i++) {
    lo = (lo ^ buf[i]) >>> 0;
    const a = lo * 0x1b3;  // times 1099511628211 = 2^40 + 0x1b3, modulo 2^64
    hi = (hi * 0x1b3 + Math.floor(a / 4294967296) + ((lo << 8) >>> 0)) >>> 0;
    lo = a >>> 0;
  }
  return (BigInt(hi) << 32n) | BigInt(lo);
}

// A synthetic model too large to commit (tests/data holds only its goldens), as generated_model of
// tests/model/model_test_util.h makes it: `make_arch_variant ARCH` of the build (binDir, where
// `loom` is) on ../shared's stories260K.gguf into <build>/testdata/NAME.gguf on first use, then
// checked by size and hash (fnv a BigInt). Throws when it cannot be made or differs.
export function generatedModel(name, arch, size, fnv, binDir = path.dirname(loomBin)) {
  const dir = path.join(binDir, '..', 'testdata');
  const out = path.join(dir, `${name}.gguf`);
  const same = () => fs.existsSync(out) && fs.statSync(out).size === size && fnv1a64(out) === fnv;
  if (!same()) {
    const tool = path.join(binDir, 'make_arch_variant');
    if (!fs.existsSync(tool)) throw new Error(`${tool} is missing: build it (it makes ${name}.gguf, which is not committed)`);
    fs.mkdirSync(dir, { recursive: true });
    const tmp = `${out}.tmp${process.pid}`;  // renamed when whole: tests running at once never see half a file
    execFileSync(tool, [arch, sharedPath('models/stories260K.gguf'), tmp], { stdio: ['ignore', 'ignore', 'inherit'] });
    fs.renameSync(tmp, out);
    if (!same()) throw new Error(`${out}: make_arch_variant ${arch} no longer makes the file the goldens were made from`);
  }
  return out;
}

// gemma3n's (23 MB): the file of tests/data/synth-gemma3n-tiny-f32.json's goldens.
export const gemma3nModel = (binDir) => generatedModel('synth-gemma3n-tiny-f32', 'gemma3n', 22895424, 0xc3ecb7e46b8cce77n, binDir);

export const golden = () => JSON.parse(fs.readFileSync(sharedPath('golden/stories260K.json'), 'utf8'));

// A running server: { url, port, proc, stderr(), stop() }. `model` is relative to ../shared;
// `modelPath` (e.g. dataPath(...)) is used as it is instead.
export async function startServer(args, { model = 'models/stories260K.gguf', modelPath = null, env = {}, waitReady = true } = {}) {
  if (!fs.existsSync(loomBin)) throw new Error(`${loomBin} is missing: build first (./scripts/build.sh)`);
  const argv = ['serve', '-m', modelPath ?? sharedPath(model), '--host', '127.0.0.1', '--port', '0', '-t', '2', ...args];
  const proc = spawn(loomBin, argv, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  let err = '';
  let exited = null;
  proc.on('exit', (code, signal) => { exited = { code, signal }; });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`loom serve did not start:\n${err}`)), 30000);
    proc.stderr.on('data', (d) => {
      err += d.toString();
      const m = err.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', () => { clearTimeout(timer); reject(new Error(`loom serve exited:\n${err}`)); });
  });
  const url = `http://127.0.0.1:${port}`;
  const server = {
    url, port, proc,
    stderr: () => err,
    exited: () => exited,
    async stop(signal = 'SIGTERM') {
      if (exited) return exited;
      const done = new Promise((r) => proc.once('exit', (code, sig) => r({ code, signal: sig })));
      proc.kill(signal);
      const t = setTimeout(() => proc.kill('SIGKILL'), 20000);
      const r = await done;
      clearTimeout(t);
      return r;
    },
  };
  if (waitReady) await waitHealthy(url, 60000);
  return server;
}

export async function waitHealthy(url, ms) {
  const t0 = Date.now();
  for (;;) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) return;
    } catch { /* not up yet */ }
    if (Date.now() - t0 > ms) throw new Error(`${url} not healthy after ${ms} ms`);
    await sleep(50);
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function post(url, pathname, body, headers = {}) {
  const r = await fetch(url + pathname, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

// Reads an SSE response into its data payloads (parsed JSON, or the string "[DONE]"); `named` has
// them with their "event:" names (null when a block has none).
export async function sse(url, pathname, body, { signal, onEvent } = {}) {
  const r = await fetch(url + pathname, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal,
  });
  const events = [];
  const named = [];
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of r.body) {
    buf += decoder.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let name = null;
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) name = line.slice(7);
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        const ev = data === '[DONE]' ? '[DONE]' : JSON.parse(data);
        events.push(ev);
        named.push({ event: name, data: ev });
        if (onEvent) onEvent(ev);
      }
    }
  }
  return { status: r.status, headers: r.headers, events, named };
}

// Prometheus text -> { name{labels}: value }.
export async function metrics(url, headers = {}) {
  const r = await fetch(`${url}/metrics`, { headers });
  const out = {};
  for (const line of (await r.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    out[line.slice(0, sp)] = Number(line.slice(sp + 1));
  }
  return out;
}

// A raw TCP connection: send bytes, read until close or timeout.
export function rawRequest(port, data, { timeout = 5000 } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    const t = setTimeout(() => { s.destroy(); resolve(got); }, timeout);
    s.on('data', (d) => { got += d.toString('latin1'); });
    s.on('close', () => { clearTimeout(t); resolve(got); });
    s.on('error', () => {});
    s.write(data);
  });
}
