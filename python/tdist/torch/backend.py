"""Registration of the "tdist" backend with torch.distributed."""

import atexit
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from tdist.torch import _plugin
from tdist.torch._plugin import ProcessGroupTdist

BACKEND_NAME = "tdist"


def create_process_group(backend_options, pg_options=None):
    """The creator torch.distributed calls for a group with backend "tdist".

    Registered with ``extended_api=True``, so torch passes its
    ``_DistributedBackendOptions`` (store, group rank and size, timeout, group
    name and the members' global ranks, which tdist's error messages name).
    """
    if pg_options is not None:
        raise ValueError(
            "tdist backend: pg_options are not supported (got %r); the only option is the timeout "
            "of init_process_group/new_group" % (pg_options,))
    timeout = _as_timedelta(backend_options.timeout)
    ranks = list(backend_options.global_ranks_in_group)
    group = ProcessGroupTdist(backend_options.store, backend_options.group_rank, backend_options.group_size,
                              timeout, ranks, backend_options.group_id)
    if not ranks or ranks == list(range(backend_options.group_size)):  # the default group: [] in torch 1.13
        _leave_at_exit(backend_options.store, backend_options.group_rank, backend_options.group_size, timeout)
    return group


_LEAVING = []  # (store, rank, size, timeout, pid) of the job this process joined

# A program that never calls destroy_process_group() (or whose DDP model
# keeps a group alive after it) would leave the groups' threads running into
# the interpreter's finalization, where a thread that drops a tensor dies
# taking the GIL and aborts the process: they are shut down at exit, while
# Python still runs. Registered first, so that it runs after _leave (atexit
# runs in reverse order). The completions their last operations posted are
# then drained too.


def _shut_down_at_exit():
    _plugin._shutdown_all()
    _plugin._drain_completions(timedelta(seconds=10))


atexit.register(_shut_down_at_exit)


def _leave_at_exit(store, rank, size, timeout):
    """The leave protocol of a job's processes, at interpreter exit.

    Rank 0 hosts the store with env:// and tcp://, and torch's
    init_process_group reads it after the backend is made (torch 1.13's
    store-based barrier polls it every 10 ms): a rank 0 that exits at once
    would take the store from ranks still polling. So every other rank says
    it leaves, as its last use of the store, and rank 0 waits for them
    before it exits (at most the group's timeout, and 60 s). Rank 0 shuts
    its groups down first: a rank waiting for it in a call (rank 0 failed,
    say) gets its error now and leaves, instead of holding rank 0 here.
    """
    if _LEAVING:
        return  # once per process: the first group of every rank
    _LEAVING.append((store, rank, size, timeout, os.getpid()))
    atexit.register(_leave)


def _leave():
    store, rank, size, timeout, pid = _LEAVING[0]
    if pid != os.getpid():
        return  # a forked child's exit: the job's rank is its parent, which leaves later
    try:
        if rank != 0:
            store.set(f"tdist/left/{rank}", "1")
        elif size > 1:
            try:
                _plugin._shutdown_all()
            except Exception:  # noqa: BLE001 - the wait below is still owed to the other ranks
                pass
            store.wait([f"tdist/left/{r}" for r in range(1, size)], min(timeout, timedelta(seconds=60)))
    except Exception:  # noqa: BLE001 - a peer gone before us, or the store: nothing to wait for
        pass


def backend_of(group=None):
    """The ProcessGroupTdist that runs `group`'s CPU tensors (a torch
    ProcessGroup; None: the default group), or None if another backend does.
    torch 2 keeps backends behind its ProcessGroup:
    ``group._get_backend(torch.device("cpu"))``."""
    pg = c10d._get_default_group() if group is None else group
    if isinstance(pg, ProcessGroupTdist):
        return pg
    try:
        backend = pg._get_backend(torch.device("cpu"))
    except (RuntimeError, ValueError):
        return None
    # Under TORCH_DISTRIBUTED_DEBUG=DETAIL torch wraps it in its checking wrapper.
    backend = getattr(backend, "wrapped_pg", backend)
    return backend if isinstance(backend, ProcessGroupTdist) else None


def _as_timedelta(timeout):
    if isinstance(timeout, timedelta):
        return timeout
    return timedelta(seconds=float(timeout))


def is_registered():
    """True once "tdist" is a torch.distributed backend."""
    return BACKEND_NAME.upper() in dist.Backend._plugins


def register():
    """Registers "tdist" with torch.distributed (once; later calls do nothing)."""
    if not is_registered():
        dist.Backend.register_backend(BACKEND_NAME, create_process_group, extended_api=True, devices=["cpu"])
