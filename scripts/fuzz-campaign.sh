#!/usr/bin/env bash
# A background fuzzing lane at the lowest priority: scripts/fuzz-campaign.sh TARGET:SECONDS ...
# runs scripts/fuzz.sh for each target in turn (its figures go to build-fuzz/fuzz-log.tsv).
# Start two lanes for two cores, each with `setsid nohup scripts/fuzz-campaign.sh ... &`: a setsid'd
# process gets its own scheduler autogroup, which ignores nice, so the lane lowers its autogroup's
# priority too (writing to /proc/self/autogroup from an interactive shell would lower the shell's).
# Never SIGSTOP a lane: libFuzzer's 20 s per-input timeout counts wall time (false "timeouts").
set -uo pipefail
cd "$(dirname "$0")/.."
echo 19 > /proc/$$/autogroup 2>/dev/null || true
renice -n 19 $$ >/dev/null 2>&1 || true
for ts in "$@"; do
  t=${ts%%:*}; s=${ts##*:}
  echo "$(date -u +%T) start $t $s"
  ./scripts/fuzz.sh --jobs 1 --seconds "$s" "$t"
  echo "$(date -u +%T) done $t rc=$?"
done
