#!/usr/bin/env bash
# Builds ref_dump against the llama.cpp that ../../../../shared/tools/build-llama-cpp.sh built
# (default ~/.cache/loom-llama-cpp; its static libraries and headers), and quant_ref.cpp
# (loom-quant-ref: ggml's block-format arithmetic, see tests/data/quant-ref/README.md) beside it.
# Usage: build.sh [OUT] (loom-quant-ref goes to $LOOM_QUANT_REF_OUT, default next to OUT's default)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
llama=${LOOM_LLAMA_DIR:-$HOME/.cache/loom-llama-cpp}
out=${1:-$llama/build/bin/loom-ref-dump}
b=$llama/build
g++ -std=c++17 -O2 -march=native -mno-amx-int8 -mno-amx-tile -mno-amx-bf16 -I"$llama/src/include" -I"$llama/src/ggml/include" \
  "$here/ref_dump.cpp" -o "$out" \
  "$b/src/libllama.a" "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" "$b/ggml/src/libggml-base.a" \
  -fopenmp -lpthread -ldl -lm
echo "$out"
qout=${LOOM_QUANT_REF_OUT:-$b/bin/loom-quant-ref}
g++ -std=c++17 -O2 -march=native -mno-amx-int8 -mno-amx-tile -mno-amx-bf16 -I"$llama/src/ggml/include" \
  "$here/quant_ref.cpp" -o "$qout" \
  "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" "$b/ggml/src/libggml-base.a" \
  -fopenmp -lpthread -ldl -lm
echo "$qout"
g++ -std=c++17 -O2 -march=native -mno-amx-int8 -mno-amx-tile -mno-amx-bf16 -I"$llama/src/ggml/include" -I"$llama/src/ggml/src" "$here/iq_ref_dump.cpp" -o "$b/bin/loom-iq-ref-dump" "$b/ggml/src/libggml-cpu.a" "$b/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -lm && echo "$b/bin/loom-iq-ref-dump"  # IQ1/IQ2/IQ3 conformance data (tests/data/quant-ref/iq*.bin)
sout=${LOOM_SAMPLE_REF_OUT:-$b/bin/loom-sample-ref}
g++ -std=c++17 -O2 -I"$llama/src/include" -I"$llama/src/ggml/include" \
  "$here/sample_ref.cpp" -o "$sout" \
  "$b/src/libllama.a" "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" "$b/ggml/src/libggml-base.a" \
  -fopenmp -lpthread -ldl -lm
echo "$sout"
