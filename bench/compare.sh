#!/usr/bin/env bash
# loom vs llama.cpp on one model, side by side in one run: bench/compare.sh MODEL [THREADS=1]
#
# Runs `loom bench --json` and ../shared/bench/peer-bench.mjs (llama.cpp via node-llama-cpp; it
# npm-installs into ~/.cache/loom-peer on first use) with the same pp/tg/reps, then prints one
# table with the ratio loom/llama.cpp (> 1: loom is faster).
# Environment: LOOM (default build/bin/loom), PEER_BENCH (default ../shared/bench/peer-bench.mjs
# beside the repo), PP=512, TG=128, REPS=3, DEPTH=0 (loom only; the peer has no depth option),
# LOOM_ARGS (extra flags for loom bench, e.g. "--bw-mib 0" to skip the bandwidth pass).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == -h || "$1" == --help ]]; then
  echo "usage: bench/compare.sh MODEL.gguf [THREADS=1]" >&2
  exit 2
fi
MODEL=$1
THREADS=${2:-1}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOOM=${LOOM:-$ROOT/build/bin/loom}
PEER_BENCH=${PEER_BENCH:-$ROOT/../shared/bench/peer-bench.mjs}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-3}
DEPTH=${DEPTH:-0}

[[ -f "$MODEL" ]] || { echo "compare.sh: model not found: $MODEL" >&2; exit 1; }
[[ -x "$LOOM" ]] || { echo "compare.sh: $LOOM not built (cmake --build build --target loom)" >&2; exit 1; }
[[ -f "$PEER_BENCH" ]] || { echo "compare.sh: peer runner not found: $PEER_BENCH" >&2; exit 1; }

# The machines are shared: say how busy this one was, since other work skews both engines.
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) core(s)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
"$LOOM" bench -m "$MODEL" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" -d "$DEPTH" --json ${LOOM_ARGS:-} > "$tmp/loom.json"
node "$PEER_BENCH" "$MODEL" "$THREADS" --pp "$PP" --tg "$TG" --reps "$REPS" > "$tmp/peer.json"

node - "$tmp/loom.json" "$tmp/peer.json" <<'JS'
const fs = require('fs')
const [l, p] = process.argv.slice(2).map((f) => JSON.parse(fs.readFileSync(f, 'utf8')))
const ratio = (a, b) => (b > 0 ? (a / b).toFixed(2) + 'x' : 'n/a')
const pp = `pp${l.pp_tokens} tok/s`, tg = `tg${l.tg_tokens}${l.depth ? '@d' + l.depth : ''} tok/s`
const rows = [
  ['', pp, tg],
  ['loom', l.pp_tps.toFixed(2), l.tg_tps.toFixed(2)],
  ['llama.cpp', p.pp_tps.toFixed(2), p.tg_tps.toFixed(2)],
  ['loom/llama.cpp', ratio(l.pp_tps, p.pp_tps), ratio(l.tg_tps, p.tg_tps)],
]
console.log(`model ${l.model}, ${l.threads} thread(s), median of ${l.reps} after a warm-up`)
for (const r of rows) console.log(r[0].padEnd(16) + r[1].padStart(16) + r[2].padStart(20))
if (l.mem_bw_gbps > 0) {
  console.log(`loom tg reads ${(l.tg_gbps).toFixed(2)} GB/s = ${(100 * l.bw_fraction).toFixed(1)} % of the read ` +
    `bandwidth measured in the same run (${l.mem_bw_gbps.toFixed(2)} GB/s, ${l.threads} thread(s))`)
}
if (l.depth) console.log(`note: loom tg ran at depth ${l.depth}, llama.cpp's at depth 0`)
JS
