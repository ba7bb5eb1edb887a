# Shared by scripts/main.sh and scripts/test.sh: installs what the build
# needs (Debian 12, as root) and configures + builds tdist into $BUILD_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
# Debian packages the build and the tests need; keep the README in step.
# The first line is the C++ core; the second the Python package and its
# tests; the third the PyTorch plugin (each optional layer is skipped by
# CMake when its packages are missing, see README); the fourth what the
# tests of other launchers and of several hosts use (mpirun; a private
# Slurm cluster with munge for srun; ip and tc for tools/testbed.py;
# matplotlib for tools/multihost_compare.py's chart), without which those
# tests skip and say why.
PACKAGES=(cmake ninja-build g++ libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libssl-dev
  python3-dev pybind11-dev python3-numpy python3-pytest
  python3-torch libtorch-dev
  openmpi-bin slurmd slurmctld slurm-client munge iproute2 python3-matplotlib)

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

configure_and_build() {
  local extra=()
  [ -n "${TDIST_SANITIZE:-}" ] && extra+=("-DTDIST_SANITIZE=$TDIST_SANITIZE")
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "${extra[@]}" >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)"
}
