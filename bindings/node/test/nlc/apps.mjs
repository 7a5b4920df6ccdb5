// Small apps for node-llama-cpp's documented use cases, written against its API (node-llama-cpp
// 3.x) and run unchanged against node-llama-cpp itself and loom-node/node-llama-cpp: each takes
// the module and a model path and returns what the app would show, for test/nlc.test.mjs to compare.
const GREEDY = { temperature: 0, repeatPenalty: false };

const llamas = new Map();
const models = new Map();
// One Llama per module, as an app has. maxThreads: node-llama-cpp's default is more threads than a
// small or busy machine has cores (4 on 2 cores here), and llama.cpp's spinning thread pool then
// takes 40 s for what takes 0.15 s on one thread; $LOOM_NLC_THREADS (default 1) for both packages.
export function llamaOf(m) {
  if (!llamas.has(m)) {
    const maxThreads = Number(process.env.LOOM_NLC_THREADS || 1);
    llamas.set(m, m.getLlama({ gpu: false, build: 'never', logLevel: m.LlamaLogLevel.error, maxThreads }));
  }
  return llamas.get(m);
}
// The model, loaded once per module and path (the apps share it; disposeModels() at the end).
export function modelOf(m, modelPath) {
  const key = `${modelPath}`;
  if (!models.has(m)) models.set(m, new Map());
  const mm = models.get(m);
  if (!mm.has(key)) mm.set(key, llamaOf(m).then((llama) => llama.loadModel({ modelPath })));
  return mm.get(key);
}
export async function disposeModels(m) {
  for (const p of models.get(m)?.values() ?? []) await (await p).dispose();
  models.delete(m);
}

// Getting started: load, context, chat session, one prompt.
export async function gettingStarted(m, modelPath) {
  const model = await modelOf(m, modelPath);
  const context = await model.createContext({ contextSize: 512 });
  const session = new m.LlamaChatSession({ contextSequence: context.getSequence() });
  const answer = await session.prompt('Once upon a time', { maxTokens: 24, ...GREEDY });
  const small = await model.createContext({ contextSize: 100, sequences: 2 });
  const smallSizes = [small.contextSize, small.getSequence().contextSize];
  await small.dispose();
  const info = { smallSizes, trainContextSize: model.trainContextSize, bos: model.tokens.bos, eos: model.tokens.eos, nl: model.tokens.nl,
    arch: model.fileInfo.metadata.general.architecture, tokens: model.tokenize('Hello world'),
    text: model.detokenize(model.tokenize('Hello world')), wrapper: session.chatWrapper.wrapperName };
  await context.dispose();
  return { answer, info };
}

// Chat with history: two prompts, the history read back, restored into a new session.
export async function chatWithHistory(m, modelPath) {
  const model = await modelOf(m, modelPath);
  const context = await model.createContext({ contextSize: 512 });
  const sequence = context.getSequence();
  const session = new m.LlamaChatSession({ contextSequence: sequence, systemPrompt: 'You tell stories.' });
  const a1 = await session.prompt('Tom had a dog.', { maxTokens: 12, ...GREEDY });
  const a2 = await session.prompt('What did the dog do?', { maxTokens: 12, ...GREEDY });
  const history = session.getChatHistory();
  session.dispose();
  await sequence.clearHistory();
  const again = new m.LlamaChatSession({ contextSequence: sequence });
  again.setChatHistory(history.slice(0, 3));
  const a2again = await again.prompt('What did the dog do?', { maxTokens: 12, ...GREEDY });
  await context.dispose();
  return { a1, a2, a2again, history };
}

// Streaming: onTextChunk pieces add up to the answer; a completion streams too.
export async function streaming(m, modelPath) {
  const model = await modelOf(m, modelPath);
  const context = await model.createContext({ contextSize: 512, sequences: 2 });
  const session = new m.LlamaChatSession({ contextSequence: context.getSequence() });
  const chunks = [];
  const tokens = [];
  const answer = await session.prompt('Lily went to the park', { maxTokens: 20, ...GREEDY, onTextChunk: (t) => chunks.push(t), onToken: (t) => tokens.push(...t) });
  const completion = new m.LlamaCompletion({ contextSequence: context.getSequence() });
  const cchunks = [];
  const text = await completion.generateCompletion('Once upon a time', { maxTokens: 24, ...GREEDY, onTextChunk: (t) => cchunks.push(t) });
  // an input longer than the context: its start is dropped, the completion goes on
  const longInput = await completion.generateCompletionWithMeta('The cat sat on the mat. '.repeat(60), { maxTokens: 20, ...GREEDY });
  await context.dispose();
  return { answer, joined: chunks.join(''), nTokens: tokens.length, text, cjoined: cchunks.join(''), longInput: [longInput.response, longInput.metadata.stopReason] };
}

// JSON-schema output: a grammar from a schema, the answer parsed with grammar.parse.
export const personSchema = {
  type: 'object',
  properties: { name: { type: 'string' }, age: { type: 'integer' }, happy: { type: 'boolean' }, tags: { type: 'array', items: { type: 'string' } } },
  required: ['name', 'age', 'happy', 'tags'],
};
export async function jsonSchemaOutput(m, modelPath) {
  const llama = await llamaOf(m);
  const model = await modelOf(m, modelPath);
  const context = await model.createContext({ contextSize: 512 });
  const grammar = await llama.createGrammarForJsonSchema(personSchema);
  const session = new m.LlamaChatSession({ contextSequence: context.getSequence() });
  const text = await session.prompt('Describe a person as JSON.', { grammar, maxTokens: 200, ...GREEDY });
  let parsed = null;
  let error = null;
  try {
    parsed = grammar.parse(text);
  } catch (e) {
    error = e.message;
  }
  await context.dispose();
  return { text, parsed, error };
}

// Function calling: functions defined with JSON-schema params; calls are executed and fed back.
export async function functionCalling(m, modelPath) {
  const model = await modelOf(m, modelPath);
  const context = await model.createContext({ contextSize: 1024 });
  const session = new m.LlamaChatSession({ contextSequence: context.getSequence() });
  const calls = [];
  const functions = {
    getWeather: m.defineChatSessionFunction({
      description: 'Weather of a city',
      params: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      handler({ city }) {
        calls.push(city);
        return { city, temperature: 21 };
      },
    }),
  };
  const meta = await session.promptWithMeta('What is the weather in Paris?', { functions, maxTokens: 40, ...GREEDY });
  const fc = meta.response.filter((r) => typeof r === 'object' && r.type === 'functionCall');
  await context.dispose();
  return { responseText: meta.responseText, stopReason: meta.stopReason, calls, functionCalls: fc.map((c) => ({ name: c.name, params: c.params, result: c.result })) };
}

// Embeddings search: embed documents, find the nearest to a query.
export const documents = ['The cat sat on the mat.', 'Lily played in the park with her ball.', 'The sun was hot and the sky was blue.', 'Tom ate an apple.'];
export async function embeddingsSearch(m, modelPath) {
  const model = await modelOf(m, modelPath);
  const ctx = await model.createEmbeddingContext({ contextSize: 256 });
  const vectors = [];
  for (const d of documents) vectors.push((await ctx.getEmbeddingFor(d)).vector.slice());
  const q = await ctx.getEmbeddingFor('A girl with a ball');
  const sims = vectors.map((v) => q.calculateCosineSimilarity(v));
  await ctx.dispose();
  return { vectors, query: q.vector.slice(), best: sims.indexOf(Math.max(...sims)) };
}

// Ranking: rank documents against a query.
export async function ranking(m, modelPath) {
  const model = await modelOf(m, modelPath);
  let out;
  try {
    const ctx = await model.createRankingContext({ contextSize: 256 });
    const ranked = await ctx.rankAndSort('a girl in the park', documents);
    out = { ranked: ranked.map((r) => ({ document: r.document, score: r.score })) };
    await ctx.dispose();
  } catch (e) {
    out = { error: e.message };
  }
  return out;
}

// Context shift: a chat longer than a small context goes on (node-llama-cpp's default strategy
// drops the oldest history and keeps the system prompt); a custom strategy and size are used.
export const shiftPrompts = ['Tom had a dog.', 'What did the dog do?', 'Where did they go?', 'Who did they meet?', 'What happened next?', 'How did it end?', 'Tell me more.', 'And then?'];
export async function contextShift(m, modelPath) {
  const model = await modelOf(m, modelPath);
  const context = await model.createContext({ contextSize: 256 });
  const sequence = context.getSequence();
  const session = new m.LlamaChatSession({ contextSequence: sequence, systemPrompt: 'You tell stories.' });
  const answers = [];
  const stopReasons = [];
  const cached = []; // loom: prompt tokens served from the cache (the window's kept prefix)
  for (const p of shiftPrompts) {
    const meta = await session.promptWithMeta(p, { maxTokens: 60, ...GREEDY });
    answers.push(meta.responseText);
    stopReasons.push(meta.stopReason);
    cached.push(sequence._lastDone?.usage?.cached_tokens ?? null);
  }
  const historyLength = session.getChatHistory().length;
  const window = session.getLastEvaluationContextWindow();
  const firstKept = window?.[0] ?? null;
  // One answer longer than the context: generation goes on past the context's end.
  session.resetChatHistory();
  await sequence.clearHistory();
  let longTokens = 0;
  const long = await session.promptWithMeta('Once upon a time', { maxTokens: 400, ...GREEDY, onToken: (t) => { longTokens += t.length; } });
  session.dispose();
  // A custom strategy: keeps the first system message and the last two messages.
  const calls = [];
  const s2 = new m.LlamaChatSession({
    contextSequence: sequence,
    systemPrompt: 'You tell stories.',
    contextShift: {
      size: 40,
      strategy({ chatHistory, maxTokensCount }) {
        calls.push(maxTokensCount);
        return { chatHistory: [chatHistory[0], ...chatHistory.slice(-2)], metadata: { kept: 3 } };
      },
    },
  });
  const customAnswers = [];
  await sequence.clearHistory();
  for (const p of shiftPrompts.slice(0, 6)) customAnswers.push(await s2.prompt(p, { maxTokens: 60, ...GREEDY }));
  await context.dispose();
  return { answers, stopReasons, cached, historyLength, firstKept, longTokens, longStop: long.stopReason, longLength: long.responseText.length, strategyCalls: calls, customAnswers };
}

// Sequence state files: saved after a prompt, loaded into a fresh context's sequence, the chat
// goes on there with the same greedy answer as in the original sequence.
export async function stateFile(m, modelPath) {
  const { default: fs } = await import('node:fs');
  const { default: os } = await import('node:os');
  const { default: path } = await import('node:path');
  const model = await modelOf(m, modelPath);
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'loom-nlc-state-')), 'state.bin');
  const c1 = await model.createContext({ contextSize: 512 });
  const s1 = new m.LlamaChatSession({ contextSequence: c1.getSequence(), systemPrompt: 'You tell stories.' });
  const a1 = await s1.prompt('Tom had a dog.', { maxTokens: 12, ...GREEDY });
  const history = s1.getChatHistory();
  const savedTokens = s1.sequence.contextTokens.length;
  const { fileSize } = await s1.sequence.saveStateToFile(file);
  const a2 = await s1.prompt('What did the dog do?', { maxTokens: 12, ...GREEDY });
  await c1.dispose();
  const c2 = await model.createContext({ contextSize: 512 });
  const seq = c2.getSequence();
  let refused = null;
  try {
    await seq.loadStateFromFile(file, {});
  } catch (e) {
    refused = e.name;
  }
  await seq.loadStateFromFile(file, { acceptRisk: true });
  const loadedTokens = seq.contextTokens.length;
  const s2 = new m.LlamaChatSession({ contextSequence: seq });
  s2.setChatHistory(history);
  const a2loaded = await s2.prompt('What did the dog do?', { maxTokens: 12, ...GREEDY });
  const cached = seq._lastDone?.usage?.cached_tokens ?? null; // loom's: prompt tokens the loaded cells served
  await c2.dispose();
  fs.rmSync(path.dirname(file), { recursive: true, force: true });
  return { a1, a2, a2loaded, fileSize, savedTokens, loadedTokens, refused, cached };
}

// Function calling with streaming: text chunks add up to the answer, tokens come per token,
// every call's parameter chunks add up to its parameters' JSON.
export async function functionStreaming(m, modelPath) {
  const model = await modelOf(m, modelPath);
  const context = await model.createContext({ contextSize: 1024 });
  const session = new m.LlamaChatSession({ contextSequence: context.getSequence() });
  const functions = {
    getWeather: m.defineChatSessionFunction({
      description: 'Weather of a city',
      params: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      handler({ city }) { return { city, temperature: 21 }; },
    }),
  };
  const run = async (extra) => {
    const chunks = [];
    const tokenCalls = [];
    const params = {};
    const meta = await session.promptWithMeta('What is the weather in Paris?', {
      functions, maxTokens: 200, ...GREEDY, ...extra,
      onTextChunk: (t) => chunks.push(t),
      onToken: (t) => tokenCalls.push(t.length),
      onFunctionCallParamsChunk: (c) => {
        const p = (params[c.callIndex] ??= { name: c.functionName, text: '', done: false, chunks: 0 });
        p.text += c.paramsChunk;
        p.chunks++;
        if (c.done) p.done = true;
      },
    });
    const fc = meta.response.filter((r) => typeof r === 'object' && r.type === 'functionCall');
    session.resetChatHistory();
    return { responseText: meta.responseText, chunks, tokenCalls, params, functionCalls: fc.map((c) => ({ name: c.name, params: c.params })) };
  };
  const free = await run({});
  // loom-only: forces a call on this tiny model (node-llama-cpp ignores the option)
  const forced = await run({ _loomToolChoice: 'required' });
  await context.dispose();
  return { free, forced };
}

// Chat wrapper classes and LlamaText: the prompt of a history through each wrapper (its LlamaText
// and tokens), a session on ChatMLChatWrapper, LlamaText's JSON, text and tokens.
export async function chatWrappers(m, modelPath) {
  const model = await modelOf(m, modelPath);
  const history = [
    { type: 'system', text: 'You tell stories.' }, { type: 'user', text: 'Tom had a dog.' }, { type: 'model', response: ['The dog ran.'] },
    { type: 'system', text: 'Be brief.' }, { type: 'user', text: 'What next?' }, { type: 'model', response: [] },
  ];
  const wrappers = {
    general: new m.GeneralChatWrapper(), chatML: new m.ChatMLChatWrapper(), llama2: new m.Llama2ChatWrapper(), llama3: new m.Llama3ChatWrapper(),
    llama31: new m.Llama3_1ChatWrapper({ todayDate: new Date('2024-07-26T12:00:00Z') }),
    alpaca: new m.AlpacaChatWrapper(), alpacaTitles: new m.AlpacaChatWrapper({ userMessageTitle: 'Q', allowSpecialTokensInTitles: true }),
    falcon: new m.FalconChatWrapper(), falconSpecial: new m.FalconChatWrapper({ allowSpecialTokensInTitles: true }), gemma: new m.GemmaChatWrapper(),
    generalSpecial: new m.GeneralChatWrapper({ allowSpecialTokensInTitles: true, userMessageTitle: 'User' }),
    mistral: new m.MistralChatWrapper(), mistralSpace: new m.MistralChatWrapper({ addSpaceBeforeEos: true }), llama2Space: new m.Llama2ChatWrapper({ addSpaceBeforeEos: true }),
  };
  const out = {};
  for (const [k, w] of Object.entries(wrappers)) {
    const state = w.generateContextState({ chatHistory: history });
    out[k] = { name: w.wrapperName, text: state.contextText.toJSON(), tokens: state.contextText.tokenize(model.tokenizer), stops: state.stopGenerationTriggers.map((t) => t.toJSON()) };
    // the same wrapper on other shapes of history: no system message; adjacent messages; a system
    // message before a model response; a last user message without a response
    out[k].shapes = [
      [{ type: 'user', text: 'Hi' }, { type: 'model', response: ['Yo'] }],
      [{ type: 'user', text: 'U1' }, { type: 'model', response: ['M1'] }, { type: 'user', text: 'U2' }, { type: 'user', text: 'U3' }, { type: 'model', response: ['partial'] }],
      [{ type: 'system', text: 'S' }, { type: 'model', response: ['M'] }, { type: 'system', text: 'S2' }, { type: 'user', text: 'U' }],
      [{ type: 'system', text: 'S1' }, { type: 'system', text: 'S1b' }, { type: 'user', text: 'U1' }, { type: 'model', response: ['M1'] }, { type: 'user', text: 'U2' }, { type: 'model', response: ['M2'] }],
      [{ type: 'user', text: 'U1' }, { type: 'system', text: 'S' }, { type: 'model', response: ['M1'] }],
    ].map((h) => w.generateContextState({ chatHistory: h }).contextText.toJSON());
    out[k].supportsSystemMessages = w.settings.supportsSystemMessages;
    out[k].initial = [w.generateInitialChatHistory(), w.generateInitialChatHistory({ systemPrompt: 'X' })];
  }
  // a wrapper of the app's own: only a name, the base class's format
  class StoryWrapper extends m.ChatWrapper {
    wrapperName = 'Story';
  }
  const story = new StoryWrapper();
  out.subclass = {
    name: story.wrapperName, text: story.generateContextState({ chatHistory: history }).contextText.toJSON(),
    call: story.generateFunctionCall('getWeather', { city: 'Paris', days: [1, 2] }).toJSON(),
    result: story.generateFunctionCallResult('getWeather', { city: 'Paris' }, { temperature: 21 }).toJSON(),
  };
  const context = await model.createContext({ contextSize: 512, sequences: 2 });
  const sequence = context.getSequence();
  const session = new m.LlamaChatSession({ contextSequence: sequence, chatWrapper: new m.ChatMLChatWrapper(), systemPrompt: 'You tell stories.' });
  const a1 = await session.prompt('Tom had a dog.', { maxTokens: 16, ...GREEDY });
  const a2 = await session.prompt('What next?', { maxTokens: 16, ...GREEDY });
  const chatMLPromptStart = sequence.contextTokens.slice(0, 40);
  const storySession = new m.LlamaChatSession({ contextSequence: context.getSequence(), chatWrapper: new StoryWrapper(), systemPrompt: 'You tell stories.' });
  out.subclass.answer = await storySession.prompt('Tom had a dog.', { maxTokens: 16, ...GREEDY });
  out.subclass.promptStart = storySession.sequence.contextTokens.slice(0, 24);
  await context.dispose();
  const t = m.LlamaText(['Hello', new m.SpecialToken('BOS'), ' world', new m.SpecialTokensText('<s>x'), ' z', 3, [' and ', m.LlamaText('more')]]);
  const text = {
    string: t.toString(), json: t.toJSON(), tokens: t.tokenize(model.tokenizer),
    roundTrip: m.LlamaText.compare(m.LlamaText.fromJSON(t.toJSON()), t), plain: m.LlamaText('plain').toJSON(), empty: m.LlamaText().toJSON(),
    isText: m.isLlamaText(t) && t instanceof m.LlamaText && new m.LlamaText('a') instanceof m.LlamaText,
    trimmed: m.LlamaText(['  a ', new m.SpecialTokensText(' b  ')]).trim().toJSON(),
    tokenizeText: m.tokenizeText('Hi there', model.tokenizer),
  };
  return { wrappers: out, a1, a2, chatMLPromptStart, text, resolved: m.resolveChatWrapper(model).wrapperName, resolvedChatML: m.resolveChatWrapper({ type: 'chatML' }).wrapperName };
}

// LlamaChat, the lower-level chat: a response to a history, continued; function calls returned.
export async function llamaChat(m, modelPath) {
  const model = await modelOf(m, modelPath);
  const context = await model.createContext({ contextSize: 1024, sequences: 2 });
  const chat = new m.LlamaChat({ contextSequence: context.getSequence() });
  const history = [{ type: 'system', text: 'You tell stories.' }, { type: 'user', text: 'Tom had a dog.' }];
  const r1 = await chat.generateResponse(history, { maxTokens: 12, ...GREEDY });
  const cont = await chat.generateResponse(r1.lastEvaluation.cleanHistory, { maxTokens: 8, ...GREEDY });
  const chunks = [];
  const r2 = await chat.generateResponse([...r1.lastEvaluation.cleanHistory, { type: 'user', text: 'What did the dog do?' }], { maxTokens: 12, ...GREEDY, onTextChunk: (t) => chunks.push(t) });
  // function calls are returned, not run (a call forced on loom; node-llama-cpp ignores the option)
  let ran = 0;
  const functions = { getWeather: m.defineChatSessionFunction({ description: 'Weather of a city', params: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, handler() { ran++; return 21; } }) };
  const fc = await chat.generateResponse([{ type: 'user', text: 'What is the weather in Paris?' }], { functions, maxTokens: 200, ...GREEDY, _loomToolChoice: 'required' });
  chat.dispose();
  // the same chat through a session
  const session = new m.LlamaChatSession({ contextSequence: context.getSequence(), systemPrompt: 'You tell stories.' });
  const s1 = await session.prompt('Tom had a dog.', { maxTokens: 12, ...GREEDY });
  await context.dispose();
  return {
    r1: r1.response, r1Stop: r1.metadata.stopReason, r1History: r1.lastEvaluation.cleanHistory, cont: cont.response,
    r2: r2.response, r2Joined: chunks.join(''), s1, disposed: chat.disposed,
    functionCalls: fc.functionCalls ?? [], fcStop: fc.metadata.stopReason, ran,
  };
}

// A model with a chat template (copies of the model with tokenizer.chat_template set): the wrapper
// picked for it (ChatML's for a ChatML template, JinjaTemplateChatWrapper for another), the
// template's prompt, stop and answers; a template that refuses system messages; a context shift.
export const templates = {
  chatML: "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
  custom: "{{ bos_token }}{% for message in messages %}{{ '[' + message['role'] + ']: ' + message['content'] + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '[assistant]: ' }}{% endif %}",
  noSystem: "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{{ '<' + message['role'] + '> ' + message['content'] + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<assistant> ' }}{% endif %}",
  // Llama 3's published template
  llama3: "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
  // Gemma's published template (no system role, alternating roles)
  gemma: "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
};
export async function templatedModel(m, modelPath) {
  const { withChatTemplate } = await import('../helpers.mjs');
  const llama = await llamaOf(m);
  const out = {};
  const history = [
    { type: 'system', text: 'You tell stories.' }, { type: 'user', text: 'Tom had a dog.' }, { type: 'model', response: ['The dog ran.'] },
    { type: 'user', text: 'What next?' }, { type: 'user', text: 'Tell me.' }, { type: 'model', response: ['Partial'] },
  ];
  for (const [name, template] of Object.entries(templates)) {
    const model = await llama.loadModel({ modelPath: withChatTemplate(modelPath, template) });
    const jinja = new m.JinjaTemplateChatWrapper({ template });
    const state = jinja.generateContextState({ chatHistory: history });
    const context = await model.createContext({ contextSize: name === 'chatML' ? 256 : 512 });
    const sequence = context.getSequence();
    const session = new m.LlamaChatSession({ contextSequence: sequence, systemPrompt: 'You tell stories.' });
    const answers = [];
    for (const p of ['Tom had a dog.', 'What next?', 'Where did they go?', ...(name === 'chatML' ? ['Who did they meet?', 'And then?'] : [])]) {
      answers.push(await session.prompt(p, { maxTokens: 40, ...GREEDY }));
    }
    out[name] = {
      wrapper: session.chatWrapper.wrapperName, resolved: m.resolveChatWrapper(model).wrapperName,
      text: state.contextText.toJSON(), tokens: state.contextText.tokenize(model.tokenizer), stops: state.stopGenerationTriggers.map((t) => t.toJSON()),
      transformed: state.transformedSystemMessagesToUserMessages, answers, promptStart: sequence.contextTokens.slice(0, 48),
    };
    await context.dispose();
    await model.dispose();
  }
  return out;
}

// The wrapper picked for models without a chat template (Llama 2's for a "<s>" BOS, whatever the
// architecture). llama-2-tiny-random.gguf is left out: node-llama-cpp also guesses from file names
// (that one gets General there), loom does not.
export async function fallbackWrappers(m, modelPath) {
  const { default: path } = await import('node:path');
  const llama = await llamaOf(m);
  const dir = path.dirname(modelPath);
  const out = {};
  for (const f of ['synth-gemma2-tiny-f32.gguf', 'synth-llama-tiny-f32.gguf', 'synth-phi3-tiny-f32.gguf', 'synth-qwen2-tiny-f32.gguf']) {
    const model = await llama.loadModel({ modelPath: path.join(dir, f) });
    const context = await model.createContext({ contextSize: 256 });
    const session = new m.LlamaChatSession({ contextSequence: context.getSequence() });
    out[f] = { resolved: m.resolveChatWrapper(model).wrapperName, session: session.chatWrapper.wrapperName };
    await model.dispose();
  }
  return out;
}
