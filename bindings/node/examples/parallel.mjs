// Several requests at once on one context: the scheduler decodes them together (continuous
// batching) and shares their common prompt prefix.
//   node examples/parallel.mjs [MODEL.gguf]
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModel } from 'loom-node';

const here = path.dirname(fileURLToPath(import.meta.url));
const model = process.argv[2] || path.join(here, '..', '..', '..', '..', 'shared', 'models', 'stories260K.gguf');
const ctx = await loadModel({ model, n_ctx: 4096, n_parallel: 4 }); // up to 4 slots for parallel.enable
await ctx.parallel.enable({ n_parallel: 4 });

const system = 'Once upon a time, in a small village, ';
const starts = ['there was a baker', 'a girl found a key', 'two friends built a boat', 'a cat lost its hat'];
const t0 = performance.now();
const requests = await Promise.all(
  starts.map((s) => ctx.parallel.completion({ prompt: system + s, n_predict: 64, temperature: 0.8, seed: 1 })),
);
const results = await Promise.all(requests.map((r) => r.promise));
const ms = performance.now() - t0;
let total = 0;
results.forEach((r, i) => {
  total += r.tokens_predicted;
  console.log(`#${r.requestId} ${starts[i]}${r.text.slice(0, 60).replace(/\n/g, ' ')}... (cache_n ${r.timings.cache_n})`);
});
console.log(`${total} tokens in ${ms.toFixed(0)} ms: ${(total / (ms / 1000)).toFixed(0)} tok/s aggregate`);
console.log(ctx.parallel.getStatus());
await ctx.release();
