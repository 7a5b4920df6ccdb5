#!/usr/bin/env bash
# Speculative decoding against plain decoding, same model, prompt, threads and length, greedy,
# interleaved (REPS rounds of: plain, each speculative setting): wall tok/s of generation
# (gen_wall_tps), the speed-up, the draft acceptance, and whether the ids equal plain decoding's.
#   bench/speculative.sh TARGET.gguf [DRAFT.gguf] [-n 256] [-t 2] [-r 2]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
loom=${LOOM:-$here/build/bin/loom}
target=${1:?usage: bench/speculative.sh TARGET.gguf [DRAFT.gguf] [-n N] [-t T] [-r R]}
shift
draft=""
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then draft=$1; shift; fi
n=256 t=2 reps=2
while [ $# -gt 0 ]; do
  case "$1" in -n) n=$2; shift 2 ;; -t) t=$2; shift 2 ;; -r) reps=$2; shift 2 ;; *) echo "unknown $1" >&2; exit 2 ;; esac
done
prompt="Once upon a time, there was a little girl who lived in a village near the forest. She liked to"
settings=("plain" "--lookup 3" "--lookup 4 --draft-max 8")
[ -n "$draft" ] && settings+=("--draft-model $draft" "--draft-model $draft --draft-p-min 0 --draft-max 4")
declare -A tps acc same
for ((r = 0; r < reps; r++)); do
  for s in "${settings[@]}"; do
    args=$s
    [ "$s" = plain ] && args=""
    # shellcheck disable=SC2086
    "$loom" generate -m "$target" $args -p "$prompt" -n "$n" -t "$t" --temp 0 --json 2>/dev/null > /tmp/loom-spec.$$.json
    read -r ids w a < <(python3 -c "
import json,sys; j=json.load(open('/tmp/loom-spec.$$.json')); s=j.get('speculative') or {}
print(hash(tuple(j['ids'])), j['timings']['gen_wall_tps'], s.get('acceptance', 0))")
    [ "$s" = plain ] && plain_ids=$ids
    tps[$s]="${tps[$s]:-} $w"
    acc[$s]=$a
    same[$s]=$([ "$ids" = "$plain_ids" ] && echo yes || echo NO)
  done
done
rm -f /tmp/loom-spec.$$.json
med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
base=$(med "${tps[plain]}")
echo "target $(basename "$target"), $t threads, $n tokens greedy, median of $reps (wall tok/s of generation)"
echo "| setting | tok/s | speed-up | draft acceptance | ids = plain |"
echo "|---|---|---|---|---|"
for s in "${settings[@]}"; do
  m=$(med "${tps[$s]}")
  label=$s
  [ -n "$draft" ] && label=${label//$draft/$(basename "$draft")}
  printf '| %s | %.1f | %.2fx | %.1f %% | %s |\n' "$label" "$m" "$(python3 -c "print($m/$base)")" "$(python3 -c "print(100*${acc[$s]})")" "${same[$s]:-yes}"
done
