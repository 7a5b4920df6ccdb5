// The examples run as documented (on the shared models) and print what they promise.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { model } from './helpers.mjs';

const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'examples');
const run = (name, ...args) => {
  const r = spawnSync(process.execPath, [path.join(dir, name), ...args], { encoding: 'utf8', timeout: 120000 });
  assert.equal(r.status, 0, `${name}: ${r.stderr}`);
  return r.stdout;
};

test('streaming.mjs streams a story', () => {
  assert.match(run('streaming.mjs', model('stories260K.gguf'), 'Once upon a time'), /tokens at [0-9.]+ tok\/s/);
});
test('chat.mjs keeps a conversation and reuses the cached prefix', () => {
  const out = run('chat.mjs', model('stories260K.gguf'));
  assert.equal((out.match(/from the cache\]/g) || []).length, 3);
  assert.match(out, /<\|im_start\|>user/);
});
test('embeddings-search.mjs ranks every document', () => {
  const out = run('embeddings-search.mjs', model('synth-bert-tiny-f32.gguf'), 'a dog');
  assert.equal(out.trim().split('\n').filter((l) => /^-?[0-9]\.[0-9]{4} {2}/.test(l)).length, 4);
});
test('parallel.mjs runs four requests at once', () => {
  assert.match(run('parallel.mjs', model('stories260K.gguf')), /tok\/s aggregate/);
});
