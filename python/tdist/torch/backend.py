"""Registration of the "tdist" backend with torch.distributed."""

from datetime import timedelta

import torch.distributed as dist

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
    return ProcessGroupTdist(
        backend_options.store,
        backend_options.group_rank,
        backend_options.group_size,
        _as_timedelta(backend_options.timeout),
        list(backend_options.global_ranks_in_group),
        backend_options.group_id,
    )


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
        dist.Backend.register_backend(BACKEND_NAME, create_process_group, extended_api=True)
