#!/usr/bin/env bash
# The whole test suite under a sanitizer, in its own build directory:
#   scripts/sanitize.sh asan [CTEST ARGS...]   ASan + UBSan in build-asan/ (every test, label asan)
#   scripts/sanitize.sh tsan [CTEST ARGS...]   TSan in build-tsan/ (every test, label tsan)
# Libraries, tests, the loom binary and the fuzz targets' replays are all instrumented, asserts on.
# Extra arguments go to ctest (e.g. -L unit, -R context, -E server_js).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-}"
case "$kind" in
  asan) sanitize=address ;;
  tsan) sanitize=thread ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [ctest args...]" >&2; exit 2 ;;
esac
shift
dir=build-$kind
jobs="${LOOM_JOBS:-$(nproc 2>/dev/null || echo 2)}"
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DLOOM_SANITIZE=$sanitize -DLOOM_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$dir" -j"$jobs"
# halt_on_error: the first report fails the test. Everything is instrumented, so TSan needs no
# suppressions here (tests/serve/tsan.supp is for test_scheduler_tsan, which instruments only src/serve).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"
cd "$dir"
ctest --output-on-failure -j"$jobs" --timeout 1800 "$@"
