#!/usr/bin/env bash
# Fetches llama.cpp's source (release v0.5.0, as bundled by the npm package node-llama-cpp 3.22.1:
# the same source ../shared/tools/build-llama-cpp.sh builds) into ~/.cache/loom-llama-cpp/src, or
# DIR, without building it. Tests read facts from it: its own tokenizer tests
# (models/ggml-vocab-*.gguf with .inp/.out, tests/vocab/test_vocab_golden.cpp). Idempotent; needs
# only npm's registry. Prints the source folder. Tests that need it skip with a message when it is
# missing, so a failure here is reported but does not stop scripts/install-deps.sh.
#
#   scripts/fetch-llama-cpp-src.sh [DIR]      (default ~/.cache/loom-llama-cpp)
set -euo pipefail
dir=${1:-$HOME/.cache/loom-llama-cpp}
mkdir -p "$dir"
bundle="$dir/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle"
if [ ! -f "$bundle" ]; then
  npm install --prefix "$dir/npm" --no-audit --no-fund --omit=optional --ignore-scripts --loglevel=error \
    node-llama-cpp@3.22.1 >&2
fi
if [ ! -d "$dir/src/.git" ]; then
  rm -rf "$dir/src.tmp"
  git clone -q "$bundle" "$dir/src.tmp"
  mv "$dir/src.tmp" "$dir/src"
fi
echo "$dir/src"
