#!/usr/bin/env node
// llama.cpp's tokenizer speed on the same text and vocabularies as bench/bench_tokenizer.cpp, for a
// side-by-side comparison with loom_bench_tokenizer.
//
// usage: node bench/tokenizer-peer.mjs [--shared DIR] [--reps 3] [--bytes 1000000] [--only NAME] [--json]
//
// The reference is node-llama-cpp's prebuilt llama.cpp CPU library from $LOOM_PEER_DIR (default
// ~/.cache/loom-peer; shared/bench/peer-bench.mjs installs it there). Each GGUF of
// shared/golden/vocab is loaded with vocabOnly; the timed call is the addon's tokenize(text, false)
// (llama_tokenize with add_special=false, parse_special=false, plus the UTF-16 -> UTF-8 copy of the
// 1 MB string, ~1 ms), median of --reps after one warm-up. llama.cpp keeps no tokenization cache,
// so this compares with loom's fresh-vocab "tokens_per_s". The text is built exactly as the C++
// side builds it (same generator); text_bytes and text_fnv1a in the JSON must match loom's.
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import { homedir } from 'node:os'
import { join, basename } from 'node:path'

const PEER_DIR = process.env.LOOM_PEER_DIR || join(homedir(), '.cache', 'loom-peer')
const NLC_ENTRY = join(PEER_DIR, 'node_modules', 'node-llama-cpp', 'dist', 'index.js')
const argv = process.argv.slice(2)
const opt = { shared: process.env.LOOM_SHARED || '../shared', reps: 3, bytes: 1000000, only: '', json: false }
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]
  if (a === '--shared') opt.shared = argv[++i]
  else if (a === '--reps') opt.reps = Math.max(1, parseInt(argv[++i], 10))
  else if (a === '--bytes') opt.bytes = parseInt(argv[++i], 10)
  else if (a === '--only') opt.only = argv[++i]
  else if (a === '--json') opt.json = true
  else if (a === '-h' || a === '--help') {
    console.log('usage: node bench/tokenizer-peer.mjs [--shared DIR] [--reps 3] [--bytes 1000000] [--only NAME] [--json]')
    process.exit(0)
  } else { console.error('unknown argument:', a); process.exit(2) }
}
if (!existsSync(NLC_ENTRY)) {
  console.error(`node-llama-cpp not found in ${PEER_DIR}; run shared/bench/peer-bench.mjs once to install it`)
  process.exit(1)
}
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = 'true'

// ---------- the text (same bytes as build_text() in bench_tokenizer.cpp) ----------
const vocabDir = join(opt.shared, 'golden', 'vocab')
// Decoding bytes -> string replaces ill-formed UTF-8 like sanitize_utf8 (WHATWG maximal subparts).
const casesFile = readFileSync(join(vocabDir, 'tokenize-cases.txt')).toString('utf8')
const unit = casesFile.split('\n__case__\n').join('\n')
let rngState = 12345
const rnd = () => { rngState = (Math.imul(rngState, 1103515245) + 12345) >>> 0; return rngState >>> 8 }
const LATIN = ['ka', 'lo', 'mi', 'ne', 'ru', 'sa', 'to', 'vi', 'el', 'an', 'or',
  'is', 'qu', 'th', 'ch', 'str', 'ing', 'ed', 'er', 'pre', 'con', 'ly']
const CYRILLIC = ['ма', 'ро', 'ви', 'ка', 'не', 'ст', 'до', 'ль']
const GREEK = ['λο', 'γο', 'κα', 'θε', 'μα']
const CJK = ['的', '一', '是', '不', '了', '人', '我', '在', '有', '他', '这',
  '中', '大', '来', '上', '国', '个', '到', '说', '们', '为', '子']
const pick = (list) => list[rnd() % list.length]
const parts = []
let textBytes = 0
const add = (s) => { parts.push(s); textBytes += Buffer.byteLength(s, 'utf8') }
for (let block = 0; textBytes < opt.bytes; block++) {
  add(`\n\n## Part ${block + 1} (${(block * 7919) % 100000} items, ${Math.floor(block / 4)}.${block % 100}%)\n\n`)
  for (let w = 0; w < 800; w++) {
    const script = rnd() % 10
    const syllables = 1 + rnd() % 4
    let word = ''
    for (let k = 0; k < syllables; k++) {
      word += script < 6 ? pick(LATIN) : script < 8 ? pick(CYRILLIC) : script < 9 ? pick(GREEK) : pick(CJK)
    }
    if (script < 6 && rnd() % 7 === 0) word = word[0].toUpperCase() + word.slice(1)
    add(word)
    const sepKind = rnd() % 20
    if (sepKind === 0) add(', ')
    else if (sepKind === 1) add('. ')
    else if (sepKind === 2) add('\n')
    else if (sepKind === 3) add(` ${rnd() % 100000} `)
    else add(' ')
  }
  if (block % 4 === 0) add(unit)
}
const text = parts.join('')
const textBuf = Buffer.from(text, 'utf8')
function fnv1a(buf) {
  let h = 0xcbf29ce484222325n
  for (const c of buf) { h ^= BigInt(c); h = (h * 0x100000001b3n) & 0xffffffffffffffffn }
  return h.toString(16).padStart(16, '0')
}
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2 }
const nowMs = () => Number(process.hrtime.bigint()) / 1e6

// ---------- peer: node-llama-cpp ----------
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(NLC_ENTRY).href)
const llama = await getLlama({ gpu: false, build: 'never', usePrebuiltBinaries: true, skipDownload: true,
  progressLogs: false, logLevel: LlamaLogLevel.error })
const files = readdirSync(vocabDir).filter((f) => f.endsWith('.gguf')).sort()
const results = []
for (const f of files) {
  const name = basename(f, '.gguf')
  if (opt.only && !name.includes(opt.only)) continue
  const model = await llama.loadModel({ modelPath: join(vocabDir, f), gpuLayers: 0, vocabOnly: true })
  const tokenize = () => model._model.tokenize(text, false) // Uint32Array, no JS array conversion
  const nTokens = tokenize().length // warm-up
  const runs = []
  for (let r = 0; r < opt.reps; r++) {
    const t0 = nowMs()
    const ids = tokenize()
    const dt = (nowMs() - t0) / 1000
    if (ids.length !== nTokens) { console.error(`${name}: token count changed between runs`); process.exit(1) }
    runs.push(dt)
  }
  const sec = median(runs)
  const type = model.fileInfo?.metadata?.tokenizer?.ggml?.model
  const r = { name, type: type === 'gpt2' ? 'bpe' : type === 'bert' ? 'wpm' : type === 'llama' ? 'spm' : String(type),
    n_tokens: nTokens, seconds: +sec.toFixed(6), tokens_per_s: +(nTokens / sec).toFixed(1),
    mb_per_s: +(textBuf.length / 1e6 / sec).toFixed(3), runs_s: runs.map((x) => +x.toFixed(6)) }
  results.push(r)
  if (!opt.json) {
    console.log(`${name.padEnd(28)} ${r.type.padEnd(4)} ${String(nTokens).padStart(9)} tokens ${sec.toFixed(4).padStart(9)} s ` +
      `${Math.round(r.tokens_per_s).toString().padStart(12)} tokens/s ${r.mb_per_s.toFixed(2).padStart(8)} MB/s`)
  }
  await model.dispose()
}
if (opt.json) {
  console.log(JSON.stringify({ engine: 'llama.cpp (node-llama-cpp)', text_bytes: textBuf.length, text_fnv1a: fnv1a(textBuf),
    reps: opt.reps, vocabs: results }))
} else {
  console.log(`text: ${textBuf.length} bytes (fnv1a ${fnv1a(textBuf)}), median of ${opt.reps} runs after a warm-up`)
}
