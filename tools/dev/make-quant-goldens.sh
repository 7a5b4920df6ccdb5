#!/usr/bin/env bash
# Goldens of issue 27's weight types: ../shared's kq source model (synth-llama-kq-f32, n_embd 256,
# rows of 256/768) quantized by real llama-quantize with an importance matrix from real
# llama-imatrix, each type pure (--pure) and as its llama-quantize file type (the mix), then run by
# real llama.cpp (tools/dev/llama-ref's ref_dump golden: last-prompt logits and teacher-forced
# steps). Writes tests/data/quant-golden/: the imatrix, SHA256SUMS of llama-quantize's files (loom
# quantize must write the same bytes) and the goldens; the quantized files themselves are not
# kept (tests/model/test_quant_golden_new.cpp makes them with loom quantize).
# Needs: ../shared/tools/build-llama-cpp.sh llama-quantize llama-imatrix, and tools/dev/llama-ref/build.sh.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${LOOM_LLAMA_DIR:-$HOME/.cache/loom-llama-cpp}/build/bin
shared=${LOOM_SHARED:-$repo/../shared}
src=$shared/golden/kq/synth-llama-kq-f32.gguf
out=$repo/tests/data/quant-golden
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$out"
"$bin/llama-imatrix" -m "$src" -f calibration.txt -o kq-imatrix.gguf -c 64 -t 1 --no-ppl > "$tmp/imatrix.log" 2>&1
: > SHA256SUMS
for t in IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M TQ1_0 TQ2_0 MXFP4_MOE Q1_0 Q2_0; do
  lower=$(echo "$t" | tr 'A-Z' 'a-z')
  for variant in mix pure; do
    name=kq-$lower-$variant
    flags=(--imatrix kq-imatrix.gguf)
    [ "$variant" = pure ] && flags+=(--pure)
    "$bin/llama-quantize" "${flags[@]}" "$src" "$tmp/$name.gguf" "$t" 1 > "$tmp/$name.log" 2>&1 || { echo "$name: llama-quantize failed" >&2; tail -3 "$tmp/$name.log" >&2; continue; }
    (cd "$tmp" && sha256sum "$name.gguf") >> SHA256SUMS
    "$bin/loom-ref-dump" golden "$tmp/$name.gguf" . "$name" --prompt "Once upon a time" \
      --prompt "The quick brown fox jumps over the lazy dog because it wanted to see" --gen 8 > /dev/null 2>> "$tmp/dump.log"
  done
done
echo "wrote $out"
