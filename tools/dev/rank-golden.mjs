#!/usr/bin/env node
// Rerank golden from real llama.cpp (release v0.5.0 as bundled in node-llama-cpp 3.22.1, CPU, 1 thread,
// flash attention off as for ../shared/golden: node-llama-cpp would pick "auto", which turns it on)
// for a model with rank pooling (a cross-encoder with a classification head), through node-llama-cpp's
// ranking API. Used once to make test data (tests/data/README.md says how).
//
// usage: node tools/dev/rank-golden.mjs MODEL.gguf OUTDIR NAME --query Q --doc D [--doc D]...
//
// Writes OUTDIR/NAME.json: per document its `ids` (the input node-llama-cpp builds, [BOS] query [EOS]
// [SEP] document [EOS] with the tokens the vocabulary has — llama.cpp's server layout for a
// vocabulary that adds BOS and SEP but not EOS), `score_raw` (what llama_get_embeddings_seq returns:
// the n_cls_out raw head outputs) and `score_sigmoid` (what LlamaRankingContext.rank() returns:
// sigmoid of the first raw output). node-llama-cpp is taken from $LOOM_PEER_DIR (default
// ~/.cache/loom-peer, as ../shared/tools/ref-golden.mjs installs it).
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import { homedir } from 'node:os'
import { join } from 'node:path'

const PEER_DIR = process.env.LOOM_PEER_DIR || join(homedir(), '.cache', 'loom-peer')
const NLC_ENTRY = join(PEER_DIR, 'node_modules', 'node-llama-cpp', 'dist', 'index.js')
const argv = process.argv.slice(2)
const docs = []
let query = null
const pos = []
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--query') query = argv[++i]
  else if (argv[i] === '--doc') docs.push(argv[++i])
  else pos.push(argv[i])
}
const [modelPath, outDir, name] = pos
if (!modelPath || !outDir || !name || query == null || !docs.length || !existsSync(modelPath) || !existsSync(NLC_ENTRY)) {
  console.error('usage: node rank-golden.mjs MODEL.gguf OUTDIR NAME --query Q --doc D [--doc D]...  (needs node-llama-cpp 3.22.1 in $LOOM_PEER_DIR; run ../shared/tools/ref-golden.mjs once to install it)')
  process.exit(2)
}
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = 'true'
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(NLC_ENTRY).href)
const llama = await getLlama({ gpu: false, build: 'never', usePrebuiltBinaries: true, skipDownload: true,
  progressLogs: false, logLevel: LlamaLogLevel.error, maxThreads: 1 })
const model = await llama.loadModel({ modelPath, gpuLayers: 0, defaultContextFlashAttention: false })
const rctx = await model.createRankingContext({ contextSize: 512, threads: 1 })
const tok = (text) => [...model.tokenize(text, false, 'trimLeadingSpace')]  // as LlamaRankingContext tokenizes
const t = model.tokens
const out = { model: name, reference: `llama.cpp ${JSON.stringify(llama.llamaCppRelease)} via node-llama-cpp (CPU, 1 thread)`,
  query, runs: [] }
for (const document of docs) {
  const ids = [...(t.bos == null ? [] : [t.bos]), ...tok(query), ...(t.eos == null ? [] : [t.eos]),
    ...(t.sep == null ? [] : [t.sep]), ...tok(document), ...(t.eos == null ? [] : [t.eos])]
  const evaluated = [...rctx._getEvaluationInput(tok(query), tok(document))]  // what rank() evaluates
  if (JSON.stringify(evaluated) !== JSON.stringify(ids)) throw new Error(`unexpected ranking input ${evaluated} (a rerank template?)`)
  const sigmoid = await rctx.rank(query, document)
  // The context still holds this evaluation's pooled output: llama_get_embeddings_seq(ctx, 0).
  const raw = [...rctx._llamaContext._ctx.getEmbedding(ids.length)]
  const check = 1 / (1 + Math.exp(-raw[0]))
  if (Math.abs(check - sigmoid) > 1e-12) throw new Error(`sigmoid(raw) ${check} != rank() ${sigmoid}: the raw read is not this evaluation's`)
  out.runs.push({ document, ids, score_raw: raw, score_sigmoid: sigmoid })
}
mkdirSync(outDir, { recursive: true })
writeFileSync(join(outDir, `${name}.json`), JSON.stringify(out, null, 1) + '\n')
await rctx.dispose(); await model.dispose(); await llama.dispose()
