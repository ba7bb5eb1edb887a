#!/usr/bin/env bash
# The README's main job: installs what is missing, builds tdist, and runs
# every collective on 4 local ranks under the launcher, checking every
# result and printing its speed (nccl-tests style table, rank 0).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages
setup_python >&2
# The build's progress goes to stderr: stdout carries only rank 0's table
# (each line prefixed "[rank 0]: " by tdistrun), so `scripts/main.sh >
# table.txt` keeps the results alone.
configure_and_build >&2
cd "$ROOT"
exec "$BUILD_DIR/bin/tdistrun" --standalone --nproc-per-node "${NPROC:-4}" \
  "$BUILD_DIR/bin/tdist-bench" --op all --check "$@"
