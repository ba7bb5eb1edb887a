"""torch 2's own layers on backend "tdist" give what they give on gloo: the
same program (torch2_layers.py) runs on both in one process per rank, and
every number is compared. DeviceMesh, DTensor and tensor parallelism move
data without arithmetic or with sums whose order both backends share at
these sizes: equal bit for bit. FSDP2, checkpointing and DDP reduce float
gradients, where gloo's ring may add in another order at 4 ranks: equal
to float tolerance (1e-6 absolute; the fp16 hook 1e-3)."""

import functools
import json

import pytest

from torch_harness import check_all_ok, run_ranks

pytest.importorskip("torch.distributed.tensor")


CASES = ["mesh_dtensor", "tp", "fsdp2", "dcp", "ddp", "pipelining", "own_layer"]


@functools.lru_cache(maxsize=None)
def _run_all(world_size):
    """Every case in one job of `world_size` processes, which import torch
    once (a job per case spent most of its time there); the tests below
    share its results."""
    results = run_ranks("torch2_layers.py", world_size, ["{ports}", ",".join(CASES), "{tmp}"],
                        ports=2 * len(CASES) + 1)
    check_all_ok(results)
    return [json.loads(r.stdout.strip().splitlines()[-1]) for r in results]


def _run(case, world_size):
    return [rank[case] for rank in _run_all(world_size)]


def _close(a, b, atol, where):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _close(a[k], b[k], atol, f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, atol, f"{where}[{i}]")
    elif isinstance(a, float):
        assert abs(a - b) <= atol, f"{where}: tdist {a} gloo {b}"
    else:
        assert a == b, f"{where}: tdist {a} gloo {b}"


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("case", ["mesh_dtensor", "tp"])
def test_mesh_dtensor_and_tensor_parallel_equal_gloo(case, world_size):
    # Bit for bit, but for the row-parallel layer's sum of 4 partial
    # products, which gloo's ring adds in another order.
    for rank, run in enumerate(_run(case, world_size)):
        if case == "tp" and world_size == 4:
            _close(run["tdist"], run["gloo"], 1e-6, f"rank {rank} tp")
        else:
            assert run["tdist"] == run["gloo"], f"rank {rank}: {case} differs from gloo"


@pytest.mark.parametrize("world_size", [2, 4])
def test_device_mesh_sub_groups_reduce_over_their_rows_and_columns(world_size):
    runs = _run("mesh_dtensor", world_size)
    if world_size == 4:  # mesh [[0, 1], [2, 3]]: dp joins 0 and 2, tp 0 and 1
        assert [r["tdist"]["sum_over_dp"] for r in runs] == [4.0, 6.0, 4.0, 6.0]
        assert [r["tdist"]["sum_over_tp"] for r in runs] == [3.0, 3.0, 7.0, 7.0]
    partial = runs[0]["tdist"]["partial_sum"]
    assert partial == [float(world_size * (world_size + 1) / 2)] * 6


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("case", ["fsdp2", "dcp", "ddp", "pipelining"])
def test_training_and_checkpoints_equal_gloo(case, world_size):
    runs = _run(case, world_size)
    for rank, run in enumerate(runs):
        if case == "ddp":
            for variant, params in run["tdist"].items():
                atol = 1e-3 if variant == "fp16_hook" else 1e-6
                _close(params, run["gloo"][variant], atol, f"rank {rank} ddp {variant}")
        else:
            _close(run["tdist"], run["gloo"], 1e-6, f"rank {rank} {case}")
    if case == "dcp":
        assert all(r["tdist"]["restored"] for r in runs)
    if case == "pipelining":  # the last stage computes the loss of each microbatch
        assert len(runs[-1]["tdist"]["gpipe_losses"]) == 4 and runs[0]["tdist"]["gpipe_losses"] == []
    if case == "fsdp2":
        losses = runs[0]["tdist"]["losses"]
        assert losses[-1] < losses[0], f"training did not lower the loss: {losses}"


@pytest.mark.parametrize("world_size", [2, 4])
def test_tdists_own_dtensor_layer_gives_torchs_results(world_size):
    # The same sharding program through torch's DTensor (on tdist and on
    # gloo) and through tdist.tensor, tdist's own layer for NumPy and paddle.
    for rank, run in enumerate(_run("own_layer", world_size)):
        for backend in ("tdist", "gloo"):
            assert all(run[backend].values()), f"rank {rank} on {backend}: {run[backend]}"
