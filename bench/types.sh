#!/usr/bin/env bash
# loom vs llama.cpp over several models and thread counts, in interleaved rounds:
#   bench/types.sh [-r ROUNDS=3] [-t "1 2"] [-o RAW.jsonl] MODEL.gguf...
#
# Each round runs, for every model and thread count in turn, `loom bench --json` and then
# ../shared/bench/peer-bench.mjs (llama.cpp through node-llama-cpp, its AVX-512/AMX build here)
# with the same pp/tg, and, where llama.cpp's own llama-bench is built (LLAMA_BENCH, default
# ~/.cache/loom-llama-cpp/build/bin/llama-bench from ../shared/tools/build-llama-cpp.sh; LLAMA_BENCH=
# empty skips it), llama-bench too, so a load change on this shared machine hits every engine of
# a round alike. After the last round it prints one markdown table: per model and thread count
# the ISA of loom's kernels, the median over the rounds of each engine's tokens/s, the ratio of
# loom's median to the stronger peer's (> 1: loom is faster) with the range of the per-round
# ratios, loom's tg GB/s and its fraction of the read bandwidth `loom bench` measured in the same
# run. (On an AMD Zen 3 node-llama-cpp's haswell build stalls in 2-thread decode and is slow on
# F16 prompts while llama-bench built for the host is not: the stronger per figure counts.)
# Environment: LOOM (default build/bin/loom), PEER_BENCH (default ../shared/bench/peer-bench.mjs
# beside the repo; PEER_BENCH= empty skips node-llama-cpp, e.g. when only an AVX2 llama-bench is a
# fair peer), PP=512, TG=128, REPS=1 (repetitions per engine and round, after a warm-up;
# each round's figure is their median), LOOM_ARGS (extra `loom bench` flags). loom's ISA switches
# pass through to loom only: LOOM_NO_AVX512=1 benches its 256-bit kernels (AVX-VNNI), with
# LOOM_NO_AVX_VNNI=1 as well the plain AVX2 ones of an AMD Zen 2/3 (base/cpu.h), while the peers
# keep their own build's ISA (for an AVX2-only llama.cpp point LLAMA_BENCH at a LLAMA_MARCH=haswell
# build of ../shared/tools/build-llama-cpp.sh).
set -euo pipefail

usage() { echo "usage: bench/types.sh [-r ROUNDS=3] [-t \"1 2\"] [-o RAW.jsonl] MODEL.gguf..." >&2; exit 2; }
ROUNDS=3
THREADS="1 2"
RAW=""
while getopts "r:t:o:h" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;;
    t) THREADS=$OPTARG ;;
    o) RAW=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || usage
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || usage

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOOM=${LOOM:-$ROOT/build/bin/loom}
PEER_BENCH=${PEER_BENCH-$ROOT/../shared/bench/peer-bench.mjs}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-1}
LLAMA_BENCH=${LLAMA_BENCH-$HOME/.cache/loom-llama-cpp/build/bin/llama-bench}
if [[ -n "$LLAMA_BENCH" && ! -x "$LLAMA_BENCH" ]]; then
  echo "types.sh: llama-bench not found at $LLAMA_BENCH (../shared/tools/build-llama-cpp.sh builds it); comparing with node-llama-cpp only" >&2
  LLAMA_BENCH=""
fi
[[ -x "$LOOM" ]] || { echo "types.sh: $LOOM not built (cmake --build build --target loom)" >&2; exit 1; }
[[ -z "$PEER_BENCH" || -f "$PEER_BENCH" ]] || { echo "types.sh: peer runner not found: $PEER_BENCH" >&2; exit 1; }
for m in "$@"; do [[ -f "$m" ]] || { echo "types.sh: model not found: $m" >&2; exit 1; }; done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
RAW=${RAW:-$tmp/raw.jsonl}
: > "$RAW"
echo "start $(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) core(s); $ROUNDS round(s), pp$PP tg$TG, threads: $THREADS" >&2
for ((round = 1; round <= ROUNDS; round++)); do
  for m in "$@"; do
    for t in $THREADS; do
      # shellcheck disable=SC2086
      "$LOOM" bench -m "$m" -t "$t" -p "$PP" -n "$TG" -r "$REPS" --bw-passes 3 --json ${LOOM_ARGS:-} > "$tmp/l.json"
      echo 'null' > "$tmp/p.json"
      [[ -z "$PEER_BENCH" ]] || node "$PEER_BENCH" "$m" "$t" --pp "$PP" --tg "$TG" --reps "$REPS" > "$tmp/p.json"
      echo '[]' > "$tmp/b.json"
      if [[ -n "$LLAMA_BENCH" ]]; then
        "$LLAMA_BENCH" -m "$m" -t "$t" -p "$PP" -n "$TG" -r "$REPS" -o json > "$tmp/b.json" 2> "$tmp/b.err" ||
          { echo "types.sh: llama-bench failed on $m:" >&2; tail -n 3 "$tmp/b.err" >&2; echo '[]' > "$tmp/b.json"; }
      fi
      node -e '
        const fs = require("fs")
        const [l, p, b] = [process.argv[1], process.argv[2], process.argv[5]].map((f) => JSON.parse(fs.readFileSync(f, "utf8")))
        const load = fs.readFileSync("/proc/loadavg", "utf8").split(" ")[0]
        const bench = (pp) => { const r = b.find((x) => (pp ? x.n_prompt > 0 && x.n_gen === 0 : x.n_gen > 0 && x.n_prompt === 0)); return r ? r.avg_ts : null }
        console.log(JSON.stringify({ round: +process.argv[3], model: process.argv[4], threads: l.threads, load: +load, isa: l.isa,
          loom: { pp: l.pp_tps, tg: l.tg_tps, tg_gbps: l.tg_gbps, mem_bw_gbps: l.mem_bw_gbps, bw_fraction: l.bw_fraction },
          peer: p ? { pp: p.pp_tps, tg: p.tg_tps } : null, llama_bench: b.length ? { pp: bench(true), tg: bench(false) } : null }))' \
        "$tmp/l.json" "$tmp/p.json" "$round" "$(basename "$m")" "$tmp/b.json" >> "$RAW"
      tail -n 1 "$RAW" | node -e '
        const r = JSON.parse(require("fs").readFileSync(0, "utf8"))
        console.error(`round ${r.round} ${r.model} t${r.threads} ${r.isa}: loom pp ${r.loom.pp.toFixed(1)} tg ${r.loom.tg.toFixed(1)}` +
          (r.peer ? ` (node-llama-cpp pp ${r.peer.pp.toFixed(1)}, tg ${r.peer.tg.toFixed(1)})` : "") +
          (r.llama_bench ? ` (llama-bench pp ${r.llama_bench.pp.toFixed(1)}, tg ${r.llama_bench.tg.toFixed(1)})` : "") + ` (load ${r.load})`)'
    done
  done
done
echo "end $(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

node - "$RAW" "$PP" "$TG" <<'JS'
const fs = require('fs')
const [file, pp, tg] = process.argv.slice(2)
const rows = fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2 }
const groups = new Map()
for (const r of rows) {
  const k = `${r.model}\t${r.threads}`
  if (!groups.has(k)) groups.set(k, [])
  groups.get(k).push(r)
}
const f1 = (x) => (x == null ? '—' : x.toFixed(1))
const ratio = (a, b) => (b > 0 ? a / b : NaN)
const range = (xs) => `${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}`
// The peers that ran (node-llama-cpp: `peer`, llama-bench: `llama_bench`) and, per round and
// figure, the stronger of them.
const peers = [['peer', 'node-llama-cpp'], ['llama_bench', 'llama-bench']].filter(([k]) => rows.some((r) => r[k]))
const val = (r, k, key) => (r[k] && r[k][key] != null ? r[k][key] : null)
const best = (r, key) => Math.max(0, ...peers.map(([k]) => val(r, k, key) ?? 0))
const cols = (key, n) => peers.map(([, name]) => `${name} ${key}${n}`).join(' | ')
const dashes = '---|'.repeat(peers.length)
console.log(`| model | threads | loom ISA | loom pp${pp} | ${cols('pp', pp)} | pp ratio (rounds) | loom tg${tg} | ${cols('tg', tg)} | tg ratio (rounds) | loom tg GB/s | % of read bw |`)
console.log(`|---|---|---|---|${dashes}---|---|${dashes}---|---|---|`)
for (const [k, rs] of groups) {
  const [model, threads] = k.split('\t')
  const isa = [...new Set(rs.map((r) => r.isa || '?'))].join('/')
  const cell = (key) => {
    const l = median(rs.map((r) => r.loom[key])), b = median(rs.map((r) => best(r, key)))
    const ps = peers.map(([pk]) => { const xs = rs.map((r) => val(r, pk, key)).filter((x) => x != null); return xs.length ? f1(median(xs)) : '—' })
    return [f1(l), ...ps, `**${ratio(l, b).toFixed(2)}** (${range(rs.map((r) => ratio(r.loom[key], best(r, key))))})`]
  }
  const gbps = median(rs.map((r) => r.loom.tg_gbps)), frac = median(rs.map((r) => r.loom.bw_fraction))
  console.log(`| ${model} | ${threads} | ${isa} | ${cell('pp').join(' | ')} | ${cell('tg').join(' | ')} | ` +
    `${gbps.toFixed(1)} | ${frac > 0 ? (100 * frac).toFixed(0) + ' %' : '—'} |`)
}
if (peers.length > 1) console.log('\nRatios are loom against the stronger peer of each round, figure by figure.')
console.log(`\n${rows.length / groups.size} interleaved round(s); medians over the rounds; load average ${Math.min(...rows.map((r) => r.load))}–${Math.max(...rows.map((r) => r.load))} during the run`)
JS
