// Chat with the model's template (ChatML for models without one), keeping the conversation: each
// turn resends the history and the prompt prefix is reused from the cache (timings.cache_n).
//   node examples/chat.mjs [MODEL.gguf]
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModel } from 'loom-node';

const here = path.dirname(fileURLToPath(import.meta.url));
const model = process.argv[2] || path.join(here, '..', '..', '..', '..', 'shared', 'models', 'stories260K.gguf');
const ctx = await loadModel({ model, n_ctx: 4096 });

const messages = [{ role: 'system', content: 'You are a storyteller.' }];
for (const question of ['Tell me about a cat.', 'And what did the cat eat?', 'How did the story end?']) {
  messages.push({ role: 'user', content: question });
  console.log(`> ${question}`);
  const r = await ctx.completion({ messages, n_predict: 48, temperature: 0 }, (t) => process.stdout.write(t.token));
  console.log(`\n  [${r.tokens_evaluated} prompt tokens, ${r.timings.cache_n} from the cache]`);
  messages.push({ role: 'assistant', content: r.content });
}
// The template's rendering of the whole conversation, as llama.node's getFormattedChat shows it.
console.log(ctx.getFormattedChat(messages).prompt.slice(0, 200) + '...');
await ctx.release();
