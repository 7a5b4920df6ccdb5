// Types of loom-node: @fugood/llama.node 1.7's API (names, options and result shapes), plus what
// loom adds (marked "loom").

export type MessagePart = { type: string; text?: string; image_url?: { url?: string }; input_audio?: { format: string; data?: string; url?: string } }
export type ChatMessage = { role: string; content?: string | MessagePart[]; [key: string]: any }

export type LlamaModelOptions = {
  model: string
  chat_template?: string
  embedding?: boolean
  embd_normalize?: number
  pooling_type?: 'none' | 'mean' | 'cls' | 'last' | 'rank'
  /** total KV cells, shared by every parallel slot (default 512; 0: 4096) */
  n_ctx?: number
  n_batch?: number
  n_ubatch?: number
  /** slots of the scheduler (default 1); parallel.enable() changes it */
  n_parallel?: number
  /** default: half the CPUs, as llama.node */
  n_threads?: number
  cache_type_k?: 'f16' | 'f32' | 'q8_0' | 'q4_0' | 'q4_1' | 'iq4_nl' | 'q5_0' | 'q5_1' | 'bf16'
  cache_type_v?: 'f16' | 'f32' | 'q8_0' | 'q4_0' | 'q4_1' | 'iq4_nl' | 'q5_0' | 'q5_1' | 'bf16'
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
  use_mlock?: boolean
  devices?: string[]
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

export type CompletionResponseFormat = {
  type: 'text' | 'json_object' | 'json_schema'
  json_schema?: { strict?: boolean; schema: object }
  schema?: object
}

export type Tool = { type: 'function'; function: { name: string; description?: string; parameters: Record<string, any> } }
export type ToolCall = { type: 'function'; function: { name: string; arguments: string }; id?: string }

export type LlamaCompletionOptions = {
  messages?: ChatMessage[]
  prompt?: string
  jinja?: boolean
  chat_template?: string
  chat_template_kwargs?: Record<string, any>
  response_format?: CompletionResponseFormat
  tools?: Tool[]
  parallel_tool_calls?: boolean
  tool_choice?: string | { type: 'function'; function: { name: string } }
  enable_thinking?: boolean
  add_generation_prompt?: boolean
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
  n_predict?: number
  /** read (llama.node declares it but ignores it) */
  max_tokens?: number
  max_length?: number
  seed?: number
  stop?: string[]
  grammar?: string
  /** a JSON schema (object, or its JSON text) */
  json_schema?: string | object
  /** [[token, bias], ...]; bias false bans the token */
  logit_bias?: Array<[number, number | false]> | number[][] | Record<string, number>
  ignore_eos?: boolean
  n_probs?: number
  n_keep?: number
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
  cache_n: number
}

export type LlamaCompletionResult = {
  text: string
  content?: string
  reasoning_content?: string
  tool_calls?: ToolCall[]
  chat_format: number
  tokens_predicted: number
  tokens_evaluated: number
  truncated: boolean
  context_full: boolean
  interrupted: boolean
  stopped_eos: boolean
  stopped_words: boolean
  stopping_word: string
  stopped_limited: boolean
  completion_probabilities?: CompletionProbability[]
  timings: LlamaCompletionTimings
  /** loom: the generated token ids */
  tokens: Int32Array
}

export type LlamaCompletionToken = {
  token: string
  content?: string
  accumulated_text?: string
  completion_probabilities?: CompletionProbability[]
}

export type TokenizeResult = { tokens: Int32Array; has_media: boolean; bitmap_hashes: string[]; chunk_pos: number[]; chunk_pos_media: number[] }
export type EmbeddingResult = { embedding: Float32Array }
export type RerankParams = { normalize?: number }
export type RerankResult = { score: number; index: number; document: string }

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
  metadata: Record<string, string>
  isChatTemplateSupported: boolean
}

export type JinjaFormattedChatResult = {
  type: 'jinja'
  prompt: string
  has_media: boolean
  chat_format: number
  grammar: string
  grammar_lazy: boolean
  grammar_triggers: Array<{ type: number; value: string; token: number }>
  thinking_forced_open?: boolean
  preserved_tokens: string[]
  additional_stops: string[]
  chat_parser: string
}
export type FormattedChatResult = { type: 'llama-chat'; prompt: string; has_media: boolean } | JinjaFormattedChatResult

export type BenchResult = {
  modelDesc: string
  modelSize: number
  modelNParams: number
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
  enable(config?: { n_parallel?: number; n_batch?: number }): Promise<boolean>
  configure(config: { n_parallel?: number; n_batch?: number }): Promise<boolean>
  disable(): void
  isEnabled(): boolean
  completion(
    options: LlamaCompletionOptions & { load_state_path?: string; save_state_path?: string; save_prompt_state_path?: string },
    onToken?: (requestId: number, data: LlamaCompletionToken) => void,
  ): Promise<{ requestId: number; promise: Promise<LlamaCompletionResult & { requestId: number }>; stop: () => void }>
  embedding(text: string, params?: { embd_normalize?: number }): Promise<{ requestId: number; promise: Promise<EmbeddingResult> }>
  rerank(query: string, documents: string[], params?: RerankParams): Promise<{ requestId: number; promise: Promise<RerankResult[]> }>
  getStatus(): ParallelStatus
  subscribeToStatus(callback: (status: ParallelStatus) => void): { remove: () => void }
}

export class LlamaContext {
  readonly parallel: LlamaParallelAPI
  getSystemInfo(): string
  getUsedDevices(): string[]
  getModelInfo(): ModelInfo
  isJinjaSupported(): boolean
  isLlamaChatSupported(): boolean
  getFormattedChat(
    messages: ChatMessage[],
    template?: string,
    params?: {
      jinja?: boolean
      response_format?: CompletionResponseFormat
      tools?: Tool[]
      parallel_tool_calls?: boolean
      tool_choice?: string
      enable_thinking?: boolean
      add_generation_prompt?: boolean
      chat_template_kwargs?: Record<string, any>
    },
  ): FormattedChatResult
  completion(options: LlamaCompletionOptions, callback?: (token: LlamaCompletionToken) => void): Promise<LlamaCompletionResult>
  stopCompletion(): void
  tokenize(text: string, opts?: { media_paths?: string[] }): Promise<TokenizeResult>
  detokenize(tokens: number[] | Int32Array): Promise<string>
  embedding(text: string, params?: { embd_normalize?: number }): Promise<EmbeddingResult>
  rerank(query: string, documents: string[], params?: RerankParams): Promise<RerankResult[]>
  saveSession(path: string): Promise<void>
  loadSession(path: string): Promise<{ tokens_loaded: number }>
  clearCache(clearData?: boolean): Promise<void>
  applyLoraAdapters(adapters: { path: string; scaled?: number }[]): Promise<void>
  removeLoraAdapters(): Promise<void>
  getLoadedLoraAdapters(): { path: string; scaled: number }[]
  bench(pp: number, tg: number, pl: number, nr: number): Promise<BenchResult>
  release(): Promise<void>
  /** multimodal and TTS: not supported (init* return false, the rest throws) */
  initMultimodal(options: { path: string; use_gpu?: boolean }): boolean
  isMultimodalEnabled(): boolean
  getMultimodalSupport(): { vision: boolean; audio: boolean }
  releaseMultimodal(): void
  initVocoder(options: { path: string; n_batch?: number }): boolean
  isVocoderEnabled(): boolean
  releaseVocoder(): void
  /** loom: the scheduler's counters (slots, queue, KV cells, prefix cache) */
  getStatus(): Record<string, number>
}

export function loadModel(options: LlamaModelOptions, onProgress?: (progress: number) => void): Promise<LlamaContext>
export function loadLlamaModelInfo(path: string): Promise<Record<string, string>>
export function toggleNativeLog(enable: boolean): Promise<void>
export function addNativeLogListener(listener: (level: string, text: string) => void): { remove: () => void }
export function initLlama(): Promise<unknown>
export function getBackendDevicesInfo(): Promise<Array<{ backend: string; type: string; deviceName: string; maxMemorySize: number; metadata?: Record<string, any> }>>
export function isLibVariantAvailable(variant?: string): Promise<boolean>
/** loom: the engine's version */
export function loomVersion(): string
