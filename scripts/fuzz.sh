#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, in build-fuzz/) and runs each for a bounded
# time: scripts/fuzz.sh [--seconds N] [--jobs J] [TARGET...]   (default: every target, 60 s each).
#
# Each target grows a working corpus in build-fuzz/corpus/TARGET, starting from the seeds in
# tests/fuzz/corpus/TARGET (and, for a few targets, the repository's test models), with the
# dictionary tests/fuzz/dict/TARGET.dict when there is one. A crash leaves its input in
# build-fuzz/crashes/TARGET/; copy it to tests/fuzz/crashes/TARGET/ with the fix, so CTest
# replays it forever. Each run appends "date target seconds executions crashes" to
# build-fuzz/fuzz-log.tsv (the figures of docs/reliability.md). Exit status 1 when a target crashed.
# LOOM_FUZZ_TIMEOUT (seconds, default 20) is libFuzzer's per-input limit, which counts wall time: a
# lane at the lowest priority on a busy machine wants a longer one, or starvation reads as a hang.
# LOOM_FUZZ_QUICK=1 builds in build-fuzz-quick/ at -O0 instead (CI's few seconds per target: the
# build is what costs there, about 40 % less CPU; campaigns want build-fuzz/'s -O1 speed).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
jobs=2
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(gguf model_load tokenizer grammar json_schema jinja chat_template state adapter capi server_request http_parser)
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/install-deps.sh --fuzz installs it and libFuzzer)" >&2; exit 2; }
dir=build-fuzz
quick=OFF
if [ "${LOOM_FUZZ_QUICK:-0}" = 1 ]; then dir=build-fuzz-quick; quick=ON; fi
if [ ! -f "$dir"/CMakeCache.txt ]; then
  CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DLOOM_FUZZ=ON -DLOOM_FUZZ_O0=$quick \
    -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$dir" -j"$jobs" --target $(printf 'fuzz_%s ' "${targets[@]}")

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=0
for t in "${targets[@]}"; do
  work=$dir/corpus/$t
  crashes=$dir/crashes/$t
  mkdir -p "$work" "$crashes"
  seeds=(tests/fuzz/corpus/"$t")
  case "$t" in gguf|model_load) seeds+=(tests/data) ;; esac
  args=(-max_total_time="$seconds" -timeout="${LOOM_FUZZ_TIMEOUT:-20}" -rss_limit_mb=4096 -print_final_stats=1
        -artifact_prefix="$crashes/")
  [ -f tests/fuzz/dict/"$t".dict ] && args+=(-dict=tests/fuzz/dict/"$t".dict)
  case "$t" in
    gguf|model_load) args+=(-max_len=2000000) ;;
    adapter) args+=(-max_len=200000) ;;
    state) args+=(-max_len=100000) ;;
    *) args+=(-max_len=16384) ;;
  esac
  # Findings: crash-, leak-, timeout-, oom- files (libFuzzer also saves slow-unit- files there).
  findings() { find "$crashes" -type f ! -name 'slow-unit-*' | wc -l; }
  before=$(findings)
  log=$dir/last-$t.log
  set +e
  t0=$SECONDS
  "$dir"/bin/fuzz_"$t" "${args[@]}" "$work" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  ran=$(( SECONDS - t0 ))
  [ "$ran" -gt "$seconds" ] && ran=$seconds  # start-up (loading the corpus) is not fuzzing time
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  new=$(( $(findings) - before ))
  # The seconds it ran (a crash stops it early), not the seconds asked for.
  printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$ran" "${execs:-0}" "$new" >> "$dir"/fuzz-log.tsv
  printf 'fuzz %-15s %5ss %10s execs  corpus %5s  crashes %s\n' "$t" "$ran" "${execs:-?}" \
    "$(find "$work" -type f | wc -l)" "$new"
  if [ $rc -ne 0 ] || [ "$new" -gt 0 ]; then
    failed=1
    echo "fuzz.sh: $t failed (exit $rc); log: $log, inputs: $crashes/" >&2
    grep -m5 -E 'ERROR|SUMMARY|fuzz check failed|runtime error|deadly signal' "$log" >&2 || true
  fi
done
exit $failed
