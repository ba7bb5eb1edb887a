#!/usr/bin/env bash
# tests/install/test_install.sh BUILD_DIR SOURCE_DIR CXX: see CMakeLists.txt.
set -euo pipefail
build=$1 src=$2 cxx=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/tdist-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/installed" --component cpp >/dev/null
mv "$work/installed" "$work/moved"  # a relocatable package works from anywhere
prefix=$work/moved
for f in bin/tdistrun bin/tdist-bench bin/tdist-trace include/tdist/distributed.h lib/libtdist.so \
         lib/libtdist_common.a lib/cmake/tdist/tdistConfig.cmake lib/pkgconfig/tdist.pc; do
  [[ -e $prefix/$f ]] || { echo "missing after install: $f" >&2; exit 1; }
done

run() {  # run NAME BINARY: 3 ranks, each must report 0 wrong elements
  local out
  out=$("$prefix/bin/tdistrun" --standalone --nproc-per-node 3 "$2" 2>&1) || { echo "$1 failed: $out" >&2; exit 1; }
  for r in 0 1 2; do
    grep -q "rank $r of 3: tdist [0-9.]*, all_reduce sum 6, 0 wrong" <<<"$out" || {
      echo "$1: rank $r did not report a correct sum:" >&2; echo "$out" >&2; exit 1; }
  done
  echo "$1: ok"
}

for kind in shared static; do
  static=OFF; [[ $kind == static ]] && static=ON
  cmake -S "$src/examples/cpp" -B "$work/$kind" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_PREFIX_PATH="$prefix" -DTDIST_EXAMPLE_STATIC=$static >"$work/$kind.log" 2>&1 ||
    { cat "$work/$kind.log" >&2; exit 1; }
  cmake --build "$work/$kind" >>"$work/$kind.log" 2>&1 || { cat "$work/$kind.log" >&2; exit 1; }
  run "find_package, $kind" "$work/$kind/all_reduce_example"
done
if ldd "$work/static/all_reduce_example" | grep -q libtdist; then
  echo "the static build links libtdist.so" >&2; exit 1
fi

# pkg-config: the compiler line alone, as docs/install.md writes it.
# shellcheck disable=SC2046  # pkg-config's flags are words
"$cxx" -O1 -o "$work/pc_example" "$src/examples/cpp/all_reduce_example.cc" \
  $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs tdist)
run "pkg-config" "$work/pc_example"
