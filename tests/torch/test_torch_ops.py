"""Every torch.distributed operation on the tdist backend at 2 and 4 ranks
(env:// on 127.0.0.1). The checks live in three suites, run one after the
other in the same processes (starting torch costs more than the checks):

- torch_suite_collectives.py: every collective, each dtype, counts 0, 1, odd, large;
- torch_suite_p2p_async.py: point to point, any source, async work, futures;
- torch_suite_groups_errors.py: subgroups, monitored barrier, errors, deadlines.
"""

import pytest

import torch_suite_collectives
import torch_suite_groups_errors
import torch_suite_p2p_async
from torch_harness import check_all_ok, passed_checks, run_ranks

SUITES = [torch_suite_collectives, torch_suite_p2p_async, torch_suite_groups_errors]


@pytest.mark.parametrize("world_size", [2, 4])
def test_ops(world_size):
    results = run_ranks("torch_worker.py", world_size, [",".join(s.__name__ for s in SUITES), "env"])
    check_all_ok(results)
    expected = {s.__name__ + "." + n for s in SUITES for n in vars(s) if n.startswith("check_")}
    assert passed_checks(results) == expected


def test_exit_right_after_a_python_callback_is_clean():
    # The failure was a race (an abort at exit in about half the runs), so
    # several runs: each must exit 0 with the right result.
    for _ in range(4):
        results = run_ranks("torch_exit_after_callback.py", 2)
        check_all_ok(results)
        for r in results:
            assert r.lines("chained") == ["chained [4.0, 4.0, 4.0, 4.0]"], r.stdout
