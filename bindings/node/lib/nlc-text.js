'use strict';
// loom-node/node-llama-cpp: LlamaText (text made of plain text, text whose control tokens are
// parsed, and builtin special tokens) and the chat wrappers that turn a chat history into one,
// with node-llama-cpp 3.x's API. Written for loom from node-llama-cpp's type declarations and the
// prompts its wrappers produce (the same LlamaText value for value, so the same prompt tokens).

// ---- LlamaText ---------------------------------------------------------------------------------

const BUILTIN = ['BOS', 'EOS', 'NL', 'EOT', 'SEP'];

class SpecialTokensText {
  constructor(value) {
    this.value = String(value);
    Object.freeze(this);
  }
  toString() { return this.value; }
  tokenize(tokenizer, trimLeadingSpace = false) {
    return tokenizer(this.value, true, trimLeadingSpace ? 'trimLeadingSpace' : undefined);
  }
  tokenizeSpecialTokensOnly(tokenizer) {
    // The control tokens as tokens, the rest as text: splits the text at the tokens that
    // tokenizing with special tokens finds and tokenizing without them does not.
    const special = tokenizer(this.value, true, 'trimLeadingSpace');
    const out = [];
    let text = '';
    for (const t of special) {
      const piece = tokenizer.detokenize([t], true);
      const plain = tokenizer.detokenize([t], false);
      if (piece !== plain) {
        if (text) out.push(text);
        text = '';
        out.push(t);
      } else {
        text += plain;
      }
    }
    if (text) out.push(text);
    return out;
  }
  toJSON() { return { type: 'specialTokensText', value: this.value }; }
  static fromJSON(json) {
    if (!SpecialTokensText.isSpecialTokensTextJSON(json)) throw new TypeError(`Invalid JSON for SpecialTokensText: ${JSON.stringify(json)}`);
    return new SpecialTokensText(json.value);
  }
  static isSpecialTokensTextJSON(value) {
    return value != null && typeof value === 'object' && value.type === 'specialTokensText';
  }
  static wrapIf(shouldWrap, value) {
    return shouldWrap ? new SpecialTokensText(value) : value;
  }
}

class SpecialToken {
  constructor(value) {
    if (!BUILTIN.includes(value)) throw new TypeError(`Unknown builtin special token: ${value}`);
    this.value = value;
    Object.freeze(this);
  }
  toString() { return this.value; }
  tokenize(tokenizer) { return tokenizer(this.value, 'builtin'); }
  toJSON() { return { type: 'specialToken', value: this.value }; }
  static fromJSON(json) {
    if (!SpecialToken.isSpecialTokenJSON(json)) throw new TypeError(`Invalid JSON for SpecialToken: ${JSON.stringify(json)}`);
    return new SpecialToken(json.value);
  }
  static isSpecialTokenJSON(value) {
    return value != null && typeof value === 'object' && value.type === 'specialToken';
  }
  static getTokenToValueMap(tokenizer) {
    const map = new Map();
    for (const v of BUILTIN) {
      const t = tokenizer(v, 'builtin');
      map.set(t.length ? t[0] : undefined, v);
    }
    return map;
  }
}

// Flattens constructor inputs into values: nested texts and arrays spread, numbers and booleans
// as text, adjacent plain texts joined and adjacent control-token texts joined, empty ones dropped.
function normalizeValues(inputs) {
  const out = [];
  const push = (v) => {
    if (v == null) return;
    if (v instanceof LlamaTextImpl) return v.values.forEach(push);
    if (Array.isArray(v)) return v.forEach(push);
    if (typeof v === 'number' || typeof v === 'boolean') v = String(v);
    if (typeof v === 'string') {
      if (v === '') return;
      if (typeof out[out.length - 1] === 'string') out[out.length - 1] += v;
      else out.push(v);
      return;
    }
    if (v instanceof SpecialTokensText) {
      if (v.value === '') return;
      const last = out[out.length - 1];
      if (last instanceof SpecialTokensText) out[out.length - 1] = new SpecialTokensText(last.value + v.value);
      else out.push(v);
      return;
    }
    if (v instanceof SpecialToken) return void out.push(v);
    throw new TypeError(`LlamaText: unsupported value ${String(v)}`);
  };
  inputs.forEach(push);
  return out;
}

const sameValue = (a, b) => {
  if (typeof a === 'string' || typeof b === 'string') return a === b;
  return a.constructor === b.constructor && a.value === b.value;
};

class LlamaTextImpl {
  constructor(...values) {
    this.values = Object.freeze(normalizeValues(values));
    Object.freeze(this);
  }
  concat(value) { return LlamaText([this, value]); }
  mapValues(mapper) { return LlamaText(this.values.map((v, i) => mapper.call(this.values, v, i, this.values))); }
  joinValues(separator) {
    const parts = [];
    this.values.forEach((v, i) => {
      if (i > 0) parts.push(separator);
      parts.push(v);
    });
    return LlamaText(parts);
  }
  toString() { return this.values.map((v) => String(v)).join(''); }
  toJSON() {
    if (this.values.length === 0) return '';
    if (this.values.length === 1 && typeof this.values[0] === 'string') return this.values[0];
    return this.values.map((v) => (typeof v === 'string' ? v : v.toJSON()));
  }
  // node-llama-cpp's tokenization of a text: every value on its own (builtin tokens as the
  // model's, control-token texts with their tokens parsed, plain text without), each as a
  // continuation (no leading space of its own, also the first: node-llama-cpp tokenizes
  // LlamaText("Hello") without SentencePiece's leading space, unlike model.tokenize("Hello")).
  tokenize(tokenizer, options) {
    void options;
    const tokens = [];
    this.values.forEach((v) => {
      const trim = true;
      if (v instanceof SpecialToken) tokens.push(...v.tokenize(tokenizer));
      else if (v instanceof SpecialTokensText) tokens.push(...v.tokenize(tokenizer, trim));
      else tokens.push(...tokenizer(v, false, trim ? 'trimLeadingSpace' : undefined));
    });
    return tokens;
  }
  compare(other) { return LlamaText.compare(this, other); }
  trim() { return this.trimStart().trimEnd(); }
  trimStart() {
    const values = this.values.slice();
    while (values.length) {
      const v = values[0];
      if (v instanceof SpecialToken) break;
      const t = typeof v === 'string' ? v.trimStart() : v.value.trimStart();
      if (t === '') {
        values.shift();
        continue;
      }
      values[0] = typeof v === 'string' ? t : new SpecialTokensText(t);
      break;
    }
    return LlamaText(values);
  }
  trimEnd() {
    const values = this.values.slice();
    while (values.length) {
      const v = values[values.length - 1];
      if (v instanceof SpecialToken) break;
      const t = typeof v === 'string' ? v.trimEnd() : v.value.trimEnd();
      if (t === '') {
        values.pop();
        continue;
      }
      values[values.length - 1] = typeof v === 'string' ? t : new SpecialTokensText(t);
      break;
    }
    return LlamaText(values);
  }
  includes(value) {
    const a = this.values;
    const b = value.values;
    if (b.length === 0) return true;
    for (let i = 0; i + b.length <= a.length; i++) {
      let ok = true;
      for (let j = 0; j < b.length && ok; j++) {
        const x = a[i + j];
        const y = b[j];
        if (b.length === 1 && typeof x === typeof y && typeof x === 'string') ok = x.includes(y);
        else if (b.length === 1 && x instanceof SpecialTokensText && y instanceof SpecialTokensText) ok = x.value.includes(y.value);
        else if (j === 0 && b.length > 1 && typeof x === 'string' && typeof y === 'string') ok = x.endsWith(y);
        else if (j === b.length - 1 && b.length > 1 && typeof x === 'string' && typeof y === 'string') ok = x.startsWith(y);
        else ok = sameValue(x, y);
      }
      if (ok) return true;
    }
    return false;
  }
  static fromJSON(json) {
    if (typeof json === 'string') return LlamaText(json);
    if (!Array.isArray(json)) throw new TypeError('LlamaText.fromJSON: a string or an array is expected');
    return LlamaText(json.map((v) => {
      if (typeof v === 'string') return v;
      if (SpecialToken.isSpecialTokenJSON(v)) return SpecialToken.fromJSON(v);
      if (SpecialTokensText.isSpecialTokensTextJSON(v)) return SpecialTokensText.fromJSON(v);
      throw new TypeError(`LlamaText.fromJSON: unknown value ${JSON.stringify(v)}`);
    }));
  }
  static compare(a, b) {
    if (!isLlamaText(a) || !isLlamaText(b)) return false;
    if (a.values.length !== b.values.length) return false;
    return a.values.every((v, i) => sameValue(v, b.values[i]));
  }
  // Tokens back to text: the builtin special tokens as SpecialToken, other control tokens as
  // SpecialTokensText, the rest as plain text.
  static fromTokens(tokenizer, tokens) {
    const builtin = SpecialToken.getTokenToValueMap(tokenizer);
    const values = [];
    let run = [];
    const flush = () => {
      if (run.length) values.push(tokenizer.detokenize(run, false));
      run = [];
    };
    for (const t of tokens) {
      if (builtin.has(t)) {
        flush();
        values.push(new SpecialToken(builtin.get(t)));
        continue;
      }
      const special = tokenizer.detokenize([t], true);
      if (special !== tokenizer.detokenize([t], false)) {
        flush();
        values.push(new SpecialTokensText(special));
      } else {
        run.push(t);
      }
    }
    flush();
    return LlamaText(values);
  }
  static joinValues(separator, values) {
    const parts = [];
    values.forEach((v, i) => {
      if (i > 0) parts.push(separator);
      parts.push(v);
    });
    return LlamaText(parts);
  }
  static isLlamaText(value) { return isLlamaText(value); }
}

// Callable with or without `new`, as node-llama-cpp's LlamaText is.
function LlamaText(...values) {
  return new LlamaTextImpl(...values);
}
LlamaText.prototype = LlamaTextImpl.prototype;
for (const k of ['fromJSON', 'compare', 'fromTokens', 'joinValues', 'isLlamaText']) LlamaText[k] = LlamaTextImpl[k];
Object.defineProperty(LlamaTextImpl.prototype, 'constructor', { value: LlamaText, enumerable: false, writable: true, configurable: true });

function isLlamaText(value) { return value instanceof LlamaTextImpl; }
function tokenizeText(text, tokenizer) {
  if (typeof text === 'string') return tokenizer(text, false);
  return text.tokenize(tokenizer);
}

// ---- chat wrappers -----------------------------------------------------------------------------------

const DEFAULT_SYSTEM_PROMPT =
  'You are a helpful, respectful and honest assistant. Always answer as helpfully as possible.\n' +
  "If a question does not make any sense, or is not factually coherent, explain why instead of answering something incorrectly. If you don't know the answer to a question, don't share false information.";

const systemText = (t) => (isLlamaText(t) ? t : typeof t === 'string' ? LlamaText(t) : LlamaText.fromJSON(t));
const modelText = (item) => (item.response ?? []).filter((r) => typeof r === 'string').join('');

const DEFAULT_SETTINGS = Object.freeze({
  supportsSystemMessages: true,
  functions: Object.freeze({
    call: Object.freeze({ optionalPrefixSpace: true, prefix: '||call: ', paramsPrefix: LlamaText(new SpecialTokensText('(')), suffix: LlamaText(new SpecialTokensText(')')), emptyCallParamsPlaceholder: '' }),
    result: Object.freeze({ prefix: LlamaText(new SpecialTokensText('\n'), '||result: '), suffix: LlamaText(new SpecialTokensText('\n')) }),
  }),
  segments: Object.freeze({}),
});

// JSON with a space after "," and ":" (Python's json.dumps), as node-llama-cpp writes calls.
function jsonDumps(v) {
  if (v === undefined) return 'null';
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (typeof v.toJSON === 'function') return jsonDumps(v.toJSON());
  if (Array.isArray(v)) return `[${v.map(jsonDumps).join(', ')}]`;
  return `{${Object.entries(v).filter(([, x]) => x !== undefined && typeof x !== 'function').map(([k, x]) => `${JSON.stringify(k)}: ${jsonDumps(x)}`).join(', ')}}`;
}

class ChatWrapper {
  constructor() {
    this.settings = DEFAULT_SETTINGS;
  }
  static get defaultSettings() { return DEFAULT_SETTINGS; }
  generateContextState({ chatHistory }) {
    // A plain format: "role: text" per item, one a line (a subclass that only names itself).
    const parts = [];
    chatHistory.forEach((item, i) => {
      if (i > 0) parts.push('\n');
      if (item.type === 'system') parts.push('system: ', systemText(item.text));
      else if (item.type === 'user') parts.push('user: ', item.text);
      else if (item.type === 'model') parts.push('model: ', this.generateModelResponseText(item.response));
    });
    return { contextText: LlamaText(parts), stopGenerationTriggers: [] };
  }
  generateFunctionCallsAndResults(functionCalls) {
    return LlamaText(functionCalls.map((c) => [this.generateFunctionCall(c.name, c.params), this.generateFunctionCallResult(c.name, c.params, c.result)]));
  }
  generateFunctionCall(name, params) {
    const call = this.settings.functions.call;
    return LlamaText(call.prefix, name, call.paramsPrefix, params === undefined ? '' : jsonDumps(params), call.suffix);
  }
  generateFunctionCallResult(functionName, functionParams, result) {
    const r = this.settings.functions.result;
    return LlamaText(r.prefix, result === undefined ? 'void' : jsonDumps(result), r.suffix);
  }
  generateModelResponseText(modelResponse) {
    return LlamaText(modelResponse.map((r) => (typeof r === 'string' ? r : r?.type === 'functionCall' ? (r.rawCall ? LlamaText.fromJSON(r.rawCall) : this.generateFunctionCallsAndResults([r])) : '')));
  }
  generateAvailableFunctionsSystemText(availableFunctions) {
    const names = Object.keys(availableFunctions ?? {});
    if (names.length === 0) return LlamaText('');
    return LlamaText(`The assistant calls these functions when needed: ${names.join(', ')}`);
  }
  addAvailableFunctionsSystemMessageToHistory(history, availableFunctions, { documentParams = true } = {}) {
    if (!availableFunctions || Object.keys(availableFunctions).length === 0) return history;
    const res = history.slice();
    const text = this.generateAvailableFunctionsSystemText(availableFunctions, { documentParams });
    const at = res.findIndex((i) => i.type !== 'system');
    res.splice(at < 0 ? res.length : at, 0, { type: 'system', text: text.toJSON() });
    return res;
  }
  generateInitialChatHistory({ systemPrompt = DEFAULT_SYSTEM_PROMPT } = {}) {
    return [{ type: 'system', text: LlamaText(systemPrompt).toJSON() }];
  }
}

// Adjacent system messages as one (texts joined by a blank line), as every wrapper has them.
function joinSystems(history) {
  const out = [];
  for (const item of history) {
    const last = out[out.length - 1];
    if (last && last.type === 'system' && item.type === 'system') last.text = LlamaText([systemText(last.text), '\n\n', systemText(item.text)]).toJSON();
    else out.push(item.type === 'system' ? { ...item } : item);
  }
  return out;
}

// Adjacent messages of one kind as one: texts joined by a blank line, responses concatenated.
function joinAdjacent(history) {
  const out = [];
  for (const item of history) {
    const last = out[out.length - 1];
    if (last && last.type === item.type) {
      if (item.type === 'model') last.response = [...last.response, ...item.response];
      else last.text = LlamaText([systemText(last.text), '\n\n', systemText(item.text)]).toJSON();
      continue;
    }
    out.push(item.type === 'model' ? { ...item, response: [...item.response] } : { ...item });
  }
  return out;
}

// Strings of stop triggers as the scheduler takes them (builtin special tokens stop anyway: they
// are end-of-generation tokens).
function stopStrings(triggers) {
  const out = [];
  for (const t of triggers ?? []) {
    const text = isLlamaText(t) ? t : LlamaText(t);
    if (text.values.some((v) => v instanceof SpecialToken)) continue;
    const s = text.toString();
    if (s && !out.includes(s)) out.push(s);
  }
  return out;
}

// Formats of titled blocks: the first system message as it is, every other item after a blank
// line and its title (a model response after its title also after a system message, and one
// opened after a last user message). General: "### Human\n"; Alpaca: "### Instruction:\n";
// Falcon: "User: ".
class TitledChatWrapper extends ChatWrapper {
  constructor(name, { userMessageTitle, modelResponseTitle, middleSystemMessageTitle, allowSpecialTokensInTitles = false }) {
    super();
    this.wrapperName = name;
    this._user = userMessageTitle;
    this._model = modelResponseTitle;
    this._system = middleSystemMessageTitle;
    this._special = allowSpecialTokensInTitles;
  }
  get userMessageTitle() { return this._user; }
  get modelResponseTitle() { return this._model; }
  get middleSystemMessageTitle() { return this._system; }
  _title(t) { return `### ${t}\n`; }
  _stops() {
    const stops = [LlamaText(new SpecialToken('EOS')), LlamaText(new SpecialTokensText('<end>')), LlamaText('<end>')];
    const titles = [this._user, this._model, this._system].flatMap((t) => [`### ${t}`, `\n### ${t}`, `\n\n### ${t}`]);
    stops.push(...titles.map((t) => LlamaText(t)));
    if (this._special) stops.push(...titles.map((t) => LlamaText(new SpecialTokensText(t))));
    return stops;
  }
  generateContextState({ chatHistory, availableFunctions, documentFunctionParams }) {
    const history = joinSystems(this.addAvailableFunctionsSystemMessageToHistory(chatHistory, availableFunctions, { documentParams: documentFunctionParams }));
    const items = history.slice();
    if (items.length && items[items.length - 1].type === 'user') items.push({ type: 'model', response: [] });
    const parts = [new SpecialToken('BOS')];
    items.forEach((item, i) => {
      const title = item.type === 'system' ? (i === 0 ? null : this._system) : item.type === 'user' ? this._user : this._model;
      const head = (i > 0 ? '\n\n' : '') + (title === null ? '' : this._title(title));
      if (head) parts.push(SpecialTokensText.wrapIf(this._special, head));
      if (item.type === 'system') parts.push(systemText(item.text));
      else if (item.type === 'user') parts.push(item.text);
      else parts.push(this.generateModelResponseText(item.response));
    });
    return { contextText: LlamaText(parts), stopGenerationTriggers: this._stops() };
  }
}

class GeneralChatWrapper extends TitledChatWrapper {
  constructor({ userMessageTitle = 'Human', modelResponseTitle = 'Assistant', middleSystemMessageTitle = 'System', allowSpecialTokensInTitles = false } = {}) {
    super('General', { userMessageTitle, modelResponseTitle, middleSystemMessageTitle, allowSpecialTokensInTitles });
  }
}

class AlpacaChatWrapper extends GeneralChatWrapper {
  constructor({ userMessageTitle = 'Instruction', modelResponseTitle = 'Response', middleSystemMessageTitle = 'System', allowSpecialTokensInTitles = false } = {}) {
    super({ userMessageTitle: `${userMessageTitle}:`, modelResponseTitle: `${modelResponseTitle}:`, middleSystemMessageTitle: `${middleSystemMessageTitle}:`, allowSpecialTokensInTitles });
    this.wrapperName = 'AlpacaChat';
  }
  get userMessageTitle() { return this._user.slice(0, -1); }
  get modelResponseTitle() { return this._model.slice(0, -1); }
  get middleSystemMessageTitle() { return this._system.slice(0, -1); }
}

class FalconChatWrapper extends TitledChatWrapper {
  constructor({ userMessageTitle = 'User', modelResponseTitle = 'Assistant', middleSystemMessageTitle = 'System', allowSpecialTokensInTitles = false } = {}) {
    super('Falcon', { userMessageTitle, modelResponseTitle, middleSystemMessageTitle, allowSpecialTokensInTitles });
  }
  _title(t) { return `${t}: `; }
  _stops() {
    const titles = [this._user, this._model, this._system].map((t) => `\n${t}:`);
    return [LlamaText(new SpecialToken('EOS')), ...titles.map((t) => LlamaText(t)), ...(this._special ? titles.map((t) => LlamaText(new SpecialTokensText(t))) : [])];
  }
}

// Gemma's turns (no system turn: system messages open the next user message, before a "---" line).
class GemmaChatWrapper extends ChatWrapper {
  constructor() {
    super();
    this.wrapperName = 'Gemma';
    this.settings = Object.freeze({ ...DEFAULT_SETTINGS, supportsSystemMessages: false });
  }
  generateContextState({ chatHistory, availableFunctions, documentFunctionParams }) {
    const history = this.addAvailableFunctionsSystemMessageToHistory(chatHistory, availableFunctions, { documentParams: documentFunctionParams });
    // user turns (system texts folded in) and model turns
    const turns = [];
    let system = [];
    const userTurn = (text) => {
      const last = turns[turns.length - 1];
      if (last && last.kind === 'user') last.text = LlamaText([last.text, '\n\n', text]);
      else turns.push({ kind: 'user', text });
    };
    const flushSystem = () => {
      // system messages no user message follows: a user turn of their own
      if (system.length) turns.push({ kind: 'user', text: LlamaText.joinValues('\n\n', system) });
      system = [];
    };
    for (const item of history) {
      if (item.type === 'system') system.push(systemText(item.text));
      else if (item.type === 'user') {
        userTurn(system.length ? LlamaText([LlamaText.joinValues('\n\n', system), '\n\n---\n\n', item.text]) : LlamaText(item.text));
        system = [];
      } else if (item.type === 'model') {
        flushSystem();
        turns.push({ kind: 'model', text: this.generateModelResponseText(item.response) });
      }
    }
    flushSystem();
    if (turns.length === 0 || turns[turns.length - 1].kind === 'user') turns.push({ kind: 'model', text: LlamaText('') });
    const S = (x) => new SpecialTokensText(x);
    const parts = [new SpecialToken('BOS')];
    turns.forEach((t, i) => {
      parts.push(S(`<start_of_turn>${t.kind}\n`), t.text);
      if (i < turns.length - 1) parts.push(S('<end_of_turn>\n'));
    });
    return {
      contextText: LlamaText(parts),
      stopGenerationTriggers: [LlamaText(new SpecialToken('EOS')), LlamaText(S('<end_of_turn>\n')), LlamaText('<end_of_turn>')],
    };
  }
}

class ChatMLChatWrapper extends ChatWrapper {
  constructor() {
    super();
    this.wrapperName = 'ChatML';
  }
  generateContextState({ chatHistory, availableFunctions, documentFunctionParams }) {
    const history = joinSystems(this.addAvailableFunctionsSystemMessageToHistory(chatHistory, availableFunctions, { documentParams: documentFunctionParams }));
    const S = (s) => new SpecialTokensText(s);
    const parts = [new SpecialToken('BOS')];
    history.forEach((item, i) => {
      const last = i === history.length - 1;
      if (item.type === 'system') parts.push(S('<|im_start|>system\n'), systemText(item.text), S('<|im_end|>\n'));
      else if (item.type === 'user') {
        parts.push(S('<|im_start|>user\n'), item.text, S('<|im_end|>\n'));
        if (last) parts.push(S('<|im_start|>assistant\n'));
      } else if (item.type === 'model') {
        parts.push(S('<|im_start|>assistant\n'));
        parts.push(this.generateModelResponseText(item.response));
        if (!last) parts.push(S('<|im_end|>\n'));
      }
    });
    return {
      contextText: LlamaText(parts),
      stopGenerationTriggers: [LlamaText(new SpecialToken('EOS')), LlamaText(S('<|im_end|>')), LlamaText('<|im_end|>')],
    };
  }
}

class Llama3ChatWrapper extends ChatWrapper {
  constructor({ parallelFunctionCalling = true } = {}) {
    super();
    this.wrapperName = 'Llama 3';
    this._parallel = parallelFunctionCalling;
  }
  _systemOf(text) { return text; }
  _history(chatHistory) { return chatHistory; }
  generateContextState({ chatHistory, availableFunctions, documentFunctionParams }) {
    const history = joinAdjacent(this._history(this.addAvailableFunctionsSystemMessageToHistory(chatHistory, availableFunctions, { documentParams: documentFunctionParams })));
    const S = (s) => new SpecialTokensText(s);
    const header = (role) => S(`<|start_header_id|>${role}<|end_header_id|>\n\n`);
    const parts = [new SpecialToken('BOS')];
    history.forEach((item, i) => {
      const last = i === history.length - 1;
      if (item.type === 'system') parts.push(header('system'), systemText(item.text), S('<|eot_id|>'));
      else if (item.type === 'user') parts.push(header('user'), item.text, S('<|eot_id|>'));
      else if (item.type === 'model') {
        parts.push(header('assistant'), this.generateModelResponseText(item.response));
        if (!last) parts.push(S('<|eot_id|>'));
      }
    });
    return {
      contextText: LlamaText(parts),
      stopGenerationTriggers: [
        LlamaText(new SpecialToken('EOS')), LlamaText(new SpecialToken('EOT')), LlamaText(S('<|eot_id|>')), LlamaText(S('<|end_of_text|>')),
        LlamaText('<|eot_id|>'), LlamaText('<|end_of_text|>'),
      ],
    };
  }
}

const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];
const asDate = (v) => {
  if (v == null) return null;
  if (typeof v === 'function') return v;
  const d = v instanceof Date ? v : new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
};
const resolveDate = (v) => (typeof v === 'function' ? v() : v);

class Llama3_1ChatWrapper extends Llama3ChatWrapper {
  constructor({ cuttingKnowledgeDate = new Date('2023-12-01T00:00:00Z'), todayDate = () => new Date(), noToolInstructions = false } = {}) {
    super();
    this.wrapperName = 'Llama 3.1';
    this.cuttingKnowledgeDate = asDate(cuttingKnowledgeDate);
    this.todayDate = asDate(todayDate);
    this.noToolInstructions = noToolInstructions;
  }
  // The system message's preamble: knowledge and today's dates, tool instructions.
  _preamble() {
    const blocks = [];
    const lines = [];
    const cut = resolveDate(this.cuttingKnowledgeDate);
    const today = resolveDate(this.todayDate);
    if (cut) lines.push(`Cutting Knowledge Date: ${MONTHS[cut.getUTCMonth()]} ${cut.getUTCFullYear()}`);
    if (today) lines.push(`Today Date: ${today.getDate()} ${MONTHS[today.getMonth()].slice(0, 3)} ${today.getFullYear()}`);
    if (lines.length) blocks.push(lines.join('\n'));
    if (!this.noToolInstructions) blocks.push('# Tool Instructions\n- When looking for real time information use relevant functions if available\n\n');
    return blocks;
  }
  prependPreambleToChatHistory(chatHistory) {
    const blocks = this._preamble();
    if (blocks.length === 0) return chatHistory;
    const res = chatHistory.slice();
    if (res[0]?.type === 'system') {
      res[0] = { type: 'system', text: LlamaText([...blocks, systemText(res[0].text)].flatMap((b, i) => (i ? ['\n\n', b] : [b]))).toJSON() };
    } else {
      res.unshift({ type: 'system', text: LlamaText(blocks.flatMap((b, i) => (i ? ['\n\n', b] : [b]))).toJSON() });
    }
    return res;
  }
  _history(chatHistory) { return this.prependPreambleToChatHistory(chatHistory); }
}

class Llama2ChatWrapper extends ChatWrapper {
  constructor({ addSpaceBeforeEos = false } = {}) {
    super();
    this.wrapperName = 'Llama2Chat';
    this._spaceBeforeEos = addSpaceBeforeEos;
  }
  generateContextState({ chatHistory, availableFunctions, documentFunctionParams }) {
    const history = joinAdjacent(this.addAvailableFunctionsSystemMessageToHistory(chatHistory, availableFunctions, { documentParams: documentFunctionParams }));
    // Turns: the system texts before a user message, the message, the model's answer.
    const turns = [];
    let cur = { system: [], user: null, model: null };
    for (const item of history) {
      if (item.type === 'system') {
        if (cur.user !== null || cur.model !== null) turns.push(cur), cur = { system: [], user: null, model: null };
        cur.system.push(systemText(item.text));
      } else if (item.type === 'user') {
        if (cur.user !== null || cur.model !== null) turns.push(cur), cur = { system: [], user: null, model: null };
        cur.user = item.text;
      } else if (item.type === 'model') {
        if (cur.model !== null) turns.push(cur), cur = { system: [], user: null, model: null };
        cur.model = this.generateModelResponseText(item.response);
      }
    }
    if (cur.system.length || cur.user !== null || cur.model !== null) turns.push(cur);
    const S = (s) => new SpecialTokensText(s);
    const parts = [];
    turns.forEach((turn, i) => {
      parts.push(new SpecialToken('BOS'));
      if (turn.system.length) parts.push(S('[INST] <<SYS>>\n'), LlamaText.joinValues('\n', turn.system), S('\n<</SYS>>\n\n'));
      else parts.push(S('[INST] '));
      parts.push(turn.user ?? '', S(' [/INST] '));
      if (turn.model) parts.push(turn.model);
      if (this._spaceBeforeEos) parts.push(' ');
      if (i < turns.length - 1) parts.push(new SpecialToken('EOS'));
    });
    if (parts.length === 0) parts.push(new SpecialToken('BOS'));
    return { contextText: LlamaText(parts), stopGenerationTriggers: [LlamaText(new SpecialToken('EOS')), LlamaText('</s>')] };
  }
}

// Mistral's [INST] turns: the leading system messages open the last user message, a later one is a
// turn of its own, every turn but the last ends with EOS; no default system prompt.
class MistralChatWrapper extends ChatWrapper {
  constructor({ addSpaceBeforeEos = false } = {}) {
    super();
    this.wrapperName = 'Mistral';
    this._spaceBeforeEos = addSpaceBeforeEos;
  }
  generateInitialChatHistory({ systemPrompt } = {}) {
    return systemPrompt === undefined ? [] : [{ type: 'system', text: LlamaText(systemPrompt).toJSON() }];
  }
  generateContextState({ chatHistory, availableFunctions, documentFunctionParams }) {
    const history = this.addAvailableFunctionsSystemMessageToHistory(chatHistory, availableFunctions, { documentParams: documentFunctionParams });
    let i = 0;
    const leading = [];
    while (i < history.length && history[i].type === 'system') leading.push(systemText(history[i++].text));
    const rest = history.slice(i);
    let lastUser = -1;
    rest.forEach((it, k) => { if (it.type === 'user') lastUser = k; });
    const turns = [];
    for (let k = 0; k < rest.length; k++) {
      const it = rest[k];
      if (it.type === 'model') {
        turns.push({ user: null, model: this.generateModelResponseText(it.response) });
        continue;
      }
      let text = it.type === 'system' ? systemText(it.text) : LlamaText(it.text);
      if (k === lastUser && leading.length) text = LlamaText([LlamaText.joinValues('\n\n', leading), '\n\n', text]);
      const next = rest[k + 1];
      if (next?.type === 'model') {
        turns.push({ user: text, model: this.generateModelResponseText(next.response) });
        k++;
      } else {
        turns.push({ user: text, model: null });
      }
    }
    const S = (x) => new SpecialTokensText(x);
    const parts = [new SpecialToken('BOS')];
    turns.forEach((t, k) => {
      parts.push(S('[INST]'), t.user ?? '', S('[/INST]'));
      if (t.model) parts.push(t.model);
      if (this._spaceBeforeEos) parts.push(' ');
      if (k < turns.length - 1) parts.push(new SpecialToken('EOS'));
    });
    return { contextText: LlamaText(parts), stopGenerationTriggers: [LlamaText(new SpecialToken('EOS')), LlamaText('</s>')] };
  }
}

// A Jinja chat template rendered by loom's template engine (the addon's chatFormat, against a
// loaded model: `render(requestObject) -> {prompt}`): every message's text goes in as a marker, so
// that the rendered prompt splits into the template's own text (control tokens parsed) and the
// messages' texts (plain text), as node-llama-cpp's JinjaTemplateChatWrapper makes it: adjacent
// messages of one kind joined, system messages folded into the next user message when the
// template refuses them, a model response being generated cut right after its text, and the
// template's text after a model response as the stop trigger.
const MARK = (i) => `\u0001loom${i}\u0001`;
const MARK_RE = /\u0001loom(\d+)\u0001/g;
const SYSTEM_AS_USER = (text) => LlamaText(['### System message\n\n', text, '\n\n----\n\n']);

class JinjaTemplateChatWrapper extends ChatWrapper {
  constructor(options = {}) {
    super();
    if (typeof options?.template !== 'string') throw new TypeError('JinjaTemplateChatWrapper: options.template must be a string');
    this.wrapperName = 'JinjaTemplate';
    this.template = options.template;
    this.reasoning = options.reasoning ?? null;
    this.modelRoleName = options.modelRoleName ?? 'assistant';
    this.userRoleName = options.userRoleName ?? 'user';
    this.systemRoleName = options.systemRoleName ?? 'system';
    this.convertUnsupportedSystemMessagesToUserMessages = options.convertUnsupportedSystemMessagesToUserMessages ?? 'auto';
    this.joinAdjacentMessagesOfTheSameType = options.joinAdjacentMessagesOfTheSameType ?? true;
    this.trimLeadingWhitespaceInResponses = options.trimLeadingWhitespaceInResponses ?? true;
    this.keepOnlyLastThought = options.keepOnlyLastThought ?? true;
    this.additionalRenderParameters = options.additionalRenderParameters;
    this._renderer = null; // set by whoever holds a model: (requestObject) => {prompt}
    this._bosString = null;
  }
  get usingJinjaFunctionCallTemplate() { return false; }
  // settings.supportsSystemMessages: whether the template gives a system message a turn of its
  // own (rendered and checked once a model can render it).
  get settings() {
    if (this._settings) return this._settings;
    let supports = true;
    try {
      supports = this._supportsSystem();
    } catch {
      return DEFAULT_SETTINGS; // nothing to render with yet
    }
    this._settings = Object.freeze({ ...DEFAULT_SETTINGS, supportsSystemMessages: supports });
    return this._settings;
  }
  set settings(v) { void v; }
  // A system message followed by a user message: the template refuses it, drops it, or (loom's
  // engine for a template without a system role) folds it into the user's turn.
  _supportsSystem() {
    if (this._system !== undefined) return this._system;
    this._render(); // throws when nothing can render
    let ok;
    try {
      const t = this._renderMessages([{ kind: 'system', text: LlamaText('\u0002') }, { kind: 'user', text: LlamaText('\u0003') }], false, true).toString();
      const a = t.indexOf('\u0002');
      const b = t.indexOf('\u0003');
      ok = a >= 0 && b > a && t.slice(a + 1, b).trim() !== '';
    } catch {
      ok = false;
    }
    this._system = ok;
    return ok;
  }
  _bind(renderer, bosString) {
    if (!this._renderer) {
      this._renderer = renderer;
      this._bosString = bosString ?? null;
    }
    return this;
  }
  _render() {
    if (this._renderer) return { render: this._renderer, bos: this._bosString };
    const any = JinjaTemplateChatWrapper._anyRenderer?.();
    if (!any) throw new Error('JinjaTemplateChatWrapper: a loaded model is needed to render the template (loom renders Jinja natively)');
    return any;
  }
  // [{role, text: LlamaText}] of a history: adjacent messages of one kind joined (with a blank
  // line), system messages folded into user messages when `systemAsUser`.
  _messages(history, systemAsUser) {
    const out = [];
    const push = (kind, text) => {
      const last = out[out.length - 1];
      if (last && last.kind === kind && this.joinAdjacentMessagesOfTheSameType) {
        last.text = LlamaText([last.text, kind === 'model' ? '' : '\n\n', text]);
      } else {
        out.push({ kind, text });
      }
    };
    let pendingSystem = null;
    for (const item of history) {
      if (item.type === 'system') {
        const t = systemText(item.text);
        if (systemAsUser) pendingSystem = LlamaText([pendingSystem ?? '', SYSTEM_AS_USER(t)]);
        else push('system', t);
      } else if (item.type === 'user') {
        push('user', pendingSystem ? LlamaText([pendingSystem, item.text]) : LlamaText(item.text));
        pendingSystem = null;
      } else if (item.type === 'model') {
        if (pendingSystem) push('user', LlamaText(pendingSystem.toString().replace(/\n\n----\n\n$/, ''))), pendingSystem = null;
        push('model', this.generateModelResponseText(item.response));
      }
    }
    if (pendingSystem) push('user', LlamaText(pendingSystem.toString().replace(/\n\n----\n\n$/, '')));
    return out;
  }
  // The template's rendering of messages as a LlamaText; `open`: the last message is a model
  // response being generated (cut right after its text).
  _renderMessages(messages, open, addGenerationPrompt) {
    const { render, bos } = this._render();
    const texts = [];
    const role = { system: this.systemRoleName, user: this.userRoleName, model: this.modelRoleName };
    const req = {
      messages: messages.map((msg) => {
        texts.push(msg.text);
        return { role: role[msg.kind], content: MARK(texts.length - 1) };
      }),
      chat_template: this.template,
      add_generation_prompt: addGenerationPrompt,
      ...(this.additionalRenderParameters ? { chat_template_kwargs: this.additionalRenderParameters } : {}),
    };
    let prompt = render(req).prompt;
    if (open) {
      const at = prompt.lastIndexOf(MARK(texts.length - 1));
      if (at >= 0) prompt = prompt.slice(0, at + MARK(texts.length - 1).length);
    }
    const parts = [];
    let at = 0;
    let first = true;
    const pushTemplate = (str) => {
      if (!str) return;
      if (first && bos && str.startsWith(bos)) {
        parts.push(new SpecialToken('BOS'));
        str = str.slice(bos.length);
      }
      first = false;
      if (str) parts.push(new SpecialTokensText(str));
    };
    let m;
    MARK_RE.lastIndex = 0;
    while ((m = MARK_RE.exec(prompt))) {
      pushTemplate(prompt.slice(at, m.index));
      first = false;
      parts.push(texts[Number(m[1])]);
      at = m.index + m[0].length;
    }
    pushTemplate(prompt.slice(at));
    return LlamaText(parts);
  }
  // The template's text after a model response, before the next message's own opening: where a
  // response ends. Rendered as user, model, user: the text between the model's text and the
  // second user's, less what also opens the first user message.
  _responseEnd() {
    if (this._end !== undefined) return this._end;
    let end = null;
    try {
      const msgs = [{ kind: 'user', text: LlamaText('\u0002') }, { kind: 'model', text: LlamaText('\u0003') }, { kind: 'user', text: LlamaText('\u0004') }];
      const t = this._renderMessages(msgs, false, false).toString();
      const u1 = t.indexOf('\u0002');
      const mEnd = t.indexOf('\u0003');
      const u2 = t.indexOf('\u0004');
      if (u1 >= 0 && mEnd > u1 && u2 > mEnd) {
        const opening = t.slice(0, u1);
        const between = t.slice(mEnd + 1, u2);
        let k = 0;
        while (k < between.length && k < opening.length && between[between.length - 1 - k] === opening[opening.length - 1 - k]) k++;
        end = between.slice(0, between.length - k) || null;
      }
    } catch {
      end = null;
    }
    this._end = end;
    return end;
  }
  generateContextState({ chatHistory, availableFunctions, documentFunctionParams }) {
    const history = this.addAvailableFunctionsSystemMessageToHistory(chatHistory, availableFunctions, { documentParams: documentFunctionParams });
    const last = history[history.length - 1];
    const open = last?.type === 'model' && modelText(last) !== '';
    const run = (systemAsUser) => {
      let messages = this._messages(history, systemAsUser);
      if (last?.type === 'model' && !open) messages = messages.slice(0, -1);
      return this._renderMessages(messages, open, !open);
    };
    let contextText;
    let transformed = false;
    const convert = this.convertUnsupportedSystemMessagesToUserMessages;
    const hasSystem = history.some((h) => h.type === 'system');
    if (convert === true || convert?.use === 'always' || (convert !== false && hasSystem && !this._supportsSystem())) {
      contextText = run(true);
      transformed = hasSystem;
    } else {
      try {
        contextText = run(false);
      } catch (err) {
        if (convert === false || !history.some((h) => h.type === 'system')) throw err;
        contextText = run(true);
        transformed = true;
      }
    }
    const end = this._responseEnd();
    const stops = [LlamaText(new SpecialToken('EOS'))];
    if (end) stops.push(LlamaText(new SpecialTokensText(end)));
    return { contextText, stopGenerationTriggers: stops, transformedSystemMessagesToUserMessages: transformed };
  }
}

// The chat wrapper node-llama-cpp would pick for a Jinja template: a specialized one whose
// prompts are the template's (rendered and compared on sample chats), else null.
function specializedForTemplate(template, jinja) {
  if (typeof template !== 'string') return null;
  if (template.includes('<|start_header_id|>') && /Cutting Knowledge Date/.test(template)) return new Llama3_1ChatWrapper();
  if (!jinja) return null;
  const samples = [
    [{ type: 'system', text: 'System.' }, { type: 'user', text: 'Hi there' }, { type: 'model', response: ['Hello.'] }, { type: 'user', text: 'How?' }, { type: 'model', response: [] }],
    [{ type: 'user', text: 'Hi there' }, { type: 'model', response: [] }],
    [{ type: 'user', text: 'Hi there' }, { type: 'model', response: ['Hello.'] }, { type: 'user', text: 'How?' }, { type: 'model', response: [] }],
  ];
  const plain = (t) => t.values.filter((v, i) => !(i === 0 && v instanceof SpecialToken && v.value === 'BOS')).map(String).join('');
  const rendered = new Map();
  const jinjaText = (k) => {
    if (!rendered.has(k)) {
      try {
        rendered.set(k, plain(jinja.generateContextState({ chatHistory: samples[k] }).contextText));
      } catch {
        rendered.set(k, null);
      }
    }
    return rendered.get(k);
  };
  for (const w of [new ChatMLChatWrapper(), new Llama3ChatWrapper(), new GemmaChatWrapper(), new MistralChatWrapper(), new Llama2ChatWrapper(), new GeneralChatWrapper(), new AlpacaChatWrapper(), new FalconChatWrapper()]) {
    // a wrapper without system messages is compared on the chats without one
    const ks = samples.map((_, k) => k).filter((k) => w.settings.supportsSystemMessages || !samples[k].some((h) => h.type === 'system'));
    if (ks.every((k) => jinjaText(k) !== null && plain(w.generateContextState({ chatHistory: samples[k] }).contextText) === jinjaText(k))) return w;
  }
  return null;
}

module.exports = {
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
  specializedForTemplate,
  stopStrings,
  DEFAULT_SYSTEM_PROMPT,
};
