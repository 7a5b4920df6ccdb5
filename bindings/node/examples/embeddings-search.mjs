// Semantic search: embed documents once, then rank them by cosine similarity to a query.
//   node examples/embeddings-search.mjs [EMBEDDING-MODEL.gguf] ["query"]
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModel } from 'loom-node';

const here = path.dirname(fileURLToPath(import.meta.url));
const model = process.argv[2] || path.join(here, '..', '..', '..', '..', 'shared', 'models', 'synth-bert-tiny-f32.gguf');
const query = process.argv[3] || 'a story about a dog';
const docs = [
  'The dog ran across the park to find its ball.',
  'Stock markets fell sharply on Monday.',
  'A puppy played with a stick in the garden.',
  'The recipe needs two eggs and a cup of flour.',
];

const ctx = await loadModel({ model, embedding: true, n_ctx: 512 });
const embed = async (t) => (await ctx.embedding(t)).embedding; // L2-normalized: a dot product is the cosine
const vectors = [];
for (const d of docs) vectors.push(await embed(d));
const q = await embed(query);
const scored = docs.map((d, i) => ({ d, score: vectors[i].reduce((s, x, k) => s + x * q[k], 0) }));
scored.sort((a, b) => b.score - a.score);
console.log(`query: ${query}`);
for (const { d, score } of scored) console.log(`${score.toFixed(4)}  ${d}`);
await ctx.release();
