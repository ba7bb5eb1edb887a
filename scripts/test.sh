#!/usr/bin/env bash
# The README's test command: installs what is missing, builds tdist and runs
# the whole test suite with ctest (every test has a deadline).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages
setup_python
configure_and_build
# The full suite: CI (CI=true) runs every case at its full depth. Elsewhere
# four soak and scale cases run lighter or skip, saying so (README.md,
# "Quick start"), so that a developer's run stays under 10 minutes on 2
# cores; TDIST_FULL_SUITE=1 asks for the full suite anywhere.
if [[ ${CI:-} == true ]]; then
  export TDIST_FULL_SUITE=${TDIST_FULL_SUITE:-1}
fi
# The fuzz targets' clang build belongs to the build too (they run beside the tests).
fuzz_seconds=${TDIST_FUZZ_SECONDS:-10}
if ((fuzz_seconds > 0)); then
  "$ROOT/scripts/fuzz.sh" --build >&2
fi
built=$SECONDS
echo "tdist: built in ${built} s; the tests follow" >&2
cd "$BUILD_DIR"
# ThreadSanitizer: known false positives (tests/tsan.supp says why).
if [[ ${TDIST_SANITIZE:-} == *thread* ]]; then
  export TSAN_OPTIONS="suppressions=$ROOT/tests/tsan.supp ${TSAN_OPTIONS:-}"
fi
rc=0
# The fuzz targets, briefly (docs/fuzzing.md): 10 s each, built above in
# build-fuzz, at nice 10 beside the suite, which leaves a CPU idle now and
# then (its tests wait for processes and deadlines). TDIST_FUZZ_SECONDS=0
# skips them.
fuzz_log=$(mktemp)
fuzz_pid=
if ((fuzz_seconds > 0)); then
  nice -n 10 "$ROOT/scripts/fuzz.sh" "$fuzz_seconds" >"$fuzz_log" 2>&1 &
  fuzz_pid=$!
fi
started=$(mktemp)  # a failed run's log is newer than this (not one left by an older run)
# One test more than the CPUs: much of the suite waits (process start-ups,
# deadlines that tests reach on purpose, Ray and testbed set-ups), and the
# extra entry fills those waits.
ctest --output-on-failure -j "$(($(nproc) + 1))" --timeout 300 "$@" || rc=$?
if ((rc != 0)) && [[ Testing/Temporary/LastTest.log -nt $started ]]; then
  # CI shows only the end of the output: repeat the last lines of every
  # failed test's output there, after ctest's summary.
  echo "=== the end of each failed test's output (from $BUILD_DIR/Testing/Temporary/LastTest.log) ==="
  awk '
    /^[0-9]+\/[0-9]+ Testing: / { name = $0; n = 0; next }
    { lines[n++] = $0 }
    /^Test Failed\./ {
      print "--- " name
      shown = 0  # the lines that say what went wrong, then the last ones
      for (i = 0; i < n && shown < 30; i++)
        if (lines[i] ~ /Failure|Which is|Error|error|assert|FAILED|Traceback|killed|timed out|deadline/) {
          print lines[i]; shown++
        }
      print "..."
      for (i = (n > 25 ? n - 25 : 0); i < n; i++) print lines[i]
    }' Testing/Temporary/LastTest.log
fi
rm -f "$started"
if [[ -n $fuzz_pid ]]; then
  wait "$fuzz_pid" || rc=1
  cat "$fuzz_log"
fi
rm -f "$fuzz_log"
echo "tdist: the tests took $((SECONDS - built)) s after the build" >&2
exit "$rc"
