// llama-server's command line under `loom serve` and under the names `llama-server` /
// `loom-llama-server` (a symlink to loom): implemented flags act, accepted ones are said once on
// stderr, refused ones stop the start with one line naming them (docs/serving.md, "llama-server's
// flags"; tools/cli/serve_flags.cpp).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import http from 'node:http';
import path from 'node:path';
import { startServer, post, loomBin, sharedPath, repo, waitHealthy } from './harness.mjs';

const model = () => sharedPath('models/stories260K.gguf');

// `loom serve ARGS` (or ARGV as given, with `bin`) run to its end: { status, stderr }.
function runToExit(args, { bin = loomBin, env = {}, serve = true } = {}) {
  const r = spawnSync(bin, serve ? ['serve', ...args] : args, {
    env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20000,
  });
  return { status: r.status, signal: r.signal, stderr: r.stderr ?? '', stdout: r.stdout ?? '' };
}

// A server started through a symlink named `name` in a temporary folder.
async function startAs(name, args, { env = {} } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-flags-'));
  const link = path.join(dir, name);
  fs.symlinkSync(loomBin, link);
  const proc = spawn(link, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  let err = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`${name} did not start:\n${err}`)); }, 30000);
    proc.stderr.on('data', (d) => {
      err += d.toString();
      const m = err.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', () => { clearTimeout(timer); reject(new Error(`${name} exited:\n${err}`)); });
  });
  const url = `http://127.0.0.1:${port}`;
  await waitHealthy(url, 60000);
  return {
    url, stderr: () => err,
    async stop() {
      const done = new Promise((r) => proc.once('exit', (code) => r(code)));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 20000);
      const code = await done;
      clearTimeout(t);
      fs.rmSync(dir, { recursive: true, force: true });
      return code;
    },
  };
}

async function chatWorks(url, modelName) {
  const r = await post(url, '/v1/chat/completions', {
    model: modelName, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, temperature: 0,
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.object, 'chat.completion');
  assert.ok(r.json.usage.completion_tokens >= 1);
}

const count = (text, re) => (text.match(re) ?? []).length;

test('loom serve with a llama-server command line: serves, accepted flags said once', async () => {
  const s = await startServer([
    '-c', '1024', '-np', '2', '-ngl', '99', '--n-gpu-layers', '99', '-fa', 'on', '--jinja', '--metrics',
    '--no-webui', '--alias', 'a,b', '--tags', 't1,t2', '-ub', '256', '-b', '512', '--threads-http', '2',
    '-to', '60', '-cram', '64', '-ctxcp', '4', '--cors-origins', '*', '--no-cors-credentials',
    '--reasoning', 'off', '--reasoning-format', 'none', '--reasoning-budget', '-1', '-n', '16',
    '--chat-template-kwargs', '{"x":1}', '--cont-batching', '--mlock', '--no-mmap', '--cache_prompt',
    '-ctk', 'f16', '-ctv', 'F16', '--no-jinja', '--no_jinja', '--sleep-idle-seconds', '-1', '--temp', '0.5', '--temp', '0.4',
  ]);
  try {
    const h = await fetch(`${s.url}/health`);
    assert.equal(h.status, 200);
    await chatWorks(s.url, 'a');
    const models = await (await fetch(`${s.url}/v1/models`)).json();
    assert.equal(models.data[0].id, 'a');
    const err = s.stderr();
    // -ngl and --n-gpu-layers are one flag: one note.
    assert.equal(count(err, /(-ngl|--n-gpu-layers) has no effect on a CPU server/g), 1, err);
    assert.equal(count(err, /-fa has no effect on a CPU server/g), 1, err);
    assert.equal(count(err, /--no-webui has no effect in loom/g), 1, err);
    assert.equal(count(err, /--temp/g), 0, err);  // a server-wide sampling default now
    assert.equal(count(err, /--no-jinja: loom renders the model's Jinja chat template anyway/g), 1, err);
    // Flags loom does (or always does) say nothing.
    for (const f of ['--jinja', '--metrics', '--cont-batching', '--sleep-idle-seconds', '--alias', '-cram']) {
      assert.ok(!err.includes(`loom: ${f} `), `${f} said something:\n${err}`);
    }
  } finally {
    await s.stop();
  }
});

test('--chat-template NAME or SOURCE is what /props reports', async () => {
  for (const [tmpl, expect] of [['chatml', '<|im_start|>'], ['llama3', '<|start_header_id|>'],
    ['{{ messages[0].content }}', '{{ messages[0].content }}']]) {
    const s = await startServer(['--chat-template', tmpl, '-c', '512', '-np', '1']);
    try {
      const props = await (await fetch(`${s.url}/props`)).json();
      assert.ok(props.chat_template.includes(expect), `${tmpl}: ${props.chat_template.slice(0, 200)}`);
      if (tmpl === 'llama3') assert.ok(!props.chat_template.includes('<|im_start|>'));
    } finally {
      await s.stop();
    }
  }
});

test('--lora a,b and --lora-init-without-apply: adapters listed, loaded with scale 0', async () => {
  const dir = sharedPath('golden/adapters');
  const s = await startServer(['--lora', `${dir}/lora-A.gguf,${dir}/lora-B.gguf`, '--lora-init-without-apply', '-np', '1', '-c', '512'],
    { modelPath: `${dir}/synth-llama-lorabase-f32.gguf` });
  try {
    const list = await (await fetch(`${s.url}/lora-adapters`)).json();
    assert.deepEqual(list.map((l) => [path.basename(l.path), l.scale]), [['lora-A.gguf', 0], ['lora-B.gguf', 0]]);
  } finally {
    await s.stop();
  }
});

test('started as llama-server (a symlink): llama-server argv, environment variables', async () => {
  const s = await startAs('llama-server', ['-m', model(), '--host', '127.0.0.1', '--port', '0', '-t', '2', '-c', '512',
    '-np', '1', '--no-mmproj', '--flash-attn', '--offline', '--log-colors'], { env: { LLAMA_ARG_ALIAS: 'from-env', LLAMA_ARG_N_GPU_LAYERS: '99' } });
  try {
    await chatWorks(s.url, 'from-env');
    const models = await (await fetch(`${s.url}/v1/models`)).json();
    assert.equal(models.data[0].id, 'from-env');
    assert.match(s.stderr(), /LLAMA_ARG_N_GPU_LAYERS \(--n-gpu-layers\) has no effect on a CPU server/);
    assert.match(s.stderr(), /--offline has no effect in loom/);
    assert.match(s.stderr(), /--flash-attn has no effect on a CPU server/);
  } finally {
    assert.equal(await s.stop(), 0);
  }
});

test('started as loom-llama-server: the same parser; without -m nor --models-dir / --models-preset, refused in one line', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-flags-'));
  try {
    const link = path.join(dir, 'loom-llama-server');
    fs.symlinkSync(loomBin, link);
    const r = runToExit(['--port', '0'], { bin: link, serve: false, env: { LLAMA_ARG_MODEL: '' } });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /-m FILE.*--models-dir.*--models-preset.*router mode/);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    const h = runToExit(['--help'], { bin: link, serve: false });
    assert.equal(h.status, 0);
    assert.match(h.stdout, /-ngl, --gpu-layers, --n-gpu-layers N/);
    const v = runToExit(['--version'], { bin: link, serve: false });
    assert.equal(v.status, 0);
    assert.match(v.stdout, /^loom /);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('refused flags and values exit non-zero with one line naming them', () => {
  const cases = [
    [['-hf', 'ggml-org/x-GGUF'], '-hf'],
    [['--hf-repo', 'ggml-org/x-GGUF'], '--hf-repo'],
    [['-mu', 'http://127.0.0.1:1/x.gguf'], '-mu'],
    [['--mmproj', 'mm.gguf'], '--mmproj'],
    [['-dr', 'gemma3'], '-dr'],
    [['--rope-scaling', 'yarn'], '--rope-scaling'],
    [['--ssl-key-file', 'k.pem'], '--ssl-key-file'],
    [['--tools', 'all'], '--tools'],
    [['--chat-template-kwargs', '[1]'], '--chat-template-kwargs'],
    [['--chat-template-kwargs', '{bad'], '--chat-template-kwargs'],
    [['-ctk', 'q5_1'], '-ctk'],
    [['-np', '0'], '-np'],
    [['--reasoning', 'maybe'], '--reasoning'],
    [['--no-such-flag'], '--no-such-flag'],
    [['-c'], '-c'],
  ];
  for (const [args, name] of cases) {
    const r = runToExit(['-m', model(), '--port', '0', ...args]);
    assert.notEqual(r.status, 0, `${args.join(' ')} started:\n${r.stderr}`);
    assert.ok(r.stderr.includes(name), `${args.join(' ')}: ${r.stderr}`);
    assert.ok(!r.stderr.includes('listening'), r.stderr);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  }
  // From the environment too, named by its variable.
  const e = runToExit(['-m', model(), '--port', '0'], { env: { LLAMA_ARG_HF_REPO: 'ggml-org/x-GGUF' } });
  assert.equal(e.status, 2);
  assert.match(e.stderr, /LLAMA_ARG_HF_REPO/);
  // A refused flag's negation asks for nothing.
  const n = runToExit(['-m', model(), '--no-agent', '--no-ui-mcp-proxy', '--version']);
  assert.equal(n.status, 0, n.stderr);
});

test("docs/serving.md's flag table is the parser's", () => {
  const r = runToExit(['--flag-table-markdown']);
  assert.equal(r.status, 0, r.stderr);
  const docs = fs.readFileSync(path.join(repo, 'docs/serving.md'), 'utf8');
  assert.ok(r.stdout.length > 10000);
  assert.ok(docs.includes(r.stdout), 'docs/serving.md differs from `loom serve --flag-table-markdown`: regenerate its tables');
});

test('server-wide sampling defaults (--temp, -n, --grammar, --samplers) sit under each request\'s own fields', async () => {
  const s = await startServer(['--temp', '0', '-n', '6', '--grammar', 'root ::= "yes" | "no"', '--seed', '7']);
  try {
    const a = await post(s.url, '/completion', { prompt: 'Once upon a time' });
    assert.equal(a.status, 200, a.text);
    assert.ok(['yes', 'no'].includes(a.json.content), a.json.content);
    assert.equal(a.json.generation_settings.temperature, 0);
    // A request's own grammar (or tools / json_schema) replaces the default grammar.
    const own = await post(s.url, '/completion', { prompt: 'Once upon a time', grammar: 'root ::= "maybe"' });
    assert.equal(own.json.content, 'maybe');
    const free = await post(s.url, '/v1/completions', { prompt: 'Once upon a time', json_schema: { type: 'integer' } });
    assert.match(free.json.choices[0].text, /^-?\d+\s*$/);
    // Greedy by default now: the same text twice, as with an explicit temperature 0.
    const b = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], grammar: 'root ::= [a-z ]{1,30}' });
    const c = await post(s.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], grammar: 'root ::= [a-z ]{1,30}', temperature: 0 });
    assert.equal(b.json.choices[0].message.content, c.json.choices[0].message.content);
    assert.equal(b.json.usage.completion_tokens <= 6, true);
  } finally {
    await s.stop();
  }
  const bad = runToExit(['-m', model(), '--port', '0', '--samplers', 'bogus']);
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /samplers: unknown sampler 'bogus'/);
});

test('--host: several addresses and a UNIX socket serve alike', async () => {
  const sock = path.join(os.tmpdir(), `loom-flags-${process.pid}.sock`);
  const s = await startServer([`--host`, `127.0.0.1,127.0.0.2,${sock}`]);
  try {
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
    const port = new URL(s.url).port;
    assert.equal((await fetch(`http://127.0.0.2:${port}/health`)).status, 200);
    const viaSocket = await new Promise((resolve, reject) => {
      const req = http.request({ socketPath: sock, path: '/v1/models', method: 'GET' }, (res) => {
        let body = '';
        res.on('data', (d) => { body += d; });
        res.on('end', () => resolve({ status: res.statusCode, body }));
      });
      req.on('error', reject);
      req.end();
    });
    assert.equal(viaSocket.status, 200);
    assert.equal(JSON.parse(viaSocket.body).object, 'list');
    assert.ok(s.stderr().includes(`listening on unix:${sock}`), s.stderr());
  } finally {
    await s.stop();
  }
  assert.equal(fs.existsSync(sock), false, 'the socket file is removed at exit');
});

test('-v logs each request as it arrives', async () => {
  const s = await startServer(['-v']);
  try {
    await post(s.url, '/completion', { prompt: 'Once', n_predict: 2 });
    await new Promise((r) => setTimeout(r, 100));
    assert.match(s.stderr(), /loom: request \d+: POST \/completion, \d+ bytes: \{"prompt":"Once"/);
  } finally {
    await s.stop();
  }
});
