'use strict';
// loom-node's second entry point, `loom-node/node-llama-cpp`: node-llama-cpp 3.x's public API
// (getLlama, LlamaModel, LlamaContext, LlamaChatSession, LlamaCompletion, grammars, function
// calling, embeddings, ranking) over the same addon and scheduler as lib/index.js. Written for
// loom from node-llama-cpp's documented API and type declarations; see README.md, "Migrating from
// node-llama-cpp", for what is the same, what differs and what is missing.
//
// Shape of the mapping:
//   - llama.loadModel() loads the weights once (the addon's load with no_context);
//     model.createContext() is a scheduler of its own on those weights (the addon's fork), with
//     `sequences` slots sharing contextSize * sequences KV cells; each sequence is a stream of
//     requests to that scheduler, whose prefix cache keeps the conversation's tokens between
//     prompts (node-llama-cpp keeps them in the sequence's own state);
//   - LlamaChatSession renders the chat with the model's own Jinja template, inside loom (the
//     scheduler's "messages" requests; tool calls are parsed by loom's tool-call parser). A model
//     without a template gets node-llama-cpp's fallback formats (Llama 2's [INST] format for llama
//     models, the "### Human / ### Assistant" format for others), tokenized here as
//     node-llama-cpp tokenizes them, so that a greedy answer is the same token for token;
//   - everything asynchronous rejects with node-llama-cpp's kinds of errors: the signal's reason
//     (an AbortError DOMException) on abort, DisposedError on disposed objects, Error otherwise.
const fs = require('node:fs');
const os = require('node:os');
const native = require('./native.js');
const {
  LlamaText, SpecialToken, SpecialTokensText, isLlamaText, tokenizeText, ChatWrapper, GeneralChatWrapper, ChatMLChatWrapper,
  AlpacaChatWrapper, FalconChatWrapper, GemmaChatWrapper, MistralChatWrapper,
  Llama2ChatWrapper, Llama3ChatWrapper, Llama3_1ChatWrapper, JinjaTemplateChatWrapper, specializedForTemplate, stopStrings,
  DEFAULT_SYSTEM_PROMPT,
} = require('./nlc-text.js');

const disposeSymbol = Symbol.dispose ?? Symbol.for('nodejs.dispose');
const asyncDisposeSymbol = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

// ---- errors ------------------------------------------------------------------------------------

class DisposedError extends Error {
  constructor() {
    super('Object is disposed');
    this.name = 'DisposedError';
  }
}
class UnsupportedError extends Error {
  constructor(message = 'UnsupportedError') {
    super(message);
    this.name = 'UnsupportedError';
  }
}
class InsufficientMemoryError extends Error {
  constructor(message = 'Insufficient memory') {
    super(message);
    this.name = 'InsufficientMemoryError';
  }
}
class NoBinaryFoundError extends Error {
  constructor(message = 'NoBinaryFoundError') {
    super(message);
    this.name = 'NoBinaryFoundError';
  }
}
class LlamaJsonSchemaValidationError extends Error {
  constructor(message, object, schema) {
    super(message);
    this.name = 'LlamaJsonSchemaValidationError';
    this.object = object;
    this.schema = schema;
  }
}

function abortReason(signal) {
  if (signal && signal.reason !== undefined) return signal.reason;
  return new DOMException('This operation was aborted', 'AbortError');
}

// ---- logging -----------------------------------------------------------------------------------

const LlamaLogLevel = Object.freeze({
  disabled: 'disabled', fatal: 'fatal', error: 'error', warn: 'warn', info: 'info', log: 'log', debug: 'debug',
});
const LOG_ORDER = ['disabled', 'fatal', 'error', 'warn', 'info', 'log', 'debug'];
const LlamaLogLevelGreaterThan = (a, b) => LOG_ORDER.indexOf(a) < LOG_ORDER.indexOf(b);
const LlamaLogLevelGreaterThanOrEqual = (a, b) => LOG_ORDER.indexOf(a) <= LOG_ORDER.indexOf(b);
const LlamaVocabularyType = Object.freeze({ none: 'none', spm: 'spm', bpe: 'bpe', wpm: 'wpm', ugm: 'ugm', rwkv: 'rwkv' });
// loom's levels (debug 0, info 1, warn 2, error 3, none 4) for node-llama-cpp's.
const LOOM_LEVEL = { disabled: 4, fatal: 3, error: 3, warn: 2, info: 1, log: 1, debug: 0 };
const FROM_LOOM = { debug: 'debug', info: 'info', warn: 'warn', error: 'error', none: 'error' };

function defaultLogger(level, message) {
  const text = message.endsWith('\n') ? message.slice(0, -1) : message;
  if (level === 'error' || level === 'fatal') console.error(text);
  else if (level === 'warn') console.warn(text);
  else console.log(text);
}

// ---- the Llama instance --------------------------------------------------------------------------

// Every loaded model of this module (of any Llama), for grammar checks: GBNF parses the same
// against any vocabulary, and a grammar made with a Llama whose models are all disposed is still
// checked against another live one.
const liveModels = new Set();

// Parses a GBNF grammar now (throws loom's message when it does not parse) against a live model:
// the grammar's own Llama's first, then any other; true when checked, false when no model was
// loaded (the grammar is then parsed by the first prompt that uses it, which rejects when it is bad).
function checkGrammar(llama, gbnf) {
  const candidates = [...(llama?._models ?? []), ...liveModels];
  for (const m of candidates) {
    if (m._disposed) continue;
    try {
      m._native.grammarCheck(gbnf);
      return true;
    } catch (err) {
      // a model released meanwhile (its dispose has begun): try the next one
      if (m._disposed || /has been released/.test(String(err?.message))) continue;
      throw err;
    }
  }
  return false;
}

class Llama {
  constructor(options) {
    this._logLevel = options.logLevel ?? LlamaLogLevel.warn;
    this._logger = options.logger ?? defaultLogger;
    this._maxThreads = options.maxThreads ?? 0;
    this._models = new Set();
    this._disposed = false;
    this._applyLog();
  }
  _applyLog() {
    if (this._logLevel === LlamaLogLevel.disabled) {
      native.setLogCallback(null, 4);
      return;
    }
    native.setLogCallback((level, text) => {
      const l = FROM_LOOM[level] ?? 'info';
      if (!LlamaLogLevelGreaterThanOrEqual(l, this._logLevel)) return;
      try {
        this._logger(l, text);
      } catch {
        // a logger that throws is ignored, as a log line cannot fail an operation
      }
    }, LOOM_LEVEL[this._logLevel] ?? 2);
  }
  get logLevel() { return this._logLevel; }
  set logLevel(v) {
    this._logLevel = v;
    this._applyLog();
  }
  get logger() { return this._logger; }
  set logger(fn) {
    this._logger = fn;
    this._applyLog();
  }
  get disposed() { return this._disposed; }
  get gpu() { return false; }
  get supportsGpuOffloading() { return false; }
  get supportsMmap() { return true; }
  get gpuSupportsMmap() { return false; }
  get supportsMlock() { return false; }
  get cpuMathCores() { return os.cpus().length; }
  get maxThreads() { return this._maxThreads; }
  set maxThreads(v) { this._maxThreads = v; }
  get numa() { return false; }
  get buildType() { return 'prebuilt'; }
  get cmakeOptions() { return {}; }
  get llamaCppRelease() { return { repo: 'loom', release: String(native.version()) }; }
  get systemInfo() { return `loom ${native.version()} | CPU threads ${os.cpus().length} | ${os.arch()}`; }
  get vramPaddingSize() { return 0; }
  async getVramState() { return { total: 0, used: 0, free: 0, unifiedSize: 0 }; }
  async getSwapState() { return { maxSize: 0, allocated: 0, used: 0 }; }
  async getGpuDeviceNames() { return []; }
  async loadModel(options) {
    if (this._disposed) throw new DisposedError();
    return LlamaModel._load(this, options ?? {});
  }
  async createGrammarForJsonSchema(schema) {
    return new LlamaJsonSchemaGrammar(this, schema);
  }
  async createGrammar(options) {
    return new LlamaGrammar(this, options);
  }
  async dispose() {
    if (this._disposed) return;
    this._disposed = true;
    await Promise.all([...this._models].map((m) => m.dispose()));
  }
  [asyncDisposeSymbol]() { return this.dispose(); }
}

let sharedLlama = null;
async function getLlama(options) {
  const opts = options === 'lastBuild' || options == null ? {} : options;
  if (typeof opts !== 'object') throw new TypeError('getLlama: options must be an object or "lastBuild"');
  if (opts.gpu !== undefined && opts.gpu !== false && opts.gpu !== 'auto') {
    // node-llama-cpp throws when a requested GPU backend is unavailable; loom-node runs on the CPU.
    if (typeof opts.gpu === 'string' || (typeof opts.gpu === 'object' && opts.gpu.type && opts.gpu.type !== 'auto')) {
      const t = typeof opts.gpu === 'string' ? opts.gpu : opts.gpu.type;
      throw new Error(`loom-node: the GPU type "${t}" is not available (loom-node runs on the CPU; use gpu: false or "auto")`);
    }
  }
  if (options == null || options === 'lastBuild') {
    if (!sharedLlama || sharedLlama.disposed) sharedLlama = new Llama(opts);
    return sharedLlama;
  }
  return new Llama(opts);
}

// ---- tokens --------------------------------------------------------------------------------------

const orNull = (t) => (t === undefined || t < 0 ? null : t);

class LlamaModelInfillTokens {
  constructor(model, sp) {
    this._model = model;
    this._sp = sp;
  }
  get prefix() { return orNull(this._sp.fimPre); }
  get suffix() { return orNull(this._sp.fimSuf); }
  get middle() { return orNull(this._sp.fimMid); }
  get prefixString() { return this._model._tokenString(this.prefix); }
  get suffixString() { return this._model._tokenString(this.suffix); }
  get middleString() { return this._model._tokenString(this.middle); }
}

class LlamaModelTokens {
  constructor(model, sp) {
    this._model = model;
    this._sp = sp;
    this._infill = new LlamaModelInfillTokens(model, sp);
  }
  get infill() { return this._infill; }
  get bos() { return orNull(this._sp.bos); }
  get eos() { return orNull(this._sp.eos); }
  get eot() { return orNull(this._sp.eot); }
  get sep() { return orNull(this._sp.sep); }
  get nl() { return orNull(this._sp.nl); }
  get bosString() { return this._model._tokenString(this.bos); }
  get eosString() { return this._model._tokenString(this.eos); }
  get eotString() { return this._model._tokenString(this.eot); }
  get sepString() { return this._model._tokenString(this.sep); }
  get nlString() { return this._model._tokenString(this.nl); }
  get shouldPrependBosToken() { return !!this._sp.addBos && this.bos != null; }
  get shouldAppendEosToken() { return !!this._sp.addEos && this.eos != null; }
}

// A GGUF header as node-llama-cpp's fileInfo: metadata nested by the dots of its keys.
function nestMetadata(entries) {
  const out = {};
  for (const e of entries) {
    const parts = e.key.split('.');
    let o = out;
    for (let i = 0; i < parts.length - 1; i++) {
      if (typeof o[parts[i]] !== 'object' || o[parts[i]] === null) o[parts[i]] = {};
      o = o[parts[i]];
    }
    o[parts[parts.length - 1]] = e.value;
  }
  return out;
}

// ---- model ----------------------------------------------------------------------------------------

class LlamaModel {
  static async _load(llama, options) {
    const modelPath = options.modelPath;
    if (typeof modelPath !== 'string' || modelPath === '') throw new TypeError('loadModel: modelPath must be a string');
    if (!fs.existsSync(modelPath)) throw new Error(`Model file not found: ${modelPath}`);
    const progress = typeof options.onLoadProgress === 'function'
      ? (p) => {
        try { options.onLoadProgress(p / 100); } catch { /* a progress callback cannot fail the load */ }
      }
      : undefined;
    const signal = options.loadSignal;
    if (signal?.aborted) throw abortReason(signal);
    const [ctx, described] = await Promise.all([
      native.load(modelPath, { no_context: true, vocab_only: !!options.vocabOnly }, progress),
      native.describe(modelPath).then(JSON.parse, () => null),
    ]);
    if (signal?.aborted) {
      await ctx.release();
      throw abortReason(signal);
    }
    const model = new LlamaModel(llama, modelPath, ctx, described, options);
    llama._models.add(model);
    liveModels.add(model);
    return model;
  }
  constructor(llama, modelPath, ctx, described, options) {
    this._llama = llama;
    this._path = modelPath;
    this._native = ctx;
    this._info = ctx.info();
    this._described = described;
    this._options = options;
    this._disposed = false;
    this._contexts = new Set();
    this._tokens = new LlamaModelTokens(this, this._info.specialTokens || {});
    this._pieces = new Map();
    const self = this;
    const tokenize = (text, specialTokens, opts) => self.tokenize(text, specialTokens, opts);
    this.tokenizer = Object.assign(tokenize, {
      tokenize,
      detokenize: (tokens, specialTokens, lastTokens) => self.detokenize(tokens, specialTokens, lastTokens),
    });
    this.onDispose = eventRelay();
    let template = null;
    try {
      template = JSON.parse(this._info.chatTemplate);
    } catch {
      template = null;
    }
    this._template = template;
  }
  _ensureNotDisposed() {
    if (this._disposed) throw new DisposedError();
  }
  _tokenString(t) {
    if (t == null || this._disposed) return null;
    return this._native.detokenizeSync([t], true);
  }
  get disposed() { return this._disposed; }
  get llama() { return this._llama; }
  get tokens() { return this._tokens; }
  get filename() { return this._path.split(/[\\/]/).pop(); }
  get fileInfo() {
    const d = this._described;
    const metadata = nestMetadata(d?.metadata ?? []);
    const arch = metadata.general?.architecture ?? this._info.arch;
    return {
      version: d?.gguf_version ?? 3,
      tensorCount: d?.tensors?.length ?? 0,
      metadata,
      architectureMetadata: metadata[arch] ?? {},
      tensorInfo: (d?.tensors ?? []).map((t) => ({ name: t.name, dimensions: t.shape ?? t.dims ?? t.dimensions, ggmlType: t.type, offset: t.offset })),
      metadataSize: 0,
      splicedParts: 1,
      fullTensorInfo: undefined,
    };
  }
  get architecture() { return this._info.arch; }
  get gpuLayers() { return 0; }
  get useMmap() { return true; }
  get size() { return this._info.size; }
  get flashAttentionSupported() { return false; }
  get defaultContextFlashAttention() { return false; }
  get trainContextSize() { return this._info.nCtxTrain; }
  get embeddingVectorSize() { return this._info.nEmbd; }
  get vocabularyType() {
    const m = this._info.metadata['tokenizer.ggml.model'];
    return { llama: 'spm', gpt2: 'bpe', bert: 'wpm', t5: 'ugm', rwkv: 'rwkv', none: 'none' }[m] ?? 'spm';
  }
  get typeDescription() { return this._info.desc; }
  getWarnings() { return []; }
  tokenize(text, specialTokens = false, options) {
    this._ensureNotDisposed();
    if (text === '') return [];
    if (specialTokens === 'builtin') {
      const t = { BOS: this.tokens.bos, EOS: this.tokens.eos, NL: this.tokens.nl, EOT: this.tokens.eot, SEP: this.tokens.sep }[text];
      if (!(text in { BOS: 1, EOS: 1, NL: 1, EOT: 1, SEP: 1 })) throw new Error(`Unknown builtin special token: ${text}`);
      return t == null ? [] : [t];
    }
    if (options === 'trimLeadingSpace') return this._continuation(text, !!specialTokens);
    return Array.from(this._native.tokenizeSync(text, false, !!specialTokens));
  }
  // Tokens of text that continues earlier text: no leading space of its own (SentencePiece
  // vocabularies add one at the start of a text). Tokenized after a newline, which is removed.
  _continuation(text, special) {
    if (special) {
      // Text with control tokens, continuing: tokenized as it would be after the BOS (or EOS)
      // token's text, which is then dropped (node-llama-cpp's tokens for chat-format text).
      const lead = (s) => s.length - s.replace(/^ +/, '').length;
      for (const t of [this.tokens.bos, this.tokens.eos]) {
        const str = this._tokenString(t);
        if (t == null || !str) continue;
        const all = Array.from(this._native.tokenizeSync(str + text, false, true));
        const at = all.indexOf(t);
        if (at >= 0 && at <= 1) {
          const rest = all.slice(at + 1);
          if (lead(this._native.detokenizeSync(rest, true)) === lead(text)) return rest;
        }
        break;
      }
    }
    const nl = Array.from(this._native.tokenizeSync('\n', false, false));
    const all = Array.from(this._native.tokenizeSync('\n' + text, false, special));
    if (nl.length > 0 && nl.every((t, i) => all[i] === t)) {
      const rest = all.slice(nl.length);
      if (!text.startsWith('\n') || this._native.detokenizeSync(rest, special).startsWith('\n')) return rest;
    }
    return Array.from(this._native.tokenizeSync(text, false, special));
  }
  detokenize(tokens, specialTokens = false, lastTokens) {
    this._ensureNotDisposed();
    const list = Array.from(tokens);
    if (list.length === 0) return '';
    if (lastTokens && lastTokens.length) {
      // The text of `tokens` as it continues after `lastTokens` (spacing rules of the vocabulary).
      const prev = Array.from(lastTokens).slice(-16);
      const before = this._native.detokenizeSync(prev, !!specialTokens);
      const both = this._native.detokenizeSync([...prev, ...list], !!specialTokens);
      if (both.startsWith(before)) return both.slice(before.length);
    }
    return this._native.detokenizeSync(list, !!specialTokens);
  }
  isSpecialToken(token) {
    if (token == null) return false;
    return [this.tokens.bos, this.tokens.eos, this.tokens.eot, this.tokens.sep].includes(token);
  }
  isEogToken(token) {
    return token != null && (token === this.tokens.eos || token === this.tokens.eot);
  }
  *iterateAllTokens() {
    for (let i = 0; i < this._info.nVocab; i++) yield i;
  }
  _chatTemplate() {
    return this._template && this._template.has_template ? this._template : null;
  }
  async createContext(options = {}) {
    this._ensureNotDisposed();
    return LlamaContext._create(this, options, {});
  }
  async createEmbeddingContext(options = {}) {
    this._ensureNotDisposed();
    return LlamaEmbeddingContext._create(this, options);
  }
  async createRankingContext(options = {}) {
    this._ensureNotDisposed();
    return LlamaRankingContext._create(this, options);
  }
  async dispose() {
    if (this._disposed) return;
    this._disposed = true;
    await Promise.all([...this._contexts].map((c) => c.dispose()));
    this._llama._models.delete(this);
    liveModels.delete(this);
    await this._native.release();
    this.onDispose.dispatchEvent();
  }
  [asyncDisposeSymbol]() { return this.dispose(); }
}

function eventRelay() {
  const listeners = new Set();
  return {
    createListener(fn) {
      listeners.add(fn);
      return { dispose: () => listeners.delete(fn), [disposeSymbol]: () => listeners.delete(fn) };
    },
    dispatchEvent(v) {
      for (const fn of [...listeners]) {
        try { fn(v); } catch { /* a listener cannot fail a dispose */ }
      }
    },
    clearListeners() { listeners.clear(); },
    get listenerCount() { return listeners.size; },
  };
}

// ---- context and sequences ---------------------------------------------------------------------

// node-llama-cpp's contexts hold at least 256 tokens (per sequence): a smaller contextSize gets 256.
const MIN_CONTEXT_SIZE = 256;
function resolveContextSize(model, v, fallback) {
  if (typeof v === 'number') {
    if (!Number.isInteger(v) || v < 1) throw new RangeError('contextSize must be a positive integer');
    return Math.max(MIN_CONTEXT_SIZE, v);
  }
  const train = model.trainContextSize || fallback;
  const max = typeof v === 'object' && v !== null && v.max ? v.max : Math.min(train, 8192);
  const min = typeof v === 'object' && v !== null && v.min ? v.min : 0;
  return Math.max(MIN_CONTEXT_SIZE, min, Math.min(max, train));
}

function threadsOf(model, threads) {
  if (typeof threads === 'number') return threads;
  if (threads && typeof threads === 'object') return threads.ideal ?? threads.min ?? 0;
  return model._llama._maxThreads || 0;
}

class LlamaContext {
  static async _create(model, options, extra) {
    const sequences = options.sequences ?? 1;
    if (!Number.isInteger(sequences) || sequences < 1) throw new RangeError('sequences must be a positive integer');
    const contextSize = resolveContextSize(model, options.contextSize, 4096);
    const batchSize = options.batchSize ?? Math.min(contextSize * sequences, 512);
    if (options.createSignal?.aborted) throw abortReason(options.createSignal);
    const nctx = await model._native.fork({
      n_ctx: contextSize * sequences,
      n_parallel: sequences,
      n_batch: batchSize,
      n_ubatch: Math.min(batchSize, 512),
      n_threads: threadsOf(model, options.threads),
      ...extra,
    });
    if (model._disposed) {
      await nctx.release();
      throw new DisposedError();
    }
    const ctx = new LlamaContext(model, nctx, contextSize, sequences, batchSize);
    model._contexts.add(ctx);
    return ctx;
  }
  constructor(model, nctx, contextSize, sequences, batchSize) {
    this._model = model;
    this._native = nctx;
    this._contextSize = contextSize;
    this._total = sequences;
    this._batchSize = batchSize;
    this._free = Array.from({ length: sequences }, (_, i) => i);
    this._sequences = new Set();
    this._inflight = new Set(); // settled-promises of the requests not yet settled
    this._disposed = false;
    this.onDispose = eventRelay();
  }
  get disposed() { return this._disposed; }
  get model() { return this._model; }
  get contextSize() { return this._contextSize; }
  get batchSize() { return this._batchSize; }
  get flashAttention() { return false; }
  get stateSize() { return 0; }
  get currentThreads() { return threadsOf(this._model, undefined) || os.cpus().length; }
  get idealThreads() { return this.currentThreads; }
  get totalSequences() { return this._total; }
  get sequencesLeft() { return this._free.length; }
  getSequence(options = {}) {
    if (this._disposed) throw new DisposedError();
    if (this._free.length === 0) throw new Error('No sequences left');
    const id = this._free.shift();
    const seq = new LlamaContextSequence(this, id, options);
    this._sequences.add(seq);
    return seq;
  }
  _release(seq) {
    this._sequences.delete(seq);
    if (!this._disposed) {
      this._free.push(seq._id);
      this._free.sort((a, b) => a - b);
    }
  }
  async dispose() {
    if (this._disposed) return;
    this._disposed = true;
    for (const s of [...this._sequences]) s.dispose();
    this._model._contexts.delete(this);
    // The scheduler stops at once (running requests end as cancelled); dispose() resolves once
    // every request of this context has settled (rejected with DisposedError) and the memory is
    // freed, as node-llama-cpp's context dispose does.
    await Promise.all([this._native.release(), ...this._inflight]);
    this.onDispose.dispatchEvent();
  }
  [asyncDisposeSymbol]() { return this.dispose(); }
}

class TokenMeter {
  constructor() {
    this._in = 0;
    this._out = 0;
  }
  get usedInputTokens() { return this._in; }
  get usedOutputTokens() { return this._out; }
  getState() { return { usedInputTokens: this._in, usedOutputTokens: this._out }; }
  useTokens(n, type) {
    if (type === 'input') this._in += n;
    else this._out += n;
  }
  diff(other) {
    const o = other instanceof TokenMeter ? other : { _in: other.usedInputTokens, _out: other.usedOutputTokens };
    return { usedInputTokens: this._in - o._in, usedOutputTokens: this._out - o._out };
  }
  static useTokens(meters, n, type) {
    for (const m of [].concat(meters || [])) m.useTokens(n, type);
  }
}

class LlamaContextSequence {
  constructor(context, id, options) {
    this._context = context;
    this._id = id;
    this._disposed = false;
    this._tokens = [];
    this._meter = new TokenMeter();
    this._queue = Promise.resolve();
    this._running = new Set(); // cancel functions of the requests in flight
    this._options = options;
    this.onDispose = eventRelay();
  }
  get disposed() { return this._disposed || this._context._disposed; }
  get context() { return this._context; }
  get model() { return this._context._model; }
  get sequenceId() { return this._id; }
  get contextSize() { return this._context.contextSize; }
  get nextTokenIndex() { return this._tokens.length; }
  get contextTokens() { return this._tokens.slice(); }
  get tokenMeter() { return this._meter; }
  get isLoadedToMemory() { return !this.disposed; }
  get tokenPredictor() { return undefined; }
  async clearHistory() {
    if (this.disposed) throw new DisposedError();
    this._tokens = [];
  }
  async eraseContextTokenRanges(ranges) {
    if (this.disposed) throw new DisposedError();
    const drop = new Set();
    for (const r of ranges) for (let i = r.start; i < r.end; i++) drop.add(i);
    this._tokens = this._tokens.filter((_, i) => !drop.has(i));
  }
  // The sequence's state (its tokens and their KV cells, from the scheduler's prefix cache) as a
  // loom session file, after the requests queued on it. Loaded into another sequence (of this
  // model), a prompt that starts with those tokens reuses their cells instead of evaluating them.
  async saveStateToFile(filePath) {
    if (this.disposed) throw new DisposedError();
    if (typeof filePath !== 'string' || filePath === '') throw new TypeError('saveStateToFile: filePath must be a string');
    await this._queue;
    if (this.disposed) throw new DisposedError();
    const tokens = this._tokens.slice();
    if (tokens.length === 0) throw new Error('saveStateToFile: the sequence holds no tokens');
    const saved = await this._context._native.saveSession(filePath, tokens);
    // The last generated token has no cells yet (it was never evaluated): the file holds the rest.
    this._savedTokens = saved;
    return { fileSize: fs.statSync(filePath).size };
  }
  async loadStateFromFile(filePath, acceptRisk) {
    if (this.disposed) throw new DisposedError();
    if (acceptRisk?.acceptRisk !== true) throw new Error('The risk of loading a state file must be accepted: pass {acceptRisk: true}');
    if (typeof filePath !== 'string' || filePath === '') throw new TypeError('loadStateFromFile: filePath must be a string');
    await this._queue;
    if (this.disposed) throw new DisposedError();
    let tokens;
    try {
      tokens = Array.from(await this._context._native.loadSession(filePath));
    } catch (err) {
      throw new Error(`Failed to load the state file "${filePath}": ${err?.message ?? err}`);
    }
    if (tokens.length > this.contextSize) {
      throw new Error(`The state file has ${tokens.length} tokens, more than the sequence's context size (${this.contextSize})`);
    }
    this._tokens = tokens;
  }
  dispose() {
    if (this._disposed) return;
    this._disposed = true;
    for (const cancel of [...this._running]) cancel();
    this._context._release(this);
    this.onDispose.dispatchEvent();
  }
  [disposeSymbol]() { this.dispose(); }
  // One generation request on this sequence, after the ones before it. Resolves with
  // {text, tokens, finish, done}; rejects with the signal's reason on abort (unless
  // stopOnAbortSignal: then it resolves with what was generated), DisposedError when the
  // sequence, its context or its model is disposed meanwhile.
  _generate(req, { onText, onTokens, onParsed, signal, stopOnAbortSignal } = {}) {
    const run = () => new Promise((resolve, reject) => {
      if (this.disposed) return reject(new DisposedError());
      if (signal?.aborted && !stopOnAbortSignal) return reject(abortReason(signal));
      let id = -1;
      let cancelled = false;
      let reason = null; // 'abort' | 'dispose' | {error}
      let text = '';
      const tokens = [];
      let finish = null;
      const cancel = (why) => {
        if (!reason) reason = why;
        cancelled = true;
        if (id >= 0) {
          try { this._context._native.cancel(id); } catch { /* released */ }
        }
      };
      const onDispose = () => cancel('dispose');
      const onAbort = () => cancel('abort');
      this._running.add(onDispose);
      if (signal) {
        if (signal.aborted) cancelled = true, reason = 'abort';
        else signal.addEventListener('abort', onAbort, { once: true });
      }
      const cleanup = () => {
        this._running.delete(onDispose);
        if (signal) signal.removeEventListener('abort', onAbort);
      };
      const call = (fn, ...args) => {
        if (!fn || reason) return;
        try {
          fn(...args);
        } catch (err) {
          cancel({ error: err });
        }
      };
      const onEvent = (kind, choice, token, piece, json) => {
        if (kind === 0) {
          tokens.push(token);
          call(onTokens, [token]);
          if (onParsed && json) call(onParsed, JSON.parse(json), token);
          if (piece) {
            text += piece;
            call(onText, piece);
          }
        } else if (kind === 1) {
          finish = JSON.parse(json);
          if (piece) {
            text += piece;
            call(onText, piece);
          }
        } else if (kind === 2) {
          cleanup();
          const done = JSON.parse(json);
          this._lastDone = done;
          const gen = finish?.tokens ?? tokens;
          // the sequence's evaluated tokens: the last generated one never was (node-llama-cpp's
          // contextTokens leave it out too)
          this._tokens = [...(done.prompt_ids ?? []), ...gen.slice(0, -1)];
          this._meter.useTokens(done.usage?.prompt_tokens ?? 0, 'input');
          this._meter.useTokens(done.usage?.completion_tokens ?? gen.length, 'output');
          if (reason && typeof reason === 'object') return reject(reason.error);
          if (reason === 'dispose' || (this.disposed && finish?.reason === 'cancelled')) return reject(new DisposedError());
          if (reason === 'abort' && !stopOnAbortSignal) return reject(abortReason(signal));
          resolve({ text: finish?.text ?? text, tokens: gen, finish: finish ?? {}, done, aborted: reason === 'abort' });
        } else {
          cleanup();
          if (this.disposed) return reject(new DisposedError());
          reject(new Error(piece));
        }
      };
      try {
        id = this._context._native.submit(JSON.stringify(req), onEvent, true);
      } catch (err) {
        cleanup();
        return reject(this.disposed ? new DisposedError() : err);
      }
      if (cancelled) this._context._native.cancel(id);
    });
    const p = this._queue.then(run, run);
    const settled = p.then(() => {}, () => {});
    this._queue = settled;
    // The context's dispose() waits for its requests to settle (their promises reject first).
    const inflight = this._context._inflight;
    inflight.add(settled);
    settled.then(() => inflight.delete(settled));
    return p;
  }
}

// ---- sampling options -------------------------------------------------------------------------------

function samplingOf(o, model) {
  const req = {};
  // node-llama-cpp's defaults: greedy (temperature 0), top-k 40, top-p 0.95, min-p 0.
  req.temperature = o.temperature ?? 0;
  req.top_k = o.topK ?? 40;
  req.top_p = o.topP ?? 0.95;
  req.min_p = o.minP ?? 0;
  if (Number.isFinite(o.seed)) req.seed = Math.max(0, Math.floor(o.seed));
  if (o.xtc) {
    req.xtc_probability = o.xtc.probability;
    req.xtc_threshold = o.xtc.threshold;
  }
  // Repeat penalty: node-llama-cpp's default ({}) is 1.1 over the last 64 tokens.
  const rp = o.repeatPenalty;
  if (rp !== false) {
    const r = rp ?? {};
    req.penalty_repeat = r.penalty ?? 1.1;
    req.penalty_last_n = r.lastTokens ?? 64;
    if (r.frequencyPenalty !== undefined) req.penalty_freq = r.frequencyPenalty;
    if (r.presencePenalty !== undefined) req.penalty_present = r.presencePenalty;
  }
  if (o.dryRepeatPenalty && o.dryRepeatPenalty.strength) {
    req.dry_multiplier = o.dryRepeatPenalty.strength;
    if (o.dryRepeatPenalty.base !== undefined) req.dry_base = o.dryRepeatPenalty.base;
    if (o.dryRepeatPenalty.allowedLength !== undefined) req.dry_allowed_length = o.dryRepeatPenalty.allowedLength;
    if (o.dryRepeatPenalty.lastTokens !== undefined) req.dry_penalty_last_n = o.dryRepeatPenalty.lastTokens;
  }
  if (o.tokenBias) {
    const tb = typeof o.tokenBias === 'function' ? o.tokenBias() : o.tokenBias;
    if (tb && tb._biases) req.logit_bias = [...tb._biases].map(([t, b]) => [t, b === 'never' ? false : b]);
  }
  if (o.maxTokens !== undefined && o.maxTokens !== null) {
    if (!Number.isInteger(o.maxTokens) || o.maxTokens < 0) throw new RangeError('maxTokens must be a non-negative integer');
    req.n_predict = o.maxTokens === 0 ? -1 : o.maxTokens;
  } else {
    req.n_predict = -1;
  }
  if (o.grammar) {
    if (!(o.grammar instanceof LlamaGrammar)) throw new TypeError('grammar must be a LlamaGrammar');
    req.grammar = o.grammar.grammar;
    if (o.grammar._stops.length) req.stop = [...o.grammar._stops];
  }
  const stops = [...(o.customStopTriggers ?? []), ...(o.stopGenerationTriggers ?? [])].filter((s) => typeof s === 'string' && s);
  if (stops.length) req.stop = [...(req.stop ?? []), ...stops];
  void model;
  return req;
}

class TokenBias {
  constructor(tokenizer) {
    this._tokenizer = tokenizer;
    this._biases = new Map();
  }
  set(input, bias) {
    const b = typeof bias === 'object' && bias !== null ? (bias.logit ?? Math.log(bias.probability)) : bias;
    const tokens = typeof input === 'number' ? [input] : this._tokenizer(typeof input === 'string' ? input : String(input), false, 'trimLeadingSpace');
    for (const t of tokens) this._biases.set(t, b);
    return this;
  }
  static for(modelOrTokenizer) {
    return new TokenBias(modelOrTokenizer.tokenizer ?? modelOrTokenizer);
  }
}

// ---- grammars -----------------------------------------------------------------------------------------

class LlamaGrammar {
  constructor(llama, { grammar, stopGenerationTriggers = [], trimWhitespaceSuffix = false, rootRuleName } = {}) {
    if (typeof grammar !== 'string') throw new TypeError('LlamaGrammar: grammar must be a GBNF string');
    this._llama = llama;
    this._grammar = rootRuleName && rootRuleName !== 'root' ? `root ::= ${rootRuleName}\n${grammar}` : grammar;
    this._stops = stopGenerationTriggers.filter((s) => typeof s === 'string');
    this._trim = trimWhitespaceSuffix;
    // The grammar is parsed now against any loaded model (GBNF does not depend on the vocabulary);
    // without one it is parsed when first used, and a bad one rejects that prompt.
    this._checked = checkGrammar(llama, this._grammar);
  }
  get grammar() { return this._grammar; }
  get rootRuleName() { return 'root'; }
  get stopGenerationTriggers() { return this._stops; }
  get trimWhitespaceSuffix() { return this._trim; }
  static async getFor(llama, type) {
    if (type === 'json') return new LlamaJsonSchemaGrammar(llama, {});
    throw new UnsupportedError(`loom-node has no built-in grammar "${type}"`);
  }
}

function typeOfJson(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

function validateAgainstSchema(value, schema, where, defs) {
  if (schema == null || typeof schema !== 'object') return;
  if (schema.$ref) {
    const name = schema.$ref.replace(/^#\/\$defs\//, '');
    return validateAgainstSchema(value, defs?.[name], where, defs);
  }
  const fail = (msg) => {
    throw new LlamaJsonSchemaValidationError(`${where}: ${msg}`, value, schema);
  };
  if ('const' in schema && JSON.stringify(value) !== JSON.stringify(schema.const)) fail(`expected ${JSON.stringify(schema.const)}`);
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) fail(`expected one of ${JSON.stringify(schema.enum)}`);
  const alts = schema.oneOf ?? schema.anyOf;
  if (alts) {
    for (const s of alts) {
      try {
        validateAgainstSchema(value, s, where, defs);
        return;
      } catch {
        // try the next one
      }
    }
    fail('matches none of the alternatives');
  }
  if (schema.type) {
    const types = [].concat(schema.type);
    const t = typeOfJson(value);
    if (!types.includes(t) && !(t === 'integer' && types.includes('number'))) fail(`expected type ${types.join(' | ')}, got ${t}`);
  }
  if (typeOfJson(value) === 'object' && schema.properties) {
    for (const k of schema.required ?? Object.keys(schema.properties)) if (!(k in value)) fail(`missing property "${k}"`);
    for (const [k, v] of Object.entries(value)) {
      if (schema.properties[k]) validateAgainstSchema(v, schema.properties[k], `${where}.${k}`, defs);
      else if (schema.additionalProperties === false) fail(`unexpected property "${k}"`);
    }
  }
  if (Array.isArray(value) && schema.items) value.forEach((v, i) => validateAgainstSchema(v, schema.items, `${where}[${i}]`, defs));
  if (Array.isArray(value) && schema.minItems !== undefined && value.length < schema.minItems) fail(`fewer than ${schema.minItems} items`);
  if (Array.isArray(value) && schema.maxItems !== undefined && value.length > schema.maxItems) fail(`more than ${schema.maxItems} items`);
}

// ---- JSON schema grammars as node-llama-cpp writes them ---------------------------------------
// node-llama-cpp's createGrammarForJsonSchema accepts the same JSON with a narrower whitespace than
// loom's generic JSON-schema grammar: after "{", "[" and "," a newline with the scope's indent (4
// spaces or a tab per level) or one optional space, "[ ]?" after a key's colon, every property in
// its order, and after the value "\n\n\n\n" then newlines (a stop trigger, trimmed). A grammar of
// the same language makes a greedy answer the same token for token, so the schemas of that subset
// get it (written here from the grammars node-llama-cpp 3.x produces); the others (formats, $ref,
// additionalProperties, anyOf/allOf, ...) get loom's generic grammar. Inlined: no recursion.
const NLC_STRING_CHAR = '([^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ["\\\\/bfnrt] | "\\\\u" [0-9a-fA-F]{4})';
function gbnfLiteral(text) {
  return JSON.stringify(text); // a GBNF literal: JSON's escapes are GBNF's
}
function nlcWhitespace(scope, newLine = 'before') {
  const pad = scope === 0 ? [] : [`(${scope * 4 === 4 ? '"    "' : `" "{${scope * 4}}`} | ${scope === 1 ? '"\\t"' : `"\\t"{${scope}}`})`];
  const values = [...(newLine === 'before' ? ['[\\n]'] : []), ...pad];
  return `(${values.join(' ')} | [ ]?)`;
}
function nlcRepeat(value, sep, min, max) {
  if (max === 0) return '';
  if (min === 0 && max === 1) return `(${value})?`;
  if (min === 1 && max === 1) return value;
  if (min === 0 && max == null) return `(${value} (${sep} ${value})*)?`;
  if (max == null) return `${value} (${sep} ${value}){${Math.max(0, min - 1)},}`;
  if (min === 0) return `(${value} (${sep} ${value}){0,${max - 1}})?`;
  return `${value} (${sep} ${value}){${min - 1},${max - 1}}`;
}
function nlcLiteralGbnf(v) {
  if (typeof v === 'string') return gbnfLiteral(JSON.stringify(v));
  if (v === null || typeof v === 'boolean' || typeof v === 'number') return gbnfLiteral(JSON.stringify(v));
  throw new UnsupportedError('literal');
}
function nlcValueGbnf(schema, scope) {
  if (schema == null || typeof schema !== 'object' || Array.isArray(schema)) throw new UnsupportedError('schema');
  const known = new Set(['type', 'properties', 'required', 'items', 'prefixItems', 'minItems', 'maxItems', 'minLength', 'maxLength', 'enum', 'const', 'oneOf', 'description', 'title', 'additionalProperties']);
  for (const k of Object.keys(schema)) if (!known.has(k)) throw new UnsupportedError(k);
  if (schema.oneOf) {
    const alts = schema.oneOf.map((x) => nlcValueGbnf(x, scope));
    return alts.length === 1 ? alts[0] : `( ${alts.join(' | ')} )`;
  }
  if ('const' in schema) return nlcLiteralGbnf(schema.const);
  if (schema.enum) {
    const alts = schema.enum.map(nlcLiteralGbnf);
    return alts.length === 1 ? alts[0] : `( ${alts.join(' | ')} )`;
  }
  const types = [].concat(schema.type ?? []);
  if (types.length !== 1) {
    if (types.length === 0) throw new UnsupportedError('any');
    return `( ${types.map((t) => nlcValueGbnf({ ...schema, type: t }, scope)).join(' | ')} )`;
  }
  const type = types[0];
  if (type === 'object') {
    if (schema.additionalProperties != null && schema.additionalProperties !== false) throw new UnsupportedError('additionalProperties');
    const items = [];
    for (const [k, v] of Object.entries(schema.properties ?? {})) {
      if (items.length) items.push(`"," ${nlcWhitespace(scope + 1)}`);
      items.push(`${gbnfLiteral(JSON.stringify(k))} ":" [ ]? ${nlcValueGbnf(v, scope + 1)}`);
    }
    return ['"{"', nlcWhitespace(scope + 1), ...items, nlcWhitespace(scope), '"}"'].join(' ');
  }
  if (type === 'array') {
    const sep = `"," ${nlcWhitespace(scope + 1)}`;
    const min = Math.max(0, Math.floor(schema.minItems ?? 0));
    const max = schema.maxItems == null ? null : Math.max(min, Math.floor(schema.maxItems));
    let inner;
    if (schema.items == null && !schema.prefixItems) throw new UnsupportedError('any');
    if (schema.prefixItems?.length) {
      const pre = schema.prefixItems.map((x) => nlcValueGbnf(x, scope + 1));
      const min2 = Math.max(min, pre.length);
      inner = pre.join(` ${sep} `);
      if (max == null || max > pre.length || min2 > pre.length) {
        if (schema.items == null) throw new UnsupportedError('any');
        const rest = nlcValueGbnf(schema.items, scope + 1);
        const rmin = min2 - pre.length;
        const rmax = max == null ? null : max - pre.length;
        if (rmax !== 0) inner += ` (${sep} ${rest})` + (rmax == null ? (rmin ? `{${rmin},}` : '*') : `{${rmin},${rmax}}`);
      }
    } else {
      inner = nlcRepeat(nlcValueGbnf(schema.items, scope + 1), sep, min, max);
    }
    return ['"["', nlcWhitespace(scope + 1), inner, nlcWhitespace(scope), '"]"'].filter((x) => x !== '').join(' ');
  }
  if (type === 'string') {
    const min = Math.max(0, Math.floor(schema.minLength ?? 0));
    const max = schema.maxLength == null ? null : Math.max(min, Math.floor(schema.maxLength));
    if (min === 0 && max == null) return `"\\"" ${NLC_STRING_CHAR}* "\\""`;
    if (max === 0) return '"\\"\\""';
    return `"\\"" ${NLC_STRING_CHAR}{${min},${max ?? ''}} "\\""`;
  }
  const num = '"-"? ("0" | [1-9] [0-9]{0,15})';
  const exp = ' ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))?';
  if (type === 'number') return `(${num} ("." [0-9]{1,16})?${exp})`;
  if (type === 'integer') return `(${num}${exp})`;
  if (type === 'boolean') return '("true" | "false")';
  if (type === 'null') return '"null"';
  throw new UnsupportedError(`type ${type}`);
}
// node-llama-cpp's grammar for a JSON schema, or null when the schema is outside that subset.
function nlcJsonSchemaGbnf(schema) {
  try {
    return `root ::= ${nlcValueGbnf(schema, 0)} "\\n\\n\\n\\n" [\\n]*\n`;
  } catch (err) {
    if (err instanceof UnsupportedError) return null;
    throw err;
  }
}

class LlamaJsonSchemaGrammar extends LlamaGrammar {
  constructor(llama, schema) {
    if (schema === null || typeof schema !== 'object') throw new TypeError('LlamaJsonSchemaGrammar: schema must be an object');
    const own = nlcJsonSchemaGbnf(schema);
    super(llama, own
      ? { grammar: own, stopGenerationTriggers: ['\n\n\n\n'], trimWhitespaceSuffix: true }
      : { grammar: native.jsonSchemaToGrammar(JSON.stringify(schema)) });
    this._schema = schema;
  }
  get schema() { return this._schema; }
  parse(json) {
    let value;
    try {
      value = JSON.parse(json);
    } catch (err) {
      throw new LlamaJsonSchemaValidationError(`The text is not JSON: ${err.message}`, json, this._schema);
    }
    validateAgainstSchema(value, this._schema, 'object', this._schema.$defs);
    return value;
  }
}

// ---- function calling -----------------------------------------------------------------------------------

function defineChatSessionFunction({ description, params, handler }) {
  if (typeof handler !== 'function') throw new TypeError('defineChatSessionFunction: handler must be a function');
  return { description, params, handler };
}
const isChatModelResponseFunctionCall = (item) => item != null && typeof item === 'object' && item.type === 'functionCall';
const isChatModelResponseSegment = (item) => item != null && typeof item === 'object' && item.type === 'segment';

// ---- chat --------------------------------------------------------------------------------------------------

const textOfSystem = (t) => (typeof t === 'string' ? t : LlamaText.fromJSON(t).toString());
const responseText = (item) => item.response.filter((r) => typeof r === 'string').join('');

// The model's own chat template, rendered inside loom (the scheduler's "messages" requests): the
// wrapper LlamaChatSession picks for a model with a template when no other is asked for. As a
// JinjaTemplateChatWrapper it also renders the history into a LlamaText (prompt lengths for
// context shifts, custom shift strategies).
class LoomTemplateChatWrapper extends JinjaTemplateChatWrapper {
  constructor(model, info) {
    super({ template: info.template ?? '' });
    this.wrapperName = 'Jinja';
    this.info = info;
    // the model's own template: chatFormat without an override renders it
    this._bind((req) => {
      const { chat_template: _ignored, ...rest } = req;
      return JSON.parse(model._native.chatFormat(JSON.stringify(rest)));
    }, model.tokens.bosString);
  }
}

// A JinjaTemplateChatWrapper made outside a session renders with any loaded model's engine.
JinjaTemplateChatWrapper._anyRenderer = () => {
  for (const m of liveModels) {
    if (!m._disposed) return { render: rendererOf(m), bos: m.tokens.bosString };
  }
  return null;
};
function rendererOf(model) {
  return (req) => JSON.parse(model._native.chatFormat(JSON.stringify(req)));
}

const WRAPPER_TYPES = {
  general: () => new GeneralChatWrapper(),
  chatML: () => new ChatMLChatWrapper(),
  llama3: () => new Llama3ChatWrapper(),
  'llama3.1': () => new Llama3_1ChatWrapper(),
  llama2Chat: () => new Llama2ChatWrapper(),
  alpacaChat: () => new AlpacaChatWrapper(),
  falconChat: () => new FalconChatWrapper(),
  gemma: () => new GemmaChatWrapper(),
  mistral: () => new MistralChatWrapper(),
};

// A model without a template: Llama 2's chat format for a model whose BOS is Llama 2's "<s>"
// (whatever its architecture), General's otherwise, as node-llama-cpp falls back (it also guesses
// from some file names; loom does not).
function fallbackWrapper(bosString) {
  return bosString === '<s>' ? new Llama2ChatWrapper() : new GeneralChatWrapper();
}

// node-llama-cpp's resolveChatWrapper: (model, options?) or (options). A model without a template
// gets node-llama-cpp's fallback (see fallbackWrapper); a template whose prompts a specialized
// wrapper renders gets that wrapper, any other a JinjaTemplateChatWrapper.
function resolveChatWrapper(modelOrOptions, maybeOptions) {
  const isModel = modelOrOptions instanceof LlamaModel;
  const options = (isModel ? maybeOptions : modelOrOptions) ?? {};
  const type = options.type ?? 'auto';
  const custom = options.customWrapperSettings ?? {};
  let template = null;
  let arch = options.architecture;
  let bosString = options.bosString ?? null;
  if (isModel) {
    template = modelOrOptions._chatTemplate()?.template ?? null;
    arch = modelOrOptions._info.arch;
    bosString = modelOrOptions.tokens.bosString;
  } else if (options.fileInfo) {
    template = options.fileInfo.metadata?.tokenizer?.chat_template ?? null;
    arch = arch ?? options.fileInfo.metadata?.general?.architecture;
  }
  const make = (name) => {
    const ctor = {
      general: GeneralChatWrapper, chatML: ChatMLChatWrapper, llama3: Llama3ChatWrapper, 'llama3.1': Llama3_1ChatWrapper, llama2Chat: Llama2ChatWrapper,
      alpacaChat: AlpacaChatWrapper, falconChat: FalconChatWrapper, gemma: GemmaChatWrapper, mistral: MistralChatWrapper,
    }[name];
    return ctor ? new ctor(custom[name]) : null;
  };
  if (type !== 'auto' && type !== 'jinjaTemplate' && type !== 'template') {
    const w = make(type);
    if (!w) throw new UnsupportedError(`loom-node has no chat wrapper "${type}"`);
    return w;
  }
  if (template && !options.noJinja) {
    const w = new JinjaTemplateChatWrapper({ ...(custom.jinjaTemplate ?? {}), template });
    if (isModel) w._bind(rendererOf(modelOrOptions), bosString);
    else if (bosString != null) {
      const any = JinjaTemplateChatWrapper._anyRenderer();
      if (any) w._bind(any.render, bosString);
    }
    if (type === 'auto') {
      let s = null;
      try {
        s = specializedForTemplate(template, w);
      } catch {
        s = null; // no model to render with: the Jinja wrapper
      }
      if (s) return s;
    }
    return w;
  }
  if (!isModel && type === 'auto' && !bosString) return arch ? new GeneralChatWrapper() : null;
  return fallbackWrapper(bosString);
}

function resolveWrapper(model, option) {
  if (option && option !== 'auto') {
    if (typeof option === 'object' && typeof option.generateContextState === 'function') {
      if (option instanceof JinjaTemplateChatWrapper) option._bind((req) => JSON.parse(model._native.chatFormat(JSON.stringify(req))), model.tokens.bosString);
      return option;
    }
    if (typeof option === 'string' && WRAPPER_TYPES[option]) return WRAPPER_TYPES[option]();
    if (typeof option === 'string') return resolveChatWrapper(model, { type: option });
  }
  const t = model._chatTemplate();
  if (t) {
    // node-llama-cpp's pick for the template (a specialized wrapper or its Jinja template, both
    // tokenized as node-llama-cpp tokenizes them); a template that cannot render a simple chat
    // that way is rendered by loom as a whole (the scheduler's "messages" requests).
    try {
      const w = resolveChatWrapper(model);
      w.generateContextState({ chatHistory: [{ type: 'system', text: 'S' }, { type: 'user', text: 'U' }, { type: 'model', response: ['M'] }, { type: 'user', text: 'U' }, { type: 'model', response: [] }] });
      return w;
    } catch {
      return new LoomTemplateChatWrapper(model, t);
    }
  }
  return fallbackWrapper(model.tokens.bosString);
}

// The chat history as OpenAI messages, for the scheduler's "messages" requests.
function historyToMessages(history) {
  const msgs = [];
  let callIndex = 0;
  for (const it of history) {
    if (it.type === 'system') msgs.push({ role: 'system', content: textOfSystem(it.text) });
    else if (it.type === 'user') msgs.push({ role: 'user', content: it.text });
    else if (it.type === 'model') {
      let text = '';
      let calls = [];
      const flush = () => {
        if (!text && !calls.length) return;
        const m = { role: 'assistant', content: text };
        if (calls.length) {
          m.tool_calls = calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.params ?? {}) } }));
        }
        msgs.push(m);
        for (const c of calls) msgs.push({ role: 'tool', tool_call_id: c.id, name: c.name, content: typeof c.result === 'string' ? c.result : JSON.stringify(c.result ?? null) });
        text = '';
        calls = [];
      };
      for (const r of it.response) {
        if (typeof r === 'string') {
          if (calls.length) flush();
          text += r;
        } else if (isChatModelResponseFunctionCall(r)) {
          calls.push({ ...r, id: `call_${callIndex++}` });
        }
      }
      flush();
    }
  }
  return msgs;
}

function toolsOf(functions) {
  if (!functions) return undefined;
  const tools = Object.entries(functions).map(([name, f]) => ({
    type: 'function',
    function: { name, description: f.description ?? '', parameters: f.params ?? { type: 'object', properties: {} } },
  }));
  return tools.length ? tools : undefined;
}

// node-llama-cpp's default context shift strategy, "eraseFirstResponseAndKeepFirstSystem": the
// history is cut until it fits maxTokensCount tokens, keeping the first system message. Cut first:
// the oldest model responses (from their start, then whole), then the oldest other messages before
// the last user message; then, if that is not enough, the start of the response being generated,
// then of the last user message.
async function eraseFirstResponseAndKeepFirstSystem({ chatHistory, maxTokensCount, count }) {
  let h = structuredClone(chatHistory);
  let removed = 0;
  let n = count(h);
  const keepFirst = h[0]?.type === 'system' ? 1 : 0;
  const lastUser = () => {
    for (let i = h.length - 1; i >= 0; i--) if (h[i].type === 'user') return i;
    return h.length;
  };
  // Characters to cut for `excess` tokens: a little more than the text's characters per token.
  // characters per token of the whole history, a little more
  const chars = (x) => x.reduce((sum, it) => sum + (it.type === 'model' ? responseText(it) : it.type === 'user' ? it.text : textOfSystem(it.text)).length, 0);
  const charsFor = (excess) => Math.max(1, Math.ceil(excess * Math.max(1, chars(h) / Math.max(1, n)) * 1.25));
  const cutStart = (text, excess) => {
    const c = charsFor(excess);
    return c >= text.length ? '' : text.slice(c);
  };
  for (let guard = 0; n > maxTokensCount && guard < 10000; guard++) {
    const excess = n - maxTokensCount;
    const end = lastUser();
    // 1. the oldest model response before the last user message
    let i = h.findIndex((it, k) => k >= keepFirst && k < end && it.type === 'model');
    if (i >= 0) {
      const it = h[i];
      const text = responseText(it);
      const rest = it.response.some((r) => typeof r !== 'string') ? '' : cutStart(text, excess);
      removed += text.length - rest.length;
      if (rest) it.response = [rest];
      else h.splice(i, 1);
    } else {
      // 2. the oldest other message before the last user message
      i = h.findIndex((it, k) => k >= keepFirst && k < end);
      if (i >= 0) {
        const it = h[i];
        removed += (it.type === 'user' ? it.text : textOfSystem(it.text)).length;
        h.splice(i, 1);
      } else {
        // 3. the start of the response being generated, 4. of the last user message
        const cur = h[h.length - 1];
        if (cur?.type === 'model' && responseText(cur) && !cur.response.some((r) => typeof r !== 'string')) {
          const text = responseText(cur);
          const rest = cutStart(text, excess);
          removed += text.length - rest.length;
          cur.response = rest ? [rest] : [];
        } else if (end < h.length && h[end].text) {
          const text = h[end].text;
          const rest = cutStart(text, excess);
          removed += text.length - rest.length;
          h[end].text = rest;
        } else {
          break;
        }
      }
    }
    n = count(h);
  }
  return { chatHistory: h, metadata: { removedCharactersNumber: removed } };
}

class ChatCore {
  _init(contextSequence, chatWrapper, contextShift, autoDisposeSequence) {
    if (!(contextSequence instanceof LlamaContextSequence)) throw new TypeError(`${this.constructor.name}: contextSequence must be a LlamaContextSequence`);
    if (contextSequence.disposed) throw new DisposedError();
    this._sequence = contextSequence;
    this._wrapper = resolveWrapper(contextSequence.model, chatWrapper);
    this._autoDispose = autoDisposeSequence;
    this._contextShift = contextShift ?? {};
    this._disposed = false;
    this._lastShiftMetadata = null;
    this.onDispose = eventRelay();
    this._seqListener = contextSequence.onDispose.createListener(() => this.dispose());
  }
  get disposed() { return this._disposed; }
  get chatWrapper() { return this._wrapper; }
  get sequence() {
    if (this._disposed) throw new DisposedError();
    return this._sequence;
  }
  get context() { return this.sequence.context; }
  get model() { return this.sequence.model; }
  dispose({ disposeSequence = this._autoDispose } = {}) {
    if (this._disposed) return;
    this._disposed = true;
    this._seqListener.dispose();
    for (const cancel of [...this._sequence._running]) cancel();
    if (disposeSequence) this._sequence.dispose();
    this.onDispose.dispatchEvent();
  }
  [disposeSymbol]() { this.dispose(); }
  // Prompt tokens and stop strings of a history through a wrapper of node-llama-cpp's kind.
  _promptTokens(history, wrapper) {
    const state = wrapper.generateContextState({ chatHistory: history });
    const text = isLlamaText(state.contextText) ? state.contextText : LlamaText(state.contextText);
    // the wrapper's text as it is: a BOS only where it writes one (node-llama-cpp adds none)
    const tokens = text.tokenize(this.model.tokenizer);
    return { tokens, stops: stopStrings(state.stopGenerationTriggers) };
  }
  // The request for one generation round over history `h` (its last item: the model response
  // being generated), and its prompt's length in tokens.
  _build(h, { tools, useTemplate, sampling, options, rounds }) {
    const req = { ...sampling };
    if (!useTemplate) {
      const { tokens, stops } = this._promptTokens(h, this._wrapper);
      req.prompt = tokens;
      if (stops.length) req.stop = [...(req.stop ?? []), ...stops];
      return { req, length: tokens.length };
    }
    const modelItem = h[h.length - 1];
    const msgs = historyToMessages(h.slice(0, -1));
    const partial = responseText(modelItem);
    req.messages = msgs;
    if (modelItem.response.some(isChatModelResponseFunctionCall)) {
      // continue after the tool results: the history up to them is in the messages
      req.messages = historyToMessages(h);
      const last = req.messages[req.messages.length - 1];
      if (last && last.role === 'assistant' && !last.tool_calls) req.messages.pop();
    } else if (partial) {
      req.messages = [...msgs, { role: 'assistant', content: partial }];
      req.continue_final_message = true;
      req.add_generation_prompt = false;
    }
    req.reasoning_format = 'none';
    if (tools) {
      req.tools = tools;
      req.tool_choice = rounds === 0 && options._loomToolChoice ? options._loomToolChoice : 'auto';
      req.parallel_tool_calls = options.maxParallelFunctionCalls !== 1;
      req.stream_parse = true;
    }
    const f = JSON.parse(this.model._native.chatFormat(JSON.stringify({
      messages: req.messages, tools: req.tools, continue_final_message: req.continue_final_message, add_generation_prompt: !req.continue_final_message,
    })));
    const bos = this.model.tokens.bosString;
    const addBos = this.model.tokens.shouldPrependBosToken && !(bos && f.prompt.startsWith(bos));
    return { req, length: this.model._native.tokenizeSync(f.prompt, addBos, true).length };
  }
  async _shiftOptions(override) {
    const cs = override ?? this._contextShift ?? {};
    const ctxSize = this.context.contextSize;
    let size = typeof cs.size === 'function' ? await cs.size(this._sequence) : cs.size;
    if (!Number.isFinite(size)) size = Math.floor(ctxSize / 10);
    size = Math.max(1, Math.min(ctxSize - 1, Math.floor(size)));
    return { size, strategy: cs.strategy ?? 'eraseFirstResponseAndKeepFirstSystem' };
  }
  // A history cut to fit the context: the strategy's, with the model response being generated last.
  async _shiftHistory(h, maxTokensCount, shift, ctx) {
    const count = (x) => this._build(x, ctx).length;
    let res;
    if (typeof shift.strategy === 'function') {
      res = await shift.strategy({ chatHistory: structuredClone(h), maxTokensCount, tokenizer: this.model.tokenizer, chatWrapper: this._wrapper, lastShiftMetadata: this._lastShiftMetadata });
    } else if (shift.strategy === 'eraseFirstResponseAndKeepFirstSystem') {
      res = await eraseFirstResponseAndKeepFirstSystem({ chatHistory: h, maxTokensCount, count });
    } else {
      throw new Error(`Unknown context shift strategy "${shift.strategy}"`);
    }
    const out = structuredClone(res?.chatHistory ?? []);
    if (out.length === 0 || out[out.length - 1].type !== 'model') out.push({ type: 'model', response: [] });
    this._lastShiftMetadata = res?.metadata ?? null;
    return out;
  }
  // Generates the model response that ends `history` (its last item, `modelItem`, mutated), in
  // rounds: a context shift before a round whose prompt does not fit, function calls run between
  // rounds (execute) or returned (LlamaChat). Resolves with {stopReason, window, pendingCalls,
  // stopTrigger}.
  async _respond(history, modelItem, options, execute, startWindow = null) {
    const { functions, onTextChunk, onToken, onResponseChunk, onFunctionCallParamsChunk, signal, stopOnAbortSignal = false, trimWhitespaceSuffix = false } = options;
    if (functions && options.grammar) throw new Error('Using both grammar and functions is not supported yet');
    const sampling = samplingOf(options, this.model);
    const tools = toolsOf(functions);
    const useTemplate = !!tools || this._wrapper instanceof LoomTemplateChatWrapper;
    const ctxSize = this.context.contextSize;
    const shift = await this._shiftOptions(options.contextShift);
    const buildCtx = { tools, useTemplate, sampling, options, rounds: 0 };
    // `win`: the history the rounds are generated from: the whole chat until a context shift cuts
    // it (from then on a copy, whose last item is the response being generated).
    let win = startWindow ?? history;
    let stopReason = 'eogToken';
    let stopTrigger;
    const pendingCalls = [];
    let remaining = sampling.n_predict;
    let callIndex = 0;
    const emit = (t) => {
      if (!t) return;
      if (onTextChunk) onTextChunk(t);
      if (onResponseChunk) onResponseChunk({ type: undefined, text: t, tokens: [] });
    };
    const addText = (item, text) => {
      const last = item.response[item.response.length - 1];
      if (typeof last === 'string') item.response[item.response.length - 1] = last + text;
      else item.response.push(text);
    };
    for (let round = 0; ; round++) {
      if (this._disposed) throw new DisposedError();
      buildCtx.rounds = round;
      let built = this._build(win, buildCtx);
      if (built.length + 1 > ctxSize) {
        // context shift: the history cut to contextSize - size tokens, as node-llama-cpp does
        win = await this._shiftHistory(win, ctxSize - shift.size, shift, buildCtx);
        built = this._build(win, buildCtx);
        if (built.length + 1 > ctxSize) throw new Error('The context size is too small to generate a response');
      }
      const { req } = built;
      const room = ctxSize - built.length;
      const capped = remaining < 0 || remaining > room;
      req.n_predict = capped ? room : remaining;
      // With functions, text is streamed from the scheduler's parse of the output so far (loom's
      // tool-call parser): its content deltas are the answer's text, its tool-call deltas the
      // calls' parameters (onFunctionCallParamsChunk); tokens go to onToken with the text they made.
      let streamed = '';
      let pendingTokens = [];
      const callNames = [];
      const onParsed = tools ? (parsed, token) => {
        pendingTokens.push(token);
        for (const d of parsed?.deltas ?? []) {
          if (d.content) {
            streamed += d.content;
            emit(d.content);
            if (onToken && pendingTokens.length) onToken(pendingTokens);
            pendingTokens = [];
          }
          for (const tc of d.tool_calls ?? []) {
            pendingTokens = [];
            const idx = tc.index ?? 0;
            if (tc.function?.name) callNames[idx] = tc.function.name;
            if (onFunctionCallParamsChunk && (tc.function?.arguments ?? '') !== '') {
              onFunctionCallParamsChunk({ callIndex: callIndex + idx, functionName: callNames[idx] ?? '', paramsChunk: tc.function.arguments, done: false });
            }
          }
        }
      } : null;
      let r;
      try {
        r = await this._sequence._generate(req, {
          onText: tools ? null : emit,
          onTokens: tools ? null : onToken,
          onParsed,
          signal,
          stopOnAbortSignal,
        });
      } catch (err) {
        if (this._disposed && !(err instanceof DisposedError) && !(err?.name === 'AbortError')) throw new DisposedError();
        throw err;
      }
      const f = r.finish;
      if (remaining >= 0) remaining = Math.max(0, remaining - r.tokens.length);
      let calls = useTemplate && tools ? (f.tool_calls ?? []) : [];
      if (Number.isInteger(options.maxParallelFunctionCalls) && options.maxParallelFunctionCalls > 0) calls = calls.slice(0, options.maxParallelFunctionCalls);
      let text = useTemplate ? (f.content ?? r.text) : r.text;
      // A call cut off by maxTokens is not text of the answer (node-llama-cpp drops an unfinished
      // call too): loom's parser gives back, at a length stop, the opening it held back.
      if (useTemplate && tools && f.reason === 'length') text = text.replace(/<(?:t(?:o(?:o(?:l(?:_(?:c(?:a(?:l(?:l(?:>[^]*)?)?)?)?)?)?)?)?)?)?$/, '');
      if (tools) {
        // what the token events did not stream yet (a stop string's text held back, say)
        if (text.startsWith(streamed) && text.length > streamed.length) emit(text.slice(streamed.length));
        if (onToken && pendingTokens.length && !calls.length) onToken(pendingTokens);
      }
      if (trimWhitespaceSuffix) text = text.replace(/\s+$/, '');
      if (text) {
        addText(modelItem, text);
        if (win !== history) addText(win[win.length - 1], text);
      }
      if (r.aborted) {
        stopReason = 'abort';
        break;
      }
      if (f.reason === 'length' && calls.length === 0) {
        if (!capped || remaining === 0) {
          stopReason = 'maxTokens';
          break;
        }
        // the context is full: the next round shifts it and goes on
        if (r.tokens.length === 0) throw new Error('The context size is too small to generate a response');
        continue;
      }
      if (f.stopped_word) {
        stopReason = options.customStopTriggers?.includes(f.stop_word) ? 'customStopTrigger' : 'stopGenerationTrigger';
        stopTrigger = f.stop_word;
      }
      if (calls.length === 0) break;
      // Function calls (the complete ones, also when maxTokens cut the generation): run them in
      // order, put their results in the history, and generate on with them, as node-llama-cpp does.
      for (const c of calls) {
        const fn = c.function ?? c;
        const def = functions[fn.name];
        if (!def) throw new Error(`The model tried to call function "${fn.name}" which is not defined`);
        let params;
        try {
          params = typeof fn.arguments === 'string' ? (fn.arguments ? JSON.parse(fn.arguments) : {}) : (fn.arguments ?? {});
        } catch {
          throw new Error(`The model called function "${fn.name}" with parameters that are not JSON: ${fn.arguments}`);
        }
        if (onFunctionCallParamsChunk) onFunctionCallParamsChunk({ callIndex, functionName: fn.name, paramsChunk: '', done: true });
        callIndex++;
        if (def.params) validateAgainstSchema(params, def.params, `params of ${fn.name}`, def.params.$defs);
        if (!execute) {
          pendingCalls.push({ name: fn.name, params, raw: JSON.stringify({ name: fn.name, arguments: params }) });
          continue;
        }
        const result = await def.handler(params);
        const call = { type: 'functionCall', name: fn.name, description: def.description, params, result };
        modelItem.response.push(call);
        if (win !== history) win[win.length - 1].response.push(structuredClone(call));
      }
      if (!execute) {
        stopReason = 'functionCalls';
        break;
      }
      if (remaining === 0) {
        stopReason = 'maxTokens';
        break;
      }
      stopReason = 'eogToken';
    }
    return { stopReason, window: win, pendingCalls, stopTrigger };
  }
}

class LlamaChatSession extends ChatCore {
  constructor({ contextSequence, chatWrapper = 'auto', systemPrompt, forceAddSystemPrompt = false, autoDisposeSequence = false, contextShift } = {}) {
    super();
    if (!(contextSequence instanceof LlamaContextSequence)) throw new TypeError('LlamaChatSession: contextSequence must be a LlamaContextSequence');
    this._init(contextSequence, chatWrapper, contextShift, autoDisposeSequence);
    // the wrapper's initial history (the system prompt, node-llama-cpp's default one where the
    // wrapper has it); a wrapper whose format has no system messages gets none unless forced
    const supportsSystem = this._wrapper.settings?.supportsSystemMessages !== false;
    const initial = typeof this._wrapper.generateInitialChatHistory === 'function'
      ? this._wrapper.generateInitialChatHistory({ systemPrompt })
      : [{ type: 'system', text: systemPrompt ?? DEFAULT_SYSTEM_PROMPT }];
    this._history = supportsSystem || forceAddSystemPrompt ? structuredClone(initial) : [];
    this._lastWindow = null;
  }
  getChatHistory() { return structuredClone(this._history); }
  setChatHistory(history) {
    if (!Array.isArray(history)) throw new TypeError('setChatHistory: history must be an array');
    this._history = structuredClone(history);
    this._lastWindow = null;
    this._lastShiftMetadata = null;
  }
  resetChatHistory() {
    this._history = this._history.filter((h) => h.type === 'system').slice(0, 1);
    this._lastWindow = null;
    this._lastShiftMetadata = null;
  }
  // The history the last prompt was evaluated with: the chat history, cut by context shifts.
  getLastEvaluationContextWindow() {
    if (this._lastWindow) return structuredClone(this._lastWindow);
    return this._lastWindowOf === this._history && this._history.length > 1 ? structuredClone(this._history) : null;
  }
  async prompt(prompt, options = {}) {
    const { responseText: text } = await this.promptWithMeta(prompt, options);
    return text;
  }
  async preloadPrompt() { /* the scheduler's prefix cache keeps the conversation; nothing to preload */ }
  async promptWithMeta(prompt, options = {}) {
    if (this._disposed) throw new DisposedError();
    if (typeof prompt !== 'string') throw new TypeError('prompt must be a string');
    const history = this.getChatHistory();
    history.push({ type: 'user', text: prompt });
    const modelItem = { type: 'model', response: [] };
    history.push(modelItem);
    if (options.responsePrefix) modelItem.response.push(options.responsePrefix);
    // After a context shift the next prompt starts from the window the last one was evaluated
    // with (its start, so the cells of its prefix, stay), as node-llama-cpp goes on from its last
    // context window; the chat history keeps everything.
    let start = null;
    if (this._lastWindow && this._lastWindowOf === this._history) {
      start = [...structuredClone(this._lastWindow), { type: 'user', text: prompt }, structuredClone(modelItem)];
    }
    const { stopReason, window } = await this._respond(history, modelItem, options, true, start);
    this._history = history;
    this._lastWindow = window === history ? null : window;
    this._lastWindowOf = history;
    return {
      response: structuredClone(modelItem.response),
      responseText: modelItem.response.filter((x) => typeof x === 'string').join(''),
      stopReason,
    };
  }
}

// node-llama-cpp's lower-level chat: one model response to a given history per generateResponse
// (the history's last item when it is a model response, continued, else a new one); function calls
// are not run but returned (stopReason "functionCalls").
class LlamaChat extends ChatCore {
  constructor({ contextSequence, chatWrapper = 'auto', autoDisposeSequence = false } = {}) {
    super();
    this._init(contextSequence, chatWrapper, undefined, autoDisposeSequence);
  }
  async generateResponse(history, options = {}) {
    if (this._disposed) throw new DisposedError();
    if (!Array.isArray(history)) throw new TypeError('generateResponse: history must be an array');
    const h = structuredClone(history);
    if (h.length === 0 || h[h.length - 1].type !== 'model') h.push({ type: 'model', response: [] });
    const modelItem = h[h.length - 1];
    const before = modelItem.response.filter((x) => typeof x === 'string').join('');
    const r = await this._respond(h, modelItem, options, false);
    const text = modelItem.response.filter((x) => typeof x === 'string').join('').slice(before.length);
    const metadata = { stopReason: r.stopReason };
    if (r.stopReason === 'customStopTrigger') metadata.customStopTrigger = [r.stopTrigger];
    const out = {
      response: text,
      fullResponse: text ? [text] : [],
      lastEvaluation: { cleanHistory: h, contextWindow: r.window === h ? structuredClone(h) : r.window, contextShiftMetadata: this._lastShiftMetadata },
      metadata,
    };
    if (r.pendingCalls.length) out.functionCalls = r.pendingCalls.map((c) => ({ functionName: c.name, params: c.params, raw: c.raw }));
    return out;
  }
}

// ---- completion -------------------------------------------------------------------------------------------

class LlamaCompletion {
  constructor({ contextSequence, autoDisposeSequence = false } = {}) {
    if (!(contextSequence instanceof LlamaContextSequence)) throw new TypeError('LlamaCompletion: contextSequence must be a LlamaContextSequence');
    this._sequence = contextSequence;
    this._autoDispose = autoDisposeSequence;
    this._disposed = false;
    this.onDispose = eventRelay();
    this._seqListener = contextSequence.onDispose.createListener(() => this.dispose());
  }
  get disposed() { return this._disposed; }
  get infillSupported() {
    const t = this._sequence.model.tokens.infill;
    return t.prefix != null && t.suffix != null && t.middle != null;
  }
  dispose({ disposeSequence = this._autoDispose } = {}) {
    if (this._disposed) return;
    this._disposed = true;
    this._seqListener.dispose();
    for (const cancel of [...this._sequence._running]) cancel();
    if (disposeSequence) this._sequence.dispose();
    this.onDispose.dispatchEvent();
  }
  [disposeSymbol]() { this.dispose(); }
  async generateCompletion(input, options = {}) {
    return (await this.generateCompletionWithMeta(input, options)).response;
  }
  async _run(prompt, options) {
    if (this._disposed || this._sequence.disposed) throw new DisposedError();
    const req = samplingOf(options, this._sequence.model);
    // An input longer than the context loses its start (a leading BOS kept): it is cut to the
    // context size less the shift size (10 %), as node-llama-cpp's completion goes on with one.
    const ctxSize = this._sequence.contextSize;
    if (prompt.length >= ctxSize) {
      const size = Math.max(1, Math.floor(ctxSize / 10));
      const bos = this._sequence.model.tokens.bos;
      const keepBos = bos != null && prompt[0] === bos ? 1 : 0;
      const keep = Math.max(1, ctxSize - size - keepBos);
      prompt = [...prompt.slice(0, keepBos), ...prompt.slice(prompt.length - keep)];
    }
    req.prompt = prompt;
    const r = await this._sequence._generate(req, {
      onText: options.onTextChunk,
      onTokens: options.onToken,
      signal: options.signal,
      stopOnAbortSignal: options.stopOnAbortSignal,
    });
    const f = r.finish;
    let text = r.text;
    if (options.trimWhitespaceSuffix || options.grammar?.trimWhitespaceSuffix) text = text.replace(/\s+$/, '');
    const metadata = r.aborted
      ? { stopReason: 'abort' }
      : f.reason === 'length'
        ? { stopReason: 'maxTokens' }
        : f.stopped_word
          ? (options.customStopTriggers?.includes(f.stop_word) ? { stopReason: 'customStopTrigger', customStopTrigger: [f.stop_word], remainingGenerationAfterStop: '' } : { stopReason: 'stopGenerationTrigger', stopGenerationTrigger: [f.stop_word], remainingGenerationAfterStop: '' })
          : { stopReason: 'eogToken' };
    return { response: text, metadata };
  }
  async generateCompletionWithMeta(input, options = {}) {
    const model = this._sequence.model;
    let prompt;
    if (typeof input === 'string') {
      // node-llama-cpp: BOS (when the model adds one), then the text as plain text.
      prompt = [...(model.tokens.shouldPrependBosToken ? [model.tokens.bos] : []), ...model.tokenize(input, false)];
    } else if (Array.isArray(input)) {
      prompt = input.slice();
    } else {
      throw new TypeError('generateCompletion: input must be a string or an array of tokens');
    }
    if (prompt.length === 0) prompt = model.tokens.bos != null ? [model.tokens.bos] : [];
    return this._run(prompt, options);
  }
  async generateInfillCompletion(prefixInput, suffixInput, options = {}) {
    return (await this.generateInfillCompletionWithMeta(prefixInput, suffixInput, options)).response;
  }
  async generateInfillCompletionWithMeta(prefixInput, suffixInput, options = {}) {
    if (!this.infillSupported) throw new UnsupportedError('Infill completions are not supported by this model');
    const model = this._sequence.model;
    const tk = (v) => (typeof v === 'string' ? model.tokenize(v, false, 'trimLeadingSpace') : Array.from(v ?? []));
    const inf = model.tokens.infill;
    const prompt = [
      ...(model.tokens.shouldPrependBosToken ? [model.tokens.bos] : []),
      inf.prefix, ...tk(prefixInput), inf.suffix, ...tk(suffixInput), inf.middle,
    ];
    return this._run(prompt, options);
  }
}

// ---- embeddings and ranking -----------------------------------------------------------------------------------

class LlamaEmbedding {
  constructor({ vector }) {
    this.vector = Object.freeze(Array.from(vector));
  }
  toJSON() { return { type: 'embedding', vector: this.vector }; }
  static fromJSON(json) {
    if (json?.type !== 'embedding') throw new Error('Invalid LlamaEmbedding JSON');
    return new LlamaEmbedding({ vector: json.vector });
  }
  calculateCosineSimilarity(other) {
    const b = other instanceof LlamaEmbedding ? other.vector : other;
    if (b.length !== this.vector.length) throw new Error('Vectors have different lengths');
    let dot = 0;
    let na = 0;
    let nb = 0;
    for (let i = 0; i < b.length; i++) {
      dot += this.vector[i] * b[i];
      na += this.vector[i] * this.vector[i];
      nb += b[i] * b[i];
    }
    if (na === 0 || nb === 0) return 0;
    return dot / (Math.sqrt(na) * Math.sqrt(nb));
  }
}

class LlamaEmbeddingContext {
  static async _create(model, options) {
    const contextSize = resolveContextSize(model, options.contextSize, 4096);
    // A model whose file names no pooling (a causal LM) is pooled as node-llama-cpp's embedding
    // context pools it (loom's addon defaults to the mean); the file's pooling otherwise.
    const named = Object.keys(model._info.metadata ?? {}).some((k) => k.endsWith('.pooling_type'));
    const extra = named ? { embedding: true } : { embedding: true, pooling: 3 /* last token, as llama.cpp's causal LMs */ };
    const ctx = await LlamaContext._create(model, { ...options, contextSize, sequences: 1, batchSize: options.batchSize ?? contextSize }, extra);
    return new LlamaEmbeddingContext(ctx);
  }
  constructor(ctx) {
    this._ctx = ctx;
    this.onDispose = eventRelay();
  }
  get disposed() { return this._ctx.disposed; }
  async getEmbeddingFor(input) {
    if (this._ctx.disposed) throw new DisposedError();
    const body = typeof input === 'string' ? { input } : { input: Array.from(input) };
    const r = await this._ctx._native.embed(JSON.stringify(body));
    return new LlamaEmbedding({ vector: r.data.subarray(0, r.dim) });
  }
  async dispose() {
    await this._ctx.dispose();
    this.onDispose.dispatchEvent();
  }
  [asyncDisposeSymbol]() { return this.dispose(); }
}

class LlamaRankingContext {
  static async _create(model, options) {
    const contextSize = resolveContextSize(model, options.contextSize, 4096);
    const ctx = await LlamaContext._create(model, { ...options, contextSize, sequences: 1, batchSize: options.batchSize ?? contextSize }, { embedding: true, pooling: 4 });
    return new LlamaRankingContext(ctx);
  }
  constructor(ctx) {
    this._ctx = ctx;
    this.onDispose = eventRelay();
  }
  get disposed() { return this._ctx.disposed; }
  async rankAll(query, documents) {
    if (this._ctx.disposed) throw new DisposedError();
    if (documents.length === 0) return [];
    const r = await this._ctx._native.embed(JSON.stringify({ rerank: { query, documents } }));
    // node-llama-cpp's rank is a probability: the logistic of the reranker's score.
    return Array.from(r.data).slice(0, documents.length).map((s) => 1 / (1 + Math.exp(-s)));
  }
  async rank(query, document) {
    return (await this.rankAll(query, [document]))[0];
  }
  async rankAndSort(query, documents) {
    const scores = await this.rankAll(query, documents);
    return documents.map((document, i) => ({ document, score: scores[i] })).sort((a, b) => b.score - a.score);
  }
  async dispose() {
    await this._ctx.dispose();
    this.onDispose.dispatchEvent();
  }
  [asyncDisposeSymbol]() { return this.dispose(); }
}

async function readGgufFileInfo(pathOrUri) {
  const d = JSON.parse(await native.describe(pathOrUri));
  const metadata = nestMetadata(d.metadata ?? []);
  return { version: d.gguf_version, tensorCount: d.tensors?.length ?? 0, metadata, architectureMetadata: metadata[metadata.general?.architecture] ?? {}, metadataSize: 0, splicedParts: 1 };
}

module.exports = {
  getLlama,
  Llama,
  LlamaLogLevel,
  LlamaLogLevelGreaterThan,
  LlamaLogLevelGreaterThanOrEqual,
  LlamaVocabularyType,
  LlamaModel,
  LlamaModelTokens,
  LlamaModelInfillTokens,
  LlamaContext,
  LlamaContextSequence,
  LlamaChatSession,
  LlamaChat,
  LlamaCompletion,
  LlamaGrammar,
  LlamaJsonSchemaGrammar,
  LlamaJsonSchemaValidationError,
  LlamaEmbeddingContext,
  LlamaEmbedding,
  LlamaRankingContext,
  LlamaText,
  SpecialToken,
  SpecialTokensText,
  isLlamaText,
  tokenizeText,
  ChatWrapper,
  GeneralChatWrapper,
  AlpacaChatWrapper,
  FalconChatWrapper,
  GemmaChatWrapper,
  MistralChatWrapper,
  ChatMLChatWrapper,
  Llama2ChatWrapper,
  Llama3ChatWrapper,
  Llama3_1ChatWrapper,
  JinjaTemplateChatWrapper,
  resolveChatWrapper,
  TokenBias,
  TokenMeter,
  defineChatSessionFunction,
  isChatModelResponseFunctionCall,
  isChatModelResponseSegment,
  readGgufFileInfo,
  DisposedError,
  UnsupportedError,
  InsufficientMemoryError,
  NoBinaryFoundError,
};
