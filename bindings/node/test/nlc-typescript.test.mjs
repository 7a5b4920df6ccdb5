// A TypeScript app typed against node-llama-cpp 3.x (test/ts-nlc/app.ts) compiles with `tsc
// --strict` against loom-node/node-llama-cpp's types, and against node-llama-cpp's own when it is
// installed in $LOOM_PEER_DIR (default ~/.cache/loom-peer, see nlc.test.mjs).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = path.join(here, 'ts-nlc');
const tsc = path.join(here, 'ts', 'node_modules', 'typescript', 'bin', 'tsc');
const missing = fs.existsSync(tsc) ? false : `typescript is not installed in ${path.join(here, 'ts')} (npm ci there): skipped`;
const peerDts = path.join(process.env.LOOM_PEER_DIR || path.join(os.homedir(), '.cache', 'loom-peer'), 'node_modules', 'node-llama-cpp', 'dist', 'index.d.ts');

const run = (project) => spawnSync(process.execPath, [tsc, '--noEmit', '-p', project], { encoding: 'utf8', timeout: 180000 });

test('an app typed against node-llama-cpp compiles against loom-node/node-llama-cpp (tsc --strict)', { skip: missing }, () => {
  const r = run(dir);
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
});

test('the same app compiles against node-llama-cpp\'s own types', { skip: missing || (fs.existsSync(peerDts) ? false : `node-llama-cpp is not installed (${peerDts}): skipped`) }, () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-nlc-ts-'));
  const cfg = path.join(tmp, 'tsconfig.json');
  fs.writeFileSync(cfg, JSON.stringify({
    extends: path.join(dir, 'tsconfig.json'),
    compilerOptions: { skipLibCheck: true, module: 'esnext', moduleResolution: 'bundler', baseUrl: dir, paths: { 'node-llama-cpp': [peerDts] } },
    files: [path.join(dir, 'app.ts'), path.join(dir, 'node-shim.d.ts')],
  }));
  const r = run(cfg);
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
});
