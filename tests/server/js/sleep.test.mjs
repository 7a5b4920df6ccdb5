// --sleep-idle-seconds (issue 32): after the idle time the model and its memory are given back
// (resident memory at most 10 % of loaded); /health, /props, /models and /metrics answer without
// waking it; the next request loads it again and is served; a request in flight keeps it awake;
// with --cache-dir the prefix cache survives the sleep.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { golden, metrics, post, sleep, sse, startServer } from './harness.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-sleep-'));
let srv;
after(async () => {
  await srv?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

const rssKiB = (pid) => Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);
const props = async () => (await (await fetch(srv.url + '/props')).json());

async function waitSleeping(ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if ((await props()).is_sleeping) return true;
    await sleep(100);
  }
  return false;
}

test('sleeps when idle, gives memory back, wakes on a request with its prefix cache', async () => {
  // A large KV cache (131072 cells) makes the loaded engine's memory stand out.
  srv = await startServer(['-np', '2', '-c', '131072', '--sleep-idle-seconds', '1', '--cache-dir', dir]);
  const run = golden().runs[0];
  // A prompt long enough for the cache dir (it keeps prefixes of 32 tokens and more).
  const prompt = golden().runs.map((r) => r.prompt + r.greedy_text).join(' ');
  const body = { prompt, n_predict: 12, temperature: 0 };
  const first = await post(srv.url, '/completion', body);
  assert.equal(first.status, 200, first.text);
  const loaded = rssKiB(srv.proc.pid);
  assert.equal((await props()).is_sleeping, false);

  // Polling the exempt endpoints does not keep it awake, and they answer while it sleeps.
  assert.ok(await waitSleeping(15000), 'the server went to sleep');
  const asleep = rssKiB(srv.proc.pid);
  assert.ok(asleep <= loaded / 10, `resident memory asleep ${asleep} KiB > 10 % of loaded ${loaded} KiB`);
  assert.equal((await fetch(srv.url + '/health')).status, 200);
  const models = await (await fetch(srv.url + '/v1/models')).json();
  assert.ok(models.data[0].meta.n_vocab > 0);
  const m = await metrics(srv.url);
  assert.ok(Object.keys(m).length > 0);
  const p = await props();
  assert.equal(p.is_sleeping, true);
  assert.ok(p.default_generation_settings.n_ctx > 0 && p.bos_token !== undefined);
  assert.match(srv.stderr(), /sleeping after 1 s/);

  // A request wakes it; the answer is the same, and the prompt comes from the cache dir.
  const again = await post(srv.url, '/completion', body);
  assert.equal(again.status, 200, again.text);
  assert.equal(again.json.content, first.json.content);
  assert.ok(again.json.timings.cache_n > 0, JSON.stringify(again.json.timings));
  assert.equal((await props()).is_sleeping, false);
  assert.match(srv.stderr(), /awake \(loaded in \d+ ms\)/);

  // A long request in flight keeps it awake past the idle time.
  assert.ok(await waitSleeping(15000));
  let sawAwake = 0;
  const long = await sse(srv.url, '/completion', { prompt: run.prompt, n_predict: 4000, temperature: 0, stream: true, ignore_eos: true }, {
    onEvent: () => { sawAwake += 1; },
  });
  assert.ok(sawAwake > 100, `${sawAwake} events`);
  const fin = long.events.at(-1);
  assert.equal(fin.stop, true);
  assert.equal(fin.tokens_predicted, 4000);
  const sleeps = srv.stderr().match(/sleeping after/g).length;
  assert.equal(sleeps, 2, 'no sleep during the long request');
});
