// Random interleavings of every loom-node method with release() and garbage collection (run by
// lifecycle.test.mjs, one process per seed, with --expose-gc). Each call may resolve, reject or
// throw; none may crash the process, and every promise must settle. Exit 0 and one summary line
// on success; exit 1 with the reason otherwise.
//   node --expose-gc test/misuse-run.mjs SEED [OPERATIONS]
import { loadModel } from '../lib/index.js';
import { stories, tmpFile } from './helpers.mjs';

const seed0 = Number(process.argv[2] || 1);
const nOps = Number(process.argv[3] || 160);
let seed = (seed0 * 2654435761) % 2147483648 || 1;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const pick = (a) => a[Math.floor(rand() * a.length)];
const gc = globalThis.gc || (() => {});

const pending = new Set();
let settled = 0;
function track(v) {
  if (v && typeof v.then === 'function') {
    const p = Promise.resolve(v).then(
      () => {},
      (e) => {
        if (!(e instanceof Error)) throw new Error(`rejected with a non-Error: ${String(e)}`);
      },
    );
    const t = p.finally(() => {
      pending.delete(t);
      settled++;
    });
    pending.add(t);
    return v;
  }
  return v;
}
function attempt(fn) {
  try {
    return track(fn());
  } catch (e) {
    if (!(e instanceof Error)) throw new Error(`threw a non-Error: ${String(e)}`);
    return undefined;
  }
}

const session = tmpFile('misuse.session');
const text = 'Once upon a time, there was a little girl named Lily. '.repeat(1 + Math.floor(rand() * 40));
let contexts = [];
const load = () =>
  track(
    loadModel({ model: stories, n_ctx: pick([128, 256, 512]), n_threads: 1, n_parallel: pick([1, 2]), embedding: rand() < 0.2 }).then(
      (c) => contexts.push(c),
    ),
  );

const ops = [
  (c) => c.completion({ prompt: text.slice(0, 200), n_predict: 1 + Math.floor(rand() * 24) }, rand() < 0.5 ? () => {} : undefined),
  (c) => c.completion({ messages: [{ role: 'user', content: 'Hi' }], n_predict: 8, signal: AbortSignal.timeout(Math.floor(rand() * 5)) }),
  (c) => c.completion({ prompt: text, n_predict: 64, ignore_eos: true }),
  (c) => c.stopCompletion(),
  (c) => c.tokenize(text),
  (c) => c.detokenize([1, 2, 3, 400, 500]),
  (c) => c.embedding('hello'),
  (c) => c.rerank('q', ['a', 'b']),
  (c) => c.saveSession(session),
  (c) => c.loadSession(session),
  (c) => c.clearCache(),
  (c) => c.applyLoraAdapters([{ path: '/nonexistent/adapter.gguf', scaled: 1 }]),
  (c) => c.removeLoraAdapters(),
  (c) => c.getFormattedChat([{ role: 'user', content: 'Hi' }]),
  (c) => c.getModelInfo(),
  (c) => c.bench(8, 4, 1, 1),
  (c) => c.parallel.enable({ n_parallel: pick([1, 2, 4]) }),
  (c) => c.parallel.disable(),
  async (c) => {
    const r = await c.parallel.completion({ prompt: 'Once', n_predict: 8 }, () => {});
    if (rand() < 0.5) r.stop();
    return r.promise;
  },
  // The inner promise is the request's: awaited, as an app does (an ignored rejection would end
  // the process as Node ends it for any unhandled rejection).
  async (c) => (await c.parallel.embedding('x')).promise,
  (c) => c.parallel.getStatus(),
  (c) => c.release(),
  (c) => c.release(),
];

async function main() {
  await load();
  for (let i = 0; i < nOps; i++) {
    const r = rand();
    if (r < 0.06 || contexts.length === 0) {
      load();
    } else if (r < 0.10) {
      // Drop a context without release() and collect it (maybe while its work runs).
      contexts.splice(Math.floor(rand() * contexts.length), 1);
      gc();
    } else {
      const c = pick(contexts);
      attempt(() => pick(ops)(c));
    }
    if (rand() < 0.3) await new Promise((res) => (rand() < 0.5 ? setImmediate(res) : setTimeout(res, Math.floor(rand() * 15))));
    if (rand() < 0.05) gc();
  }
  // Everything settles; then release what is left and collect.
  const deadline = Date.now() + 120000;
  while (pending.size > 0) {
    if (Date.now() > deadline) throw new Error(`${pending.size} promises never settled`);
    await Promise.race([Promise.allSettled([...pending]), new Promise((r) => setTimeout(r, 1000))]);
  }
  await Promise.all(contexts.map((c) => c.release()));
  contexts = [];
  gc();
  await new Promise((r) => setTimeout(r, 50));
  gc();
  console.log(`misuse: ${nOps} operations, ${settled} settled (seed ${seed0})`);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`misuse (seed ${seed0}): ${e.stack || e}`);
    process.exit(1);
  },
);
