#!/usr/bin/env bash
# Installs what is missing, builds if needed and runs the whole test suite (CTest prints the
# summary line). Test data comes from ../shared beside the repository or $LOOM_SHARED.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
(cd build && ctest --output-on-failure -j"$jobs" "$@")
[ $# -ne 0 ] || ./scripts/tidy-changed.sh build  # clang-tidy on the C++ files changed since the last release tag (or HEAD~1)
# With LOOM_FUZZ_SECONDS=N (N > 0): every fuzz target for N seconds under ASan + UBSan (clang,
# build-fuzz-quick/ at -O0; docs/reliability.md), after the suite has replayed the seed corpora and
# crash inputs (label fuzz). Off by default: its second, instrumented build of the library (about
# 700 CPU-seconds) kept CI over its 20 minutes; the replays and the sanitizer twins stay in the suite.
# Skipped when ctest arguments select tests.
fuzz_seconds="${LOOM_FUZZ_SECONDS:-0}"
# Leaks fail the run too (LeakSanitizer, as in the longer campaigns).
if [ $# -eq 0 ] && [ "$fuzz_seconds" != 0 ]; then
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}" LOOM_FUZZ_QUICK=1 \
    ./scripts/fuzz.sh --seconds "$fuzz_seconds" --jobs "$jobs"
fi
