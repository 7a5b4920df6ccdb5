#!/usr/bin/env bash
# loom vs llama.cpp over several models and thread counts, in interleaved rounds:
#   bench/types.sh [-r ROUNDS=3] [-t "1 2"] [-o RAW.jsonl] MODEL.gguf...
#
# Each round runs, for every model and thread count in turn, `loom bench --json` and then
# ../shared/bench/peer-bench.mjs (llama.cpp through node-llama-cpp, its AVX-512/AMX build here)
# with the same pp/tg, so a load change on this shared machine hits both engines of a pair and
# every pair alike. After the last round it prints one markdown table: per model and thread
# count the median over the rounds of each engine's tokens/s, the ratio of the medians (> 1:
# loom is faster) with the range of the per-round ratios, loom's tg GB/s and its fraction of the
# read bandwidth `loom bench` measured in the same run.
# Environment: LOOM (default build/bin/loom), PEER_BENCH (default ../shared/bench/peer-bench.mjs
# beside the repo), PP=512, TG=128, REPS=1 (repetitions per engine and round, after a warm-up;
# each round's figure is their median), LOOM_ARGS (extra `loom bench` flags). loom's ISA switches
# pass through to loom only: LOOM_NO_AVX512=1 benches its 256-bit kernels (AVX-VNNI), with
# LOOM_NO_AVX_VNNI=1 as well the plain AVX2 ones of an AMD Zen 2/3 (base/cpu.h), while the peer
# keeps its own build's ISA (for an AVX2-only llama.cpp see LLAMA_MARCH in
# ../shared/tools/build-llama-cpp.sh).
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
PEER_BENCH=${PEER_BENCH:-$ROOT/../shared/bench/peer-bench.mjs}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-1}
[[ -x "$LOOM" ]] || { echo "types.sh: $LOOM not built (cmake --build build --target loom)" >&2; exit 1; }
[[ -f "$PEER_BENCH" ]] || { echo "types.sh: peer runner not found: $PEER_BENCH" >&2; exit 1; }
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
      node "$PEER_BENCH" "$m" "$t" --pp "$PP" --tg "$TG" --reps "$REPS" > "$tmp/p.json"
      node -e '
        const fs = require("fs")
        const [l, p] = [process.argv[1], process.argv[2]].map((f) => JSON.parse(fs.readFileSync(f, "utf8")))
        const load = fs.readFileSync("/proc/loadavg", "utf8").split(" ")[0]
        console.log(JSON.stringify({ round: +process.argv[3], model: process.argv[4], threads: l.threads, load: +load,
          loom: { pp: l.pp_tps, tg: l.tg_tps, tg_gbps: l.tg_gbps, mem_bw_gbps: l.mem_bw_gbps, bw_fraction: l.bw_fraction },
          peer: { pp: p.pp_tps, tg: p.tg_tps } }))' "$tmp/l.json" "$tmp/p.json" "$round" "$(basename "$m")" >> "$RAW"
      tail -n 1 "$RAW" | node -e '
        const r = JSON.parse(require("fs").readFileSync(0, "utf8"))
        console.error(`round ${r.round} ${r.model} t${r.threads}: pp ${r.loom.pp.toFixed(1)} vs ${r.peer.pp.toFixed(1)}, ` +
          `tg ${r.loom.tg.toFixed(1)} vs ${r.peer.tg.toFixed(1)} (load ${r.load})`)'
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
const f1 = (x) => x.toFixed(1)
const ratio = (a, b) => (b > 0 ? a / b : NaN)
const range = (xs) => `${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}`
console.log(`| model | threads | loom pp${pp} | llama.cpp pp${pp} | pp ratio (rounds) | loom tg${tg} | llama.cpp tg${tg} | tg ratio (rounds) | loom tg GB/s | % of read bw |`)
console.log('|---|---|---|---|---|---|---|---|---|---|')
for (const [k, rs] of groups) {
  const [model, threads] = k.split('\t')
  const lpp = median(rs.map((r) => r.loom.pp)), ppp = median(rs.map((r) => r.peer.pp))
  const ltg = median(rs.map((r) => r.loom.tg)), ptg = median(rs.map((r) => r.peer.tg))
  const gbps = median(rs.map((r) => r.loom.tg_gbps)), frac = median(rs.map((r) => r.loom.bw_fraction))
  console.log(`| ${model} | ${threads} | ${f1(lpp)} | ${f1(ppp)} | **${ratio(lpp, ppp).toFixed(2)}** (${range(rs.map((r) => ratio(r.loom.pp, r.peer.pp)))}) | ` +
    `${f1(ltg)} | ${f1(ptg)} | **${ratio(ltg, ptg).toFixed(2)}** (${range(rs.map((r) => ratio(r.loom.tg, r.peer.tg)))}) | ` +
    `${gbps.toFixed(1)} | ${frac > 0 ? (100 * frac).toFixed(0) + ' %' : '—'} |`)
}
console.log(`\n${rows.length / groups.size} interleaved round(s); medians over the rounds; load average ${Math.min(...rows.map((r) => r.load))}–${Math.max(...rows.map((r) => r.load))} during the run`)
JS
