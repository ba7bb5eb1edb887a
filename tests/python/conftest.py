"""Shared setup of the tdist Python tests (run by ctest with
PYTHONPATH=<build>/python; see tests/python/CMakeLists.txt)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# One intra-op thread per rank on a 2-core machine, for the ranks that
# import torch (ctest sets it too). torch is not imported here: a test that
# does not use it would pay 1.5 s of CPU for the import, and every rank it
# forks the copying of torch's pages.
os.environ.setdefault("OMP_NUM_THREADS", "1")
