// Misuse of loom-node/node-llama-cpp gives node-llama-cpp's kinds of errors, never a crash.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stories } from './helpers.mjs';
import nlc from '../lib/node-llama-cpp.js';

const { getLlama, LlamaChatSession, LlamaCompletion, LlamaGrammar, DisposedError, defineChatSessionFunction, UnsupportedError } = nlc;

async function setup(contextSize = 256) {
  const llama = await getLlama({ logLevel: nlc.LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: stories });
  const context = await model.createContext({ contextSize, sequences: 2 });
  return { llama, model, context };
}

test('abort: AbortError (the signal\'s reason); stopOnAbortSignal keeps the text', async () => {
  const { model, context } = await setup();
  const session = new LlamaChatSession({ contextSequence: context.getSequence() });
  const ac = new AbortController();
  const p = session.prompt('Once upon a time', { maxTokens: 200, signal: ac.signal, onTextChunk: () => ac.abort() });
  await assert.rejects(p, (e) => e.name === 'AbortError');
  const ac2 = new AbortController();
  const text = await session.prompt('Once upon a time', { maxTokens: 200, signal: ac2.signal, stopOnAbortSignal: true, onTextChunk: () => ac2.abort() });
  assert.equal(typeof text, 'string');
  const meta = await session.promptWithMeta('Hi', { maxTokens: 4, signal: AbortSignal.abort(), stopOnAbortSignal: true });
  assert.equal(meta.stopReason, 'abort');
  await model.dispose();
});

test('dispose during a prompt: one DisposedError per request, dispose() waits for them, no unhandled rejection', async () => {
  const unhandled = [];
  const onUnhandled = (e) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  try {
    const { model, context } = await setup();
    const session = new LlamaChatSession({ contextSequence: context.getSequence() });
    let chunks = 0;
    const p = session.prompt('Once upon a time', { maxTokens: 200, onTextChunk: () => { chunks++; session.dispose(); } });
    await assert.rejects(p, DisposedError);
    assert.ok(chunks >= 1);
    await assert.rejects(session.prompt('x'), DisposedError);
    // A completion on another sequence, cancelled by the context's dispose: its promise rejects
    // once, with DisposedError, before context.dispose() resolves (node-llama-cpp's order).
    const c = new LlamaCompletion({ contextSequence: context.getSequence() });
    const events = [];
    let disposing = null;
    // disposed from its first text chunk: certainly in flight
    const p2 = c.generateCompletion('Once upon a time', { maxTokens: 200, onTextChunk: () => { disposing ??= context.dispose().then(() => events.push('disposed')); } });
    const settled2 = p2.then(() => events.push('resolved'), (e) => events.push(e));
    // one more, queued behind the first on the same sequence
    const c2 = new LlamaCompletion({ contextSequence: c._sequence });
    const p3 = c2.generateCompletion('Lily', { maxTokens: 50 });
    const settled3 = p3.then(() => events.push('resolved'), (e) => events.push(e));
    await Promise.all([settled2, settled3]);
    assert.ok(disposing, 'no text chunk came');
    await disposing;
    assert.equal(events.length, 3, events.map(String).join(', '));
    assert.ok(events[0] instanceof DisposedError && events[1] instanceof DisposedError, events.map(String).join(', '));
    assert.equal(events[2], 'disposed');
    assert.throws(() => context.getSequence(), DisposedError);
    await assert.rejects(c.generateCompletion('x'), DisposedError);
    await model.dispose();
    assert.throws(() => model.tokenize('x'), DisposedError);
    await assert.rejects(model.createContext(), DisposedError);
    // model.dispose() during a prompt: the same
    const s2 = await setup();
    const session2 = new LlamaChatSession({ contextSequence: s2.context.getSequence() });
    const p4 = session2.prompt('Once upon a time', { maxTokens: 200 });
    const settled4 = p4.then(() => 'resolved', (e) => e);
    await s2.model.dispose();
    const r4 = await settled4;
    assert.ok(r4 instanceof DisposedError || r4 === 'resolved', String(r4));
    // late rejections would arrive after a turn of the event loop
    await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

test('a grammar that does not parse throws at construction, also when the model it was checked with is gone', async () => {
  const { llama, model } = await setup();
  assert.throws(() => new LlamaGrammar(llama, { grammar: 'root ::= undefined-rule' }), /undefined rule/i);
  await assert.rejects(llama.createGrammar({ grammar: 'root ::= "unterminated' }));
  // a second Llama (own logger options) with its own model; the first model disposed
  const llama2 = await getLlama({ logLevel: nlc.LlamaLogLevel.error, logger: () => {} });
  const model2 = await llama2.loadModel({ modelPath: stories });
  await model.dispose();
  assert.throws(() => new LlamaGrammar(llama, { grammar: 'root ::= undefined-rule' }), /undefined rule/i);
  assert.throws(() => new LlamaGrammar(llama2, { grammar: 'root ::= undefined-rule' }), /undefined rule/i);
  const good = new LlamaGrammar(llama, { grammar: 'root ::= "yes" | "no"' });
  // the grammar works on the other model's context
  const ctx = await model2.createContext({ contextSize: 128 });
  const c = new LlamaCompletion({ contextSequence: ctx.getSequence() });
  const out = await c.generateCompletion('Is it?', { grammar: good, maxTokens: 8 });
  assert.ok(out === 'yes' || out === 'no', out);
  await model2.dispose();
  // no model loaded at all: construction does not crash; a bad grammar rejects the prompt using it
  const bad = new LlamaGrammar(llama2, { grammar: 'root ::= undefined-rule' });
  const model3 = await llama2.loadModel({ modelPath: stories });
  const ctx3 = await model3.createContext({ contextSize: 128 });
  const c3 = new LlamaCompletion({ contextSequence: ctx3.getSequence() });
  await assert.rejects(c3.generateCompletion('x', { grammar: bad, maxTokens: 4 }), /undefined rule/i);
  await model3.dispose();
});

test('a function that throws rejects the prompt with its error; the session goes on', async () => {
  const { model, context } = await setup(1024);
  const session = new LlamaChatSession({ contextSequence: context.getSequence() });
  const functions = {
    explode: defineChatSessionFunction({ description: 'Explodes', params: { type: 'object', properties: { why: { type: 'string' } } }, handler() { throw new Error('boom'); } }),
  };
  // loom's tool_choice "required" (a test hook) forces the call on this tiny model.
  await assert.rejects(session.promptWithMeta('Call explode', { functions, maxTokens: 300, repeatPenalty: false, _loomToolChoice: 'required' }), /boom/);
  // an async handler that rejects: the same
  functions.explode = defineChatSessionFunction({ description: 'Explodes', params: { type: 'object', properties: { why: { type: 'string' } } }, async handler() { throw new TypeError('async boom'); } });
  await assert.rejects(session.promptWithMeta('Call explode', { functions, maxTokens: 300, repeatPenalty: false, _loomToolChoice: 'required' }), (e) => e instanceof TypeError && /async boom/.test(e.message));
  // the failed prompts left no trace in the history
  assert.deepEqual(session.getChatHistory().map((h) => h.type), ['system']);
  const ok = await session.prompt('Hi', { maxTokens: 4 });
  assert.equal(typeof ok, 'string');
  await model.dispose();
});

test('forced function call: executed with schema-shaped params, result fed back', async () => {
  const { model, context } = await setup(1024);
  const session = new LlamaChatSession({ contextSequence: context.getSequence() });
  const seen = [];
  const functions = {
    getWeather: defineChatSessionFunction({ description: 'Weather', params: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, handler({ city }) { seen.push(city); return { city, t: 21 }; } }),
  };
  const meta = await session.promptWithMeta('Weather in Paris?', { functions, maxTokens: 400, maxParallelFunctionCalls: 1, repeatPenalty: false, _loomToolChoice: 'required' });
  const calls = meta.response.filter((r) => typeof r === 'object' && r.type === 'functionCall');
  assert.ok(calls.length >= 1, JSON.stringify(meta));
  assert.equal(typeof calls[0].params.city, 'string');
  assert.deepEqual(calls[0].result, { city: calls[0].params.city, t: 21 });
  assert.equal(seen.length, calls.length);
  assert.ok(['eogToken', 'maxTokens'].includes(meta.stopReason), meta.stopReason);
  // fed back: the generation after the call had the result in its prompt
  const evaluated = model.detokenize(session.sequence.contextTokens, true);
  assert.ok(evaluated.includes('<tool_response>') && evaluated.includes('"t":21'), evaluated.slice(-600));
  // the history has the call with its result
  const last = session.getChatHistory().at(-1);
  assert.equal(last.type, 'model');
  assert.deepEqual(last.response.filter((r) => typeof r === 'object').map((r) => r.result), calls.map((c) => c.result));
  await model.dispose();
});

test('infill on a model without FIM tokens: UnsupportedError; no sequences left: Error', async () => {
  const { model, context } = await setup();
  const c = new LlamaCompletion({ contextSequence: context.getSequence() });
  assert.equal(c.infillSupported, false);
  await assert.rejects(c.generateInfillCompletion('a', 'b'), UnsupportedError);
  context.getSequence();
  assert.throws(() => context.getSequence(), /No sequences left/);
  await model.dispose();
});

test('state files: a missing, corrupt or other model\'s file is an Error; no tokens, a disposed sequence, no acceptRisk refused', async () => {
  const fs = await import('node:fs');
  const os = await import('node:os');
  const path = await import('node:path');
  const { model, context } = await setup();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-nlc-misuse-'));
  const seq = context.getSequence();
  await assert.rejects(seq.saveStateToFile(path.join(dir, 'empty.bin')), /no tokens/);
  await assert.rejects(seq.loadStateFromFile(path.join(dir, 'missing.bin'), { acceptRisk: true }), (e) => e instanceof Error && /Failed to load/.test(e.message));
  fs.writeFileSync(path.join(dir, 'corrupt.bin'), Buffer.from('not a state file at all, just bytes'));
  await assert.rejects(seq.loadStateFromFile(path.join(dir, 'corrupt.bin'), { acceptRisk: true }), /Failed to load/);
  await assert.rejects(seq.loadStateFromFile(path.join(dir, 'corrupt.bin')), /acceptRisk/);
  // a good file, truncated
  const session = new LlamaChatSession({ contextSequence: seq });
  await session.prompt('Tom had a dog.', { maxTokens: 8 });
  const good = path.join(dir, 'good.bin');
  await seq.saveStateToFile(good);
  const bytes = fs.readFileSync(good);
  fs.writeFileSync(path.join(dir, 'cut.bin'), bytes.subarray(0, bytes.length >> 1));
  const seq2 = context.getSequence();
  await assert.rejects(seq2.loadStateFromFile(path.join(dir, 'cut.bin'), { acceptRisk: true }), /Failed to load/);
  assert.equal(seq2.contextTokens.length, 0);
  seq2.dispose();
  await assert.rejects(seq2.saveStateToFile(good), DisposedError);
  await assert.rejects(seq2.loadStateFromFile(good, { acceptRisk: true }), DisposedError);
  // another model's context refuses the file
  const { model: helpers } = await import('./helpers.mjs');
  const other = await (await getLlama({ logLevel: nlc.LlamaLogLevel.error })).loadModel({ modelPath: helpers('llama-2-tiny-random.gguf') });
  const otherCtx = await other.createContext({ contextSize: 256 });
  await assert.rejects(otherCtx.getSequence().loadStateFromFile(good, { acceptRisk: true }), /Failed to load/);
  await other.dispose();
  // the sequence still works after the failures
  assert.equal(typeof (await session.prompt('And then?', { maxTokens: 4 })), 'string');
  fs.rmSync(dir, { recursive: true, force: true });
  await model.dispose();
});

test('context shift misuse: a system prompt longer than the context, a throwing strategy, dispose while shifting', async () => {
  const { model, context } = await setup(256);
  const long = 'The cat sat on the mat and looked at the dog. '.repeat(40);
  const s1 = new LlamaChatSession({ contextSequence: context.getSequence(), systemPrompt: long });
  await assert.rejects(s1.prompt('Hi', { maxTokens: 8 }), (e) => e instanceof Error && /context size is too small/.test(e.message));
  s1.dispose();
  const s2 = new LlamaChatSession({
    contextSequence: context.getSequence(),
    contextShift: { strategy() { throw new RangeError('strategy failed'); } },
  });
  await assert.rejects(s2.prompt('Once upon a time', { maxTokens: 400 }), (e) => e instanceof RangeError && e.message === 'strategy failed');
  // a strategy returning nothing that fits
  s2.setChatHistory([]);
  const s3 = new LlamaChatSession({ contextSequence: s2.sequence, contextShift: { strategy: ({ chatHistory }) => ({ chatHistory }) } });
  await assert.rejects(s3.prompt('Once upon a time', { maxTokens: 400 }), /context size is too small/);
  // dispose in the middle of a generation that goes past the context's end
  const s4 = new LlamaChatSession({ contextSequence: s2.sequence });
  let n = 0;
  await assert.rejects(s4.prompt('Once upon a time', { maxTokens: 600, onToken: () => { if (++n === 300) s4.dispose(); } }), DisposedError);
  await model.dispose();
});

test('LlamaChat and chat wrappers: disposed objects, bad arguments', async () => {
  const { model, context } = await setup();
  const chat = new nlc.LlamaChat({ contextSequence: context.getSequence() });
  await assert.rejects(chat.generateResponse('not an array'), TypeError);
  chat.dispose();
  assert.equal(chat.disposed, true);
  await assert.rejects(chat.generateResponse([{ type: 'user', text: 'Hi' }]), DisposedError);
  assert.throws(() => new nlc.SpecialToken('NOPE'), TypeError);
  assert.throws(() => nlc.LlamaText.fromJSON(42), TypeError);
  assert.throws(() => new nlc.JinjaTemplateChatWrapper({}), TypeError);
  // a template that does not parse: an Error when the prompt is made, not a crash
  const bad = new nlc.JinjaTemplateChatWrapper({ template: '{% for x in %}' });
  assert.throws(() => bad.generateContextState({ chatHistory: [{ type: 'user', text: 'Hi' }] }), Error);
  const s = new LlamaChatSession({ contextSequence: context.getSequence(), chatWrapper: bad });
  await assert.rejects(s.prompt('Hi', { maxTokens: 4 }), Error);
  assert.throws(() => nlc.resolveChatWrapper(model, { type: 'noSuchWrapper' }), UnsupportedError);
  await model.dispose();
});
