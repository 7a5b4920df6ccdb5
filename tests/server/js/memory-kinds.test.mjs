// `loom serve` on models whose memory is not only KV cells: recurrent (Mamba), hybrids (Granite 4:
// Mamba-2 + attention; LFM2: short conv + attention; Qwen3.5: Gated DeltaNet + attention), sliding-window
// (Gemma 2; Gemma 4 and Gemma 3n with shared-KV layers too) and encoder-decoder (T5). Prefixes resume from
// checkpoints of the recurrent states / windows kept in the prefix cache: turn 4 of a chat that
// resends its history reuses at least turn 3's prompt (T5 shares no prefixes: its encoder sees
// each prompt whole), and concurrent streams equal their single-stream outputs.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { dataPath, gemma3nModel, post, sharedPath, startServer } from './harness.mjs';

const models = [
  ['mamba', () => dataPath('synth-mamba-tiny-f32.gguf')],
  ['granitehybrid', () => dataPath('synth-granitehybrid-tiny-f32.gguf')],
  ['lfm2 (short-conv hybrid)', () => dataPath('synth-lfm2-tiny-f32.gguf')],
  ['qwen35 (Gated DeltaNet hybrid)', () => dataPath('synth-qwen35-tiny-f32.gguf')],
  ['gemma2 (sliding window)', () => sharedPath('models/synth-gemma2-tiny-f32.gguf')],
  ['gemma4 (sliding + global heads of two sizes, shared KV)', () => dataPath('synth-gemma4-tiny-f32.gguf')],
  // 23 MB, not committed: made by the build's make_arch_variant (generatedModel).
  ['gemma3n (AltUp, Laurel, sliding + global, shared KV)', () => gemma3nModel()],
  ['t5 (encoder-decoder)', () => dataPath('synth-t5-tiny-f32.gguf')],
  // Mixture of experts: the tokens of a batch grouped by expert, whatever the other streams.
  ['qwen35moe (DeltaNet hybrid + experts, gated shared expert)', () => dataPath('synth-qwen35moe-tiny-f32.gguf')],
  ['granitehybrid with experts (Mamba-2 hybrid + shared expert)', () => dataPath('synth-granitehybridmoe-tiny-f32.gguf')],
  ['qwen3moe', () => dataPath('synth-qwen3moe-tiny-f32.gguf')],
  ['qwen3next (DeltaNet hybrid, key heads repeated in place, + experts)', () => dataPath('synth-qwen3next-tiny-f32.gguf')],
  ['gemma4 with experts (beside the dense FFN; sliding + global, shared KV)', () => dataPath('synth-gemma4moe-tiny-f32.gguf')],
];

for (const [name, path] of models) {
  test(`${name}: turn 4 of a resent chat restores a checkpoint; concurrent streams equal single ones`, async () => {
    const modelPath = path();
    const srv = await startServer(['-np', '4', '-c', '2048', '--ctx-checkpoints', '8'], { modelPath });
    try {
      const messages = [{ role: 'system', content: 'You are a storyteller.' }];
      let lastPrompt = 0;
      for (let turn = 1; turn <= 4; turn++) {
        messages.push({ role: 'user', content: `Tell me part ${turn} of the story about Lily and the park.` });
        const r = await post(srv.url, '/v1/chat/completions', { messages, max_tokens: 16, temperature: 0 });
        assert.equal(r.status, 200, r.text);
        const reply = r.json.choices[0].message.content ?? '';
        if (turn === 4 && !name.startsWith('t5')) {
          assert.ok(r.json.timings.cache_n >= lastPrompt, `turn 4 reused ${r.json.timings.cache_n} tokens, turn 3's prompt was ${lastPrompt}`);
        }
        lastPrompt = r.json.usage.prompt_tokens;
        messages.push({ role: 'assistant', content: reply });
      }
      // Another conversation with the same system prompt resumes from the checkpoint at its end.
      if (!name.startsWith('t5')) {
        const other = await post(srv.url, '/v1/chat/completions', {
          messages: [messages[0], { role: 'user', content: 'Something else entirely, please.' }], max_tokens: 4, temperature: 0,
        });
        assert.equal(other.status, 200, other.text);
        assert.ok(other.json.timings.cache_n > 0, `a new conversation with the same system prompt reused ${other.json.timings.cache_n} tokens`);
      }
      // Concurrent completions equal one at a time (greedy).
      const prompts = Array.from({ length: 8 }, (_, i) => `Once upon a time number ${i}, a ${['cat', 'dog', 'girl', 'boy'][i % 4]}`);
      const single = [];
      for (const p of prompts) {
        const r = await post(srv.url, '/v1/completions', { prompt: p, max_tokens: 12, temperature: 0, cache_prompt: false });
        assert.equal(r.status, 200, r.text);
        single.push(r.json.choices[0].text);
      }
      const together = await Promise.all(prompts.map((p) => post(srv.url, '/v1/completions', { prompt: p, max_tokens: 12, temperature: 0 })));
      together.forEach((r, i) => {
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.choices[0].text, single[i], `stream ${i}`);
      });
    } finally {
      await srv.stop();
    }
  });
}
