"""tdist as a torch.distributed backend.

Importing this module registers the backend ``"tdist"`` with
``torch.distributed.Backend.register_backend``; after that every
``torch.distributed`` call on a group created with backend ``"tdist"`` runs on
tdist::

    import torch
    import torch.distributed as dist
    import tdist.torch  # registers "tdist"

    dist.init_process_group("tdist")          # env://, tcp://, file:// or store=
    t = torch.ones(4)
    dist.all_reduce(t)

The backend is a ``c10d::Backend`` of torch 2 for CPU tensors
(``init_process_group("tdist")`` or ``"cpu:tdist"``). It supports every
collective (PREMUL_SUM included, which gloo refuses) and torch_npu's uneven
all-gather and reduce-scatter, point to point with any-source receives, subgroups, async work
with futures, and torch's layers above the process group: DDP, DeviceMesh,
DTensor, FSDP2, checkpointing. docs/torch.md lists what works and what does not.

The import also relaxes three of torch's argument checks for tdist groups
only (see ``tdist.torch.compat``): tensors instead of lists in ``all_to_all``
and mixed input/output dtypes in ``scatter``, ``reduce_scatter`` and
``all_to_all``, and lets ``monitored_barrier`` reach tdist groups. Other
backends see torch's functions unchanged.

Under mpirun, PMI launchers and srun the import also exports RANK,
WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE from the launcher's own
variables when they are unset, so that torch's env:// finds the rank.

With TDIST_TORCH_STORE=tdist (tdistrun sets it) torch's env:// and tcp://
rendezvous use ``tdist.torch.TCPStore``, tdist's own store, for every
backend: it listens only on MASTER_ADDR and authenticates with the job's
token, where torch's TCPStore listens on every interface and cannot
authenticate (see ``tdist.torch.store``).

torch_npu's additions (``reinit_process_group``, the uneven all-gather and
reduce-scatter, ``get_comm_name``, ``is_tdist_available``) are functions of
this module; see ``tdist.torch.npu`` and docs/torch_npu.md.
"""

import torch.distributed as _dist

if not _dist.is_available():  # pragma: no cover - Debian's torch has it
    raise ImportError("tdist.torch needs torch.distributed, which this torch build lacks")


try:
    from tdist.torch._plugin import ProcessGroupTdist  # noqa: E402
except ImportError as _error:
    if getattr(_error, "name", None) != "tdist.torch._plugin":
        raise
    import torch as _torch

    raise ImportError(
        "tdist.torch: this tdist was built without its torch plugin (tdist/torch/_plugin*.so is missing): "
        "torch 2 was not importable by the interpreter tdist was built for. Build it for this interpreter "
        "(torch %s): pip install --no-build-isolation . in a clone, with torch installed first, or "
        "cmake -DTDIST_PYTHON_EXECUTABLE=%s; see docs/install.md" % (_torch.__version__, __import__("sys").executable),
        name="tdist.torch._plugin") from None
from tdist.torch import backend as _backend  # noqa: E402
from tdist.torch import compat as _compat  # noqa: E402
from tdist.torch import store as _store  # noqa: E402
from tdist.torch.npu import (  # noqa: E402
    all_gather_into_tensor_uneven,
    get_comm_name,
    is_tdist_available,
    reduce_scatter_tensor_uneven,
    reinit_process_group,
)

BACKEND_NAME = _backend.BACKEND_NAME
create_process_group = _backend.create_process_group
backend_of = _backend.backend_of
is_registered = _backend.is_registered


def _export_launcher_variables():
    """torch's env:// reads only RANK and WORLD_SIZE (torchrun's variables).
    Under mpirun, PMI launchers or srun, which set their own, export RANK,
    WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE from them as tdist's own
    env:// reads them (``launch_environment()``), so that
    ``dist.init_process_group("tdist")`` works under them as in the Python
    package. A variable already set is never replaced; a malformed launcher
    variable is left for the rendezvous to report."""
    import os
    from tdist import _C

    try:
        env = _C.launch_environment()
    except Exception:  # noqa: BLE001 - reported by init_process_group instead
        return
    if env["rank_source"] in ("", "RANK"):
        return
    for name, key in (("RANK", "rank"), ("WORLD_SIZE", "world_size"), ("LOCAL_RANK", "local_rank"),
                      ("LOCAL_WORLD_SIZE", "local_world_size")):
        if env[key] >= 0:
            os.environ.setdefault(name, str(env[key]))


_export_launcher_variables()
_backend.register()
_compat.install()
_store.install()
TCPStore = _store.TCPStore
# Beside torch_npu's torch.distributed.is_hccl_available.
if not hasattr(_dist, "is_tdist_available"):
    _dist.is_tdist_available = is_tdist_available
# At exit, backend.py shuts the groups down and drains the futures'
# completions, before the interpreter finalizes.

__all__ = ["BACKEND_NAME", "ProcessGroupTdist", "TCPStore", "all_gather_into_tensor_uneven", "backend_of",
           "create_process_group", "get_comm_name", "is_registered", "is_tdist_available", "reduce_scatter_tensor_uneven",
           "reinit_process_group"]
