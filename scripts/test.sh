#!/usr/bin/env bash
# Installs what is missing, builds if needed and runs the whole test suite (CTest prints the
# summary line). Test data comes from ../shared beside the repository or $LOOM_SHARED.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
cd build
ctest --output-on-failure -j"$jobs" "$@"
