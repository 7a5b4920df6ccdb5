#!/bin/bash
# The tensor types llama-quantize gives the mixture-of-experts test files under the k-quant and
# legacy mixes (tests/data/moe-quant-types.json, checked by MoeQuantize.TypesAreLlamaQuantizes in
# tests/model/test_moe.cpp): its rules that depend on n_expert (attn_v / attn_k to Q8_0 and
# attn_output to Q5_K with 8 experts, ffn_*_exps by the layer in their name), the fallbacks of rows
# shorter than a block, the router kept.
#
#   tools/dev/moe-quant-types.sh LLAMA_QUANTIZE LOOM OUT.json MODEL.gguf...
#
# LLAMA_QUANTIZE: ~/.cache/loom-llama-cpp/build/bin/llama-quantize; LOOM: build/bin/loom (only its
# `info --json` reads the results). The json maps "MODEL.gguf" (base name) -> mix -> tensor -> type.
set -euo pipefail
q=$1 loom=$2 out=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mixes="Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K Q4_0 Q5_1 Q8_0 IQ4_XS IQ4_NL"
for m in "$@"; do
  b=$(basename "$m")
  for t in $mixes; do
    "$q" "$m" "$tmp/q.gguf" "$t" 1 >/dev/null 2>&1
    "$loom" info -m "$tmp/q.gguf" --json 2>/dev/null >"$tmp/$b.$t.json"
  done
done
python3 - "$tmp" "$out" "$mixes" "$@" <<'EOF'
import json, os, sys
tmp, out, mixes, models = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]
res = {}
for m in models:
    b = os.path.basename(m)
    res[b] = {}
    for t in mixes:
        info = json.load(open(os.path.join(tmp, f"{b}.{t}.json")))
        res[b][t.lower()] = {x["name"]: x["type"] for x in info["tensors"]}
json.dump(res, open(out, "w"), sort_keys=True, separators=(",", ":"))
EOF
