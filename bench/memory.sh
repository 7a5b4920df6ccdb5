#!/usr/bin/env bash
# The memory a context allocates, loom beside llama.cpp, for the same model, context and sequences:
# loom's `loom info -m M -c N -np S --json` (its memory breakdown) against llama.cpp's own report of
# its KV buffers (tools/dev/llama-ref ref_dump kvmem: unified KV, F16, llama.cpp's default sizing of
# the window cache; `swa_full` as --swa-full).
#   bench/memory.sh MODEL.gguf [N_CTX=32768] [SLOTS=1]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/memory.sh MODEL.gguf [N_CTX] [SLOTS]}
n_ctx=${2:-32768}
slots=${3:-1}
loom=${LOOM:-build/bin/loom}
ref=${LOOM_REF_DUMP:-$HOME/.cache/loom-llama-cpp/build/bin/loom-ref-dump}
[ -x "$ref" ] || { echo "bench/memory.sh: $ref is missing (tools/dev/llama-ref/build.sh builds it)" >&2; exit 1; }
printf '%-10s %-6s %-6s %14s %14s %8s\n' setting n_ctx slots loom_bytes llama_bytes ratio
for mode in window swa_full; do
  flag=(); [ "$mode" = swa_full ] && flag=(--swa-full)
  lb=$("$loom" info -m "$model" -c "$n_ctx" -np "$slots" "${flag[@]}" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["memory"]["total_bytes"])')
  rb=$("$ref" kvmem "$model" "$n_ctx" "$slots" "$mode" 2>/dev/null | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["kv_bytes"])')
  printf '%-10s %-6s %-6s %14s %14s %8s\n' "$mode" "$n_ctx" "$slots" "$lb" "$rb" "$(python3 -c "print(f'{$lb/$rb:.3f}')")"
done
