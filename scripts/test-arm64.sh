#!/usr/bin/env bash
# Cross-compiles loom for AArch64 (cmake/aarch64-linux-gnu.cmake) into build-arm64/ and runs the
# tests under QEMU user-mode emulation, on a Debian 12 x86-64 host. Installs what is missing
# (multiarch arm64 packages; idempotent like install-deps.sh). Extra arguments go to ctest.
#
#   ./scripts/test-arm64.sh                           # -cpu max: NEON, dotprod, SVE, SVE2
#   LOOM_QEMU_CPU=cortex-a53 ./scripts/test-arm64.sh  # ARMv8.0: plain NEON, no dotprod/SVE
#   LOOM_ARM64_FULL=1 ./scripts/test-arm64.sh         # the whole suite (about an hour)
#
# QEMU runs floating-point heavy code a few hundred times slower than the host: the whole suite
# takes about an hour on 2 cores. By default (12-14 minutes with -cpu max, about 6 with
# cortex-a53, plus about 8 for the first build) the script skips the exhaustive sweeps whose code paths other
# tests also cover on AArch64 (LOOM_ARM64_SKIP below) and runs everything else: every unit test
# (base, gguf, quant and the SIMD kernels under each Highway target, ops, attention, vocab,
# sample, chat, context, C API, CLI), the llama.cpp golden conformance tests (tokenizers,
# dequantization, quantization, model logits) with a few representative types of the per-type
# model sweeps, and the ASan fuzz test.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- dependencies ----------------------------------------------------------------------------
host_pkgs=(build-essential cmake pkg-config g++-aarch64-linux-gnu qemu-user nlohmann-json3-dev libcli11-dev)
# The :arm64 runtime (loader, libstdc++, sanitizers) that QEMU loads the test binaries with.
arm_pkgs=(libhwy-dev libgtest-dev libgmock-dev libpcre2-dev libc6 libstdc++6 libasan8 libubsan1)
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
missing=()
for p in "${host_pkgs[@]}" "${arm_pkgs[@]/%/:arm64}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- configure and build ---------------------------------------------------------------------
cpu="${LOOM_QEMU_CPU:-max}"
jobs=$(nproc 2>/dev/null || echo 2)
start=$SECONDS
# The emulated CPU is a cache variable: changing it relinks the tests (test_util embeds the
# emulator command for the CLI tests) and rediscovers them with the new emulator.
cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_BENCH=OFF -DLOOM_QEMU_CPU="$cpu" >/dev/null
cmake --build build-arm64 -j"$jobs"
echo "build: $((SECONDS - start)) s" >&2

# --- test ------------------------------------------------------------------------------------
# Skipped by default (each takes minutes under QEMU; what they check is covered on AArch64 by
# the tests named after the colon):
#  - QuantSimd.VecDotTileMatchesReference: QuantSimdHighway.VecDotTileMatchesReference (each target)
#  - Packed.{ReferenceMatchesVecDotOnOriginalRows,DispatchedMatchesReference}: every packable
#    type, most of them without an AArch64 kernel; the types with one are checked by
#    Packed.DispatchedNeonTypesMatchReference and Packed.Neon* (each of the three copies)
#  - test_quant_simd_force_scalar: QuantSimd.* and QuantSimdHighway.* without the environment
#  - QuantizeModel.RequantizeNeedsPermission: the other QuantizeModel/QuantGoldenQuantize tests
#  - Attention.{ShapesF16Causal,StreamingChunksOverManyKvHeads,KvTypePairs,MasksHideAndBiasCells}:
#    the other Attention.* tests and test_attention_force_scalar (same kernels, smaller sweeps)
#  - ContextInvariants.{QuantizedKvStaysCloseToF16,SeqAddShiftEqualsFreshDecodeOfTheSameTokens}:
#    the other ContextInvariants tests (long decode sweeps)
#  - Models/KQuantGolden other than q4_0, q8_0, q4_k_m, q6_k; Models/KQuantDequantizedTwin other
#    than q4_k_m; KQuantFamily/GoldenSteps on the f32/bf16 models: the same forward pass
#  - Speculative.SeededSampling...: Speculative.GreedyOutput... (the same rounds, greedy)
#  - the TSan twins (test_*_tsan): TSan needs its runtime for arm64 and a memory layout QEMU's
#    user mode does not promise; races are what the x86 TSan suite (scripts/sanitize.sh tsan) checks
# (CTest's regular expressions allow at most 9 groups: one per line.)
skip=(
  '^QuantSimd\.VecDotTileMatchesReference$'
  '^Packed\.(ReferenceMatchesVecDotOnOriginalRows|DispatchedMatchesReference)$'
  '^test_quant_simd_force_scalar$'
  '^QuantizeModel\.RequantizeNeedsPermission$'
  '^Attention\.(ShapesF16Causal|StreamingChunksOverManyKvHeads|KvTypePairs|MasksHideAndBiasCells)$'
  '^ContextInvariants\.(QuantizedKvStaysCloseToF16|SeqAddShiftEqualsFreshDecodeOfTheSameTokens)$'
  '^Models/KQuantGolden\..*/(q2_k|q3_k_[sml]|q4_k_s|q5_k_[sm]|q4_1|q5_0|q5_1|iq4_nl|iq4_xs) '
  '^Models/KQuantDequantizedTwin\..*/(q2_k|q3_k_[sml]|q4_k_s|q5_k_[sm]|q6_k|q4_0|q4_1|q5_0|q5_1|q8_0|iq4_nl|iq4_xs) '
  '^KQuantFamily/GoldenSteps\..*/synth_llama_kq_(f32|bf16) '
  '^Speculative\.SeededSamplingIsPlainDecodingsWhateverTheDraft$'
  '^test_[a-z_]+_tsan$'
)
LOOM_ARM64_SKIP=$(IFS='|'; echo "${skip[*]}")
filter=(-E "$LOOM_ARM64_SKIP")
[ "${LOOM_ARM64_FULL:-0}" != 0 ] && filter=()

echo "running the tests under qemu-aarch64 -cpu $cpu" >&2
start=$SECONDS
cd build-arm64
status=0
ctest --output-on-failure -j"$jobs" --timeout 1500 "${filter[@]}" "$@" || status=$?
echo "tests: $((SECONDS - start)) s under qemu-aarch64 -cpu $cpu" >&2
exit $status
