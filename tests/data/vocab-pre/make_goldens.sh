#!/usr/bin/env bash
# Remakes goldens.json and pretokens.json. goldens.json: llama.cpp's tokenization of cases.txt under every BPE pre-tokenizer name
# that llama.cpp's src/llama-vocab.cpp names (and the "gemma4" tokenizer model), each with a
# vocabulary made by tools/dev/make_vocab_pre from one of llama.cpp's own vocab files:
# models/ggml-vocab-gemma-4.gguf for the SentencePiece-style presets (gemma4,
# granite-embed-multi-311m, sarvam-moe; whitespace with the "whitespace" tokenizer model, as
# llama.cpp's BPE asserts on a pre-token with a space otherwise), models/ggml-vocab-llama-bpe.gguf
# for the others.
# Usage (from the repository root, after `cmake --build build --target make_vocab_pre` and
# tools/dev/llama-ref/build.sh):
#   bash tests/data/vocab-pre/make_goldens.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${LOOM_LLAMA_CPP_SRC:-$HOME/.cache/loom-llama-cpp/src}
ref=${LOOM_REF_DUMP:-$HOME/.cache/loom-llama-cpp/build/bin/loom-ref-dump}
gen=${MAKE_VOCAB_PRE:-build/bin/make_vocab_pre}
[ -x "$gen" ] || gen=$(find build -name make_vocab_pre -type f -perm -u+x | head -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The names, in llama_vocab::impl::load's order.
names=$(grep -o 'tokenizer_pre == "[^"]*"' "$src/src/llama-vocab.cpp" | sed 's/.*== "//; s/"$//' | awk '!seen[$0]++')
spm_style="gemma4 granite-embed-multi-311m sarvam-moe"
mkdir -p "$tmp/bpe" "$tmp/spm" "$tmp/model" "$tmp/ws" "$tmp/out"
bpe_names=() spm_names=()
for n in $names; do
  if [ "$n" = whitespace ]; then continue; fi
  if [[ " $spm_style " == *" $n "* ]]; then spm_names+=("$n"); else bpe_names+=("$n"); fi
done
"$gen" "$src/models/ggml-vocab-llama-bpe.gguf" "$tmp/bpe" gpt2 "${bpe_names[@]}"
"$gen" "$src/models/ggml-vocab-gemma-4.gguf" "$tmp/spm" gpt2 "${spm_names[@]}"
"$gen" "$src/models/ggml-vocab-gemma-4.gguf" "$tmp/model" gemma4 gemma4
"$gen" "$src/models/ggml-vocab-gemma-4.gguf" "$tmp/ws" whitespace whitespace
for n in "${bpe_names[@]}"; do "$ref" tokenize "$tmp/bpe/$n.gguf" "$here/cases.txt" "$tmp/out/bpe.$n.json" 2>/dev/null; done
for n in "${spm_names[@]}"; do "$ref" tokenize "$tmp/spm/$n.gguf" "$here/cases.txt" "$tmp/out/spm.$n.json" 2>/dev/null; done
"$ref" tokenize "$tmp/model/gemma4.gguf" "$here/cases.txt" "$tmp/out/model.gemma4.json" 2>/dev/null
"$ref" tokenize "$tmp/ws/whitespace.gguf" "$here/cases.txt" "$tmp/out/ws.whitespace.json" 2>/dev/null
python3 "$here/collect_goldens.py" "$here/cases.txt" "$tmp/out" $names > "$here/goldens.json"
echo "$here/goldens.json"
# Pre-tokens: llama.cpp's unicode_regex_split with the regex list of each of loom's presets.
"$gen" --regexes "$tmp/regexes.json"
"$ref" split "$tmp/regexes.json" "$here/cases.txt" "$tmp/split.json"
python3 "$here/collect_pretokens.py" "$tmp/split.json" > "$here/pretokens.json"
echo "$here/pretokens.json"
