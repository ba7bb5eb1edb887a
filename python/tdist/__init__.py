"""tdist: collective communication for NumPy arrays and CPU torch tensors,
with the API of ``torch.distributed``::

    import tdist as dist

    dist.init_process_group("tdist")        # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    x = numpy.ones(4, numpy.float32)        # or torch.ones(4)
    dist.all_reduce(x)                      # in place, zero copy

Launch with ``python3 -m tdist.run --nproc-per-node 4 train.py`` or
``tdist.spawn(fn, nprocs=4)``. docs/python.md lists the API and how it
differs from torch.distributed. Importing tdist never imports torch.
"""

import sys as _sys

try:
    from tdist import _C
except ImportError as _error:
    if getattr(_error, "name", None) not in ("tdist._C", "tdist"):
        raise
    raise ImportError(
        "tdist: its extension module (tdist/_C*.so beside %s) is missing or was built for another Python "
        "(this is %s %d.%d): build tdist for this interpreter (pip install --no-build-isolation . in a clone, "
        "or cmake -DTDIST_PYTHON_EXECUTABLE=%s); see docs/install.md"
        % (__file__, _sys.executable, _sys.version_info[0], _sys.version_info[1], _sys.executable),
        name="tdist._C") from None
from tdist._C import (
    DistBackendError,
    DistError,
    DistInvalidArgument,
    DistNetworkError,
    DistNetworkTimeoutError,
    DistStoreError,
    DistStoreTimeoutError,
    DistTimeoutError,
    FileStore,
    HashStore,
    PrefixStore,
    ProcessGroup,
    ReduceOp,
    Store,
    TCPStore,
)
from tdist._spawn import (
    ProcessContext,
    ProcessException,
    ProcessExitedException,
    ProcessRaisedException,
    spawn,
    start_processes,
)
from tdist._work import Future, Work
from tdist.debug import DebugLevel, breakpoint, get_debug_level, set_debug_level, set_debug_level_from_env
from tdist.collectives import (
    all_gather,
    all_gather_into_tensor,
    all_gather_into_tensor_uneven,
    all_reduce,
    all_to_all,
    all_to_all_single,
    barrier,
    broadcast,
    gather,
    reduce,
    reduce_scatter,
    reduce_scatter_tensor,
    reduce_scatter_tensor_uneven,
    scatter,
)
from tdist.distributed_c10d import (
    Backend,
    GroupMember,
    abort,
    default_pg_timeout,
    destroy_process_group,
    get_backend,
    get_comm_name,
    get_global_rank,
    get_group_rank,
    get_process_group_ranks,
    get_rank,
    get_world_size,
    group,
    init_process_group,
    is_available,
    is_gloo_available,
    is_initialized,
    is_mpi_available,
    is_nccl_available,
    is_tdist_available,
    is_torchelastic_launched,
    is_ucc_available,
    new_group,
    reduce_op,
    reinit_process_group,
)
from tdist.device_mesh import DeviceMesh, init_device_mesh
from tdist import tensor
from tdist.fault_tolerance import agree, revoke, shrink
from tdist.monitored import monitored_barrier
from tdist.objects import all_gather_object, broadcast_object_list, gather_object, scatter_object_list
from tdist.p2p import P2POp, batch_isend_irecv, irecv, isend, recv, send, sendrecv
from tdist.trace import dump_trace, trace_calls

__version__ = getattr(_C, "__version__", "0")

# As torch.distributed does on import: TDIST_DEBUG, else TORCH_DISTRIBUTED_DEBUG
# (a value other than OFF, INFO or DETAIL raises DistInvalidArgument here).
set_debug_level_from_env()


def _make_nccl_premul_sum(factor):
    """ReduceOp PREMUL_SUM with `factor` (torch's private helper of that name)."""
    return ReduceOp.premul_sum(factor)


__all__ = [
    "Backend", "DebugLevel", "DeviceMesh", "DistBackendError", "DistError", "DistInvalidArgument", "DistNetworkError",
    "DistNetworkTimeoutError", "DistStoreError", "DistStoreTimeoutError", "DistTimeoutError", "FileStore",
    "Future", "GroupMember", "HashStore", "P2POp", "PrefixStore", "ProcessContext", "ProcessException",
    "ProcessExitedException", "ProcessGroup", "ProcessRaisedException", "ReduceOp", "Store", "TCPStore", "Work",
    "abort", "all_gather", "all_gather_into_tensor", "all_gather_into_tensor_uneven", "all_gather_object",
    "all_reduce", "all_to_all", "all_to_all_single", "barrier", "batch_isend_irecv", "breakpoint", "broadcast",
    "broadcast_object_list", "default_pg_timeout", "destroy_process_group", "dump_trace", "gather",
    "gather_object", "get_backend", "get_comm_name", "get_debug_level", "get_global_rank", "get_group_rank",
    "get_process_group_ranks", "get_rank", "get_world_size", "group", "init_device_mesh", "init_process_group", "irecv",
    "is_available", "is_gloo_available", "is_initialized", "is_mpi_available", "is_nccl_available",
    "is_tdist_available", "is_torchelastic_launched", "is_ucc_available", "isend", "monitored_barrier", "new_group",
    "recv", "reduce", "reduce_op", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_tensor_uneven",
    "reinit_process_group", "scatter", "scatter_object_list", "send", "sendrecv", "set_debug_level", "set_debug_level_from_env", "spawn", "start_processes",
    "tensor", "trace_calls",
    "agree", "revoke", "shrink",
]
