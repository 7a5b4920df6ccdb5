// Types of loom-node: @fugood/llama.node 1.7's API (every public name of its lib/index.ts and
// lib/binding.ts, with shapes a program written for llama.node compiles against), plus what loom
// adds (marked "loom"). Where llama.node's name stands for something loom-node does not expose
// (its native binding), the comment says so.

export type MessagePart = {
  type: string
  text?: string
  image_url?: { url?: string }
  input_audio?: { format: string; data?: string; url?: string }
} & Record<string, any>
export type ChatMessage = { role: string; content?: string | MessagePart[]; [key: string]: any }

export type LlamaKvCacheType = 'f16' | 'f32' | 'q8_0' | 'q4_0' | 'q4_1' | 'iq4_nl' | 'q5_0' | 'q5_1'

/** llama.node's speculative decoding types (multi-token prediction): accepted and ignored by loom;
 * loom's own is `draft_model` / `lookup` */
export type SpeculativeType = 'none' | 'draft-mtp' | 'mtp'

export type LlamaSpeculativeOptions = {
  enabled?: boolean
  type?: SpeculativeType
  types?: SpeculativeType[]
  n_max?: number
  n_min?: number
  p_min?: number
  p_split?: number
  draft?: {
    model?: string
    path?: string
    model_draft?: string
    draft_model?: string
    n_max?: number
    n_min?: number
    p_min?: number
    p_split?: number
    n_gpu_layers?: number
    cache_type_k?: LlamaKvCacheType
    cache_type_v?: LlamaKvCacheType
  }
}

export type LlamaModelOptions = {
  model: string
  /** a Jinja template, or the name of a built-in one ('chatml', 'llama3', ...) */
  chat_template?: string
  embedding?: boolean
  embd_normalize?: number
  /** default: the file's; a model whose file names none (a causal LM) is mean-pooled */
  pooling_type?: 'none' | 'mean' | 'cls' | 'last' | 'rank'
  /** total KV cells, shared by every parallel slot (default 512; 0: 4096) */
  n_ctx?: number
  n_batch?: number
  n_ubatch?: number
  /** slots of the scheduler (default 1): the most parallel.enable() accepts */
  n_parallel?: number
  /** default: half the CPUs, as llama.node */
  n_threads?: number
  cache_type_k?: LlamaKvCacheType | 'bf16'
  cache_type_v?: LlamaKvCacheType | 'bf16'
  ctx_shift?: boolean
  use_mmap?: boolean
  vocab_only?: boolean
  lora?: string
  lora_scaled?: number
  lora_list?: { path: string; scaled: number }[]
  rope_freq_base?: number
  rope_freq_scale?: number
  /** accepted for compatibility, no effect on a CPU engine */
  n_gpu_layers?: number
  flash_attn?: boolean
  flash_attn_type?: 'auto' | 'on' | 'off'
  kv_unified?: boolean
  swa_full?: boolean
  n_cpu_moe?: number
  state_cache_budget_mb?: number
  state_cache_max_checkpoints?: number
  use_mlock?: boolean
  devices?: string[]
  cpu_mask?: string
  cpu_strict?: boolean
  no_extra_bufts?: boolean
  /** llama.node's MTP speculative options: accepted, not used (see draft_model) */
  model_draft?: string
  speculative?: LlamaSpeculativeOptions | SpeculativeType | boolean
  spec_type?: SpeculativeType | SpeculativeType[]
  spec_draft_n_max?: number
  spec_draft_n_min?: number
  spec_draft_p_min?: number
  spec_draft_p_split?: number
  spec_draft_n_gpu_layers?: number
  spec_draft_cache_type_k?: LlamaKvCacheType
  spec_draft_cache_type_v?: LlamaKvCacheType
  /** loom: speculative decoding with this draft model (same vocabulary; checked) for every
   * completion without `lookup`; the same tokens as without it */
  draft_model?: string
  /** loom: most draft tokens per step (1..32, default 16) */
  draft_max?: number
  /** loom: shorter drafts are not verified (default 0) */
  draft_min?: number
  /** loom: the draft stops at a token below this probability (default 0.75) */
  draft_p_min?: number
  [key: string]: any
}

export type LibVariant = 'default' | 'vulkan' | 'cuda' | 'snapdragon'

export interface LlamaModelOptionsExtended extends LlamaModelOptions {
  /** only 'default' exists in loom-node */
  lib_variant?: LibVariant
}

export type CompletionResponseFormat = {
  type: 'text' | 'json_object' | 'json_schema'
  json_schema?: { strict?: boolean; schema: Record<string, any> }
  schema?: Record<string, any>
}

export type Tool = { type: 'function'; function: { name: string; description?: string; parameters: Record<string, any> } }
export type ToolCall = { type: 'function'; function: { name: string; arguments: string }; id?: string }

export type LlamaCompletionOptions = {
  messages?: ChatMessage[]
  prompt?: string
  /** read for getFormattedChat's result type only: loom renders every template with its Jinja engine */
  jinja?: boolean
  /** how reasoning (<think>...</think>) is split from the content; default 'none' (kept in it) */
  reasoning_format?: 'none' | 'auto' | 'deepseek'
  /** a Jinja template, or the name of a built-in one */
  chat_template?: string
  force_pure_content?: boolean
  chat_template_kwargs?: Record<string, any>
  response_format?: CompletionResponseFormat
  tools?: Tool[]
  parallel_tool_calls?: boolean
  tool_choice?: string | { type: 'function'; function: { name: string } }
  now?: string | number
  enable_thinking?: boolean
  thinking_forced_open?: boolean
  thinking_budget_tokens?: number
  thinking_budget_message?: string
  thinking_start_tag?: string
  thinking_end_tag?: string
  generation_prompt?: string
  chat_parser?: string
  prefill_text?: string
  temperature?: number
  top_k?: number
  top_p?: number
  min_p?: number
  mirostat?: number
  mirostat_tau?: number
  mirostat_eta?: number
  penalty_last_n?: number
  penalty_repeat?: number
  penalty_freq?: number
  penalty_present?: number
  typ_p?: number
  typical_p?: number
  xtc_threshold?: number
  xtc_probability?: number
  dry_multiplier?: number
  dry_base?: number
  dry_allowed_length?: number
  dry_penalty_last_n?: number
  dry_sequence_breakers?: string[]
  top_n_sigma?: number
  n_predict?: number
  /** read (llama.node declares it but ignores it) */
  max_tokens?: number
  max_length?: number
  seed?: number
  stop?: string[]
  grammar?: string
  /** true: the grammar is not applied (loom cannot start a grammar at a trigger) */
  grammar_lazy?: boolean
  grammar_triggers?: { type: number; value: string; token?: number }[]
  preserved_tokens?: string[]
  /** a JSON schema (object, or its JSON text) */
  json_schema?: string | object
  /** [[token, bias], ...]; bias false bans the token */
  logit_bias?: number[][] | Array<[number, number | false]> | Record<string, number>
  ignore_eos?: boolean
  media_paths?: string | string[]
  guide_tokens?: number[] | Int32Array
  n_probs?: number
  n_keep?: number
  speculative?: LlamaSpeculativeOptions | SpeculativeType | boolean
  spec_type?: SpeculativeType | SpeculativeType[]
  spec_draft_n_max?: number
  spec_draft_n_min?: number
  spec_draft_p_min?: number
  spec_draft_p_split?: number
  /** loom: speculative decoding by prompt lookup, drafts from repeated n-grams of this size
   * (0: off); the output is unchanged, only faster on text that repeats its context */
  lookup?: number
  /** loom: most draft tokens verified per step (default 16), and the fewest worth verifying */
  draft_max?: number
  draft_min?: number
  /** node-llama-cpp's: aborting stops the completion (the result has interrupted: true) */
  signal?: AbortSignal
  [key: string]: any
}

export type LlamaParallelCompletionOptions = LlamaCompletionOptions & {
  load_state_path?: string
  save_state_path?: string
  save_prompt_state_path?: string
  load_state_size?: number
  save_state_size?: number
}

export type TokenProbability = { tok_str: string; prob: number }
export type CompletionProbability = { content: string; probs: TokenProbability[] }

export type LlamaCompletionTimings = {
  prompt_n: number
  prompt_ms: number
  prompt_per_token_ms: number
  prompt_per_second: number
  predicted_n: number
  predicted_ms: number
  predicted_per_token_ms: number
  predicted_per_second: number
  /** prompt tokens taken from the prefix cache */
  cache_n?: number
}

export type LlamaCompletionResult = {
  text: string
  /** the parsed content (a plain prompt: the text); absent when empty, as llama.node */
  content?: string
  reasoning_content?: string
  tool_calls?: ToolCall[]
  chat_format: number
  tokens_predicted: number
  tokens_evaluated: number
  draft_tokens?: number
  draft_tokens_accepted?: number
  truncated: boolean
  context_full: boolean
  interrupted: boolean
  stopped_eos?: boolean
  stopped_words?: boolean
  stopping_word?: string
  stopped_limited?: boolean
  audio_tokens?: Array<number>
  completion_probabilities?: CompletionProbability[]
  timings: LlamaCompletionTimings
  /** loom: the generated token ids */
  tokens?: Int32Array
}

export type LlamaCompletionToken = {
  token: string
  /** the content parsed from the text so far (not the new piece) */
  content?: string
  reasoning_content?: string
  tool_calls?: ToolCall[]
  accumulated_text?: string
  completion_probabilities?: CompletionProbability[]
}

export type LlamaParallelCompletionResult = {
  requestId: number
  text: string
  reasoning_content?: string
  content?: string
  tool_calls?: ToolCall[]
  chat_format: number
  stopped_eos: boolean
  stopped_limit: boolean
  stopped_word: boolean
  context_full: boolean
  tokens_evaluated: number
  tokens_predicted: number
  draft_tokens?: number
  draft_tokens_accepted?: number
  timings: LlamaCompletionTimings & { cache_n: number }
}

export type TokenizeResult = { tokens: Int32Array; has_media: boolean; bitmap_hashes: string[]; chunk_pos: number[]; chunk_pos_media: number[] }
export type EmbeddingResult = { embedding: Float32Array }
export type RerankParams = { normalize?: number }
export type RerankResult = { score: number; index: number }

export type BackendDeviceInfo = { backend: string; type: string; deviceName: string; maxMemorySize: number; metadata?: Record<string, any> }

export type BenchResult = {
  modelDesc?: string
  modelSize?: number
  modelNParams?: number
  nKvMax: number
  nBatch: number
  nUBatch: number
  flashAttn: number
  isPpShared: boolean
  nGpuLayers: number
  nThreads: number
  nThreadsBatch: number
  pp: number
  tg: number
  pl: number
  nKv: number
  tPp: number
  speedPp: number
  tTg: number
  speedTg: number
  t: number
  speed: number
}

export type ModelInfo = {
  desc: string
  nEmbd: number
  nParams: number
  size: number
  is_recurrent: boolean
  is_hybrid: boolean
  chatTemplates: {
    llamaChat: boolean
    jinja: {
      default: boolean
      defaultCaps: { tools: boolean; toolCalls: boolean; systemRole: boolean; parallelToolCalls: boolean }
      toolUse: boolean
      toolUseCaps?: { tools: boolean; toolCalls: boolean; systemRole: boolean; parallelToolCalls: boolean }
    }
  }
  /** the file's metadata as text, without its arrays (as llama.cpp's model metadata) */
  metadata: Record<string, string>
  isChatTemplateSupported: boolean
}

export type GGUFModelInfo = {
  version?: number
  alignment?: number
  data_offset?: number
  [key: string]: string | number | undefined
}

export type JinjaFormattedChatResult = {
  prompt: string
  chat_format: number
  /** with tools: the tool-call grammar (lazy: from a trigger on, unless tool_choice is 'required') */
  grammar: string
  grammar_lazy: boolean
  grammar_triggers: Array<{ type: number; value: string; token: number }>
  generation_prompt?: string
  thinking_forced_open?: boolean
  thinking_start_tag?: string
  thinking_end_tag?: string
  preserved_tokens: string[]
  additional_stops: string[]
  /** loom: {"format": the tool-call format loom parses} as JSON (llama.node: a serialized PEG parser) */
  chat_parser: string
}

export type FormattedChatResult =
  | { type: 'llama-chat'; prompt: string; has_media: boolean; media_paths?: Array<string> }
  | ({ type: 'jinja'; has_media: boolean; media_paths?: Array<string> } & JinjaFormattedChatResult)

export type ParallelRequestStatus = {
  request_id: number
  type: 'completion' | 'embedding' | 'rerank'
  state: 'queued' | 'processing_prompt' | 'generating' | 'done'
  prompt_length: number
  tokens_generated: number
  prompt_ms: number
  generation_ms: number
  tokens_per_second: number
}
export type ParallelStatus = { n_parallel: number; active_slots: number; queued_requests: number; requests: ParallelRequestStatus[] }

export class LlamaParallelAPI {
  /** rejects when n_parallel exceeds loadModel's n_parallel */
  enable(config?: { n_parallel?: number; n_batch?: number }): Promise<boolean>
  configure(config: { n_parallel?: number; n_batch?: number }): Promise<boolean>
  disable(): void
  isEnabled(): boolean
  completion(
    options: LlamaParallelCompletionOptions,
    onToken?: (requestId: number, data: LlamaCompletionToken) => void,
  ): Promise<{ requestId: number; promise: Promise<any>; stop: () => void }>
  embedding(text: string, params?: { embd_normalize?: number }): Promise<{ requestId: number; promise: Promise<{ embedding: number[] }> }>
  rerank(
    query: string,
    documents: string[],
    params?: RerankParams,
  ): Promise<{ requestId: number; promise: Promise<Array<{ score: number; index: number; document: string }>> }>
  getStatus(): ParallelStatus
  subscribeToStatus(callback: (status: ParallelStatus) => void): { remove: () => void }
}

/** The context loadModel() returns (llama.node's LlamaContextWrapper). llama.node's type of this
 * name is its native binding's interface, which loom-node does not expose. */
export class LlamaContext {
  readonly parallel: LlamaParallelAPI
  getSystemInfo(): string
  getUsedDevices(): string[]
  getModelInfo(): ModelInfo
  isJinjaSupported(): boolean
  isLlamaChatSupported(): boolean
  getFormattedChat(
    messages: ChatMessage[],
    /** a Jinja template or a built-in name for this call (default: loadModel's, else the model's) */
    template?: string,
    params?: {
      jinja?: boolean
      response_format?: CompletionResponseFormat
      tools?: Tool[]
      parallel_tool_calls?: boolean
      tool_choice?: string
      enable_thinking?: boolean
      reasoning_format?: 'none' | 'auto' | 'deepseek'
      add_generation_prompt?: boolean
      now?: string | number
      chat_template_kwargs?: Record<string, any>
      force_pure_content?: boolean
    },
  ): FormattedChatResult
  completion(options: LlamaCompletionOptions, callback?: (token: LlamaCompletionToken) => void): Promise<LlamaCompletionResult>
  stopCompletion(): void
  tokenize(text: string, opts?: { media_paths?: string[] }): Promise<TokenizeResult>
  detokenize(tokens: number[] | Int32Array): Promise<string>
  embedding(text: string, params?: { embd_normalize?: number }): Promise<EmbeddingResult>
  rerank(query: string, documents: string[], params?: RerankParams): Promise<Array<RerankResult & { document: string }>>
  saveSession(path: string): Promise<void>
  /** loom: resolves with the number of tokens loaded */
  loadSession(path: string): Promise<any>
  /** empties the prefix cache once the running requests are done; later requests wait for it */
  clearCache(clearData?: boolean): void
  /** loads and checks the adapters now (a bad file throws); they apply to every request started after the call */
  applyLoraAdapters(adapters: { path: string; scaled?: number }[]): void
  removeLoraAdapters(): void
  getLoadedLoraAdapters(): { path: string; scaled: number }[]
  bench(pp: number, tg: number, pl: number, nr: number): Promise<BenchResult>
  release(): Promise<void>
  /** multimodal and TTS: not supported (init* return false, the rest throws) */
  initMultimodal(options: { path: string; use_gpu?: boolean; image_min_tokens?: number; image_max_tokens?: number }): boolean
  isMultimodalEnabled(): boolean
  getMultimodalSupport(): { vision: boolean; audio: boolean }
  releaseMultimodal(): void
  initVocoder(options: { path: string; n_batch?: number }): boolean
  isVocoderEnabled(): boolean
  releaseVocoder(): void
  getFormattedAudioCompletion(speaker: string | null, text: string): { prompt: string; grammar?: string }
  getAudioCompletionGuideTokens(text: string): Int32Array
  decodeAudioTokens(tokens: number[] | Int32Array): Promise<Float32Array>
  /** loom: the scheduler's counters (slots, queue, KV cells, prefix cache) */
  getStatus(): Record<string, any>
}

/** What loadModule() / initLlama() return. llama.node's LlamaContext here is its native class,
 * constructed synchronously; loom-node's throws (contexts come from loadModel()), its static
 * helpers work. */
export interface Module {
  LlamaContext: {
    new (options: LlamaModelOptions, onProgress?: (progress: number) => void): never
    loadModelInfo(path: string, skip: string[]): Promise<GGUFModelInfo>
    toggleNativeLog(enable: boolean, callback: (level: string, text: string) => void): void
    /** JSON text of BackendDeviceInfo[] */
    getBackendDevicesInfo(): BackendDeviceInfo[] | string
  }
}

export function loadModel(options: LlamaModelOptionsExtended, onProgress?: (progress: number) => void): Promise<LlamaContext>
export function loadModule(variant?: LibVariant): Promise<Module>
export const initLlama: typeof loadModule
export function loadLlamaModelInfo(path: string): Promise<GGUFModelInfo>
export function toggleNativeLog(enable: boolean): Promise<void>
export function isNativeLogEnabled(): boolean
export function addNativeLogListener(listener: (level: string, text: string) => void): { remove: () => void }
export function getBackendDevicesInfo(variant?: LibVariant): Promise<BackendDeviceInfo[]>
export function isLibVariantAvailable(variant?: LibVariant): Promise<boolean>
/** loom's version ("0.3.0") and git commit */
export const BuildInfo: { number: string; commit: string }
/** loom: the engine's version */
export function loomVersion(): string
