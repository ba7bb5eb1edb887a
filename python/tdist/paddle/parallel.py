"""Setting up and tearing down: init_parallel_env, new_group,
destroy_process_group, and the rank and backend queries of
paddle.distributed, on tdist's process groups."""

import datetime
import os
import warnings

import tdist
from tdist._C import DistInvalidArgument
from tdist._spawn import url_host
from tdist.paddle import group as _group
from tdist.paddle.env import ParallelEnv, rendezvous_endpoint
from tdist.paddle.group import Group

_default_timeout = datetime.timedelta(seconds=1800)
_CPU_BACKENDS = {None, "auto", "gloo", "tdist"}


def is_available():
    """True: tdist.paddle always works on CPUs."""
    return True


def is_initialized():
    """True once init_parallel_env created the global group (and it was not destroyed)."""
    return _group.is_initialized()


def init_parallel_env(nccl_config=None):
    """Joins the other ranks and returns the global Group (id 0).
    `nccl_config` (NCCL's settings) is taken and ignored, as by paddle on CPUs.

    Rank and world size come from PADDLE_TRAINER_ID / PADDLE_TRAINERS_NUM (or
    RANK / WORLD_SIZE), the meeting point from MASTER_ADDR:MASTER_PORT, else
    PADDLE_MASTER, else the first PADDLE_TRAINER_ENDPOINTS entry (env.py).
    With a world size below 2 it warns and returns None, as paddle does.
    Called again, it returns the existing global group.
    """
    env = ParallelEnv()
    if env.world_size < 2:
        warnings.warn("Currently not a parallel execution environment, `paddle.distributed.init_parallel_env` "
                      "will not do anything.")
        return None
    if _group.is_initialized():
        return _group.global_group()
    backend = os.environ.get("PADDLE_DISTRI_BACKEND", "auto")
    if backend not in _CPU_BACKENDS:
        raise DistInvalidArgument(f"init_parallel_env: PADDLE_DISTRI_BACKEND={backend!r}; tdist runs on CPUs "
                                  "(use 'gloo' or 'auto')")
    rank, world_size = env.rank, env.world_size
    if not 0 <= rank < world_size:
        raise DistInvalidArgument(f"init_parallel_env: rank {rank} is outside [0, {world_size}) "
                                  "(PADDLE_TRAINER_ID/RANK and PADDLE_TRAINERS_NUM/WORLD_SIZE)")
    host, port = rendezvous_endpoint()
    if not tdist.is_initialized():
        tdist.init_process_group("tdist", init_method=f"tcp://{url_host(host)}:{port}", rank=rank,
                                 world_size=world_size)
    group = Group(rank, _group.GLOBAL_GROUP_ID, list(range(world_size)), pg=tdist.group.WORLD,
                  name=_group.DEFAULT_GROUP_NAME)
    _group.add_group(group)
    tdist.barrier()
    return group


def new_group(ranks=None, backend=None, timeout=_default_timeout, nccl_comm_init_option=0, nccl_config=None):
    """Creates a group of the given global ranks (all when None) and returns
    its Group on every rank (with rank -1 on non-members). Every rank of the
    global group must call it, in the same order. `backend`: None, "gloo"
    or "auto" (tdist's CPU backend); GPU backends raise. The NCCL options
    are taken and ignored, as by paddle on CPUs."""
    if not _group.is_initialized():
        raise AssertionError("Call paddle.distributed.init_parallel_env first to initialize the distributed "
                             "environment.")
    if backend not in _CPU_BACKENDS:
        raise DistInvalidArgument(f"new_group: backend {backend!r} is not available; tdist runs on CPUs "
                                  "(use None, 'gloo' or 'auto')")
    global_group = _group.global_group()
    ranks = list(global_group.ranks) if ranks is None else sorted(int(r) for r in ranks)
    if len(ranks) > len(global_group.ranks):
        raise AssertionError("Size of new group must be less than or equal to that of the default global group.")
    bad = [r for r in ranks if not 0 <= r < global_group.nranks]
    if bad or len(set(ranks)) != len(ranks):
        raise DistInvalidArgument(f"new_group: ranks {ranks} must be distinct global ranks in "
                                  f"[0, {global_group.nranks})")
    gid = _group.new_group_id()
    pg = tdist.new_group(ranks, timeout=timeout)
    me = global_group.rank
    if len(ranks) > 1 and me in ranks:
        group = Group(ranks.index(me), gid, ranks, pg=pg, name=f"{_group.DEFAULT_GROUP_NAME}{gid}")
    else:
        group = Group(-1, gid, ranks, pg=None, name=f"{_group.DEFAULT_GROUP_NAME}{gid}")
        group._tdist_pg = pg  # a one-rank group's own tdist group, destroyed with it
    _group.add_group(group)
    return group


def destroy_process_group(group=None):
    """Destroys `group`; None (or the global group) destroys every group and
    leaves the environment uninitialized. AssertionError (paddle's) for a
    group that does not exist (any more)."""
    _group.check_group(group, "destroy_process_group")
    group = _group.global_group() if group is None else group
    if group.id not in _group.groups():
        raise AssertionError(f"Destroy group with id {group.id} is invalid.")
    if group.id == _group.GLOBAL_GROUP_ID:
        _group.groups().clear()
        if tdist.is_initialized():
            tdist.destroy_process_group()
        return
    del _group.groups()[group.id]
    pg = group.process_group if group.process_group is not None else getattr(group, "_tdist_pg", None)
    if isinstance(pg, tdist.ProcessGroup) and tdist.is_initialized():
        tdist.destroy_process_group(pg)


def get_rank(group=None):
    """This process's rank in `group` (-1 outside it); without a group, its
    global rank, also before init_parallel_env (from the environment)."""
    _group.check_group(group, "get_rank")
    if group is not None:
        return group.rank
    if _group.is_initialized():
        return _group.global_group().rank
    return ParallelEnv().rank


def get_world_size(group=None):
    """The number of ranks of `group` (-1 on non-members, as paddle); without
    a group, of the job, also before init_parallel_env."""
    _group.check_group(group, "get_world_size")
    if group is not None:
        return group.world_size
    if _group.is_initialized():
        return _group.global_group().nranks
    return ParallelEnv().world_size


def get_backend(group=None):
    """"GLOO" (paddle's name of its CPU backend, for which tdist stands in);
    RuntimeError on a non-member, as paddle."""
    if _group.skip_non_member(group, "get_backend"):
        raise RuntimeError("Invalid group specified")
    return _group.resolve(group).backend
