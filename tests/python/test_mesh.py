"""Device meshes and sharded tensors (tdist.device_mesh, tdist.tensor) on
forked ranks over shared memory and TCP: random layouts and transitions give
back the original tensor bit for bit; mesh queries; errors (mesh_cases.py)."""

import os
import subprocess
import sys

import pytest

import mesh_cases
from harness import run_ranks
from tdist.tensor import Partial, Replicate, Shard

MESHES = [(1,), (2,), (3,), (5,), (2, 2), (1, 4), (2, 3), (3, 2), (6,), (2, 2, 2), (2, 4), (8,)]


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n


@pytest.mark.parametrize("mesh_shape", MESHES, ids=lambda s: "x".join(map(str, s)))
def test_random_redistributions_give_back_the_tensor(mesh_shape):
    world = _size(mesh_shape)
    trials = 40 if world <= 4 else 16
    counts = run_ranks(mesh_cases.property_job, world, mesh_shape, 7 + world, trials, "numpy")
    assert counts == [trials * 4] * world


@pytest.mark.parametrize("mesh_shape", [(2, 2), (3,), (2, 1, 3)], ids=lambda s: "x".join(map(str, s)))
def test_random_redistributions_over_tcp(mesh_shape):
    world = _size(mesh_shape)
    counts = run_ranks(mesh_cases.property_job, world, mesh_shape, 101 + world, 6, "numpy",
                       env={"TDIST_TRANSPORT": "tcp"})
    assert counts == [24] * world


@pytest.mark.skipif(mesh_cases.torch is None, reason="python3-torch is not installed")
@pytest.mark.parametrize("mesh_shape", [(2, 2), (5,)], ids=lambda s: "x".join(map(str, s)))
def test_random_redistributions_of_torch_tensors(mesh_shape):
    world = _size(mesh_shape)
    counts = run_ranks(mesh_cases.property_job, world, mesh_shape, 55, 6, "torch")
    assert counts == [24] * world


@pytest.mark.parametrize("world", [4, 6])
def test_a_mesh_of_permuted_ranks_groups_by_coordinate(world):
    results = run_ranks(mesh_cases.permuted_mesh_job, world)
    ranks = list(range(world))[::-1]
    cols = world // 2
    for rank, [(coordinate, b_mesh, b_group, local_a, local_b)] in enumerate(results):
        flat = ranks.index(rank)
        assert coordinate == [flat // cols, flat % cols]
        assert b_mesh == ranks[(flat // cols) * cols:(flat // cols + 1) * cols]
        assert b_group == sorted(b_mesh)  # group ranks ascend; the mesh order is kept by the mesh
        assert (local_a, local_b) == (flat // cols, flat % cols)


def test_mesh_queries_and_from_local():
    results = run_ranks(mesh_cases.api_job, 4)
    for rank, out in enumerate(results):
        assert out["shape"] == (2, 2) and out["ndim"] == 2 and out["size"] == 4 and out["size_tp"] == 2
        assert out["names"] == ("dp", "tp")
        assert out["coordinate"] == [rank // 2, rank % 2]
        assert out["tp_ranks"] == [2 * (rank // 2), 2 * (rank // 2) + 1]
        assert out["dp_ranks"] == [rank % 2, rank % 2 + 2]
        assert out["tp_mesh"] == out["tp_ranks"]
        assert out["even_shape"] == (4, 3)
        assert "DeviceMesh(shape=[2, 2], dims=[dp, tp]" in out["repr"]
        # 9 rows over [Shard(0), Shard(0)]: 5 + 4, then 3 + 2 and 2 + 2 of 3 floats.
        assert "all_gather over mesh dim 1 (tp)" in out["plan"] and "total:" in out["plan"]
    plans = [out["plan"] for out in results]
    assert "[3, 3] -> [5, 3]" in plans[0] and "[2, 3] -> [5, 3]" in plans[1]


@pytest.mark.parametrize("world", [2, 3])
def test_bad_calls_raise_with_the_reason(world):
    results = run_ranks(mesh_cases.error_job, world)
    assert all(r == results[0] for r in results)
    assert len(results[0]) == 9


@pytest.mark.parametrize("mesh_shape", [(1,), (3,), (2, 2)], ids=lambda s: "x".join(map(str, s)))
def test_operator_rules_compute_what_numpy_does(mesh_shape):
    results = run_ranks(mesh_cases.ops_job, _size(mesh_shape), mesh_shape)
    placements = results[0]
    k = len(mesh_shape)

    def layout(*p):
        return repr(tuple(p) * k)

    # The rules of docs/mesh.md, per mesh dimension.
    assert placements["Replicate()@Shard(dim=1)"] == layout(Shard(1))          # column-wise weight
    assert placements["Shard(dim=1)@Shard(dim=0)"] == layout(Partial())        # row-wise weight
    assert placements["Shard(dim=0)@Replicate()"] == layout(Shard(0))          # split batch
    assert placements["Partial(sum)@Replicate()"] == layout(Partial())
    assert placements["Partial(sum)+Partial(sum)"] == layout(Partial())
    assert placements["Partial(sum)*3"] == layout(Partial())
    assert placements["Partial(sum)+1"] == layout(Replicate())                 # not linear: reduced first
    assert placements["sum Shard(dim=0)"] == layout(Partial())
    assert placements["sum1k Shard(dim=0)"] == layout(Shard(0))
    assert placements["Shard(dim=0).T"] == layout(Shard(1))
    assert all(r == placements for r in results)


EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "examples",
                       "tensor_parallel_mlp.py")


@pytest.mark.skipif(mesh_cases.torch is None, reason="python3-torch is not installed")
@pytest.mark.parametrize("dp,tp", [(2, 2), (1, 3), (3, 1)])
def test_tensor_parallel_example_matches_one_process(dp, tp):
    run = subprocess.run([sys.executable, "-m", "tdist.run", "--standalone", "--nproc-per-node", str(dp * tp), EXAMPLE,
                          "--dp", str(dp), "--tp", str(tp), "--steps", "12", "--check"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "largest difference from the one-process run" in run.stdout, run.stdout
    assert "all_reduce over mesh dim 1 (tp)" in run.stdout or tp == 1, run.stdout


def test_paddle_auto_parallel_api_on_numpy():
    assert run_ranks(mesh_cases.paddle_auto_parallel_job, 4) == [True] * 4


def test_edge_cases_fail_loudly_or_give_exact_answers():
    results = run_ranks(mesh_cases.edge_job, 4)
    assert all(len(r) == 8 for r in results), results
