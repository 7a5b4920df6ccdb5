#!/usr/bin/env bash
# loom vs llama.cpp's llama-bench on this year's model families, side by side in one run:
#   bench/families.sh [-t "1 2"] [-r REPS=3] [SHAPE...]
#     SHAPE: qwen35-0.8b lfm2-1.2b smollm3-3b (issue 29, the default), gemma4-e2b ministral3-3b (issue 30),
#            qwen3moe-2b gpt-oss-2b (issue 31: mixtures of experts)
#
# The models are synthetic (random weights) at the published configs' dimensions, made once by
# `make_arch_variant bench-shape` (F16, with a llama.cpp vocabulary of the right size: qwen35's,
# GPT-NeoX's padded to 65536 for LFM2, Llama 3's for SmolLM3, Gemma 4's, Llama 3's padded to 131072
# for Ministral 3, Qwen2's padded to o200k's 201088 for gpt-oss) and llama-quantize Q4_K_M (gpt-oss:
# MXFP4_MOE, the published files' mix: MXFP4 experts, Q8_0 elsewhere), and kept in
# $LOOM_BENCH_MODELS (default ~/.cache/loom-bench-models). For each model and thread count: pp512 and
# tg128 (REPS repetitions), and at the last thread count tg128 after 4096 tokens of context
# (-d 4096, DEPTH overrides; one repetition, the fill is long), loom (`loom bench --json`) then
# llama-bench (built by ../shared/tools/build-llama-cpp.sh; LLAMA_BIN overrides its folder), and
# one markdown table: tokens/s of each, the ratio (> 1: loom is faster), and loom's tg GB/s with its
# fraction of the read bandwidth `loom bench` measures in the same run.
set -euo pipefail

usage() { echo "usage: bench/families.sh [-t \"1 2\"] [-r REPS] [SHAPE...]" >&2; exit 2; }
THREADS="1 2"
REPS=3
while getopts "t:r:h" opt; do
  case $opt in
    t) THREADS=$OPTARG ;;
    r) REPS=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
SHAPES=("$@")
[[ ${#SHAPES[@]} -gt 0 ]] || SHAPES=(qwen35-0.8b lfm2-1.2b smollm3-3b)

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOOM=${LOOM:-$ROOT/build/bin/loom}
MAV=${MAV:-$ROOT/build/bin/make_arch_variant}
LLAMA_BIN=${LLAMA_BIN:-$HOME/.cache/loom-llama-cpp/build/bin}
LLAMA_SRC=${LOOM_LLAMA_CPP_SRC:-$HOME/.cache/loom-llama-cpp/src}
MODELS=${LOOM_BENCH_MODELS:-$HOME/.cache/loom-bench-models}
DEPTH=${DEPTH:-4096}
for b in "$LOOM" "$MAV" "$LLAMA_BIN/llama-bench" "$LLAMA_BIN/llama-quantize"; do
  [[ -x "$b" ]] || { echo "families.sh: $b is missing (cmake --build build; ../shared/tools/build-llama-cpp.sh)" >&2; exit 1; }
done
mkdir -p "$MODELS"

quant_of() { [[ $1 == gpt-oss-* ]] && echo MXFP4_MOE || echo Q4_K_M; }

model_for() {  # SHAPE -> path of its quantized file (quant_of), made when missing
  local shape=$1 q out vocab extra=""
  q=$(quant_of "$shape")
  out="$MODELS/$1-${q,,}.gguf"
  if [[ ! -f "$out" ]]; then
    case $shape in
      qwen35-*) vocab=ggml-vocab-qwen35.gguf ;;
      lfm2-*) vocab=ggml-vocab-gpt-neox.gguf; extra=vocab=65536 ;;
      smollm3-*) vocab=ggml-vocab-llama-bpe.gguf ;;
      gemma4-*) vocab=ggml-vocab-gemma-4.gguf ;;
      ministral3-*) vocab=ggml-vocab-llama-bpe.gguf; extra=vocab=131072 ;;
      qwen3moe-*) vocab=ggml-vocab-qwen2.gguf ;;
      gpt-oss-*) vocab=ggml-vocab-qwen2.gguf; extra=vocab=201088 ;;
      *) echo "families.sh: unknown shape $shape" >&2; exit 2 ;;
    esac
    [[ -f "$LLAMA_SRC/models/$vocab" ]] || { echo "families.sh: $LLAMA_SRC/models/$vocab missing (scripts/fetch-llama-cpp-src.sh)" >&2; exit 1; }
    echo "making $out ..." >&2
    # shellcheck disable=SC2086
    "$MAV" bench-shape "$shape" "$LLAMA_SRC/models/$vocab" "$MODELS/$shape-f16.gguf" $extra >&2
    "$LLAMA_BIN/llama-quantize" "$MODELS/$shape-f16.gguf" "$out" "$q" "$(nproc)" > "$MODELS/$shape-quantize.log" 2>&1
    rm -f "$MODELS/$shape-f16.gguf"
  fi
  echo "$out"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) core(s); CPU: $(lscpu | sed -n 's/^Model name: *//p')"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=()
for shape in "${SHAPES[@]}"; do
  m=$(model_for "$shape")
  for t in $THREADS; do
    "$LOOM" bench -m "$m" -t "$t" -p 512 -n 128 -r "$REPS" --json > "$tmp/l0.json" 2>/dev/null
    "$LLAMA_BIN/llama-bench" -m "$m" -t "$t" -p 512 -n 128 -r "$REPS" -o json > "$tmp/p0.json" 2>/dev/null
    if [[ "$t" == "${THREADS##* }" ]]; then  # depth only at the last thread count, one repetition (the fill is long)
      "$LOOM" bench -m "$m" -t "$t" -p 0 -n 128 -r 1 -d "$DEPTH" --bw-mib 0 --json > "$tmp/ld.json" 2>/dev/null
      "$LLAMA_BIN/llama-bench" -m "$m" -t "$t" -p 0 -n 128 -d "$DEPTH" -r 1 -o json > "$tmp/pd.json" 2>/dev/null
    else
      echo '{"depth":0,"tg_tps":0}' > "$tmp/ld.json"; echo '[]' > "$tmp/pd.json"
    fi
    rows+=("$(node - "$shape $(quant_of "$shape")" "$t" "$tmp/l0.json" "$tmp/ld.json" "$tmp/p0.json" "$tmp/pd.json" <<'JS'
const fs = require('fs')
const [shape, t, l0, ld, p0, pd] = process.argv.slice(2)
const L0 = JSON.parse(fs.readFileSync(l0, 'utf8')), LD = JSON.parse(fs.readFileSync(ld, 'utf8'))
const P = [...JSON.parse(fs.readFileSync(p0, 'utf8')), ...JSON.parse(fs.readFileSync(pd, 'utf8'))]
const peer = (np, ng, nd) => (P.find((e) => e.n_prompt === np && e.n_gen === ng && (e.n_depth ?? 0) === nd) || {}).avg_ts || 0
const depth = LD.depth
const cells = [[L0.pp_tps, peer(512, 0, 0)], [L0.tg_tps, peer(0, 128, 0)], [LD.tg_tps, peer(0, 128, depth)]]
const fmt = ([a, b]) => (a > 0 ? `${a.toFixed(1)} / ${b.toFixed(1)} (**${b > 0 ? (a / b).toFixed(2) : 'n/a'}x**)` : '–')
const bw = L0.mem_bw_gbps > 0 ? `${L0.tg_gbps.toFixed(1)} GB/s = ${(100 * L0.bw_fraction).toFixed(0)} % of ${L0.mem_bw_gbps.toFixed(1)}` : 'n/a'
console.log(`| ${shape} | ${t} | ${cells.map(fmt).join(' | ')} | ${bw} |`)
JS
)")
    echo "${rows[-1]}"
  done
done
echo
echo "| model | threads | pp512 tok/s loom / llama.cpp | tg128 | tg128 @ depth $DEPTH | loom tg read rate |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
