#!/usr/bin/env bash
# Builds ref_dump against the llama.cpp that ../../../../shared/tools/build-llama-cpp.sh built
# (default ~/.cache/loom-llama-cpp; its static libraries and headers). Usage: build.sh [OUT]
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
