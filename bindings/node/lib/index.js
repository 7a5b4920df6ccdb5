'use strict';
// loom-node: @fugood/llama.node's API (1.7) over loom's scheduler. Switching is a one-line change:
//   const { loadModel } = require('loom-node')   // was require('@fugood/llama.node')
// The native addon (src/, over the C API) does the work off the event loop; this file checks options,
// translates llama.node's names into loom's request JSON (include/loom/loom_serve.h) and shapes
// results the way llama.node returns them. See README.md for what differs.
const os = require('node:os');
const native = require('./native');

const POOLING = { none: 0, mean: 1, cls: 2, last: 3, rank: 4 };
const POOLING_NAMES = ['none', 'mean', 'cls', 'last', 'rank'];
const KV_TYPES = { f32: 0, f16: 1, q4_0: 2, q4_1: 3, q5_0: 6, q5_1: 7, q8_0: 8, iq4_nl: 20, bf16: 30 };
// Chat formats as numbers (llama.node reports common_chat_format's enum; loom's are its own).
const CHAT_FORMATS = { none: 0, generic: 1, hermes: 2, llama3: 3, mistral: 4, mistral_args: 5 };
// llama.cpp's common_grammar_trigger_type: the kinds of loom's trigger strings.
const TRIGGER_TYPES = { token: 0, word: 1, pattern: 2, pattern_full: 3 };
const REASONING_FORMATS = ['none', 'auto', 'deepseek', 'deepseek-legacy'];
// What llama.node's getModelInfo() and loadLlamaModelInfo() leave out of the metadata.
const MODEL_INFO_SKIP = new Set(['tokenizer.ggml.tokens', 'tokenizer.ggml.token_type', 'tokenizer.ggml.merges', 'tokenizer.ggml.scores']);

// ---- option checking --------------------------------------------------------------------------

function typeError(msg) {
  return new TypeError(`loom-node: ${msg}`);
}

function checkType(obj, key, type, where) {
  const v = obj[key];
  if (v === undefined || v === null) return;
  const ok =
    type === 'array' ? Array.isArray(v) : type === 'integer' ? Number.isInteger(v) : typeof v === type && !(type === 'number' && !Number.isFinite(v));
  if (!ok) throw typeError(`${where}.${key} must be ${type === 'integer' ? 'an integer' : `a${/^[aeiou]/.test(type) ? 'n' : ''} ${type}`}`);
}

const MODEL_OPTION_TYPES = {
  model: 'string', chat_template: 'string', embedding: 'boolean', embd_normalize: 'integer', pooling_type: 'string',
  n_ctx: 'integer', n_batch: 'integer', n_ubatch: 'integer', n_parallel: 'integer', n_threads: 'integer',
  n_gpu_layers: 'integer', cache_type_k: 'string', cache_type_v: 'string', ctx_shift: 'boolean', kv_unified: 'boolean',
  use_mmap: 'boolean', use_mlock: 'boolean', vocab_only: 'boolean', lora: 'string', lora_scaled: 'number',
  lora_list: 'array', rope_freq_base: 'number', rope_freq_scale: 'number', flash_attn: 'boolean',
  // loom: speculative decoding with a draft model (same vocabulary) for completions without lookup.
  draft_model: 'string', draft_max: 'integer', draft_min: 'integer', draft_p_min: 'number',
};

const COMPLETION_OPTION_TYPES = {
  prompt: 'string', messages: 'array', jinja: 'boolean', chat_template: 'string', response_format: 'object',
  tools: 'array', parallel_tool_calls: 'boolean', enable_thinking: 'boolean', add_generation_prompt: 'boolean',
  chat_template_kwargs: 'object', temperature: 'number', top_k: 'integer', top_p: 'number', min_p: 'number',
  mirostat: 'integer', mirostat_tau: 'number', mirostat_eta: 'number', penalty_last_n: 'integer',
  penalty_repeat: 'number', penalty_freq: 'number', penalty_present: 'number', typ_p: 'number', typical_p: 'number',
  xtc_threshold: 'number', xtc_probability: 'number', dry_multiplier: 'number', dry_base: 'number',
  dry_allowed_length: 'integer', dry_penalty_last_n: 'integer', dry_sequence_breakers: 'array', n_predict: 'integer',
  max_tokens: 'integer', max_length: 'integer', seed: 'integer', stop: 'array', grammar: 'string',
  logit_bias: 'array', ignore_eos: 'boolean', n_probs: 'integer', n_keep: 'integer', lookup: 'integer',
  draft_max: 'integer', draft_min: 'integer', reasoning_format: 'string', grammar_lazy: 'boolean',
};

function checkOptions(options, types, where) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw typeError(`${where} must be an object`);
  }
  for (const [k, t] of Object.entries(types)) checkType(options, k, t, where);
}

function checkReasoningFormat(v, where) {
  if (v !== undefined && v !== null && !REASONING_FORMATS.includes(v)) {
    throw typeError(`${where}.reasoning_format must be one of ${REASONING_FORMATS.join(', ')}`);
  }
}

// ---- native logging ---------------------------------------------------------------------------

const logListeners = new Set();
let logEnabled = false;

function refreshLog() {
  if (logEnabled && logListeners.size > 0) {
    native.setLogCallback((level, text) => {
      for (const fn of logListeners) {
        try {
          fn(level, text);
        } catch {
          // a listener's exception must not reach the native side
        }
      }
    }, 1);
  } else {
    native.setLogCallback(null, 2);
  }
}

async function toggleNativeLog(enable) {
  logEnabled = !!enable;
  refreshLog();
}

function isNativeLogEnabled() {
  return logEnabled;
}

function addNativeLogListener(listener) {
  if (typeof listener !== 'function') throw typeError('the log listener must be a function');
  logListeners.add(listener);
  refreshLog();
  return {
    remove: () => {
      logListeners.delete(listener);
      refreshLog();
    },
  };
}

// ---- GGUF metadata as llama.cpp renders it (gguf_kv_to_str) -----------------------------------------

function ggufScalarText(type, v) {
  if (type === 'f32' || type === 'f64') return Number(v).toFixed(6); // std::to_string
  if (type === 'bool') return v ? 'true' : 'false';
  return String(v);
}

function ggufText(entry) {
  if (entry.type === 'array') {
    const items = Array.isArray(entry.value) ? entry.value : [];
    return `[${items.map((x) => (typeof x === 'string' ? `"${x.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"` : typeof x === 'boolean' ? String(x) : typeof x === 'number' && !Number.isInteger(x) ? x.toFixed(6) : String(x))).join(', ')}]`;
  }
  return ggufScalarText(entry.type, entry.value);
}

async function describeFile(path) {
  return JSON.parse(await native.describe(path));
}

// llama_model's metadata (what llama.node's getModelInfo() lists): every key that is not an array.
function modelMetadata(described) {
  const out = {};
  for (const m of described.metadata) if (m.type !== 'array') out[m.key] = ggufText(m);
  return out;
}

// ---- request translation -------------------------------------------------------------------------

const PASSTHROUGH = [
  'temperature', 'top_k', 'top_p', 'min_p', 'mirostat', 'mirostat_tau', 'mirostat_eta', 'penalty_last_n',
  'penalty_repeat', 'penalty_freq', 'penalty_present', 'typical_p', 'typ_p', 'xtc_threshold', 'xtc_probability',
  'dry_multiplier', 'dry_base', 'dry_allowed_length', 'dry_penalty_last_n', 'dry_sequence_breakers', 'seed', 'stop',
  'grammar', 'logit_bias', 'ignore_eos', 'n_probs', 'n_keep', 'tools', 'tool_choice', 'parallel_tool_calls',
  'add_generation_prompt', 'dynatemp_range', 'dynatemp_exponent', 'min_keep', 'samplers', 'cache_prompt', 'lookup',
];

function jsonSchemaOf(responseFormat) {
  if (!responseFormat) return undefined;
  if (responseFormat.type === 'json_schema') return responseFormat.json_schema?.schema ?? {};
  // json_object without a schema: an object (llama.cpp turns the empty schema into one).
  if (responseFormat.type === 'json_object') return responseFormat.schema ?? { type: 'object' };
  return undefined;
}

function promptRequired() {
  // llama.node's message (its completion() and parallel.completion() refuse an empty prompt).
  return new TypeError('loom-node: Prompt is required');
}

function buildRequest(options, { stream }) {
  const req = {};
  for (const k of PASSTHROUGH) if (options[k] !== undefined && options[k] !== null) req[k] = options[k];
  // A lazy grammar (getFormattedChat's tool-call grammar, applied by llama.node from its trigger
  // on) cannot be applied from a trigger by loom: it is not applied at all rather than from the
  // first token (which would force a tool call).
  if (options.grammar_lazy === true) delete req.grammar;
  // seed: llama.node's default (0xFFFFFFFF, LLAMA_DEFAULT_SEED) and -1 both mean random.
  if (req.seed === 0xffffffff || req.seed < 0) delete req.seed;
  // Lengths: n_predict, else max_tokens (llama.node declares it but ignores it), else max_length.
  const n = options.n_predict ?? options.max_tokens ?? options.max_length;
  if (n !== undefined) req.n_predict = n;
  if (options.logit_bias !== undefined) {
    // [[token, bias]] (llama.node) or {token: bias} (OpenAI).
    req.logit_bias = options.logit_bias;
  }
  if (options.json_schema !== undefined) req.json_schema = options.json_schema;
  // loom: speculative decoding by prompt lookup (the same tokens, faster on repetitive text).
  if (options.draft_max !== undefined) req['speculative.n_max'] = options.draft_max;
  if (options.draft_min !== undefined) req['speculative.n_min'] = options.draft_min;
  if (Array.isArray(options.messages)) {
    req.messages = options.messages;
    if (options.chat_template) req.chat_template = options.chat_template;
    if (options.response_format && options.response_format.type !== 'text') req.response_format = options.response_format;
    const kwargs = { ...(options.chat_template_kwargs || {}) };
    if (options.enable_thinking !== undefined && kwargs.enable_thinking === undefined) kwargs.enable_thinking = options.enable_thinking;
    if (Object.keys(kwargs).length) req.chat_template_kwargs = kwargs;
    // llama.node's default: reasoning stays in the content unless asked for.
    req.reasoning_format = options.reasoning_format ?? 'none';
    // Each token event carries the parse of the text so far (content, reasoning, tool calls).
    if (stream) req.stream_parse = true;
  } else {
    if (typeof options.prompt !== 'string') throw typeError('completion needs a prompt (string) or messages (array)');
    if (options.prompt === '') throw promptRequired();
    req.prompt = options.prompt;
    const schema = jsonSchemaOf(options.response_format);
    if (schema !== undefined && req.json_schema === undefined && req.grammar === undefined) req.json_schema = schema;
  }
  return req;
}

function probabilitiesOf(detail) {
  // loom's logprobs -> llama.node's completion_probabilities entry.
  return {
    content: detail.piece,
    probs: (detail.top || []).map((t) => ({ tok_str: t.piece, prob: Math.exp(t.logprob) })),
  };
}

// loom's additions to llama.node's objects are not enumerable: readable, but a result lists (and
// serializes to, and compares as) llama.node's fields only.
function hide(obj, key, value) {
  Object.defineProperty(obj, key, { value, enumerable: false, writable: true, configurable: true });
  return obj;
}

function timingsOf(done) {
  const t = done?.timings || {};
  const out = {
    prompt_n: t.prompt_n ?? 0,
    prompt_ms: t.prompt_ms ?? 0,
    prompt_per_token_ms: t.prompt_per_token_ms ?? 0,
    prompt_per_second: t.prompt_per_second ?? 0,
    predicted_n: t.predicted_n ?? 0,
    predicted_ms: t.predicted_ms ?? 0,
    predicted_per_token_ms: t.predicted_per_token_ms ?? 0,
    predicted_per_second: t.predicted_per_second ?? 0,
  };
  // llama.node's completion timings have 8 fields; its parallel results add cache_n.
  return hide(out, 'cache_n', t.cache_n ?? 0);
}

// llama.node's result of a completion on a vocab_only model: nothing generated.
function emptyResult() {
  const r = {
    chat_format: 0,
    context_full: false,
    interrupted: false,
    stopped_eos: false,
    stopped_limited: true,
    stopped_words: false,
    stopping_word: '',
    text: '',
    timings: timingsOf(null),
    tokens_evaluated: 0,
    tokens_predicted: 0,
    truncated: false,
  };
  hide(r, 'stopped_limit', true);
  hide(r, 'stopped_word', false);
  return hide(r, 'tokens', new Int32Array(0));
}

// A parallel request's result as llama.node's (its fields; the rest of a completion result hidden).
// llama.node parses (content, reasoning_content, tool_calls) the output of chat requests only.
function parallelResult(requestId, r, chat) {
  const out = {
    requestId,
    text: r.text,
    stopped_eos: r.stopped_eos,
    stopped_limit: r.stopped_limit,
    stopped_word: r.stopped_word,
    context_full: r.context_full,
    tokens_evaluated: r.tokens_evaluated,
    tokens_predicted: r.tokens_predicted,
    chat_format: r.chat_format,
  };
  for (const k of ['content', 'reasoning_content', 'tool_calls']) {
    if (r[k] === undefined) continue;
    if (chat) out[k] = r[k];
    else hide(out, k, r[k]);
  }
  out.timings = { cache_n: r.timings.cache_n, ...r.timings };
  if (r.completion_probabilities) out.completion_probabilities = r.completion_probabilities;
  for (const k of ['truncated', 'interrupted', 'stopped_words', 'stopping_word', 'stopped_limited', 'tokens']) hide(out, k, r[k]);
  return out;
}

function toolCallsOf(list) {
  // llama.node's shape: {type: 'function', function: {name, arguments}, id?}
  return (list || []).map((c) => {
    const fn = c.function || c;
    const out = { type: 'function', function: { name: fn.name ?? '', arguments: typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {}) } };
    if (c.id) out.id = c.id;
    return out;
  });
}

// A token callback's chat fields as llama.node sets them: the parse of the text so far, each only
// when not empty.
function setParsed(data, parsed) {
  if (parsed.content) data.content = parsed.content;
  if (parsed.reasoning_content) data.reasoning_content = parsed.reasoning_content;
  if (parsed.tool_calls && parsed.tool_calls.length) data.tool_calls = toolCallsOf(parsed.tool_calls);
}

function abortError() {
  const e = new Error('The operation was aborted');
  e.name = 'AbortError';
  return e;
}

function releasedError() {
  return new Error('loom-node: this context has been released');
}

// Starts one request on the native scheduler. Returns {promise, cancel}: the promise resolves
// with llama.node's result object. The request is submitted at once, or, while an exclusive
// operation (clearCache, LoRA) called before it is still pending, right after that operation.
function startCompletion(ctx, options, onToken, { parse = true } = {}) {
  checkOptions(options, COMPLETION_OPTION_TYPES, 'completion options');
  checkReasoningFormat(options.reasoning_format, 'completion options');
  if (onToken !== undefined && onToken !== null && typeof onToken !== 'function') {
    throw typeError('the token callback must be a function');
  }
  const signal = options.signal;
  if (signal !== undefined && (typeof signal !== 'object' || signal === null || typeof signal.aborted !== 'boolean')) {
    throw typeError('completion options.signal must be an AbortSignal');
  }
  const chat = Array.isArray(options.messages);
  const wantProbs = (options.n_probs ?? 0) > 0;
  // The engine parses each token's text so far only when a callback shows it.
  const req = buildRequest(options, { stream: !!onToken && chat && parse });
  let id = -1;
  let cancelled = false;
  const cancel = () => {
    cancelled = true;
    if (id >= 0) ctx._native.cancel(id);
  };
  const promise = new Promise((resolve, reject) => {
    let text = '';
    let finish = null;
    let callbackError = null;
    const probs = [];
    const deliver = (data) => {
      if (!onToken || callbackError) return;
      try {
        onToken(data);
      } catch (err) {
        // The caller's callback threw: stop the request and reject with its error.
        callbackError = err;
        cancel();
      }
    };
    // A token callback's data as llama.node's: the piece, the text so far, and its parse
    // (for a plain prompt the content is the whole text, as llama.node's content-only parse).
    const tokenData = (piece, parsed, entry) => {
      const data = { token: piece };
      if (!chat) {
        if (text) data.content = text;
      } else if (parsed && ('content' in parsed || 'reasoning_content' in parsed || 'tool_calls' in parsed)) {
        setParsed(data, parsed);
      } else if (text) {
        data.content = text; // the engine gave no parse (older C API): the raw text so far
      }
      data.accumulated_text = text;
      if (entry) data.completion_probabilities = [entry];
      return data;
    };
    const onEvent = (kind, choice, token, piece, json) => {
      if (kind === 0) {
        // token
        text += piece;
        const detail = json ? JSON.parse(json) : null;
        const entry = detail && wantProbs && detail.top ? probabilitiesOf(detail) : null;
        if (entry) probs.push(entry);
        if (piece.length > 0 || entry) deliver(tokenData(piece, detail, entry));
      } else if (kind === 1) {
        // finish: the rest of the text (held back while a stop string could still match)
        finish = JSON.parse(json);
        if (piece.length > 0) {
          text += piece;
          deliver(tokenData(piece, finish, null));
        }
      } else if (kind === 2) {
        // done
        const done = JSON.parse(json);
        cleanup();
        if (callbackError) return reject(callbackError);
        const f = finish || {};
        const nPredict = req.n_predict ?? -1;
        const generated = done.usage?.completion_tokens ?? 0;
        const limited = f.reason === 'length' && nPredict >= 0 && generated >= nPredict;
        const all = f.text ?? text;
        const prompt = done.prompt_tokens ?? 0;
        const result = { text: all };
        // llama.node sets content, reasoning_content and tool_calls only when not empty.
        const content = chat ? f.content ?? '' : all;
        if (content) result.content = content;
        if (chat && f.reasoning_content) result.reasoning_content = f.reasoning_content;
        if (chat && f.tool_calls && f.tool_calls.length) result.tool_calls = toolCallsOf(f.tool_calls);
        Object.assign(result, {
          chat_format: 0,
          tokens_predicted: generated,
          tokens_evaluated: prompt,
          // A request longer than the context went on past its end: context shift (llama.node's
          // truncated). Derived: the engine reports no per-request shift count.
          truncated: ctx._options.ctx_shift !== false && prompt + generated > (ctx._info.nCtx ?? Infinity),
          context_full: f.reason === 'length' && !limited,
          interrupted: f.reason === 'cancelled',
          stopped_eos: !!f.stopped_eos && f.reason === 'stop',
          stopped_words: !!f.stopped_word,
          stopping_word: f.stop_word || '',
          stopped_limited: limited,
          timings: timingsOf(done),
        });
        if (wantProbs) result.completion_probabilities = probs;
        // llama.node's parallel-result names, and loom's generated token ids.
        hide(result, 'stopped_limit', limited);
        hide(result, 'stopped_word', !!f.stopped_word);
        hide(result, 'tokens', Int32Array.from(f.tokens || []));
        ctx._lastTokens = Int32Array.from([...(done.prompt_ids || []), ...(f.tokens || [])]);
        // This request's own prompt + output (parallel requests finish in any order).
        Object.defineProperty(result, '_allTokens', { value: ctx._lastTokens, enumerable: false });
        resolve(result);
      } else {
        cleanup();
        const err = new Error(`loom-node: ${piece}`);
        err.code = token;
        reject(err);
      }
    };
    const onAbort = () => cancel();
    const cleanup = () => {
      if (signal) signal.removeEventListener('abort', onAbort);
    };
    if (signal) {
      if (signal.aborted) cancelled = true;
      else signal.addEventListener('abort', onAbort, { once: true });
    }
    const submit = () => {
      if (ctx._released) {
        cleanup();
        reject(releasedError());
        return;
      }
      try {
        // Token events only when something reads them (the finish event has the whole text).
        id = ctx._native.submit(JSON.stringify(req), onEvent, !!onToken || wantProbs);
      } catch (err) {
        cleanup();
        reject(err);
        return;
      }
      if (cancelled) ctx._native.cancel(id);
    };
    if (ctx._barrier) ctx._barrier.then(submit);
    else submit();
  });
  // In flight until settled (parallel.enable waits for these before changing the slots).
  const forget = () => ctx._inflight.delete(promise);
  ctx._inflight.add(promise);
  promise.then(forget, forget);
  return { promise, cancel };
}

function normalizeEmbedding(v, mode) {
  // llama.cpp's common_embd_normalize: -1 none, 0 max-abs to int16 range, 1 taxicab, 2 euclidean, >2 p-norm.
  let sum = 0;
  if (mode < 0) return v;
  if (mode === 0) {
    for (const x of v) sum = Math.max(sum, Math.abs(x));
    sum /= 32760;
  } else if (mode === 2) {
    for (const x of v) sum += x * x;
    sum = Math.sqrt(sum);
  } else {
    for (const x of v) sum += Math.pow(Math.abs(x), mode);
    sum = Math.pow(sum, 1 / mode);
  }
  const inv = sum > 0 ? 1 / sum : 0;
  const out = new Float32Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = v[i] * inv;
  return out;
}

let warnedNoEmbedding = false;

// ---- the parallel API ----------------------------------------------------------------------------

class LlamaParallelAPI {
  constructor(ctx) {
    this._ctx = ctx;
    this._enabled = false;
    // requestId -> {type, state, t0, generated, cancel}; ids are the context's own (1, 2, ...),
    // unique over completions, embeddings and reranks, known before the request is queued.
    this._requests = new Map();
  }

  async enable(config = {}) {
    if (config === null || typeof config !== 'object') throw typeError('parallel.enable config must be an object');
    checkType(config, 'n_parallel', 'integer', 'config');
    checkType(config, 'n_batch', 'integer', 'config');
    const n = config.n_parallel ?? 2;
    if (n < 1) throw new RangeError('loom-node: n_parallel must be at least 1');
    const max = this._ctx._maxParallel;
    if (n > max) {
      // llama.node's message: the slots are bounded by loadModel's n_parallel (n_seq_max).
      throw new Error(
        `Failed to enable parallel mode with ${n} slots. Context n_seq_max (${max}) is less than requested. ` +
          `Context was initialized with n_parallel=${max}. To use ${n} parallel slots, reinitialize the context with n_parallel >= ${n}`,
      );
    }
    await this._ctx._reconfigure({ n_parallel: n, n_batch: config.n_batch });
    this._enabled = true;
    return true;
  }

  async configure(config) {
    return this.enable(config);
  }

  disable() {
    this._enabled = false;
  }

  isEnabled() {
    return this._enabled;
  }

  _need() {
    if (!this._enabled) throw new Error('Parallel mode is not enabled. Call enable() first.');
  }

  _track(type) {
    const requestId = this._ctx._nextRequestId++;
    const state = { type, state: 'queued', t0: Date.now(), generated: 0 };
    this._requests.set(requestId, state);
    return { requestId, state, done: () => this._requests.delete(requestId) };
  }

  async completion(options, onToken) {
    this._need();
    if (onToken !== undefined && onToken !== null && typeof onToken !== 'function') throw typeError('onToken must be a function');
    if (options === null || typeof options !== 'object') throw typeError('options must be an object');
    for (const k of ['load_state_path', 'save_state_path', 'save_prompt_state_path']) checkType(options, k, 'string', 'options');
    if (!Array.isArray(options.messages) && options.prompt === '') throw promptRequired();
    // llama.node's per-request state files: loaded into the prefix cache before the request, its
    // prompt (+ output) saved after it — loom's checked session files.
    if (options.load_state_path) {
      if (this._ctx._barrier) await this._ctx._barrier;
      await this._ctx._native.loadSession(options.load_state_path);
    }
    const { requestId, state, done } = this._track('completion');
    let started;
    try {
      started = startCompletion(
        this._ctx,
        options,
        (data) => {
          state.state = 'generating';
          state.generated++;
          if (onToken) onToken(requestId, { requestId, ...data });
        },
        { parse: !!onToken },
      );
    } catch (err) {
      done();
      throw err;
    }
    let settle = null;
    const promise = new Promise((resolve, reject) => {
      settle = { resolve, reject };
    });
    started.promise.then(
      async (r) => {
        try {
          const all = r._allTokens;
          if (options.save_state_path) await this._ctx._native.saveSession(options.save_state_path, all);
          if (options.save_prompt_state_path) {
            await this._ctx._native.saveSession(options.save_prompt_state_path, all.subarray(0, r.tokens_evaluated));
          }
          if (settle) settle.resolve(parallelResult(requestId, r, Array.isArray(options.messages)));
        } catch (err) {
          if (settle) settle.reject(err);
        } finally {
          settle = null;
          done();
        }
      },
      (err) => {
        done();
        if (settle) settle.reject(err);
        settle = null;
      },
    );
    // llama.node: stop() cancels the request and rejects its promise at once.
    const stop = () => {
      started.cancel();
      if (settle) {
        settle.reject(new Error('Request cancelled'));
        settle = null;
      }
    };
    return { requestId, promise, stop };
  }

  async embedding(text, params) {
    this._need();
    const { requestId, state, done } = this._track('embedding');
    state.state = 'processing_prompt';
    const promise = this._ctx.embedding(text, params).then(
      (r) => {
        done();
        // llama.node's parallel embedding is a plain array.
        return { requestId, embedding: Array.from(r.embedding) };
      },
      (err) => {
        done();
        throw err;
      },
    );
    return { requestId, promise };
  }

  async rerank(query, documents, params) {
    this._need();
    const { requestId, state, done } = this._track('rerank');
    state.state = 'processing_prompt';
    if (Array.isArray(documents) && !this._ctx._isReranker()) {
      // llama.node's parallel rerank on a model that cannot rank resolves with its failure score
      // (-1e6) for every document (ctx.rerank() throws, as llama.node's).
      done();
      const docs = documents.map((d, index) => ({ score: -1000000, index, document: d }));
      return { requestId, promise: Promise.resolve(docs) };
    }
    const promise = this._ctx.rerank(query, documents, params).then(
      (r) => {
        done();
        return r;
      },
      (err) => {
        done();
        throw err;
      },
    );
    return { requestId, promise };
  }

  getStatus() {
    this._need();
    const s = JSON.parse(this._ctx._native.stats());
    const requests = [...this._requests.entries()].map(([id, r]) => ({
      request_id: id,
      type: r.type,
      state: r.state,
      prompt_length: 0,
      tokens_generated: r.generated,
      prompt_ms: 0,
      generation_ms: Date.now() - r.t0,
      tokens_per_second: r.generated / Math.max(1e-3, (Date.now() - r.t0) / 1000),
    }));
    return { n_parallel: s.slots, active_slots: s.slots_busy, queued_requests: s.waiting, requests };
  }

  subscribeToStatus(callback) {
    this._need();
    if (typeof callback !== 'function') throw typeError('callback must be a function');
    const timer = setInterval(() => {
      try {
        callback(this.getStatus());
      } catch {
        // a subscriber's error stays with it
      }
    }, 250);
    timer.unref();
    return { remove: () => clearInterval(timer) };
  }
}

// ---- the context ------------------------------------------------------------------------------

class LlamaContext {
  constructor(nativeCtx, options) {
    this._native = nativeCtx;
    this._options = options;
    this._inflight = new Set(); // promises of running requests
    this._completions = new Set(); // cancel functions of completion()'s requests: what stopCompletion stops
    this._lastTokens = new Int32Array(0);
    this._loras = [];
    this._released = false;
    // Exclusive operations (clearCache, LoRA) return at once; the requests started after one wait
    // for it: _barrier is a promise (never rejected) while any is pending, else null.
    this._barrier = null;
    this._nextRequestId = 1;
    this._maxParallel = options.n_parallel ?? 1;
    this._info = nativeCtx.info();
    this._metadata = null; // set by loadModel from the file's header
    this.parallel = new LlamaParallelAPI(this);
  }

  _live() {
    if (this._released) throw releasedError();
  }

  // Runs start() (which returns a native promise) after the pending exclusive operations; later
  // requests wait for it. Returns the operation's own promise (rejections included); a failure
  // nobody awaits is reported as a process warning instead of an unhandled rejection.
  _exclusive(start, onError) {
    const prev = this._barrier;
    const op = prev ? prev.then(start) : Promise.resolve().then(start);
    const barrier = op.then(
      () => undefined,
      (err) => {
        if (onError) onError(err);
      },
    );
    this._barrier = barrier;
    barrier.then(() => {
      if (this._barrier === barrier) this._barrier = null;
    });
    return op;
  }

  getSystemInfo() {
    this._live();
    return `loom ${native.version()} | C API ${native.apiVersion} | CPU threads ${os.cpus().length} | ${os.arch()}`;
  }

  getUsedDevices() {
    return ['CPU'];
  }

  // The template llama.node validates for getModelInfo() is the model file's own; the one used
  // (capabilities, rendering) is loadModel's chat_template when given.
  _templateInfo() {
    if (this._tmplInfo) return this._tmplInfo;
    const metadata = this._metadata ?? this._info.metadata ?? {};
    let own = null;
    try {
      own = JSON.parse(this._native.chatTemplateInfo());
    } catch {
      own = null; // the file's template does not parse
    }
    const hasModelTemplate = 'tokenizer.chat_template' in metadata && !!own?.has_template;
    let effective = hasModelTemplate ? own : null;
    const over = this._options.chat_template;
    if (over) {
      try {
        effective = JSON.parse(this._native.chatTemplateInfo(over));
      } catch {
        effective = null;
      }
    }
    this._tmplInfo = { hasModelTemplate, effective };
    return this._tmplInfo;
  }

  getModelInfo() {
    this._live();
    const i = this._info;
    const t = this._templateInfo();
    const e = t.effective;
    // Capabilities of the template in use; without one (loom then renders ChatML) no tool support.
    const caps = {
      tools: !!e?.supports_tools,
      toolCalls: !!e?.supports_tool_calls,
      systemRole: true,
      parallelToolCalls: !!e?.supports_parallel_tool_calls,
    };
    const metadata = this._metadata ?? Object.fromEntries(Object.entries(i.metadata || {}).filter(([k]) => !MODEL_INFO_SKIP.has(k)));
    const toolUse = 'tokenizer.chat_template.tool_use' in metadata;
    const jinja = { default: t.hasModelTemplate, defaultCaps: caps, toolUse };
    if (toolUse) jinja.toolUseCaps = { ...caps };
    return {
      desc: i.vocabOnly ? '' : i.desc, // llama.node: empty for a vocab_only model
      nEmbd: i.nEmbd,
      nParams: i.nParams,
      size: i.size,
      is_recurrent: !!i.recurrent,
      is_hybrid: false,
      chatTemplates: { llamaChat: t.hasModelTemplate, jinja },
      metadata: { ...metadata },
      isChatTemplateSupported: t.hasModelTemplate,
    };
  }

  isJinjaSupported() {
    const { jinja } = this.getModelInfo().chatTemplates;
    return !!jinja?.toolUse || !!jinja?.default;
  }

  isLlamaChatSupported() {
    return !!this.getModelInfo().chatTemplates.llamaChat;
  }

  getFormattedChat(messages, template, params = {}) {
    this._live();
    if (!Array.isArray(messages)) throw typeError('messages must be an array');
    if (template !== undefined && template !== null && typeof template !== 'string') throw typeError('template must be a string');
    if (params === undefined || params === null) params = {};
    if (typeof params !== 'object') throw typeError('params must be an object');
    checkReasoningFormat(params.reasoning_format, 'params');
    const req = { messages };
    // A template (Jinja source or a built-in name such as 'chatml') for this call, else loadModel's.
    const tmpl = template || this._options.chat_template;
    if (tmpl) req.chat_template = tmpl;
    for (const k of ['tools', 'tool_choice', 'parallel_tool_calls', 'add_generation_prompt']) {
      if (params[k] !== undefined && params[k] !== null) req[k] = params[k];
    }
    if (params.response_format && params.response_format.type !== 'text') req.response_format = params.response_format;
    const kwargs = { ...(params.chat_template_kwargs || {}) };
    for (const [k, v] of Object.entries(kwargs)) {
      // llama.node passes each value as JSON text.
      if (typeof v === 'string') {
        try {
          kwargs[k] = JSON.parse(v);
        } catch {
          kwargs[k] = v;
        }
      }
    }
    if (params.enable_thinking !== undefined && kwargs.enable_thinking === undefined) kwargs.enable_thinking = params.enable_thinking;
    if (Object.keys(kwargs).length) req.chat_template_kwargs = kwargs;
    // As llama.node: the Jinja result when the model's own template is usable and jinja is not off;
    // else llama.cpp's plain chat formatting, of the messages only (no tools, no response format).
    const useJinja = this.isJinjaSupported() && (params.jinja ?? true);
    if (!useJinja) {
      const plain = { messages };
      if (req.chat_template) plain.chat_template = req.chat_template;
      const prompt = JSON.parse(this._native.chatFormat(JSON.stringify(plain))).prompt;
      return { type: 'llama-chat', prompt, has_media: false, media_paths: [] };
    }
    const f = JSON.parse(this._native.chatFormat(JSON.stringify(req)));
    // llama.node's grammar for tools with tool_choice auto is the tool-call grammar, applied lazily
    // from a trigger: loom's is the grammar it applies when a tool call is required.
    let grammar = f.grammar || '';
    let lazy = false;
    const triggers = f.grammar_triggers || [];
    const tools = Array.isArray(params.tools) && params.tools.length > 0;
    if (tools && !grammar && triggers.length && params.tool_choice !== 'none') {
      try {
        grammar = JSON.parse(this._native.chatFormat(JSON.stringify({ ...req, tool_choice: 'required' }))).grammar || '';
        lazy = grammar !== '';
      } catch {
        grammar = '';
      }
    }
    return {
      type: 'jinja',
      has_media: false,
      media_paths: [],
      prompt: f.prompt,
      chat_format: CHAT_FORMATS[f.tool_call_format] ?? 0,
      grammar,
      grammar_lazy: lazy,
      grammar_triggers: lazy ? triggers.map((t) => ({ type: TRIGGER_TYPES[t.type] ?? TRIGGER_TYPES.word, value: t.value, token: -1 })) : [],
      thinking_forced_open: !!f.thinking_forced_open,
      preserved_tokens: f.preserved_tokens || [],
      additional_stops: f.additional_stops || [],
      // llama.node: llama.cpp's serialized PEG parser of the output; loom: the name of the output
      // format it parses (completion() parses messages requests itself).
      chat_parser: JSON.stringify({ format: f.tool_call_format || 'none' }),
    };
  }

  completion(options, onToken) {
    try {
      this._live();
      if (this._options.vocab_only) {
        // llama.node answers a completion on a vocab_only model with an empty result.
        checkOptions(options, COMPLETION_OPTION_TYPES, 'completion options');
        return Promise.resolve(emptyResult());
      }
      const { promise, cancel } = startCompletion(this, options, onToken);
      this._completions.add(cancel);
      return promise.finally(() => this._completions.delete(cancel));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  stopCompletion() {
    if (this._released) return;
    for (const cancel of this._completions) cancel();
  }

  async tokenize(text, opts = {}) {
    this._live();
    if (typeof text !== 'string') throw typeError('text must be a string');
    // As llama.node (llama.rn's common_tokenize(ctx, text, false, true)): no BOS, special tokens parsed.
    const tokens = await this._native.tokenize(text, false, true);
    // llama.node lists the media fields only for a text with media.
    const r = { tokens, has_media: false };
    for (const k of ['bitmap_hashes', 'chunk_pos', 'chunk_pos_media']) hide(r, k, []);
    return r;
  }

  async detokenize(tokens) {
    this._live();
    return this._native.detokenize(tokens, false);
  }

  _pooling() {
    // The context's pooling: loadModel's pooling_type, else the file's (-1: none given).
    const p = this._options.pooling_type;
    return p !== undefined ? POOLING[p] : this._info.pooling ?? -1;
  }

  async embedding(text, params = {}) {
    this._live();
    if (typeof text !== 'string') throw typeError('text must be a string');
    if (params === undefined || params === null) params = {};
    if (typeof params !== 'object') throw typeError('params must be an object');
    checkType(params, 'embd_normalize', 'integer', 'params');
    if (!this._options.embedding) {
      // llama.node's answer on a context loaded without embedding: true: n_embd zeros.
      if (!warnedNoEmbedding) {
        warnedNoEmbedding = true;
        process.emitWarning('embedding() on a context loaded without embedding: true returns zeros (as llama.node); load with embedding: true', {
          code: 'LOOM_NODE_EMBEDDING_DISABLED',
        });
      }
      return { embedding: new Float32Array(this._info.nEmbd) };
    }
    if (this._barrier) await this._barrier;
    const r = await this._native.embed(JSON.stringify({ input: text }));
    if (!r.dim || !r.n) {
      throw new Error(`loom-node: pooling_type '${POOLING_NAMES[this._pooling()] ?? 'none'}' gives no pooled embedding; load the model with pooling_type 'mean', 'cls' or 'last'`);
    }
    const mode = params.embd_normalize ?? this._options.embd_normalize ?? 2;
    return { embedding: normalizeEmbedding(r.data.subarray(0, r.dim), mode) };
  }

  _isReranker() {
    return !!this._options.embedding && this._pooling() === POOLING.rank;
  }

  async rerank(query, documents, params = {}) {
    this._live();
    if (typeof query !== 'string') throw typeError('query must be a string');
    if (!Array.isArray(documents) || documents.some((d) => typeof d !== 'string')) throw typeError('documents must be an array of strings');
    const pooling = this._pooling();
    if (!this._isReranker()) {
      // llama.node: "reranking not supported, pooling_type: N".
      throw new Error(
        `loom-node: reranking not supported, pooling_type: ${POOLING_NAMES[pooling] ?? 'none'} ` +
          "(load a reranker with embedding: true and pooling_type: 'rank')",
      );
    }
    if (documents.length === 0) return [];
    if (this._barrier) await this._barrier;
    const r = await this._native.embed(JSON.stringify({ rerank: { query, documents } }));
    const sigmoid = params?.normalize === 1;
    const out = [];
    for (let i = 0; i < r.n; i++) {
      const s = r.data[i * r.dim];
      out.push({ score: sigmoid ? 1 / (1 + Math.exp(-s)) : s, index: i, document: documents[i] });
    }
    return out.sort((a, b) => b.score - a.score);
  }

  async saveSession(path) {
    this._live();
    if (typeof path !== 'string') throw typeError('path must be a string');
    if (this._lastTokens.length === 0) throw new Error('loom-node: nothing to save (run a completion first)');
    if (this._barrier) await this._barrier;
    await this._native.saveSession(path, this._lastTokens);
  }

  async loadSession(path) {
    this._live();
    if (typeof path !== 'string') throw typeError('path must be a string');
    if (this._barrier) await this._barrier;
    const tokens = await this._native.loadSession(path);
    this._lastTokens = tokens;
    return { tokens_loaded: tokens.length };
  }

  // llama.node's clearCache is synchronous: so is this one. The prefix cache is emptied once the
  // running requests are done; requests started after this call wait for it.
  clearCache(clearData) {
    this._live();
    if (this._options.vocab_only) return;
    this._exclusive(
      () => this._native.clearCache(),
      (err) => {
        if (!this._released) warn('clearCache', err);
      },
    );
  }

  // llama.node's LoRA calls are synchronous: the adapters are loaded (and checked against the
  // model) here, a bad file throws; they replace the context's once the running requests are done,
  // and requests started after this call wait for them.
  applyLoraAdapters(adapters) {
    this._live();
    if (!Array.isArray(adapters)) throw typeError('adapters must be an array of {path, scaled}');
    const list = adapters.map((a, i) => {
      if (!a || typeof a !== 'object' || typeof a.path !== 'string') throw typeError(`adapters[${i}].path must be a string`);
      if (a.scaled !== undefined && a.scaled !== null && typeof a.scaled !== 'number') throw typeError(`adapters[${i}].scaled must be a number`);
      return { path: a.path, scaled: a.scaled ?? 1.0 };
    });
    return this._setLoras([...this._loras, ...list]);
  }

  removeLoraAdapters() {
    this._live();
    return this._setLoras([]);
  }

  _setLoras(all) {
    if (this._options.vocab_only) throw new Error('loom-node: the model was loaded with vocab_only: no LoRA adapters');
    const handle = this._native.loadLora(all); // throws at the call for a file that cannot be used
    const before = this._loras;
    this._loras = all;
    this._exclusive(
      () => this._native.setLora(handle),
      (err) => {
        if (this._loras === all) this._loras = before;
        if (!this._released) warn('applyLoraAdapters', err);
      },
    );
  }

  getLoadedLoraAdapters() {
    return this._loras.map((a) => ({ ...a }));
  }

  async bench(pp, tg, pl, nr) {
    this._live();
    if (this._barrier) await this._barrier;
    const r = JSON.parse(await this._native.bench(pp, tg, pl, nr));
    const i = this._info;
    return {
      modelDesc: i.desc,
      modelSize: i.size,
      modelNParams: i.nParams,
      nKvMax: i.nCtx,
      nBatch: this._options.n_batch,
      nUBatch: this._options.n_ubatch,
      flashAttn: 1,
      isPpShared: false,
      nGpuLayers: 0,
      nThreads: this._options.n_threads,
      nThreadsBatch: this._options.n_threads,
      pp: r.pp,
      tg: r.tg,
      pl: r.pl,
      nKv: r.n_kv,
      tPp: r.t_pp,
      speedPp: r.speed_pp,
      tTg: r.t_tg,
      speedTg: r.speed_tg,
      t: r.t,
      speed: r.speed,
    };
  }

  // A new scheduler with other slots (parallel.enable), once the running requests are done.
  async _reconfigure(change) {
    this._live();
    if (this._barrier) await this._barrier;
    await Promise.allSettled([...this._inflight]);
    const opts = { ...this._nativeOpts, ...Object.fromEntries(Object.entries(change).filter(([, v]) => v !== undefined)) };
    await this._native.reconfigure(opts);
    this._nativeOpts = opts;
    if (this._loras.length) await this._native.setLora(this._loras);
    this._info = this._native.info();
  }

  async release() {
    if (this._released) return;
    this._released = true;
    await this._native.release();
  }

  // llama.node's multimodal and TTS parts: loom has no vision / audio models yet. The init
  // functions report failure as llama.node does (false); the rest is a clear error.
  initMultimodal() {
    return false;
  }

  isMultimodalEnabled() {
    return false;
  }

  getMultimodalSupport() {
    return { vision: false, audio: false };
  }

  releaseMultimodal() {}

  initVocoder() {
    return false;
  }

  isVocoderEnabled() {
    return false;
  }

  releaseVocoder() {}

  getFormattedAudioCompletion() {
    throw new Error('loom-node: text-to-speech is not supported');
  }

  getAudioCompletionGuideTokens() {
    throw new Error('loom-node: text-to-speech is not supported');
  }

  async decodeAudioTokens() {
    throw new Error('loom-node: text-to-speech is not supported');
  }

  // Not in llama.node: the native handle's scheduler counters.
  getStatus() {
    this._live();
    return JSON.parse(this._native.stats());
  }
}

function warn(what, err) {
  process.emitWarning(`loom-node: ${what} failed after it returned: ${err && err.message ? err.message : err}`, { code: 'LOOM_NODE_EXCLUSIVE_FAILED' });
}

function nativeOptions(options) {
  const o = {
    n_ctx: options.n_ctx ?? 512,
    n_batch: options.n_batch ?? 2048,
    n_ubatch: options.n_ubatch ?? 512,
    n_parallel: options.n_parallel ?? 1,
    n_threads: options.n_threads ?? Math.max(1, Math.floor(os.cpus().length / 2)),
    embedding: options.embedding ?? false,
    ctx_shift: options.ctx_shift ?? true,
    vocab_only: options.vocab_only ?? false,
    rope_freq_base: options.rope_freq_base ?? 0,
    rope_freq_scale: options.rope_freq_scale ?? 0,
  };
  if (o.n_ctx === 0) o.n_ctx = 4096;
  if (options.pooling_type !== undefined) {
    if (!(options.pooling_type in POOLING)) throw typeError(`pooling_type must be one of ${Object.keys(POOLING).join(', ')}`);
    o.pooling = POOLING[options.pooling_type];
  }
  for (const k of ['cache_type_k', 'cache_type_v']) {
    if (options[k] === undefined) continue;
    const t = KV_TYPES[String(options[k]).toLowerCase()];
    if (t === undefined) throw typeError(`${k} must be one of ${Object.keys(KV_TYPES).join(', ')}`);
    o[k === 'cache_type_k' ? 'type_k' : 'type_v'] = t;
  }
  if (options.chat_template) o.chat_template = options.chat_template;
  if (options.draft_model) {
    o.draft_model = options.draft_model;
    for (const k of ['draft_max', 'draft_min', 'draft_p_min']) if (options[k] !== undefined) o[k] = options[k];
  }
  return o;
}

async function loadModel(options, onProgress) {
  checkOptions(options, MODEL_OPTION_TYPES, 'options');
  if (typeof options.model !== 'string' || options.model === '') throw typeError('options.model must be a path to a GGUF file');
  if (onProgress !== undefined && onProgress !== null && typeof onProgress !== 'function') throw typeError('onProgress must be a function');
  if (options.n_parallel !== undefined && options.n_parallel !== null && options.n_parallel < 1) {
    throw new RangeError('loom-node: n_parallel must be at least 1');
  }
  const nopts = nativeOptions(options);
  let last = -1;
  let settled = false;
  const progress = onProgress
    ? (p) => {
        if (settled || p <= last) return;
        last = p;
        try {
          onProgress(p);
        } catch {
          // the caller's progress callback must not break loading
        }
      }
    : undefined;
  const nativeCtx = await native.load(options.model, nopts, progress);
  if (progress && last < 100) progress(100);
  settled = true;
  const ctx = new LlamaContext(nativeCtx, { ...options, ...nopts });
  ctx._nativeOpts = nopts;
  try {
    // llama_model's metadata as llama.node lists it: the file's keys without the arrays.
    ctx._metadata = modelMetadata(await describeFile(options.model));
  } catch {
    // the native metadata (every key) stays
  }
  // LoRA given at load: lora / lora_scaled, lora_list.
  const loras = [];
  if (options.lora) loras.push({ path: options.lora, scaled: options.lora_scaled ?? 1.0 });
  if (Array.isArray(options.lora_list)) for (const a of options.lora_list) loras.push(a);
  if (loras.length && !nopts.vocab_only) {
    try {
      await ctx._native.setLora(loras);
      ctx._loras = loras.map((a) => ({ path: a.path, scaled: a.scaled ?? 1.0 }));
    } catch (err) {
      await ctx.release();
      throw err;
    }
  }
  return ctx;
}

async function loadLlamaModelInfo(path) {
  if (typeof path !== 'string') throw typeError('path must be a string');
  const d = await describeFile(path);
  // As llama.node's: the header's version, alignment and data offset, then the metadata as text
  // without the tokenizer's large arrays.
  const out = { version: d.gguf_version, alignment: d.alignment };
  if (d.tensors.length) {
    let end = 0;
    for (const t of d.tensors) end = Math.max(end, t.offset + t.bytes);
    const rest = d.file_size - end; // the data offset plus the last tensor's padding
    out.data_offset = rest - (rest % d.alignment);
  }
  for (const m of d.metadata) if (!MODEL_INFO_SKIP.has(m.key)) out[m.key] = ggufText(m);
  return out;
}

function backendDevices() {
  return [{ backend: 'CPU', type: 'cpu', deviceName: 'CPU', maxMemorySize: os.totalmem(), metadata: { threads: os.cpus().length } }];
}

async function getBackendDevicesInfo(variant) {
  return backendDevices();
}

async function isLibVariantAvailable(variant) {
  return variant === undefined || variant === 'default';
}

// llama.node's loadModule() / initLlama(): its native module, whose LlamaContext class loads a model
// synchronously in its constructor. loom loads off the event loop, so contexts come from
// loadModel(); the module's static helpers work.
let moduleLogCallback = null;
class ModuleLlamaContext {
  constructor() {
    throw new TypeError('loom-node: contexts are made by loadModel() (loom does not load a model on the JavaScript thread)');
  }

  static toggleNativeLog(enable, callback) {
    if (moduleLogCallback) logListeners.delete(moduleLogCallback);
    moduleLogCallback = typeof callback === 'function' ? callback : null;
    if (moduleLogCallback) logListeners.add(moduleLogCallback);
    logEnabled = !!enable;
    refreshLog();
  }

  static async loadModelInfo(path, skip = []) {
    const info = await loadLlamaModelInfo(path);
    for (const k of Array.isArray(skip) ? skip : []) delete info[k];
    return info;
  }

  static getBackendDevicesInfo() {
    return JSON.stringify(backendDevices());
  }
}
const loomModule = Object.freeze({ LlamaContext: ModuleLlamaContext });

async function loadModule(variant) {
  return loomModule;
}

// llama.node's build number and commit: loom's version and git commit.
const BuildInfo = (() => {
  const v = String(native.version());
  const m = /^(\S+)(?:\s*\(git ([0-9a-f]+)[^)]*\))?/.exec(v);
  return Object.freeze({ number: m ? m[1] : v, commit: m && m[2] ? m[2].slice(0, 9) : '' });
})();

module.exports = {
  getBackendDevicesInfo,
  isLibVariantAvailable,
  loadModel,
  loadModule,
  loadLlamaModelInfo,
  toggleNativeLog,
  isNativeLogEnabled,
  addNativeLogListener,
  LlamaContext,
  LlamaParallelAPI,
  BuildInfo,
  initLlama: loadModule,
  loomVersion: () => native.version(),
};
