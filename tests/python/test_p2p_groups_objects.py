"""Point to point, groups, object collectives, monitored_barrier, dtype
conversion and argument errors on 2 and 4 ranks (misc_cases.py)."""

import numpy as np
import pytest

import misc_cases
import tdist as dist
from cases import merge, run_cases
from harness import run_ranks

CASE_NAMES = [name for name, _ in misc_cases.build(2)]
_results = {}


def _job(rank, world_size):
    return run_cases(misc_cases.build(world_size), rank, world_size)


def results_for(world_size):
    if world_size not in _results:
        _results[world_size] = merge(run_ranks(_job, world_size))
    return _results[world_size]


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("case", CASE_NAMES)
def test_case(world_size, case):
    results = results_for(world_size)
    assert case in results, f"{case} did not run"
    assert results[case] is None, results[case]


# ---- torch 2's group ranks: group_src and group_dst ----


def _group_peers(rank, world):
    sub = dist.new_group([1, 2])  # group rank 0 is global 1, group rank 1 is global 2
    if rank == 0:
        return None
    me = dist.get_rank(sub)
    b = np.array([float(rank)])
    dist.broadcast(b, group=sub, group_src=1)  # global rank 2
    r = np.array([float(rank)])
    dist.reduce(r, group=sub, group_dst=0)
    if me == 0:
        dist.send(np.array([7.0]), group=sub, group_dst=1)
    else:
        got = np.zeros(1)
        dist.recv(got, group=sub, group_src=0)
        assert got[0] == 7.0
    gathered = [None, None] if me == 1 else None
    dist.gather_object(rank * 10, gathered, group=sub, group_dst=1)
    with pytest.raises(ValueError, match="give src or group_src, not both"):
        dist.broadcast(b, src=1, group=sub, group_src=0)
    with pytest.raises(ValueError, match="give dst .* or group_dst"):
        dist.reduce(r, group=sub)
    return b[0], (r[0] if me == 0 else None), gathered


def test_group_src_and_group_dst_name_ranks_in_the_group():
    results = run_ranks(_group_peers, 3)
    assert results[0] is None
    assert results[1] == (2.0, 3.0, None)
    assert results[2] == (2.0, None, [10, 20])
