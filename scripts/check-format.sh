#!/usr/bin/env bash
# Checks that the tree's C and C++ sources are as .clang-format writes them, with Debian 12's
# clang-format-14 (pinned in install-deps.sh: other versions format some constructs differently).
# --fix formats them instead. Generated tables and test data are left as they are.
# Usage: check-format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=${CLANG_FORMAT:-clang-format-14}
command -v "$fmt" >/dev/null || { echo "check-format: $fmt not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-format: not a git checkout; nothing to check"
  exit 0
fi
mapfile -t files < <(git ls-files -- src tools bench tests include bindings/node/src |
  grep -E '\.(c|cc|cpp|h|hpp)$' | grep -v -e 'unicode_tables\.cpp$' -e 'iq_grids\.cpp$' -e '/data/')
if [ "${1:-}" = --fix ]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
if ! out=$("$fmt" --dry-run -Werror "${files[@]}" 2>&1); then
  grep 'error:' <<<"$out" | cut -d: -f1 | sort -u | sed 's/^/  not formatted: /'
  echo "check-format: run scripts/check-format.sh --fix (or git clang-format-14 on your change)" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
