#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, docs/fuzzing.md) with clang into
# build-fuzz and runs each for SECONDS (default 30) from its seed corpus.
# Exits non-zero if any target crashes, printing the input that crashed it.
#   scripts/fuzz.sh [SECONDS]          FUZZ_DIR=... keeps the grown corpora there
#   scripts/fuzz.sh --build            only builds them (scripts/test.sh, before the tests)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

BUILD_ONLY=0
if [[ ${1:-} == --build ]]; then
  BUILD_ONLY=1
  shift
fi
SECONDS_PER_TARGET=${1:-30}
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
TARGETS=(store_protocol tcp_wire init_method object_codec)

# Only what these targets need: they link the store, rendezvous and
# transport layers, not GoogleTest, Python or torch. libclang-rt-14-dev
# holds libFuzzer and the sanitizer runtimes.
PACKAGES=(cmake ninja-build clang libclang-rt-14-dev)
install_packages

CC=clang CXX=clang++ cmake -S "$ROOT" -B "$FUZZ_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTDIST_FUZZ=ON -DTDIST_BUILD_TESTS=OFF -DTDIST_BUILD_PYTHON=OFF -DTDIST_BUILD_TORCH=OFF >/dev/null
cmake --build "$FUZZ_BUILD_DIR" -j "$(nproc)" --target "${TARGETS[@]/#/fuzz_}"
((BUILD_ONLY)) && exit 0

# The repository's corpora are seeds only: a run grows a copy of them.
work=${FUZZ_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tdist-fuzz.XXXXXX")}
mkdir -p "$work"
echo "tdist: fuzzing for ${SECONDS_PER_TARGET}s per target in $work" >&2
rc=0
for target in "${TARGETS[@]}"; do
  mkdir -p "$work/$target/corpus" "$work/$target/crashes"
  cp -n "$ROOT/tests/fuzz/corpus/$target/"* "$work/$target/corpus/" 2>/dev/null || true
  log="$work/$target/fuzz.log"
  # -artifact_prefix: crashing inputs land in crashes/; -error_exitcode keeps
  # a finding distinct from a failure to start.
  if "$FUZZ_BUILD_DIR/bin/fuzz_$target" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/$target/crashes/" "$work/$target/corpus" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz_$target: ok, ${runs:-?} executions in ${SECONDS_PER_TARGET}s"
  else
    rc=1
    echo "fuzz_$target: FAILED (log: $log)"
    tail -n 40 "$log"
    for input in "$work/$target/crashes/"*; do
      [ -e "$input" ] && echo "fuzz_$target: crashing input: $input (replay: $FUZZ_BUILD_DIR/bin/fuzz_$target $input)"
    done
  fi
done
exit "$rc"
