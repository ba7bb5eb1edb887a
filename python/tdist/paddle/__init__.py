"""tdist.paddle: paddle.distributed's collective API on tdist::

    import tdist.paddle as dist            # instead of: import paddle.distributed as dist

    dist.init_parallel_env()
    data = numpy.array([dist.get_rank() + 1.0])   # or a paddle / CPU torch tensor
    dist.all_reduce(data)                  # in place
    dist.stream.all_reduce(data, sync_op=False).wait()

Launch with ``python3 -m tdist.paddle.launch --nproc_per_node 4 train.py`` or
``dist.spawn(train, nprocs=4)``. Tensors are paddle tensors (through DLPack,
zero copy), NumPy arrays, CPU torch tensors, or other CPU objects with DLPack
or the buffer protocol; neither paddle nor torch is imported here.
docs/paddle.md lists what is provided and how it differs from paddle.
"""

from tdist.paddle import stream
from tdist.paddle.auto_parallel import (
    ColWiseParallel,
    Partial,
    ProcessMesh,
    ReduceType,
    Replicate,
    RowWiseParallel,
    Shard,
    dtensor_from_fn,
    get_mesh,
    parallelize,
    reshard,
    set_mesh,
    shard_layer,
    shard_tensor,
    split,
)
from tdist.paddle._task import Task
from tdist.paddle.communication import (
    all_gather,
    all_reduce,
    alltoall,
    alltoall_single,
    barrier,
    broadcast,
    gather,
    irecv,
    isend,
    recv,
    reduce,
    reduce_scatter,
    scatter,
    send,
    wait,
)
from tdist.paddle.env import ParallelEnv
from tdist.paddle.gloo import gloo_barrier, gloo_init_parallel_env, gloo_release
from tdist.paddle.group import Group, get_group
from tdist.paddle.objects import all_gather_object, broadcast_object_list, scatter_object_list
from tdist.paddle.p2p import P2POp, batch_isend_irecv
from tdist.paddle.parallel import (
    destroy_process_group,
    get_backend,
    get_rank,
    get_world_size,
    init_parallel_env,
    is_available,
    is_initialized,
    new_group,
)
from tdist.paddle.reduce_op import ReduceOp
from tdist.paddle.spawn import MultiprocessContext, spawn

__all__ = [
    "ColWiseParallel", "Partial", "ProcessMesh", "ReduceType", "Replicate", "RowWiseParallel", "Shard",
    "dtensor_from_fn", "get_mesh", "parallelize", "reshard", "set_mesh", "shard_layer", "shard_tensor", "split",
    "Group", "MultiprocessContext", "P2POp", "ParallelEnv", "ReduceOp", "Task", "all_gather", "all_gather_object",
    "all_reduce", "alltoall", "alltoall_single", "barrier", "batch_isend_irecv", "broadcast",
    "broadcast_object_list", "destroy_process_group", "gather", "get_backend", "get_group", "get_rank",
    "get_world_size", "gloo_barrier", "gloo_init_parallel_env", "gloo_release", "init_parallel_env", "irecv",
    "is_available", "is_initialized", "isend", "new_group", "recv", "reduce", "reduce_scatter", "scatter",
    "scatter_object_list", "send", "spawn", "stream", "wait",
]


def __getattr__(name):
    """paddle.DataParallel's counterpart and paddle.distributed.fleet's,
    imported on first use (they import paddle)."""
    if name == "DataParallel":
        from tdist.paddle.data_parallel import DataParallel
        return DataParallel
    if name == "fleet":
        import importlib
        return importlib.import_module("tdist.paddle.fleet")
    raise AttributeError(f"module 'tdist.paddle' has no attribute {name!r}")
