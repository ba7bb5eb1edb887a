"""Issue 25 in the torch plugin, at several world sizes (env:// on 127.0.0.1):

- torch_suite_seq_profiler.py: sequence numbers, profiler events with
  shapes for every op and point to point, record_param_comms arguments,
  DETAIL off by default;
- torch_suite_sparse.py: sparse all_reduce (sums, order, errors, DDP with a
  sparse embedding);
- torch_suite_detail.py: tdist's DETAIL checks, under TDIST_DEBUG=DETAIL;
- torch_suite_torch_detail.py: torch's own checking wrapper around tdist,
  under TORCH_DISTRIBUTED_DEBUG=DETAIL.
"""

import pytest

import torch_suite_detail
import torch_suite_seq_profiler
import torch_suite_sparse
import torch_suite_torch_detail
from torch_harness import check_all_ok, passed_checks, run_ranks


def _run(suite, world_size, extra_env=None):
    # Debug levels off unless the test sets them, whatever the caller's.
    env = {"TORCH_DISTRIBUTED_DEBUG": "OFF", "TDIST_DEBUG": "OFF"}
    env.update(extra_env or {})
    results = run_ranks("torch_worker.py", world_size, [suite.__name__, "env"], extra_env=env)
    check_all_ok(results)
    expected = {suite.__name__ + "." + n for n in vars(suite) if n.startswith("check_")}
    assert passed_checks(results) == expected


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_sequence_numbers_and_profiler_events(world_size):
    _run(torch_suite_seq_profiler, world_size)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_sparse_all_reduce(world_size):
    _run(torch_suite_sparse, world_size)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_detail_checks_torch_debug(world_size):
    _run(torch_suite_torch_detail, world_size, {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})


def test_detail_checks_tdist_debug():
    _run(torch_suite_detail, 3, {"TDIST_DEBUG": "detail"})
