// Generation through loom-node against llama.cpp's goldens: the greedy story, streaming, tokenizer,
// stop strings, probabilities, grammars and JSON schemas, sessions, LoRA.
import assert from 'node:assert/strict';
import { test, after } from 'node:test';
import fs from 'node:fs';
import { loadModel, loadLlamaModelInfo } from '../lib/index.js';
import { stories, golden, greedy, tmpFile, shared, model as sharedModel } from './helpers.mjs';

const g = golden('stories260K.json');
const ctx = await loadModel({ model: stories, n_ctx: 2048, n_threads: 1 });
after(() => ctx.release());

test('the greedy story of stories260K is llama.cpp\'s, and streamed tokens add up to it', async () => {
  for (const run of g.runs) {
    let streamed = '';
    const r = await ctx.completion({ prompt: run.prompt, n_predict: run.greedy_ids.length, ...greedy }, (t) => {
      streamed += t.token;
    });
    assert.deepEqual([...r.tokens], run.greedy_ids, run.prompt);
    // The golden text is llama.cpp's detokenization of the ids alone, which drops SPM's leading space.
    assert.equal(r.text.replace(/^ /, ''), run.greedy_text, run.prompt);
    assert.equal(streamed, r.text);
    assert.equal(r.tokens_evaluated, run.prompt_ids.length);
    assert.equal(r.tokens_predicted, run.greedy_ids.length);
    assert.ok(r.timings.predicted_per_second > 0);
  }
});

test('loom-only lookup speculation gives the golden greedy story too', async () => {
  for (const run of g.runs) {
    const r = await ctx.completion({ prompt: run.prompt, n_predict: run.greedy_ids.length, ...greedy, lookup: 2, draft_max: 6 });
    assert.deepEqual([...r.tokens], run.greedy_ids, run.prompt);
  }
  await assert.rejects(() => ctx.completion({ prompt: 'x', lookup: 'three' }), TypeError);
});

test('loom-only draft model (draft_model) gives the golden greedy story; a wrong one fails to load', async () => {
  const spec = await loadModel({ model: stories, n_ctx: 1024, n_threads: 1, draft_model: stories, draft_max: 4, draft_p_min: 0 });
  try {
    for (const run of g.runs) {
      const r = await spec.completion({ prompt: run.prompt, n_predict: run.greedy_ids.length, ...greedy });
      assert.deepEqual([...r.tokens], run.greedy_ids, run.prompt);
    }
    const st = spec.getStatus();
    assert.ok(st.draft_accepted > 0, JSON.stringify(st));
  } finally {
    await spec.release();
  }
  await assert.rejects(() => loadModel({ model: stories, draft_model: sharedModel('synth-bert-tiny-f32.gguf') }), /differs/);
  await assert.rejects(() => loadModel({ model: stories, draft_model: stories, draft_max: 99 }), RangeError);
  await assert.rejects(() => loadModel({ model: stories, draft_model: 3 }), TypeError);
});

test('tokenize gives the golden ids (as llama.node: no BOS, special tokens parsed); detokenize inverts it', async () => {
  for (const run of g.runs) {
    const { tokens } = await ctx.tokenize(run.prompt);
    assert.ok(tokens instanceof Int32Array);
    assert.deepEqual([...tokens], run.prompt_ids.slice(1));
  }
  assert.ok((g.tokenize || []).length > 0);
  for (const c of g.tokenize) {
    const { tokens } = await ctx.tokenize(c.text);
    assert.deepEqual([...tokens], c.ids_parse_special, JSON.stringify(c.text));
  }
  const text = await ctx.detokenize(g.runs[0].prompt_ids.slice(1));
  assert.equal(text.trim(), g.runs[0].prompt.trim());
});

test('successive completions reuse the cached prompt prefix', async () => {
  const prompt = g.runs[0].prompt + ' and a long long way to go, a long long way to go';
  const a = await ctx.completion({ prompt, n_predict: 8, ...greedy });
  const b = await ctx.completion({ prompt, n_predict: 8, ...greedy });
  assert.equal(b.text, a.text);
  assert.ok(b.timings.cache_n >= a.tokens_evaluated - 1, `cache_n ${b.timings.cache_n}`);
});

test('stop words end the text before them; limits and EOS are reported', async () => {
  const full = await ctx.completion({ prompt: g.runs[0].prompt, n_predict: 40, ...greedy });
  assert.equal(full.stopped_limited, true);
  const word = full.text.slice(20, 26);
  const r = await ctx.completion({ prompt: g.runs[0].prompt, n_predict: 40, stop: [word], ...greedy });
  assert.equal(r.stopped_words, true);
  assert.equal(r.stopping_word, word);
  assert.equal(r.text, full.text.slice(0, full.text.indexOf(word)));
  // logit_bias (llama.node's [[token, bias]]) makes EOS (id 2) the greedy pick; false bans a token.
  const eos = await ctx.completion({ prompt: g.runs[0].prompt, n_predict: 50, logit_bias: [[2, 100]], ...greedy });
  assert.equal(eos.stopped_eos, true);
  assert.ok(eos.tokens_predicted <= 1);
  assert.equal(eos.text, '');
  const banned = await ctx.completion({ prompt: g.runs[0].prompt, n_predict: 8, logit_bias: [[g.runs[0].greedy_ids[0], false]], ...greedy });
  assert.notEqual(banned.tokens[0], g.runs[0].greedy_ids[0]);
});

test('n_probs gives llama.node\'s completion_probabilities; temperature 0 ignores XTC', async () => {
  const tokens = [];
  const r = await ctx.completion(
    { prompt: g.runs[0].prompt, n_predict: 6, n_probs: 3, xtc_probability: 1, xtc_threshold: 0, ...greedy },
    (t) => tokens.push(t),
  );
  assert.deepEqual([...r.tokens], g.runs[0].greedy_ids.slice(0, 6));
  assert.equal(r.completion_probabilities.length, 6);
  for (const p of r.completion_probabilities) {
    assert.equal(p.probs.length, 3);
    assert.ok(p.probs[0].prob >= p.probs[1].prob && p.probs[1].prob >= p.probs[2].prob);
    assert.equal(p.probs[0].tok_str, p.content);
  }
  assert.ok(tokens.every((t) => t.completion_probabilities?.length === 1));
});

test('a GBNF grammar and a JSON schema constrain the output', async () => {
  const r = await ctx.completion({ prompt: 'Colors:', n_predict: 60, grammar: 'root ::= color (", " color){0,3}\ncolor ::= "red" | "green" | "blue"', seed: 7 });
  assert.match(r.text, /^(red|green|blue)(, (red|green|blue)){0,3}$/);
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' } }, required: ['name', 'age'] };
  for (const opts of [{ json_schema: JSON.stringify(schema) }, { response_format: { type: 'json_schema', json_schema: { schema } } }]) {
    const j = await ctx.completion({ prompt: 'Person:', n_predict: 200, ...greedy, ...opts });
    const v = JSON.parse(j.text);
    assert.equal(typeof v.name, 'string');
    assert.ok(Number.isInteger(v.age));
  }
});

test('chat messages go through the template; tools come back as tool_calls', async () => {
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const f = ctx.getFormattedChat(messages);
  // stories260K has no template of its own: llama.node's result type is then 'llama-chat'.
  assert.equal(f.type, 'llama-chat');
  assert.match(f.prompt, /Weather in Paris\?/);
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const r = await ctx.completion({ messages, tools, tool_choice: 'required', n_predict: 400, ...greedy });
  assert.equal(r.tool_calls.length, 1, r.text);
  assert.equal(r.tool_calls[0].function.name, 'get_weather');
  assert.equal(typeof JSON.parse(r.tool_calls[0].function.arguments).city, 'string');
  const plain = await ctx.completion({ messages, n_predict: 10, ...greedy });
  assert.equal(typeof plain.content, 'string');
  assert.equal(plain.tool_calls, undefined); // as llama.node: absent when there are none
});

// The token callback's parsed fields come from the engine's stream parser (src/api/chat_stream.h),
// the one loom serve streams from: reasoning apart from the content as it comes, tool-call text
// never in the content, and the last callback's fields are the result's.
test('token callbacks carry the reply parsed as it streams: reasoning apart, no raw tool-call text', async () => {
  const messages = [{ role: 'user', content: 'Hi' }];
  const grammar = 'root ::= "<think>" [a-z ]{5,20} "</think>" [a-z ]{3,20}';
  const seen = [];
  const r = await ctx.completion({ messages, grammar, reasoning_format: 'auto', n_predict: 60, ...greedy }, (t) => seen.push(t));
  assert.ok(r.reasoning_content.length >= 5, r.text);
  assert.ok(!r.content.includes('think>'));
  let prev = { content: '', reasoning_content: '' };
  let grewWhileThinking = 0;
  for (const t of seen) {
    const now = { content: t.content ?? '', reasoning_content: t.reasoning_content ?? '' };
    assert.ok(now.content.startsWith(prev.content) && now.reasoning_content.startsWith(prev.reasoning_content), 'fields only grow');
    assert.ok(!now.content.includes('think>'), JSON.stringify(t));
    if (now.reasoning_content.length > prev.reasoning_content.length && !now.content) grewWhileThinking++;
    prev = now;
  }
  assert.ok(grewWhileThinking >= 2, 'reasoning streams before the block closes');
  assert.equal(prev.reasoning_content, r.reasoning_content);
  assert.equal(prev.content, r.content);

  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const calls = [];
  const tr = await ctx.completion({ messages, tools, tool_choice: 'required', n_predict: 400, ...greedy }, (t) => calls.push(t));
  assert.equal(tr.tool_calls.length, 1);
  for (const t of calls) {
    assert.ok(!(t.content ?? '').includes('tool_call') && !(t.content ?? '').includes('{'), JSON.stringify(t));
  }
  const last = calls.filter((t) => t.tool_calls).at(-1);
  assert.deepEqual(last.tool_calls.map((c) => c.function), tr.tool_calls.map((c) => c.function));
});

test('a saved session, loaded into a new context, continues exactly as without', async () => {
  const prompt = g.runs[1].prompt;
  const first = await ctx.completion({ prompt, n_predict: 16, ...greedy });
  const file = tmpFile('session.bin');
  await ctx.saveSession(file);
  assert.ok(fs.statSync(file).size > 0);
  // The continuation of prompt + first output, computed from scratch.
  const cont = prompt + first.text;
  const want = await ctx.completion({ prompt: cont, n_predict: 16, cache_prompt: false, ...greedy });
  const other = await loadModel({ model: stories, n_ctx: 2048, n_threads: 1 });
  try {
    const { tokens_loaded } = await other.loadSession(file);
    assert.ok(tokens_loaded >= first.tokens_evaluated);
    const got = await other.completion({ prompt: cont, n_predict: 16, ...greedy });
    assert.equal(got.text, want.text);
    assert.ok(got.timings.cache_n >= tokens_loaded - 1, `cache_n ${got.timings.cache_n} of ${tokens_loaded}`);
    // A corrupt file is refused and changes nothing.
    fs.writeFileSync(file, 'garbage');
    await assert.rejects(other.loadSession(file));
    const again = await other.completion({ prompt: cont, n_predict: 16, ...greedy });
    assert.equal(again.text, want.text);
  } finally {
    await other.release();
  }
});

test('LoRA adapters give llama.cpp\'s greedy ids (golden), and removing them restores the base', async () => {
  const dir = `${shared}/golden/adapters`;
  const base = golden('adapters/lorabase.json');
  const withA = golden('adapters/lorabase-A100.json');
  const stacked = golden('adapters/lorabase-A100-B070.json');
  const c = await loadModel({ model: `${dir}/${base.model_file}`, n_ctx: 256, n_threads: 1, lora: `${dir}/lora-A.gguf`, lora_scaled: 1 });
  try {
    const run = async (gold) => {
      for (const r of gold.runs) {
        const out = await c.completion({ prompt: r.prompt, n_predict: r.greedy_ids.length, ...greedy });
        assert.deepEqual([...out.tokens], r.greedy_ids, `${gold.model}: ${r.prompt}`);
      }
    };
    await run(withA);
    assert.deepEqual(c.getLoadedLoraAdapters(), [{ path: `${dir}/lora-A.gguf`, scaled: 1 }]);
    await c.applyLoraAdapters([{ path: `${dir}/lora-B.gguf`, scaled: 0.7 }]);
    await run(stacked);
    await c.removeLoraAdapters();
    await run(base);
    // Synchronous, as llama.node's: a file that cannot be used throws at the call.
    assert.throws(() => c.applyLoraAdapters([{ path: `${dir}/missing.gguf` }]), /missing\.gguf/);
    await run(base);
  } finally {
    await c.release();
  }
});

test('model info, system info, bench and loadLlamaModelInfo', async () => {
  const i = ctx.getModelInfo();
  assert.match(i.desc, /llama/);
  assert.ok(i.nParams > 0 && i.size > 0 && i.nEmbd > 0);
  assert.equal(i.metadata['general.architecture'], 'llama');
  assert.equal(typeof ctx.getSystemInfo(), 'string');
  const b = await ctx.bench(64, 16, 2, 1);
  assert.equal(b.pp, 64);
  assert.ok(b.speedPp > 0 && b.speedTg > 0);
  const meta = await loadLlamaModelInfo(stories);
  assert.equal(meta['general.architecture'], 'llama');
  assert.equal(meta['tokenizer.ggml.tokens'], undefined);
});
