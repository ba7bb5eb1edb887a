#!/usr/bin/env bash
# The README's test command: installs what is missing, builds tdist and runs
# the whole test suite with ctest (every test has a deadline).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages
configure_and_build
cd "$BUILD_DIR"
# ThreadSanitizer: known false positives (tests/tsan.supp says why).
if [[ ${TDIST_SANITIZE:-} == *thread* ]]; then
  export TSAN_OPTIONS="suppressions=$ROOT/tests/tsan.supp ${TSAN_OPTIONS:-}"
fi
ctest --output-on-failure -j "$(nproc)" --timeout 300 "$@"
