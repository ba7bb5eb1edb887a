"""Issue 25 in the torch plugin, at several world sizes (env:// on 127.0.0.1):

- torch_suite_seq_profiler.py: sequence numbers, profiler events with
  shapes for every op and point to point, record_param_comms arguments,
  DETAIL off by default;
- torch_suite_sparse.py: sparse all_reduce (sums, order, errors, DDP with a
  sparse embedding);
- torch_suite_detail.py: tdist's DETAIL checks, under TDIST_DEBUG=DETAIL;
- torch_suite_torch_detail.py: torch's own checking wrapper around tdist,
  under TORCH_DISTRIBUTED_DEBUG=DETAIL.

The first two share their processes (one job per world size, both with
the debug levels off); each test still asserts its own suite's checks.
"""

import functools

import pytest

import torch_suite_detail
import torch_suite_seq_profiler
import torch_suite_sparse
import torch_suite_torch_detail
from torch_harness import check_suite_passed, run_ranks

# Debug levels off unless the test sets them, whatever the caller's.
OFF = (("TDIST_DEBUG", "OFF"), ("TORCH_DISTRIBUTED_DEBUG", "OFF"))
# The suites that need the same environment share one job of processes per
# world size (starting torch costs more than the checks), in this order:
# the sequence numbers first, on a group no other suite has used.
JOBS = {
    "off": ((torch_suite_seq_profiler, torch_suite_sparse), OFF),
    "torch_detail": ((torch_suite_torch_detail,), (("TDIST_DEBUG", "OFF"), ("TORCH_DISTRIBUTED_DEBUG", "DETAIL"))),
    "tdist_detail": ((torch_suite_detail,), (("TDIST_DEBUG", "detail"), ("TORCH_DISTRIBUTED_DEBUG", "OFF"))),
}


@functools.lru_cache(maxsize=None)
def _job(job, world_size):
    suites, env = JOBS[job]
    return run_ranks("torch_worker.py", world_size, [",".join(s.__name__ for s in suites), "env"],
                     extra_env=dict(env))


def _check(job, suite, world_size):
    suites = JOBS[job][0]
    check_suite_passed(_job(job, world_size), suite, [s.__name__ for s in suites], last=suite is suites[-1])


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_sequence_numbers_and_profiler_events(world_size):
    _check("off", torch_suite_seq_profiler, world_size)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_sparse_all_reduce(world_size):
    _check("off", torch_suite_sparse, world_size)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_detail_checks_torch_debug(world_size):
    _check("torch_detail", torch_suite_torch_detail, world_size)


def test_detail_checks_tdist_debug():
    _check("tdist_detail", torch_suite_detail, 3)
