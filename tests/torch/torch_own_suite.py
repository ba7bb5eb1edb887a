"""torch's own distributed tests, from the installed wheel
(torch.testing._internal.distributed.distributed_test), with tdist in gloo's
place.

The suite is written for backend "gloo": BACKEND stays "gloo", so every
test takes gloo's branches and skips, and every process group the tests
make with backend "gloo" (init_process_group, new_group and what torch
builds on them: subgroups, DeviceMesh) is made with "tdist" instead.
TORCH_OWN_SUITE_BACKEND=gloo runs the same tests on gloo itself, which is
how tests/torch/run_torch_own_suite.py finds what gloo passes.

Ranks are forked, not spawned (torch's own driver spawns): a spawned rank
spends seconds importing torch, for each of some 400 tests.

Run with pytest: python -m pytest tests/torch/torch_own_suite.py
"""

import gc
import os

os.environ.setdefault("BACKEND", "gloo")
os.environ.setdefault("WORLD_SIZE", "3")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed import distributed_c10d as c10d  # noqa: E402

SUBSTITUTE = os.environ.get("TORCH_OWN_SUITE_BACKEND", "tdist")
if SUBSTITUTE not in ("tdist", "gloo"):
    raise SystemExit(f"TORCH_OWN_SUITE_BACKEND must be tdist or gloo, not {SUBSTITUTE!r}")


def _in_place_of_gloo(backend):
    """'gloo' -> 'tdist', also inside 'cpu:gloo,cuda:nccl'; None stays None
    (a new group then takes the default group's backend, tdist)."""
    if backend is None or SUBSTITUTE == "gloo":
        return backend
    return str(backend).replace("gloo", SUBSTITUTE)


def _substituting(function):
    def call(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = _in_place_of_gloo(kwargs["backend"])
        elif function is _init_process_group and args:
            args = (_in_place_of_gloo(args[0]),) + args[1:]
        elif function is _new_group and len(args) >= 3:
            args = args[:2] + (_in_place_of_gloo(args[2]),) + args[3:]
        return function(*args, **kwargs)

    call.__wrapped__ = function
    call.__name__ = function.__name__
    call.__doc__ = function.__doc__
    return call


_init_process_group = c10d.init_process_group
_new_group = c10d.new_group
# Both names: torch.distributed re-exports distributed_c10d's functions, and
# torch's own callers (new_subgroups, DeviceMesh) look them up in c10d.
for _module in (c10d, dist):
    _module.init_process_group = _substituting(_init_process_group)
    _module.new_group = _substituting(_new_group)

import time  # noqa: E402

from torch.testing._internal import common_distributed  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class _PromptPolling:
    """The time module, but for the harness's 0.1 s polling sleeps, which
    become 10 ms: torch's file barrier between the ranks (Barrier.sync, two
    or three per test) and the parent's wait for the ranks to exit
    (MultiProcessTestCase._join_processes) each poll every 0.1 s, which kept
    a shard waiting more than half of its time (34 s of wall, 13 s of CPU).
    Only the two modules' own `time` is replaced; a test's deliberate sleeps
    (other durations) are unchanged, and so is what the barriers wait for."""

    HARNESS_POLL_S = 0.1
    POLL_S = 0.01

    def __getattr__(self, name):
        return getattr(time, name)

    def sleep(self, seconds):
        time.sleep(self.POLL_S if seconds == self.HARNESS_POLL_S else seconds)


distributed_test.time = common_distributed.time = _PromptPolling()


class TestDistBackendWithFork(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        # The ranks' collections then leave this process's objects alone
        # instead of copying every page they sit on.
        gc.collect()
        gc.freeze()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)


if __name__ == "__main__":
    run_tests()
