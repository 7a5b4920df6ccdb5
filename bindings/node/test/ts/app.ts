// A TypeScript program written against @fugood/llama.node 1.7.15's API (its lib/index.ts and
// lib/binding.ts names), unchanged but for the module it is compiled against: tsconfig.json maps
// '@fugood/llama.node' to loom-node's index.d.ts. typescript.test.mjs runs `tsc --noEmit` on it.
import {
  loadModel,
  loadModule,
  initLlama,
  loadLlamaModelInfo,
  toggleNativeLog,
  isNativeLogEnabled,
  addNativeLogListener,
  getBackendDevicesInfo,
  isLibVariantAvailable,
  BuildInfo,
  LlamaParallelAPI,
} from '@fugood/llama.node'
import type {
  MessagePart,
  ChatMessage,
  LlamaKvCacheType,
  LlamaModelOptions,
  LlamaModelOptionsExtended,
  CompletionResponseFormat,
  SpeculativeType,
  LlamaSpeculativeOptions,
  LlamaCompletionOptions,
  LlamaParallelCompletionOptions,
  TokenProbability,
  CompletionProbability,
  LlamaCompletionResult,
  LlamaCompletionToken,
  LlamaParallelCompletionResult,
  TokenizeResult,
  EmbeddingResult,
  RerankParams,
  RerankResult,
  BackendDeviceInfo,
  BenchResult,
  ModelInfo,
  GGUFModelInfo,
  FormattedChatResult,
  JinjaFormattedChatResult,
  Tool,
  ToolCall,
  ParallelRequestStatus,
  ParallelStatus,
  LlamaContext,
  Module,
  LibVariant,
} from '@fugood/llama.node'

type Context = Awaited<ReturnType<typeof loadModel>>

const kv: LlamaKvCacheType = 'q8_0'
const variant: LibVariant = 'default'
const spec: SpeculativeType = 'none'
const specOptions: LlamaSpeculativeOptions = { enabled: false, type: spec, n_max: 8 }
const modelOptions: LlamaModelOptions = { model: 'model.gguf', n_ctx: 2048, cache_type_k: kv, cache_type_v: 'f16', n_parallel: 4, flash_attn_type: 'auto' }
const extended: LlamaModelOptionsExtended = { ...modelOptions, lib_variant: variant, speculative: specOptions }

const tools: Tool[] = [
  {
    type: 'function',
    function: { name: 'calc', description: 'Calculates', parameters: { type: 'object', properties: { expression: { type: 'string' } } } },
  },
]
const part: MessagePart = { type: 'text', text: 'Hello' }
const messages: ChatMessage[] = [
  { role: 'system', content: 'You are helpful.' },
  { role: 'user', content: [part] },
]
const format: CompletionResponseFormat = { type: 'json_schema', json_schema: { strict: true, schema: { type: 'object' } } }

function describe(result: LlamaCompletionResult): string {
  const calls: ToolCall[] = (result as { tool_calls?: ToolCall[] }).tool_calls ?? []
  const probs: CompletionProbability[] = result.completion_probabilities ?? []
  const first: TokenProbability | undefined = probs[0]?.probs[0]
  return `${result.text} ${result.content ?? ''} ${result.reasoning_content ?? ''} ${calls.length} ${first?.tok_str ?? ''} ` +
    `${result.tokens_predicted}/${result.tokens_evaluated} ${result.truncated} ${result.context_full} ${result.interrupted} ` +
    `${result.chat_format} ${result.timings.predicted_per_second.toFixed(1)}`
}

async function chat(ctx: Context): Promise<void> {
  const info: ModelInfo = ctx.getModelInfo()
  const jinja = ctx.isJinjaSupported() && info.chatTemplates.jinja.defaultCaps.tools
  const formatted: FormattedChatResult = ctx.getFormattedChat(messages, undefined, { jinja, tools, tool_choice: 'auto', reasoning_format: 'none' })
  if (formatted.type === 'jinja') {
    const j = formatted as JinjaFormattedChatResult
    console.log(j.prompt, j.grammar, j.grammar_lazy, j.grammar_triggers.length, j.chat_parser, j.chat_format, j.preserved_tokens)
  }
  const options: LlamaCompletionOptions = {
    messages,
    tools,
    response_format: format,
    reasoning_format: 'auto',
    chat_template: 'chatml',
    n_predict: 64,
    temperature: 0.7,
    stop: ['</s>'],
    n_probs: 2,
    chat_template_kwargs: { enable_thinking: false },
  }
  const result = await ctx.completion(options, (token: LlamaCompletionToken) => {
    console.log(token.token)
    if (token.tool_calls) console.log(token.tool_calls.map((c) => c.function.name))
    if (token.reasoning_content) console.log(token.reasoning_content.length)
    if (token.content) console.log(token.content.length, token.accumulated_text?.length)
  })
  console.log(describe(result))
  ctx.stopCompletion()
}

async function parallel(ctx: Context): Promise<void> {
  const api: LlamaParallelAPI = ctx.parallel
  const enabled: boolean = await api.enable({ n_parallel: 2, n_batch: 512 })
  const options: LlamaParallelCompletionOptions = { prompt: 'Hello', n_predict: 8, save_state_path: '/tmp/state.bin', load_state_size: 0 }
  const { requestId, promise, stop } = await api.completion(options, (id: number, data: LlamaCompletionToken) => console.log(id, data.token))
  const r: LlamaParallelCompletionResult = await promise
  console.log(enabled, requestId, r.requestId, r.text, r.stopped_limit, r.timings.cache_n)
  stop()
  const emb = await api.embedding('text', { embd_normalize: 2 })
  const v: number[] = (await emb.promise).embedding
  const ranked = await api.rerank('query', ['a', 'b'], { normalize: 1 })
  const docs: Array<{ score: number; index: number; document: string }> = await ranked.promise
  const status: ParallelStatus = api.getStatus()
  const reqs: ParallelRequestStatus[] = status.requests
  const sub = api.subscribeToStatus((s: ParallelStatus) => console.log(s.active_slots, s.queued_requests))
  sub.remove()
  console.log(v.length, docs.length, reqs.length, api.isEnabled())
  api.disable()
}

async function main(): Promise<void> {
  await toggleNativeLog(true)
  const listener = addNativeLogListener((level: string, text: string) => console.log(level, text))
  console.log(isNativeLogEnabled(), BuildInfo.number, BuildInfo.commit)
  const devices: BackendDeviceInfo[] = await getBackendDevicesInfo()
  console.log(devices.map((d) => `${d.backend} ${d.type} ${d.deviceName} ${d.maxMemorySize}`), await isLibVariantAvailable('default'))
  const mod: Module = await loadModule('default')
  const same: Module = await initLlama()
  const gguf: GGUFModelInfo = await mod.LlamaContext.loadModelInfo('model.gguf', [])
  const meta: GGUFModelInfo = await loadLlamaModelInfo('model.gguf')
  console.log(same === mod, gguf.version, meta['general.architecture'])

  const ctx = await loadModel(extended, (progress: number) => console.log(progress))
  console.log(ctx.getSystemInfo(), ctx.getUsedDevices(), ctx.isLlamaChatSupported())
  const tokens: TokenizeResult = await ctx.tokenize('Once upon a time')
  console.log(await ctx.detokenize(Array.from(tokens.tokens)), tokens.has_media)
  const e: EmbeddingResult = await ctx.embedding('Once upon a time', { embd_normalize: 2 })
  const rerankParams: RerankParams = { normalize: 1 }
  const ranked: Array<RerankResult & { document: string }> = await ctx.rerank('query', ['a', 'b'], rerankParams)
  console.log(e.embedding.length, ranked[0]?.document)
  await chat(ctx)
  await parallel(ctx)
  ctx.clearCache()
  ctx.clearCache(true)
  ctx.applyLoraAdapters([{ path: 'lora.gguf', scaled: 1 }])
  console.log(ctx.getLoadedLoraAdapters())
  ctx.removeLoraAdapters()
  await ctx.saveSession('/tmp/session.bin')
  await ctx.loadSession('/tmp/session.bin')
  const bench: BenchResult = await ctx.bench(64, 16, 1, 1)
  console.log(bench.speedPp, bench.speedTg)
  if (ctx.initMultimodal({ path: 'mmproj.gguf', use_gpu: false })) console.log(ctx.getMultimodalSupport().vision)
  if (ctx.initVocoder({ path: 'vocoder.gguf', n_batch: 512 })) console.log(ctx.isVocoderEnabled())
  listener.remove()
  await ctx.release()
}

// The binding's native context type is a name apps may mention (llama.node exports it).
export type NativeContext = LlamaContext

main().catch((err: unknown) => {
  console.error(err)
  throw err
})
