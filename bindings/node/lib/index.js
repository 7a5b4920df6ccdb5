'use strict';
// loom-node: @fugood/llama.node's API (1.7) over loom's scheduler. Switching is a one-line change:
//   const { loadModel } = require('loom-node')   // was require('@fugood/llama.node')
// The native addon (src/addon.cpp) does the work off the event loop; this file checks options,
// translates llama.node's names into loom's request JSON (include/loom/loom_serve.h) and shapes
// results the way llama.node returns them. See README.md for what differs.
const os = require('node:os');
const native = require('./native');

const POOLING = { none: 0, mean: 1, cls: 2, last: 3, rank: 4 };
const KV_TYPES = { f32: 0, f16: 1, q4_0: 2, q4_1: 3, q5_0: 6, q5_1: 7, q8_0: 8, iq4_nl: 20, bf16: 30 };
// Chat formats as numbers (llama.node reports common_chat_format's enum; loom's are its own).
const CHAT_FORMATS = { none: 0, generic: 1, hermes: 2, llama3: 3, mistral: 4, mistral_args: 5 };

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
  draft_max: 'integer', draft_min: 'integer',
};

function checkOptions(options, types, where) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw typeError(`${where} must be an object`);
  }
  for (const [k, t] of Object.entries(types)) checkType(options, k, t, where);
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
  if (responseFormat.type === 'json_object') return responseFormat.schema ?? {};
  return undefined;
}

function buildRequest(options) {
  const req = {};
  for (const k of PASSTHROUGH) if (options[k] !== undefined && options[k] !== null) req[k] = options[k];
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
  } else {
    if (typeof options.prompt !== 'string') throw typeError('completion needs a prompt (string) or messages (array)');
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

function timingsOf(done) {
  const t = done?.timings || {};
  return {
    prompt_n: t.prompt_n ?? 0,
    prompt_ms: t.prompt_ms ?? 0,
    prompt_per_token_ms: t.prompt_per_token_ms ?? 0,
    prompt_per_second: t.prompt_per_second ?? 0,
    predicted_n: t.predicted_n ?? 0,
    predicted_ms: t.predicted_ms ?? 0,
    predicted_per_token_ms: t.predicted_per_token_ms ?? 0,
    predicted_per_second: t.predicted_per_second ?? 0,
    cache_n: t.cache_n ?? 0,
  };
}

function abortError() {
  const e = new Error('The operation was aborted');
  e.name = 'AbortError';
  return e;
}

// Runs one request on the native scheduler: resolves with llama.node's result object.
function runCompletion(ctx, options, onToken, track) {
  checkOptions(options, COMPLETION_OPTION_TYPES, 'completion options');
  if (onToken !== undefined && onToken !== null && typeof onToken !== 'function') {
    throw typeError('the token callback must be a function');
  }
  const req = buildRequest(options);
  const signal = options.signal;
  if (signal !== undefined && (typeof signal !== 'object' || typeof signal.aborted !== 'boolean')) {
    throw typeError('completion options.signal must be an AbortSignal');
  }
  const chat = Array.isArray(options.messages);
  const wantProbs = (options.n_probs ?? 0) > 0;
  const p = new Promise((resolve, reject) => {
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
        native_cancel();
      }
    };
    let id = -1;
    const native_cancel = () => {
      if (id >= 0) ctx._native.cancel(id);
    };
    const onEvent = (kind, choice, token, piece, json) => {
      if (kind === 0) {
        // token
        text += piece;
        const detail = json ? JSON.parse(json) : null;
        const entry = detail && wantProbs ? probabilitiesOf(detail) : null;
        if (entry) probs.push(entry);
        if (piece.length > 0 || entry) {
          const data = { token: piece, accumulated_text: text };
          if (chat) data.content = piece;
          if (entry) data.completion_probabilities = [entry];
          deliver(data);
        }
      } else if (kind === 1) {
        // finish: the rest of the text (held back while a stop string could still match)
        finish = JSON.parse(json);
        if (piece.length > 0) {
          text += piece;
          deliver(chat ? { token: piece, content: piece, accumulated_text: text } : { token: piece, accumulated_text: text });
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
        const result = {
          text: f.text ?? text,
          content: chat ? f.content ?? '' : f.text ?? text,
          reasoning_content: chat && f.reasoning_content ? f.reasoning_content : undefined,
          tool_calls: chat ? (f.tool_calls || []) : undefined,
          chat_format: 0,
          tokens_predicted: generated,
          tokens_evaluated: done.prompt_tokens ?? 0,
          truncated: false,
          context_full: f.reason === 'length' && !limited,
          interrupted: f.reason === 'cancelled',
          stopped_eos: !!f.stopped_eos && f.reason === 'stop',
          stopped_words: !!f.stopped_word,
          stopping_word: f.stop_word || '',
          stopped_limited: limited,
          stopped_limit: limited,
          stopped_word: !!f.stopped_word,
          timings: timingsOf(done),
          // loom: the generated token ids
          tokens: Int32Array.from(f.tokens || []),
        };
        if (wantProbs) result.completion_probabilities = probs;
        if (result.reasoning_content === undefined) delete result.reasoning_content;
        if (result.tool_calls === undefined) delete result.tool_calls;
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
    const onAbort = () => native_cancel();
    const cleanup = () => {
      if (signal) signal.removeEventListener('abort', onAbort);
      if (track) track.delete(id);
    };
    try {
      // Token events only when something reads them (the finish event has the whole text).
      id = ctx._native.submit(JSON.stringify(req), onEvent, !!onToken || wantProbs);
    } catch (err) {
      reject(err);
      return;
    }
    if (track) track.set(id, native_cancel);
    if (signal) {
      if (signal.aborted) native_cancel();
      else signal.addEventListener('abort', onAbort, { once: true });
    }
    if (options._onId) options._onId(id);
  });
  // In flight until settled (parallel.enable waits for these before changing the slots).
  const forget = () => ctx._inflight.delete(p);
  ctx._inflight.add(p);
  p.then(forget, forget);
  return p;
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

// ---- the context ------------------------------------------------------------------------------

class LlamaParallelAPI {
  constructor(ctx) {
    this._ctx = ctx;
    this._enabled = false;
    this._requests = new Map(); // id -> {cancel, type, state, t0, prompt, generated}
  }

  async enable(config = {}) {
    if (config === null || typeof config !== 'object') throw typeError('parallel.enable config must be an object');
    checkType(config, 'n_parallel', 'integer', 'config');
    checkType(config, 'n_batch', 'integer', 'config');
    const n = config.n_parallel ?? 2;
    if (n < 1 || n > 256) throw new RangeError('loom-node: n_parallel must be between 1 and 256');
    await this._ctx._reconfigure({ n_parallel: Math.max(n, 1), n_batch: config.n_batch });
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

  async completion(options, onToken) {
    this._need();
    if (onToken !== undefined && typeof onToken !== 'function') throw typeError('onToken must be a function');
    for (const k of ['load_state_path', 'save_state_path', 'save_prompt_state_path']) checkType(options || {}, k, 'string', 'options');
    // llama.node's per-request state files: loaded into the prefix cache before the request, its
    // prompt (+ output) saved after it — loom's checked session files.
    if (options?.load_state_path) await this._ctx._native.loadSession(options.load_state_path);
    let requestId = -1;
    const state = { type: 'completion', state: 'queued', t0: Date.now(), generated: 0, prompt: 0 };
    const opts = {
      ...options,
      _onId: (id) => {
        requestId = id;
        this._requests.set(id, state);
      },
    };
    const promise = runCompletion(this._ctx, opts, (data) => {
      state.state = 'generating';
      state.generated++;
      if (onToken) onToken(requestId, data);
    }, this._ctx._running).then(
      async (r) => {
        this._requests.delete(requestId);
        const all = r._allTokens;
        if (options?.save_state_path) await this._ctx._native.saveSession(options.save_state_path, all);
        if (options?.save_prompt_state_path) {
          await this._ctx._native.saveSession(options.save_prompt_state_path, all.subarray(0, r.tokens_evaluated));
        }
        return { requestId, ...r };
      },
      (e) => {
        this._requests.delete(requestId);
        throw e;
      },
    );
    return { requestId, promise, stop: () => this._ctx._native.cancel(requestId) };
  }

  async embedding(text, params) {
    this._need();
    return { requestId: -1, promise: this._ctx.embedding(text, params) };
  }

  async rerank(query, documents, params) {
    this._need();
    return { requestId: -1, promise: this._ctx.rerank(query, documents, params) };
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

class LlamaContext {
  constructor(nativeCtx, options) {
    this._native = nativeCtx;
    this._options = options;
    this._running = new Map(); // request id -> cancel (completion() and parallel requests)
    this._inflight = new Set(); // their promises
    this._completions = new Set(); // ids started by completion(): what stopCompletion stops
    this._lastTokens = new Int32Array(0);
    this._loras = [];
    this._released = false;
    this._info = nativeCtx.info();
    this.parallel = new LlamaParallelAPI(this);
  }

  _live() {
    if (this._released) throw new Error('loom-node: this context has been released');
  }

  getSystemInfo() {
    this._live();
    return `loom ${native.version()} | C API ${native.apiVersion} | CPU threads ${os.cpus().length} | ${os.arch()}`;
  }

  getUsedDevices() {
    return ['CPU'];
  }

  getModelInfo() {
    this._live();
    const i = this._info;
    let tmpl = {};
    try {
      tmpl = JSON.parse(i.chatTemplate || '{}');
    } catch {
      tmpl = {};
    }
    const caps = {
      tools: !!tmpl.supports_tools,
      toolCalls: !!tmpl.supports_tool_calls,
      systemRole: true,
      parallelToolCalls: !!tmpl.supports_parallel_tool_calls,
    };
    const recurrent = /^(mamba|mamba2|rwkv)/.test(i.arch || '');
    return {
      desc: i.desc,
      nEmbd: i.nEmbd,
      nParams: i.nParams,
      size: i.size,
      is_recurrent: recurrent,
      is_hybrid: false,
      chatTemplates: {
        llamaChat: !!tmpl.has_template,
        jinja: { default: !!tmpl.has_template, defaultCaps: caps, toolUse: caps.tools, toolUseCaps: caps },
      },
      metadata: i.metadata,
      isChatTemplateSupported: !!tmpl.has_template,
    };
  }

  isJinjaSupported() {
    return this.getModelInfo().chatTemplates.jinja.default;
  }

  isLlamaChatSupported() {
    return this.getModelInfo().chatTemplates.llamaChat;
  }

  getFormattedChat(messages, template, params = {}) {
    this._live();
    if (!Array.isArray(messages)) throw typeError('messages must be an array');
    if (template !== undefined && template !== null && typeof template !== 'string') throw typeError('template must be a string');
    if (params === null || typeof params !== 'object') throw typeError('params must be an object');
    const req = { messages };
    if (template) req.chat_template = template;
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
    const f = JSON.parse(this._native.chatFormat(JSON.stringify(req)));
    const jinja = params.jinja ?? true;
    if (!jinja) return { type: 'llama-chat', prompt: f.prompt, has_media: false };
    return {
      type: 'jinja',
      has_media: false,
      prompt: f.prompt,
      chat_format: CHAT_FORMATS[f.tool_call_format] ?? 0,
      grammar: f.grammar,
      grammar_lazy: f.grammar_lazy,
      grammar_triggers: (f.grammar_triggers || []).map((t) => ({ type: 0, value: t.value, token: -1 })),
      thinking_forced_open: f.thinking_forced_open,
      preserved_tokens: f.preserved_tokens,
      additional_stops: f.additional_stops,
      chat_parser: '',
    };
  }

  completion(options, onToken) {
    try {
      this._live();
      let id = -1;
      const p = runCompletion(this, { ...options, _onId: (i) => { id = i; this._completions.add(i); } }, onToken, this._running);
      return p.finally(() => this._completions.delete(id));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  stopCompletion() {
    if (this._released) return;
    for (const id of this._completions) this._native.cancel(id);
  }

  async tokenize(text, opts = {}) {
    this._live();
    if (typeof text !== 'string') throw typeError('text must be a string');
    // As llama.node (llama.rn's common_tokenize(ctx, text, false, true)): no BOS, special tokens parsed.
    const tokens = await this._native.tokenize(text, false, true);
    return { tokens, has_media: false, bitmap_hashes: [], chunk_pos: [], chunk_pos_media: [] };
  }

  async detokenize(tokens) {
    this._live();
    return this._native.detokenize(tokens, false);
  }

  async embedding(text, params = {}) {
    this._live();
    if (typeof text !== 'string') throw typeError('text must be a string');
    if (params === null || typeof params !== 'object') throw typeError('params must be an object');
    checkType(params, 'embd_normalize', 'integer', 'params');
    const r = await this._native.embed(JSON.stringify({ input: text }));
    const mode = params.embd_normalize ?? this._options.embd_normalize ?? 2;
    return { embedding: normalizeEmbedding(r.data, mode) };
  }

  async rerank(query, documents, params = {}) {
    this._live();
    if (typeof query !== 'string') throw typeError('query must be a string');
    if (!Array.isArray(documents) || documents.some((d) => typeof d !== 'string')) throw typeError('documents must be an array of strings');
    if (documents.length === 0) return [];
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
    await this._native.saveSession(path, this._lastTokens);
  }

  async loadSession(path) {
    this._live();
    if (typeof path !== 'string') throw typeError('path must be a string');
    const tokens = await this._native.loadSession(path);
    this._lastTokens = tokens;
    return { tokens_loaded: tokens.length };
  }

  async clearCache() {
    this._live();
    await this._native.clearCache();
  }

  async applyLoraAdapters(adapters) {
    this._live();
    if (!Array.isArray(adapters)) throw typeError('adapters must be an array of {path, scaled}');
    const list = adapters.map((a, i) => {
      if (!a || typeof a.path !== 'string') throw typeError(`adapters[${i}].path must be a string`);
      if (a.scaled !== undefined && typeof a.scaled !== 'number') throw typeError(`adapters[${i}].scaled must be a number`);
      return { path: a.path, scaled: a.scaled ?? 1.0 };
    });
    const all = [...this._loras, ...list];
    await this._native.setLora(all);
    this._loras = all;
  }

  async removeLoraAdapters() {
    this._live();
    await this._native.setLora([]);
    this._loras = [];
  }

  getLoadedLoraAdapters() {
    return this._loras.map((a) => ({ ...a }));
  }

  async bench(pp, tg, pl, nr) {
    this._live();
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

  // A new scheduler with more slots (parallel.enable), once the running requests are done.
  async _reconfigure(change) {
    this._live();
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
  // LoRA given at load: lora / lora_scaled, lora_list.
  const loras = [];
  if (options.lora) loras.push({ path: options.lora, scaled: options.lora_scaled ?? 1.0 });
  if (Array.isArray(options.lora_list)) for (const a of options.lora_list) loras.push(a);
  if (loras.length && !nopts.vocab_only) {
    try {
      await ctx.applyLoraAdapters(loras);
    } catch (err) {
      await ctx.release();
      throw err;
    }
  }
  return ctx;
}

async function loadLlamaModelInfo(path) {
  if (typeof path !== 'string') throw typeError('path must be a string');
  const ctx = await native.load(path, { vocab_only: true });
  try {
    const i = ctx.info();
    const skip = new Set(['tokenizer.ggml.tokens', 'tokenizer.ggml.token_type', 'tokenizer.ggml.merges', 'tokenizer.ggml.scores']);
    const out = {};
    for (const [k, v] of Object.entries(i.metadata)) if (!skip.has(k)) out[k] = v;
    return out;
  } finally {
    await ctx.release();
  }
}

async function getBackendDevicesInfo() {
  return [{ backend: 'CPU', type: 'cpu', deviceName: 'CPU', maxMemorySize: os.totalmem(), metadata: { threads: os.cpus().length } }];
}

async function isLibVariantAvailable(variant) {
  return variant === undefined || variant === 'default';
}

module.exports = {
  getBackendDevicesInfo,
  isLibVariantAvailable,
  loadModel,
  loadLlamaModelInfo,
  toggleNativeLog,
  addNativeLogListener,
  LlamaContext,
  LlamaParallelAPI,
  initLlama: async () => native,
  loomVersion: () => native.version(),
};
