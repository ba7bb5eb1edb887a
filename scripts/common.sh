# Shared by scripts/main.sh and scripts/test.sh: installs what the build
# needs (Debian 12, as root) and configures + builds tdist into $BUILD_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
# Debian packages the build and the tests need; keep the README in step.
# The first line is the C++ core; the second what the Python side needs of
# Debian (its headers, venv and pip; the Python packages themselves, torch
# included, come from the package index: python/requirements-dev.txt); the
# third what the tests of other launchers and of several hosts use (mpirun;
# a private Slurm cluster with munge for srun; ip and tc for
# tools/testbed.py), without which those tests skip and say why.
PACKAGES=(cmake ninja-build g++ libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libssl-dev pkg-config
  python3-dev python3-venv python3-pip
  openmpi-bin slurmd slurmctld slurm-client munge iproute2)

# The interpreter the Python package and the torch plugin are built for and
# tested with: a virtual environment (TDIST_VENV, default .venv in the
# clone) made from Python 3.11 (python3 if that is 3.11, else python3.11),
# with python/requirements-dev.txt installed. torch 2.13.0's CPU build for
# Python 3.11 is what pip installs there.
VENV=${TDIST_VENV:-$ROOT/.venv}
PYTHON=$VENV/bin/python

install_packages() {
  local missing=()
  for pkg in "${PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) && return 0
  echo "tdist: installing ${missing[*]}" >&2
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

setup_python() {
  local base=""
  for candidate in python3 python3.11; do
    if command -v "$candidate" >/dev/null &&
      [ "$("$candidate" -c 'import sys; print(sys.version_info[:2] == (3, 11))')" = True ]; then
      base=$(command -v "$candidate")
      break
    fi
  done
  if [ -z "$base" ]; then
    echo "tdist: Python 3.11 not found (python3 or python3.11); torch 2.13.0's CPU build is for 3.11" >&2
    return 1
  fi
  if [ ! -x "$PYTHON" ]; then
    echo "tdist: making the virtual environment $VENV from $base" >&2
    "$base" -m venv "$VENV" >&2
  fi
  local req=$ROOT/python/requirements-dev.txt stamp=$VENV/.tdist-requirements
  if ! cmp -s "$req" "$stamp"; then
    echo "tdist: installing python/requirements-dev.txt into $VENV" >&2
    "$PYTHON" -m pip install -q --disable-pip-version-check -r "$req" >&2
    cp "$req" "$stamp"
  fi
}

configure_and_build() {
  local extra=()
  [ -n "${TDIST_SANITIZE:-}" ] && extra+=("-DTDIST_SANITIZE=$TDIST_SANITIZE")
  if [ -x "$PYTHON" ] && [ -z "${TDIST_SANITIZE:-}" ]; then
    # The build goes through pip, as a user's install does (docs/install.md):
    # scikit-build-core configures and builds $BUILD_DIR (tests included)
    # and installs the Python package, the torch plugin and the console
    # scripts into the virtual environment. (A sanitizer build is never
    # installed there: it takes the plain CMake route below.)
    "$PYTHON" -m pip install --no-build-isolation --no-deps --disable-pip-version-check \
      -Cbuild-dir="$BUILD_DIR" -Ccmake.build-type="${BUILD_TYPE:-RelWithDebInfo}" \
      -Ccmake.define.TDIST_BUILD_TESTS=ON -Ccmake.define.TDIST_PYTHON_EXECUTABLE="$PYTHON" \
      -Cbuild.verbose=true "$ROOT" >&2
    return
  fi
  [ -x "$PYTHON" ] && extra+=("-DTDIST_PYTHON_EXECUTABLE=$PYTHON")
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "${extra[@]}" >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}
