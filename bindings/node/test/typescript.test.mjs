// A TypeScript program written for @fugood/llama.node 1.7.15 (test/ts/app.ts: every public name of
// its lib/index.ts and lib/binding.ts) compiles against loom-node's index.d.ts with `tsc --noEmit`.
// TypeScript comes from test/ts's lock file (scripts/install-deps.sh, or `npm ci` in test/ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'ts');
const tsc = path.join(dir, 'node_modules', 'typescript', 'bin', 'tsc');
const missing = fs.existsSync(tsc)
  ? false
  : `typescript is not installed in ${dir} (run scripts/install-deps.sh, or npm ci there): the check is skipped`;

test('a TypeScript app written for llama.node compiles against loom-node\'s types', { skip: missing }, () => {
  const r = spawnSync(process.execPath, [tsc, '--noEmit', '-p', dir], { encoding: 'utf8', timeout: 120000 });
  assert.equal(r.status, 0, `tsc --noEmit failed:\n${r.stdout}${r.stderr}`);
});

test('index.d.ts names every export of the module, and the module exports every value it declares', { skip: missing }, async () => {
  const src = fs.readFileSync(path.join(dir, '..', '..', 'index.d.ts'), 'utf8');
  const declared = new Set([...src.matchAll(/^export (?:declare )?(?:function|const|class) (\w+)/gm)].map((m) => m[1]));
  const mod = await import('../lib/index.js');
  const exported = Object.keys(mod.default);
  for (const k of exported) assert.ok(declared.has(k), `${k} is exported but not in index.d.ts`);
  for (const k of declared) assert.ok(exported.includes(k), `${k} is in index.d.ts but not exported`);
});
