// llama-server's slots (issue 32): GET /slots, POST /slots/{id}?action=save|restore|erase with
// --slot-save-path, id_slot in requests; a saved slot restored after a restart continues exactly
// as the uninterrupted generation does (greedy).
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { golden, post, startServer } from './harness.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-slots-'));
const servers = [];
async function start(args, opts) {
  const s = await startServer(args, opts);
  servers.push(s);
  return s;
}
after(async () => {
  for (const s of servers) await s.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

const get = async (url, p) => {
  const r = await fetch(url + p);
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, text, json };
};

test('save -> restart -> restore: the continuation equals the uninterrupted generation', async () => {
  const run = golden().runs[0];
  let srv = await start(['-np', '2', '-c', '1024', '--slot-save-path', dir]);
  const slots0 = await get(srv.url, '/slots');
  assert.equal(slots0.status, 200, slots0.text);
  assert.equal(slots0.json.length, 2);
  assert.deepEqual(slots0.json.map((s) => [s.id, s.is_processing]), [[0, false], [1, false]]);
  assert.ok(slots0.json.every((s) => s.n_ctx > 0 && s.speculative === false));

  // Uninterrupted: 32 tokens. Interrupted: 16 in slot 1, saved, the server restarted, restored
  // into slot 0, then 16 more from prompt + the first 16.
  const whole = await post(srv.url, '/completion', { prompt: run.prompt_ids, n_predict: 32, temperature: 0, return_tokens: true });
  assert.equal(whole.status, 200, whole.text);
  const first = await post(srv.url, '/completion', { prompt: run.prompt_ids, n_predict: 16, temperature: 0, return_tokens: true, id_slot: 1, cache_prompt: true });
  assert.deepEqual(first.json.tokens, whole.json.tokens.slice(0, 16));
  const s1 = (await get(srv.url, '/slots')).json[1];
  assert.equal(s1.is_processing, false);
  assert.equal(typeof s1.id_task, 'number');
  assert.equal(s1.next_token[0].n_decoded, 16);
  assert.equal(s1.params.n_predict, 16);
  assert.equal(s1.params.temperature, 0);
  assert.ok(s1.n_cached >= run.prompt_ids.length + 15, JSON.stringify(s1));

  const saved = await post(srv.url, '/slots/1?action=save', { filename: 'story.bin' });
  assert.equal(saved.status, 200, saved.text);
  assert.equal(saved.json.id_slot, 1);
  assert.equal(saved.json.filename, 'story.bin');
  assert.ok(saved.json.n_saved >= run.prompt_ids.length, saved.text);
  assert.equal(saved.json.n_written, fs.statSync(path.join(dir, 'story.bin')).size);
  assert.equal(typeof saved.json.timings.save_ms, 'number');
  await srv.stop();

  srv = await start(['-np', '2', '-c', '1024', '--slot-save-path', dir]);
  const restored = await post(srv.url, '/slots/0?action=restore', { filename: 'story.bin' });
  assert.equal(restored.status, 200, restored.text);
  assert.equal(restored.json.n_restored, saved.json.n_saved);
  assert.equal(restored.json.n_read, saved.json.n_written);
  assert.equal((await get(srv.url, '/slots')).json[0].n_cached, saved.json.n_saved);
  const rest = await post(srv.url, '/completion', {
    prompt: [...run.prompt_ids, ...first.json.tokens], n_predict: 16, temperature: 0, return_tokens: true,
  });
  assert.deepEqual([...first.json.tokens, ...rest.json.tokens], whole.json.tokens);
  // The restored tokens were reused, not computed again.
  assert.ok(rest.json.timings.cache_n >= saved.json.n_saved - 1, JSON.stringify(rest.json.timings));

  // Erase: the slot that ran the continuation forgets its tokens and the cache drops them.
  const busy = (await get(srv.url, '/slots')).json.reduce((a, b) => (b.n_cached > a.n_cached ? b : a));
  assert.equal(busy.n_cached, run.prompt_ids.length + 31, JSON.stringify(busy));  // the last token is sampled, never decoded
  const erased = await post(srv.url, `/slots/${busy.id}?action=erase`, {});
  assert.equal(erased.status, 200, erased.text);
  assert.deepEqual(erased.json, { id_slot: busy.id, n_erased: busy.n_cached });
  assert.equal((await get(srv.url, '/slots')).json[busy.id].n_cached, 0);
  const again = await post(srv.url, '/completion', { prompt: run.prompt_ids, n_predict: 1, temperature: 0 });
  assert.ok(again.json.timings.cache_n < run.prompt_ids.length - 1, JSON.stringify(again.json.timings));

  // Bad input: 400 / 404 with a message; the server keeps serving.
  const bad = [
    ['/slots/x?action=save', { filename: 'a.bin' }, 400],
    ['/slots/9?action=save', { filename: 'a.bin' }, 400],
    ['/slots/-1?action=save', { filename: 'a.bin' }, 400],
    ['/slots/0?action=fly', { filename: 'a.bin' }, 400],
    ['/slots/0', { filename: 'a.bin' }, 400],
    ['/slots/0?action=save', { filename: '../escape.bin' }, 400],
    ['/slots/0?action=save', { filename: 'sub/dir.bin' }, 400],
    ['/slots/0?action=save', { filename: '' }, 400],
    ['/slots/0?action=save', { filename: 7 }, 400],
    ['/slots/0?action=save', {}, 400],
    ['/slots/0?action=restore', { filename: 'missing.bin' }, 404],
  ];
  for (const [p, body, status] of bad) {
    const r = await post(srv.url, p, body);
    assert.equal(r.status, status, `${p} ${JSON.stringify(body)}: ${r.text}`);
    assert.ok(r.json?.error?.message, r.text);
  }
  assert.ok(!fs.existsSync(path.join(dir, '..', 'escape.bin')));
  // A corrupt file is refused and changes nothing.
  const bytes = fs.readFileSync(path.join(dir, 'story.bin'));
  fs.writeFileSync(path.join(dir, 'cut.bin'), bytes.subarray(0, bytes.length >> 1));
  const cut = await post(srv.url, '/slots/0?action=restore', { filename: 'cut.bin' });
  assert.equal(cut.status, 400, cut.text);
  assert.equal((await post(srv.url, '/completion', { prompt: run.prompt, n_predict: 4, temperature: 0 })).status, 200);
});

test('a slot file of another model is refused; id_slot is checked; --no-slots and no --slot-save-path answer 501', async () => {
  const other = await start(['-np', '1', '--slot-save-path', dir], { model: 'models/llama-2-tiny-random.gguf' });
  fs.writeFileSync(path.join(dir, 'x'), '');
  const a = await post(other.url, '/slots/0?action=restore', { filename: 'story.bin' });
  assert.equal(a.status, 400, a.text);
  assert.match(a.json.error.message, /model|vocab|tensor|layer|mismatch|does not match/i);
  const pinned = await post(other.url, '/completion', { prompt: 'Hi', n_predict: 2, id_slot: 5 });
  assert.equal(pinned.status, 400, pinned.text);
  assert.match(pinned.json.error.message, /id_slot/);

  const plain = await start(['-np', '1', '--no-slots']);
  assert.equal((await get(plain.url, '/slots')).status, 501);
  const noPath = await post(plain.url, '/slots/0?action=save', { filename: 'a.bin' });
  assert.equal(noPath.status, 501);
  assert.match(noPath.json.error.message, /--slot-save-path/);
  assert.equal((await get(plain.url, '/props')).json.endpoint_slots, false);
});
