#!/usr/bin/env bash
# loom as a library, end to end: install the build into a scratch prefix; build tests/downstream
# with find_package (shared and static) and story.c with pkg-config; run all three on stories260K
# and compare with llama.cpp's golden story; build the .deb with CPack, unpack it (dpkg -x) and
# run its loom. Usage: run.sh BUILD_DIR [SHARED_DIR]
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
shared=${2:-${LOOM_SHARED:-$src/../shared}}
model="$shared/models/stories260K.gguf"
[ -f "$model" ] || { echo "run.sh: $model not found (set LOOM_SHARED)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/loom-downstream.XXXXXX")
trap 'rm -rf "$work"' EXIT
want=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print(r['prompt']); print(len(r['greedy_ids'])); print(r['greedy_text'])" "$shared/golden/stories260K.json")
prompt=$(sed -n 1p <<<"$want"); n=$(sed -n 2p <<<"$want"); text=$(sed -n '3,$p' <<<"$want")
check() {  # NAME OUTPUT: the output, less SPM's leading space, is the golden text
  local got="${2# }"
  if [ "$got" != "$text" ]; then echo "FAIL $1: got [$got] want [$text]" >&2; exit 1; fi
  echo "ok $1"
}

cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in bin/loom include/loom/loom.h include/loom/loom_serve.h include/loom/loom.hpp lib/libloom.a lib/cmake/loom/loomConfig.cmake lib/pkgconfig/loom.pc; do
  [ -e "$work/prefix/$f" ] || { echo "FAIL: $f not installed" >&2; exit 1; }
done
ls "$work/prefix"/lib/libloom.so.* >/dev/null

# docs/api.md's C++ example (loom.hpp), extracted: built below with find_package and pkg-config.
awk '/^```cpp$/{n++; if (n==1) {on=1; next}} /^```$/{on=0} on' "$src/docs/api.md" > "$work/example.cpp"
grep -q "int main" "$work/example.cpp" || { echo "FAIL: no example in docs/api.md" >&2; exit 1; }

# find_package: nothing from the source tree on the include path (the prefix only).
cmake -S "$src/tests/downstream" -B "$work/ds" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release \
      -DLOOM_EXAMPLE="$work/example.cpp" >/dev/null
cmake --build "$work/ds" -j2 >/dev/null
check find_package-shared "$(LD_LIBRARY_PATH="$work/prefix/lib" "$work/ds/story_shared" "$model" "$prompt" "$n" 2>/dev/null)"
check find_package-static "$("$work/ds/story_static" "$model" "$prompt" "$n" 2>/dev/null)"
check find_package-cpp-example "$(LD_LIBRARY_PATH="$work/prefix/lib" "$work/ds/example" "$model" "$prompt" 2>/dev/null)"
# The shared build really uses the installed libloom.so.
libs=$(LD_LIBRARY_PATH="$work/prefix/lib" ldd "$work/ds/story_shared")
grep -q "$work/prefix/lib/libloom.so.0" <<<"$libs" || { echo "FAIL: story_shared does not load the installed libloom.so: $libs" >&2; exit 1; }

# pkg-config, from a plain C compiler command line.
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
cc -std=c99 -O2 -o "$work/story_pc" "$src/tests/downstream/story.c" $(pkg-config --cflags --libs loom)
check pkg-config-shared "$(LD_LIBRARY_PATH="$work/prefix/lib" "$work/story_pc" "$model" "$prompt" "$n" 2>/dev/null)"
c++ -O2 -x c -std=c99 -c -o "$work/story.o" "$src/tests/downstream/story.c" $(pkg-config --cflags loom)
c++ -o "$work/story_pc_static" "$work/story.o" -Wl,-Bstatic $(pkg-config --libs-only-L loom) -lloom -Wl,-Bdynamic $(pkg-config --static --libs loom | sed 's/-lloom//')
check pkg-config-static "$("$work/story_pc_static" "$model" "$prompt" "$n" 2>/dev/null)"

c++ -std=c++17 -Wall -Wextra -Werror -o "$work/example" "$work/example.cpp" $(pkg-config --cflags --libs loom)
check docs-api-example-pkg-config "$(LD_LIBRARY_PATH="$work/prefix/lib" "$work/example" "$model" "$prompt" 2>/dev/null)"

# The .deb: build, check its dependencies, unpack, run.
(cd "$build" && cpack -G DEB -B "$work/deb" >/dev/null)
deb=$(ls "$work"/deb/loom_*.deb)
deps=$(dpkg-deb -f "$deb" Depends)
[ -n "$deps" ] || { echo "FAIL: the .deb has no Depends" >&2; exit 1; }
for d in libhwy libpcre2-8 libstdc++6 libc6; do
  grep -q "$d" <<<"$deps" || { echo "FAIL: the .deb does not depend on $d ($deps)" >&2; exit 1; }
done
dpkg -x "$deb" "$work/root"
check deb-loom "$(LD_LIBRARY_PATH="$work/root/usr/lib" "$work/root/usr/bin/loom" generate -m "$model" -p "$prompt" -n "$n" --temp 0 -t 1 2>/dev/null)"
version=$(sed -n 's/^project(loom VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
"$work/root/usr/bin/loom" --version | grep -q "loom $version (git " || { echo "FAIL: loom --version (want $version)" >&2; exit 1; }
echo "downstream: all passed ($(basename "$deb"): Depends: $deps)"
