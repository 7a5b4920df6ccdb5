// Streaming completion: tokens are printed as they come; the result has the full text and timings.
//   node examples/streaming.mjs [MODEL.gguf] ["prompt"]
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModel } from 'loom-node';

const here = path.dirname(fileURLToPath(import.meta.url));
const model = process.argv[2] || path.join(here, '..', '..', '..', '..', 'shared', 'models', 'stories260K.gguf');
const prompt = process.argv[3] || 'Once upon a time';

const ctx = await loadModel({ model, n_ctx: 2048 }, (p) => process.stderr.write(`\rloading ${p}%`));
process.stderr.write('\n');
process.stdout.write(prompt);
const result = await ctx.completion({ prompt, n_predict: 128, temperature: 0.7, seed: 42, stop: ['\n\n'] }, (t) => {
  process.stdout.write(t.token);
});
console.log(`\n\n${result.tokens_predicted} tokens at ${result.timings.predicted_per_second.toFixed(1)} tok/s` +
  (result.stopped_words ? `, stopped at ${JSON.stringify(result.stopping_word)}` : ''));
await ctx.release();
