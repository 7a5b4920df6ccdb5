#!/usr/bin/env bash
# Regenerates tests/chat/data/llama_cpp_chat_builtins.json: what llama.cpp's built-in chat
# templates (llama_chat_apply_template with a name such as "llama3") produce, from the llama.cpp
# source that ../../../../shared/tools/build-llama-cpp.sh checks out (default
# ~/.cache/loom-llama-cpp/src; only its src/llama-chat.cpp is compiled, nothing else is built).
# Usage: gen_chat_builtins.sh [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
llama=${LOOM_LLAMA_DIR:-$HOME/.cache/loom-llama-cpp}/src
out=${1:-$here/../../../tests/chat/data/llama_cpp_chat_builtins.json}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/extract_chat_template_tests.py" "$llama/tests/test-chat-template.cpp" > "$tmp/cases.json"
g++ -std=c++17 -O1 -I"$llama/include" -I"$llama/ggml/include" -I"$llama/src" \
  "$here/chat_builtins.cpp" "$llama/src/llama-chat.cpp" -o "$tmp/chat_builtins"
"$tmp/chat_builtins" "$tmp/cases.json" > "$out"
echo "$out"
