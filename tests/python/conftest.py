"""Shared setup of the tdist Python tests (run by ctest with
PYTHONPATH=<build>/python; see tests/python/CMakeLists.txt)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch

    # Forked ranks inherit this: one intra-op thread each on a 2-core machine.
    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass
