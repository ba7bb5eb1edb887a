"""torch_npu's additions on the tdist backend (torch_suite_npu.py) at 1, 2,
3 and 4 ranks, env:// on 127.0.0.1."""

import pytest

import torch_suite_npu
from torch_harness import check_all_ok, passed_checks, run_ranks


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_torch_npu_additions(world_size):
    results = run_ranks("torch_worker.py", world_size, [torch_suite_npu.__name__, "env"],
                        extra_env={"TORCH_DISTRIBUTED_DEBUG": "OFF", "TDIST_DEBUG": "OFF"})
    check_all_ok(results)
    expected = {torch_suite_npu.__name__ + "." + n for n in vars(torch_suite_npu) if n.startswith("check_")}
    assert passed_checks(results) == expected


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_torch_npu_program_runs_with_its_import_and_device_name_changed(world_size):
    results = run_ranks("npu_program.py", world_size)
    check_all_ok(results)
    assert all("NPU-OK" in r.stdout for r in results), [r.stdout for r in results]
