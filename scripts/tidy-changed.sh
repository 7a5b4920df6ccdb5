#!/usr/bin/env bash
# clang-tidy (.clang-tidy's checks) on the C++ files changed since the merge base with the previous
# release tag (v*), or since the first parent when there is none, working-tree changes included.
# Uses build/compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS); only files it compiles are
# checked (headers through them: diagnostics in a changed header are reported too), at most
# LOOM_TIDY_MAX of them (default 8). Exit 1 on any
# finding. Usage: scripts/tidy-changed.sh [--list] [BUILD_DIR] (--list: print the files, run
# nothing); CLANG_TIDY picks the binary (default clang-tidy-14, Debian 12's, pinned in
# scripts/install-deps.sh); LOOM_TIDY=0 skips.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${LOOM_TIDY:-1}" = 0 ] && exit 0
list=0
if [ "${1:-}" = --list ]; then list=1; shift; fi
build=${1:-build}
tidy=${CLANG_TIDY:-clang-tidy-14}
command -v "$tidy" >/dev/null || { echo "tidy-changed: $tidy not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
[ -f "$build/compile_commands.json" ] || { echo "tidy-changed: no $build/compile_commands.json" >&2; exit 1; }
git rev-parse --git-dir >/dev/null 2>&1 || { echo "tidy-changed: not a git checkout, nothing to compare" >&2; exit 0; }
if tag=$(git describe --tags --abbrev=0 --match 'v*' HEAD 2>/dev/null); then
  base=$(git merge-base "$tag" HEAD)
else
  base=$(git rev-parse -q --verify HEAD^1 || true)
  [ -n "$base" ] || { echo "tidy-changed: no previous release tag and no parent commit" >&2; exit 0; }
fi
mapfile -t changed < <(git diff --name-only --diff-filter=ACMR "$base" -- '*.cpp' '*.cc' '*.h' '*.hpp')
# The compiled files among them; a changed header is checked through one file that includes it.
mapfile -t files < <(python3 - "$build/compile_commands.json" "${changed[@]}" <<'PY'
import json, os, re, sys
db = {os.path.relpath(e["file"]) for e in json.load(open(sys.argv[1]))}
changed = sys.argv[2:]
out = [f for f in changed if f in db and not f.startswith("tests/")]
for h in (f for f in changed if f.endswith((".h", ".hpp")) and not f.startswith("tests/")):
    name = h[4:] if h.startswith("src/") else os.path.basename(h)
    users = sorted(f for f in db if not f.startswith("tests/") and os.path.exists(f)
                   and re.search(r'#include "' + re.escape(name) + '"', open(f, errors="replace").read()))
    out += [u for u in users[:1] if u not in out]
print("\n".join(out))
PY
)
if [ ${#files[@]} -eq 0 ] || [ -z "${files[0]}" ]; then
  echo "tidy-changed: no compiled C++ file changed since ${tag:-$base}"
  exit 0
fi
headers=$(printf '%s\n' "${changed[@]}" | grep -E '\.(h|hpp)$' | sed 's/[.[\*^$()+?{|]/\\&/g' | paste -sd'|' || true)
filter="^$(pwd)/(${headers:-no-header-changed})$"
echo "tidy-changed: ${#files[@]} file(s) changed since ${tag:-${base:0:12}}"
# At most LOOM_TIDY_MAX files (default 8: about a minute on two cores); the rest are named.
max=${LOOM_TIDY_MAX:-8}
if [ ${#files[@]} -gt "$max" ]; then
  echo "tidy-changed: checking the first $max; not checked: ${files[*]:$max}"
  files=("${files[@]:0:$max}")
fi
if [ $list = 1 ]; then printf '  %s\n' "${files[@]}"; echo "  header filter: $filter"; exit 0; fi
jobs=$(nproc 2>/dev/null || echo 2)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf '%s\n' "${files[@]}" | xargs -P "$jobs" -I{} "$tidy" -p "$build" --quiet --header-filter="$filter" {} >"$log" 2>/dev/null || true
if grep -qE '(warning|error): ' "$log"; then
  grep -E -A3 '(warning|error): ' "$log"
  echo "tidy-changed: findings above (.clang-tidy lists the checks)" >&2
  exit 1
fi
echo "tidy-changed: clean"
