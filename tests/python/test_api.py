"""The module-level API: names, signatures against torch.distributed's,
docstrings, exception classes, ReduceOp/Backend/group objects, lazy torch,
single-rank groups (zero copy, every dtype), init errors and backends
written in Python."""

import inspect
import os
import subprocess
import sys
import warnings
from datetime import timedelta

import numpy as np
import pytest

import tdist as dist
from harness import run_ranks

try:
    import torch
    import torch.distributed as torch_dist
except ImportError:  # pragma: no cover
    torch = torch_dist = None

API = ["is_available", "init_process_group", "destroy_process_group", "is_initialized", "get_rank",
       "get_world_size", "get_backend", "Backend", "ReduceOp", "reduce_op", "TCPStore", "FileStore", "HashStore",
       "PrefixStore", "new_group", "get_group_rank", "get_global_rank", "get_process_group_ranks", "send", "recv",
       "isend", "irecv", "P2POp", "batch_isend_irecv", "broadcast", "all_reduce", "reduce", "all_gather",
       "all_gather_into_tensor", "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
       "all_to_all_single", "barrier", "monitored_barrier", "all_gather_into_tensor_uneven",
       "reduce_scatter_tensor_uneven", "broadcast_object_list", "all_gather_object", "gather_object",
       "scatter_object_list", "DistError", "DistBackendError", "DistNetworkError", "DistStoreError", "group",
       "GroupMember", "spawn", "Work"]


def test_every_api_name_exists_and_is_documented():
    for name in API:
        assert hasattr(dist, name), name
    for name in dist.__all__:
        obj = getattr(dist, name)
        if callable(obj) and not isinstance(obj, (int, str)):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"


def test_distributed_c10d_holds_the_calls_as_torchs_module_does():
    import tdist.distributed_c10d as c10d
    for name in API:
        if torch_dist is not None and hasattr(torch_dist.distributed_c10d, name):
            assert getattr(c10d, name) is getattr(dist, name), name
    for name in ("all_reduce", "send", "all_gather_object", "monitored_barrier", "new_group"):
        assert getattr(c10d, name) is getattr(dist, name), name
        assert name in dir(c10d), name
    with pytest.raises(AttributeError, match="no attribute 'not_a_call'"):
        c10d.not_a_call  # noqa: B018


def test_importing_tdist_does_not_import_torch():
    code = ("import sys, numpy, tdist as dist\n"
            "dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)\n"
            "x = numpy.ones(3); dist.all_reduce(x); dist.destroy_process_group()\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(torch_dist is None, reason="needs torch")
@pytest.mark.parametrize("name", [n for n in API if n not in ("Work", "spawn", "group", "GroupMember",
                                                                  "Backend", "ReduceOp", "reduce_op", "P2POp")
                                  and not n.startswith("Dist") and not n.endswith("Store")
                                  and not n.endswith("_uneven")])
def test_signature_matches_torch_distributed(name):
    theirs = inspect.signature(getattr(torch_dist, name)).parameters
    ours = inspect.signature(getattr(dist, name)).parameters
    # torch's parameters come first, in torch's order (extra ones may follow).
    assert list(ours)[:len(theirs)] == list(theirs), (list(ours), list(theirs))
    for p in theirs.values():
        default, mine = p.default, ours[p.name].default
        if isinstance(default, (int, str, bool)) or default is None:
            if not (p.name in ("timeout", "backend") and mine is None):  # None means torch's default
                assert mine == default, (p.name, mine, default)
        elif isinstance(default, timedelta):
            assert mine in (None, default), (p.name, mine)
        elif p.name == "op":
            assert mine == dist.ReduceOp.SUM
        elif default is inspect.Parameter.empty:  # (backend is optional since torch 2.3)
            assert mine is inspect.Parameter.empty or p.name == "backend", p.name


def test_exception_classes_mirror_errors_h():
    for cls in (dist.DistBackendError, dist.DistNetworkError, dist.DistStoreError, dist.DistTimeoutError,
                dist.DistInvalidArgument, dist.DistStoreTimeoutError, dist.DistNetworkTimeoutError):
        assert issubclass(cls, dist.DistError) and issubclass(cls, RuntimeError)
    assert issubclass(dist.DistStoreTimeoutError, dist.DistStoreError)
    assert issubclass(dist.DistStoreTimeoutError, dist.DistTimeoutError)
    assert issubclass(dist.DistNetworkTimeoutError, dist.DistNetworkError)
    assert issubclass(dist.DistNetworkTimeoutError, dist.DistTimeoutError)
    assert issubclass(dist.DistInvalidArgument, ValueError)
    assert dist.DistError.__module__ == "tdist"


def test_reduce_op_backend_and_group_objects():
    assert {op.name for op in dist.ReduceOp.RedOpType.__members__.values()} == {
        "SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG", "PREMUL_SUM"}
    assert dist.ReduceOp(dist.ReduceOp.MAX) == dist.ReduceOp.MAX
    assert dist.ReduceOp.premul_sum(2.5).premul_factor == 2.5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dist.reduce_op.SUM == dist.ReduceOp.SUM
    assert caught and issubclass(caught[0].category, FutureWarning)
    assert dist.Backend("GLOO") == "gloo" and dist.Backend("tdist") == dist.Backend.TDIST == "tdist"
    assert dist.is_available() and not dist.is_initialized()
    assert dist.group.WORLD is None and dist.GroupMember.WORLD is None
    assert dist.GroupMember.NON_GROUP_MEMBER == -100
    with pytest.raises(dist.DistError, match="not been initialized"):
        dist.get_rank()


def _single_rank(rank, world):
    """world_size=1 over a HashStore: zero copy and every dtype."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    assert dist.get_backend() == "tdist" and dist.get_world_size() == 1
    with pytest.raises(dist.DistError, match="already initialized"):
        dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
    x = np.arange(4, dtype=np.float32)
    address = x.__array_interface__["data"][0]
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    assert x.__array_interface__["data"][0] == address and x.tolist() == [0, 1, 2, 3]
    if torch is not None:
        for dtype in (torch.bfloat16, torch.float16, torch.bool, torch.complex128, torch.uint8):
            t = torch.ones(3, dtype=dtype)
            ptr = t.data_ptr()
            out = torch.zeros(3, dtype=dtype)
            dist.all_gather_into_tensor(out, t)
            assert t.data_ptr() == ptr and out.tolist() == t.tolist(), dtype
        scalar = torch.tensor(5)  # zero-dimensional
        dist.broadcast(scalar, 0)
        assert scalar.item() == 5
    dist.destroy_process_group()
    assert not dist.is_initialized()
    dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)  # again, after destroy
    dist.destroy_process_group()


def test_single_rank_group_zero_copy_and_reinit():
    run_ranks(_single_rank, 1, init=False)


def _init_errors(rank, world):
    with pytest.raises(dist.DistInvalidArgument, match="GPUs"):
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    with pytest.raises(dist.DistInvalidArgument, match="unknown backend"):
        dist.init_process_group("nosuch", store=dist.HashStore(), rank=0, world_size=1)
    with pytest.raises(dist.DistInvalidArgument, match="mutually exclusive"):
        dist.init_process_group(store=dist.HashStore(), init_method="env://", rank=0, world_size=1)
    with pytest.raises(dist.DistInvalidArgument, match="required with an explicit store"):
        dist.init_process_group(store=dist.HashStore())
    # Under a launcher, a fixed rank that contradicts RANK fails at once, naming both.
    os.environ.update({"TDIST_RESTART_COUNT": "0", "RANK": "1", "WORLD_SIZE": "2"})
    with pytest.raises(dist.DistInvalidArgument, match=r"rank=0 was passed.*as rank 1 of 2 \(RANK=1\)"):
        dist.init_process_group("gloo", rank=0, world_size=2)
    assert not dist.is_initialized()


def test_init_errors():
    run_ranks(_init_errors, 1, init=False)


def _python_backend(rank, world):
    calls = []

    class Doubling(dist.ProcessGroup):
        """A toy backend: all_reduce doubles the tensor; nothing else is supported."""

        def backend_name(self):
            return "doubling"

        def all_reduce(self, tensor, op):
            calls.append((tensor.dtype, tensor.shape, op))
            view = tensor.numpy()  # shares the caller's memory
            view *= 2
            work = dist._C.Work("all_reduce")
            work.finish()
            return work

    dist.Backend.register_backend("doubling", lambda store, r, size, timeout: Doubling(r, size, timeout=timeout))
    assert dist.Backend.DOUBLING == "doubling" and "doubling" in dist.Backend.backend_list()
    dist.init_process_group("doubling", store=dist.HashStore(), rank=0, world_size=1)
    assert dist.get_backend() == "doubling"
    x = np.array([1.0, 2.0])
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    assert x.tolist() == [2.0, 4.0] and calls == [("float64", [2], dist.ReduceOp.MAX)]
    work = dist.all_reduce(x, async_op=True)
    assert work.wait() and x.tolist() == [4.0, 8.0]
    with pytest.raises(dist.DistBackendError, match="backend doubling does not support broadcast"):
        dist.broadcast(x, 0)
    dist.destroy_process_group()


def test_backend_written_in_python():
    run_ranks(_python_backend, 1, init=False)
