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

test('dispose during a prompt: DisposedError; disposed objects refuse work', async () => {
  const { model, context } = await setup();
  const session = new LlamaChatSession({ contextSequence: context.getSequence() });
  const p = session.prompt('Once upon a time', { maxTokens: 200, onTextChunk: () => session.dispose() });
  await assert.rejects(p, DisposedError);
  await assert.rejects(session.prompt('x'), DisposedError);
  const c = new LlamaCompletion({ contextSequence: context.getSequence() });
  const p2 = c.generateCompletion('Once upon a time', { maxTokens: 200 });
  await context.dispose();
  await assert.rejects(p2, DisposedError);
  assert.throws(() => context.getSequence(), DisposedError);
  await model.dispose();
  assert.throws(() => model.tokenize('x'), DisposedError);
  await assert.rejects(model.createContext(), DisposedError);
});

test('a grammar that does not parse throws at construction', async () => {
  const { llama, model } = await setup();
  assert.throws(() => new LlamaGrammar(llama, { grammar: 'root ::= undefined-rule' }), /undefined rule/);
  await assert.rejects(llama.createGrammar({ grammar: 'root ::= "unterminated' }));
  await model.dispose();
});

test('a function that throws rejects the prompt with its error; the session goes on', async () => {
  const { model, context } = await setup(1024);
  const session = new LlamaChatSession({ contextSequence: context.getSequence() });
  const functions = {
    explode: defineChatSessionFunction({ description: 'Explodes', params: { type: 'object', properties: { why: { type: 'string' } } }, handler() { throw new Error('boom'); } }),
  };
  // loom's tool_choice "required" (a test hook) forces the call on this tiny model.
  await assert.rejects(session.promptWithMeta('Call explode', { functions, maxTokens: 300, _loomToolChoice: 'required' }), /boom/);
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
  const meta = await session.promptWithMeta('Weather in Paris?', { functions, maxTokens: 300, _loomToolChoice: 'required' });
  const calls = meta.response.filter((r) => typeof r === 'object' && r.type === 'functionCall');
  assert.ok(calls.length >= 1, JSON.stringify(meta));
  assert.equal(typeof calls[0].params.city, 'string');
  assert.deepEqual(calls[0].result, { city: calls[0].params.city, t: 21 });
  assert.equal(seen.length, calls.length);
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
