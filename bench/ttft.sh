#!/usr/bin/env bash
# Time to the first generated token from process start, loom vs llama.cpp, as whole processes:
#   bench/ttft.sh MODEL.gguf [THREADS=1] [RUNS=7]
# loom:      build/bin/loom generate -m MODEL -p PROMPT -n 1 -t THREADS --temp 0 -c 512
#            once without the packed-weights cache and once with LOOM_PACK_CACHE (warm: the cache
#            file is written by a first run that is not counted);
# llama.cpp: loom-ref-dump ttft MODEL PROMPT THREADS (tools/dev/llama-ref: llama.cpp's own load,
#            a default context of 512 cells, the prompt, one greedy pick; built by
#            tools/dev/llama-ref/build.sh against ../shared/tools/build-llama-cpp.sh's libraries).
# Both print the same first token (checked). Runs alternate A B A B (farm-bench --vs when it is on
# the PATH, else a plain loop with /usr/bin/time), medians reported.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/ttft.sh MODEL.gguf [THREADS] [RUNS]}
threads=${2:-1}
runs=${3:-7}
prompt="Once upon a time"
loom=${LOOM:-build/bin/loom}
ref=${REF_DUMP:-$HOME/.cache/loom-llama-cpp/build/bin/loom-ref-dump}
[ -x "$ref" ] || { echo "ttft.sh: $ref missing (tools/dev/llama-ref/build.sh)" >&2; exit 2; }
cache=$(mktemp -d "${TMPDIR:-/tmp}/loom-ttft.XXXXXX")
trap 'rm -rf "$cache"' EXIT

a=$("$loom" generate -m "$model" -p "$prompt" -n 1 -t "$threads" --temp 0 -c 512 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["ids"][0])')
b=$("$ref" ttft "$model" "$prompt" "$threads" 2>/dev/null | tail -1)
[ "$a" = "$b" ] || { echo "ttft.sh: first tokens differ: loom $a, llama.cpp $b" >&2; exit 1; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); first token $a from both"
LOOM_PACK_CACHE="$cache" "$loom" generate -m "$model" -p "$prompt" -n 1 -t "$threads" --temp 0 -c 512 >/dev/null 2>&1

loom_cmd=("$loom" generate -m "$model" -p "$prompt" -n 1 -t "$threads" --temp 0 -c 512)
ref_cmd="$ref ttft $model '$prompt' $threads"
if command -v farm-bench >/dev/null; then
  echo "== loom (packing at load) vs llama.cpp"
  farm-bench -n "$runs" --timeout 600 --vs "$ref_cmd" -- "${loom_cmd[@]}"
  echo "== loom (LOOM_PACK_CACHE, warm) vs llama.cpp"
  LOOM_PACK_CACHE="$cache" farm-bench -n "$runs" --timeout 600 --vs "$ref_cmd" -- "${loom_cmd[@]}"
else
  for i in $(seq "$runs"); do
    /usr/bin/time -f "loom %e s" "${loom_cmd[@]}" >/dev/null 2>>/dev/stdout
    LOOM_PACK_CACHE="$cache" /usr/bin/time -f "loom+cache %e s" "${loom_cmd[@]}" >/dev/null 2>>/dev/stdout
    /usr/bin/time -f "llama.cpp %e s" "$ref" ttft "$model" "$prompt" "$threads" >/dev/null 2>>/dev/stdout
  done
fi
