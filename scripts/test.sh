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
# Every fuzz target for a few seconds under ASan + UBSan (clang, build-fuzz-quick/ at -O0, which
# builds faster than build-fuzz/'s campaigns at -O1; docs/reliability.md),
# after the suite has replayed the seed corpora and crash inputs (label fuzz). Skipped when ctest
# arguments select tests; LOOM_FUZZ_SECONDS=0 skips it too.
fuzz_seconds="${LOOM_FUZZ_SECONDS:-3}"
# Leaks fail the run too (LeakSanitizer, as in the longer campaigns).
if [ $# -eq 0 ] && [ "$fuzz_seconds" != 0 ]; then
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}" LOOM_FUZZ_QUICK=1 \
    ./scripts/fuzz.sh --seconds "$fuzz_seconds" --jobs "$jobs"
fi
