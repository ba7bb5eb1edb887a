"""Point to point, groups, object collectives, monitored_barrier, dtype
conversion and argument errors on 2 and 4 ranks (misc_cases.py)."""

import pytest

import misc_cases
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
