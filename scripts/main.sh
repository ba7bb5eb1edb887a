#!/usr/bin/env bash
# The README's main job: installs what is missing, builds tdist, and runs the
# store demo: 4 processes meet through env:// rendezvous and use a TCPStore.
# (The launcher and the benchmark replace this demo in a later milestone.)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages
configure_and_build
"$BUILD_DIR/bin/tdist-store-demo" --nproc "${NPROC:-4}"
