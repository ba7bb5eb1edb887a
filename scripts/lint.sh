#!/usr/bin/env bash
# Checks formatting (clang-format) and runs clang-tidy over tdist's sources.
#   scripts/lint.sh          check only; non-zero exit if anything is off
#   scripts/lint.sh --fix    reformat in place first
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages clang-format clang-tidy
cd "$ROOT"
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [ "${1:-}" = "--fix" ]; then clang-format -i "${files[@]}"; fi
clang-format --dry-run --Werror "${files[@]}"
configure_and_build >/dev/null
# The torch plugin too (src/torch_plugin/.clang-tidy drops one check that
# reports torch's own headers); its files take a minute each (torch's headers).
mapfile -t sources < <(git ls-files 'src/*.cc' 'examples/*.cc' 'tools/*.cc')
# One clang-tidy per core; the compile database comes from the build.
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$BUILD_DIR" --quiet 2>/dev/null |
  tee "$BUILD_DIR/clang-tidy.log"
! grep -q "warning:" "$BUILD_DIR/clang-tidy.log"
