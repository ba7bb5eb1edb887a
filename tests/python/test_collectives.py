"""Every collective on 2 and 4 ranks, NumPy and torch tensors, every dtype,
element counts 0, 1 and 7, every reduce op; results against NumPy
references (collective_cases.py). One job per world size runs all cases."""

import pytest

import collective_cases
from cases import merge, run_cases
from harness import run_ranks

WORLD_SIZES = [2, 4]
CASE_NAMES = [name for name, _ in collective_cases.build(2)]


def _job(rank, world_size):
    return run_cases(collective_cases.build(world_size), rank, world_size)


_results = {}


def results_for(world_size):
    if world_size not in _results:
        _results[world_size] = merge(run_ranks(_job, world_size))
    return _results[world_size]


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_collective(world_size, case):
    results = results_for(world_size)
    assert case in results, f"{case} did not run"
    assert results[case] is None, results[case]
