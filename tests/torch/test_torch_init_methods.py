"""init_process_group("tdist") with every init method and store: tcp://,
file://, an explicit TCPStore and FileStore (2 ranks), and a HashStore (one
rank; a HashStore lives in one process). env:// is what the other test
files use."""

import pytest

import torch_suite_init
from torch_harness import check_all_ok, passed_checks, run_ranks

CHECKS = {"torch_suite_init." + n for n in vars(torch_suite_init) if n.startswith("check_")}


@pytest.mark.parametrize("kind,world_size", [("tcp", 2), ("file", 2), ("tcpstore", 2), ("filestore", 2),
                                             ("hashstore", 1)])
def test_init_method(kind, world_size):
    results = run_ranks("torch_worker.py", world_size, ["torch_suite_init", kind, "{tmp}/store"])
    check_all_ok(results)
    assert passed_checks(results) == CHECKS


def test_missing_rank_fails_at_the_deadline():
    # Rank 1 of 2 never starts: rank 0's init fails at the group's timeout
    # with an error naming the missing rank (tdist's message, via the store
    # torch created).
    results = run_ranks("torch_worker.py", 1, ["torch_suite_init", "file", "{tmp}/store"],
                        extra_env={"WORLD_SIZE": "2", "TDIST_TEST_PG_TIMEOUT_S": "2"})
    assert results[0].returncode != 0
    assert "torch.distributed.DistNetworkError" in results[0].stderr  # a RuntimeError
    assert "timed out after 2000 ms waiting for ranks 1 to connect" in results[0].stderr, results[0].stderr
