"""Process groups, backends and reduce operators, shaped like
``torch.distributed.distributed_c10d``: ``init_process_group``,
``destroy_process_group``, ``new_group``, rank queries, ``Backend``,
``ReduceOp``/``reduce_op``, ``group.WORLD`` and ``GroupMember``; and, as
torch's module does, the collectives, point-to-point, object collectives,
``Store`` and ``Work`` of ``tdist`` under the same names.
"""

import atexit
import numbers
import operator
import os
import warnings
from datetime import timedelta

from tdist import _C, _detail
from tdist._C import DistInvalidArgument, ProcessGroup, ReduceOp

# Called when the default group is destroyed (tdist.device_mesh forgets the
# groups it made).
_ON_DESTROY_DEFAULT = []

#: The default timeout of process groups (the spec's 30 minutes for CPU backends).
default_pg_timeout = timedelta(minutes=30)

# Backend names of torch.distributed's CPU backends that tdist's own backend
# stands in for: it implements every operation they do (and more).
_CPU_ALIASES = {"gloo", "mpi", "undefined"}
# GPU-only backends: no CPU equivalent to fall back on.
_GPU_BACKENDS = {"nccl", "ucc", "hccl"}


def is_available():
    """True: the tdist package is always usable (torch.distributed.is_available)."""
    return True


def is_tdist_available():
    """True: tdist's own backend is built in (beside torch_npu's is_hccl_available)."""
    return True


def is_gloo_available():
    """True: "gloo" is accepted as a name of tdist's own CPU backend."""
    return True


def is_mpi_available():
    """True: "mpi" is accepted as a name of tdist's own CPU backend."""
    return True


def is_nccl_available():
    """False: tdist runs on CPUs."""
    return False


def is_ucc_available():
    """False: tdist runs on CPUs."""
    return False


def is_torchelastic_launched():
    """True if this process was started by tdistrun (python3 -m tdist.run) or torchrun."""
    return "TDIST_RESTART_COUNT" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ


class Backend(str):
    """Backend names, as torch.distributed.Backend: ``Backend("GLOO")`` is
    ``"gloo"``. tdist's own backend is ``Backend.TDIST``; ``"gloo"`` and
    ``"mpi"`` select it too (it implements everything they do on CPU).
    ``register_backend`` adds a third-party backend."""

    UNDEFINED = "undefined"
    TDIST = "tdist"
    GLOO = "gloo"
    MPI = "mpi"
    NCCL = "nccl"
    UCC = "ucc"

    def __new__(cls, name):
        if not isinstance(name, str):
            raise DistInvalidArgument(f"Backend name must be a string, not {type(name).__name__}")
        value = getattr(Backend, name.upper(), None)
        return value if isinstance(value, str) else name.lower()

    @classmethod
    def register_backend(cls, name, func, extended_api=False, devices=None):
        """Registers a third-party backend under `name` (case-insensitive).

        ``func(store, rank, size, timeout)`` must return a ``tdist.ProcessGroup``
        (e.g. a Python subclass overriding ``backend_name()`` and the operations
        it supports, each taking ``tdist._C.Tensor`` views and returning a
        ``tdist._C.Work``). Afterwards ``init_process_group(name)`` and
        ``new_group(backend=name)`` use it and ``Backend.<NAME>`` is defined.
        ``extended_api`` and ``devices`` are accepted for torch compatibility;
        only CPU is meaningful.
        """
        if hasattr(Backend, name.upper()) and name.lower() not in _C.registered_backends():
            raise DistInvalidArgument(f"register_backend: {name.upper()} is a built-in backend name")
        _C.register_backend(name, func)
        setattr(Backend, name.upper(), name.lower())

    @staticmethod
    def backend_list():
        """The names of the registered backends."""
        return sorted(_C.registered_backends())


def _backend_to_create(backend, op):
    """The registered backend to create for a user-given name ("" = default)."""
    if backend is None:
        return ""
    name = Backend(backend)
    if ":" in name:  # "cpu:gloo,cuda:nccl": tdist only drives the CPU part
        parts = dict(p.split(":", 1) for p in name.split(",") if ":" in p)
        if "cpu" not in parts:
            raise DistInvalidArgument(f"{op}: backend {backend!r} names no CPU backend; tdist runs on CPUs")
        name = parts["cpu"]
    if name in _CPU_ALIASES:
        return "tdist"
    if name in _GPU_BACKENDS:
        raise DistInvalidArgument(
            f"{op}: backend {backend!r} drives GPUs; tdist runs on CPUs: use 'tdist' (or its alias 'gloo')")
    return name


class _ReduceOpAliases:
    """The deprecated ``reduce_op`` namespace: the ReduceOp kinds, with a warning."""

    def __getattr__(self, name):
        value = getattr(ReduceOp.RedOpType, name)
        warnings.warn("torch.distributed.reduce_op is deprecated, please use torch.distributed.ReduceOp "
                      "instead", FutureWarning, stacklevel=2)
        return value

    def __dir__(self):
        return list(ReduceOp.RedOpType.__members__)


#: Deprecated alias of ReduceOp (as torch.distributed.reduce_op): warns on use.
reduce_op = _ReduceOpAliases()


class _WorldProperty(type):
    """Makes ``group.WORLD`` / ``GroupMember.WORLD`` the current default group."""

    @property
    def WORLD(cls):  # noqa: N802 - torch's name
        return _C.default_group() if _C.is_initialized() else None


class group(metaclass=_WorldProperty):  # noqa: N801 - torch's name
    """``group.WORLD``: the default process group (None before init_process_group)."""


class GroupMember(metaclass=_WorldProperty):
    """``GroupMember.WORLD`` (the default group) and ``GroupMember.NON_GROUP_MEMBER``,
    what ``new_group`` returns on ranks outside the new group."""

    NON_GROUP_MEMBER = -100


class _NotMember:
    """Marks a group argument this rank is not part of."""


NOT_MEMBER = _NotMember()


def resolve_group(group_arg, op="this operation"):
    """The _C group for a user's `group` argument: None for the default
    group, NOT_MEMBER for ``GroupMember.NON_GROUP_MEMBER``."""
    if group_arg is None or isinstance(group_arg, ProcessGroup):
        return group_arg
    if isinstance(group_arg, int) and group_arg == GroupMember.NON_GROUP_MEMBER:
        return NOT_MEMBER
    raise TypeError(f"{op}: group must be a tdist.ProcessGroup, None or GroupMember.NON_GROUP_MEMBER, "
                    f"not {type(group_arg).__name__}")


def _check_launcher_agrees(rank, world_size):
    """Raises if an explicit rank contradicts the launcher that started us.

    Under tdistrun or torchrun, a fixed rank in a job of the launcher's size
    means two processes claim one rank (and rank 0's store port): fail at
    once, saying where each value came from, instead of in the rendezvous. A
    different world_size is left alone (a job may be assembled by hand from
    single-process launches), as torch does.
    """
    if rank < 0 or not is_torchelastic_launched():
        return
    env = _C.launch_environment()
    if env["rank"] < 0 or rank == env["rank"]:
        return
    if world_size > 0 and env["world_size"] > 0 and world_size != env["world_size"]:
        return
    raise DistInvalidArgument(
        f"init_process_group: rank={rank} was passed, but the launcher started this process as rank "
        f"{env['rank']} of {env['world_size']} ({env['rank_source']}={env['rank']}); pass "
        f"rank={env['rank']} or leave rank out")


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None, _ranks=None):
    """Initializes the default process group (torch.distributed.init_process_group).

    Args:
        backend: "tdist" (default), or "gloo"/"mpi" (names for the same CPU
            backend), or a name registered with ``Backend.register_backend``.
        init_method: "env://" (default: MASTER_ADDR, MASTER_PORT, RANK,
            WORLD_SIZE), "tcp://host:port" or "file:///path". Excludes `store`.
        timeout: ``datetime.timedelta`` deadline of every operation
            (default 30 minutes) and of the rendezvous; must be positive
            (``timedelta(0)`` is not "no timeout": DistInvalidArgument).
        world_size, rank: required with `store` or tcp:// (unless in the URL);
            taken from the environment for env://.
        store: an explicit ``Store`` shared by all ranks.
        group_name: accepted for compatibility (unused).
        pg_options, device_id: accepted for compatibility; must be None
            (device_id may name the CPU).
        _ranks: torch 2's private argument; must be None.

    Raises DistError if already initialized, DistInvalidArgument for bad
    arguments, DistStoreError/DistTimeoutError if the rendezvous fails.
    """
    if pg_options is not None:
        raise DistInvalidArgument("init_process_group: pg_options are not supported by tdist")
    if device_id is not None and str(device_id) != "cpu":
        raise DistInvalidArgument(f"init_process_group: device_id={device_id!r}; tdist runs on CPUs")
    if _ranks is not None:
        raise DistInvalidArgument("init_process_group: _ranks (torch's private argument) is not supported by tdist")
    if store is not None and init_method is not None:
        raise DistInvalidArgument("init_process_group: init_method and store are mutually exclusive")
    if store is None and init_method in (None, "env://"):
        _check_launcher_agrees(rank, world_size)
    name = _backend_to_create(backend, "init_process_group")
    timeout = _check_timeout("init_process_group", timeout)
    _C.init_process_group(name or "tdist", init_method or "", default_pg_timeout if timeout is None else timeout,
                          world_size, rank, store, group_name)
    _detail.on_init()


@atexit.register
def _destroy_at_exit():
    """At interpreter exit, a default group still there is destroyed as by
    destroy_process_group(), while Python still runs: its calls end (ranks
    waiting on this one get their errors). After the interpreter, rank 0,
    which hosts the store under env:// and tcp://, keeps the store until the
    other ranks have left it (one may still be making a group of its peers:
    docs/python.md, "Rank 0 done first")."""
    if not _C.is_initialized():
        return
    try:
        destroy_process_group()
    except Exception as e:  # noqa: BLE001 - exiting anyway; say why the group did not end cleanly
        warnings.warn(f"tdist: destroying the default process group at exit: {e}", RuntimeWarning, stacklevel=1)


def _check_timeout(op, timeout, zero_allowed=False):
    """`timeout` (None: the default) if it is a positive timedelta (or zero,
    where `zero_allowed`: monitored_barrier's "only who is there"); raises
    otherwise (zero is not "no timeout": torch's Gloo fails at once with it)."""
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, numbers.Real):  # seconds, as the binding takes them
        seconds = timeout
    else:
        return timeout  # None, or for the binding to refuse
    if zero_allowed and seconds == 0:
        return timeout
    if seconds <= 0:
        raise DistInvalidArgument(f"{op}: timeout must be positive, got {seconds:g} s (zero does not mean "
                                  "\"no timeout\"; pass a long one instead)")
    return timeout


def destroy_process_group(group=None):
    """Destroys `group`, or (None or the default group) the default group and
    every group made since init_process_group, so that init_process_group can
    be called again. Calls on a destroyed group raise DistError. As torch
    1.13: AssertionError if the default group is not initialized (before
    init_process_group, or destroyed twice); DistError (a RuntimeError)
    "Invalid process group specified" for another group destroyed twice.

    Rank 0, which hosts the store under env:// and tcp://, returns at once
    but keeps the store serving the other ranks: at exit, or at its next
    init_process_group, it waits until they have left it (destroyed the
    default group, or exited) or are gone, at most the group's timeout and
    60 s. A default group still there at interpreter exit is destroyed then."""
    g = resolve_group(group, "destroy_process_group")
    if g is NOT_MEMBER:
        return
    if g is None and not _C.is_initialized():
        raise AssertionError("destroy_process_group: the default process group is not initialized "
                             "(destroy_process_group() was called before init_process_group(), or twice)")
    is_default = g is None or g is GroupMember.WORLD  # (`group` is the argument here)
    _C.destroy_process_group(g)
    _detail.on_destroy(g)
    if is_default:
        for forget in _ON_DESTROY_DEFAULT:
            forget()


def is_initialized():
    """True once init_process_group has run (and destroy_process_group has not)."""
    return _C.is_initialized()


def get_rank(group=None):
    """This process's rank in `group` (default: the global rank); -1 if it is
    not a member. Raises DistError before init_process_group."""
    g = resolve_group(group, "get_rank")
    return -1 if g is NOT_MEMBER else _C.get_rank(g)


def get_world_size(group=None):
    """The number of ranks in `group` (default: all); -1 if this process is
    not a member."""
    g = resolve_group(group, "get_world_size")
    return -1 if g is NOT_MEMBER else _C.get_world_size(g)


def get_backend(group=None):
    """The backend name of `group` ("tdist" for tdist's own backend, also when
    it was selected as "gloo")."""
    g = resolve_group(group, "get_backend")
    if g is NOT_MEMBER:
        raise DistInvalidArgument("get_backend: this rank is not a member of the group")
    return Backend(_C.get_backend(g))


def reinit_process_group(group=None, rebuild_link=True):
    """Rebuilds `group`'s connections in place (torch_npu's
    ``torch_npu.distributed.reinit_process_group``). Every member calls it at
    the same point of its calls, with no other thread using the group.
    Operations queued before it (async_op=True) finish first.

    ``rebuild_link=True``: the sockets and shared memory are closed and made
    anew through the group's store; the group counts its collectives from 0
    again, like a new group, and keeps its comm name. Pending point-to-point
    works fail. ``rebuild_link=False``: the connections stay and a barrier
    checks that every member is there. A non-member returns at once. If a
    member never comes, the rebuild raises after the group's timeout and
    every later call on the group raises DistBackendError.

    A member that died may be replaced: a new process with the same rank
    and the same store (tdistrun --restart-policy=failed restarts it) that
    creates the group anew (init_process_group, then the same new_group
    calls) meets the survivors' rebuild, as both are the group's next
    generation (docs/fault-tolerance.md, "Recovering with a replaced
    rank")."""
    g = resolve_group(group, "reinit_process_group")
    if g is NOT_MEMBER:
        return
    _C.reinit_process_group(g, bool(rebuild_link))
    # Under DETAIL the group's twin (which carries the argument checks) is
    # rebuilt with it, as a replacement rank creates both anew.
    entry = _detail._twins.get(id(_C.default_group() if g is None else g))
    if entry is not None:
        _C.reinit_process_group(entry[1], bool(rebuild_link))


def abort(group=None, reason=""):
    """Aborts `group` (None: the default group). Its running operation fails
    on every rank that can be reached, with a DistBackendError naming this
    rank and `reason`; operations queued behind it (async_op=True) fail
    without starting; every later call on the group raises until
    reinit_process_group(group) rebuilds it on every member. Any thread may
    call it, also while another is blocked in a call of the group; only the
    first call counts. A non-member returns at once."""
    g = resolve_group(group, "abort")
    if g is NOT_MEMBER:
        return
    _C.abort_process_group(g, str(reason or ""))


def get_comm_name(group=None):
    """The group's communicator name (torch_npu's get_hccl_comm_name): unique
    in the job, equal on every member, the same for the group's life; None
    on a non-member."""
    g = resolve_group(group, "get_comm_name")
    if g is NOT_MEMBER:
        return None
    return _C.get_comm_name(g) or None


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None, sort_ranks=True):
    """Creates a group of the given global ranks (all when None).

    Every rank of the default group must call it, in the same order, unless
    `use_local_synchronization` is True (then only members need to). Group
    ranks follow ascending global rank (``sort_ranks=False`` is accepted
    only for ranks already in that order). Returns the group on members and
    ``GroupMember.NON_GROUP_MEMBER`` elsewhere. `timeout` defaults to the
    default group's; `backend` to the default group's. `device_id` may only
    name the CPU.
    """
    if pg_options is not None:
        raise DistInvalidArgument("new_group: pg_options are not supported by tdist")
    if device_id is not None and str(device_id) != "cpu":
        raise DistInvalidArgument(f"new_group: device_id={device_id!r}; tdist runs on CPUs")
    if not sort_ranks and ranks is not None and list(ranks) != sorted(ranks):
        raise DistInvalidArgument(f"new_group: sort_ranks=False with ranks {list(ranks)} out of order; tdist "
                                  "numbers group ranks in ascending global rank")
    timeout = _check_timeout("new_group", timeout)
    if ranks is not None:
        ranks = _rank_list("new_group", ranks)
        if not ranks:
            return GroupMember.NON_GROUP_MEMBER  # as torch: a group of no ranks has no member
    ranks = [] if ranks is None else ranks
    if use_local_synchronization and ranks and _C.get_rank(None) not in ranks:
        return GroupMember.NON_GROUP_MEMBER
    g = _C.new_group(ranks, timeout, _backend_to_create(backend, "new_group"), use_local_synchronization)
    g = g if _C.is_member(g) else GroupMember.NON_GROUP_MEMBER
    _detail.on_new_group(g, ranks, timeout, use_local_synchronization)  # TDIST_DEBUG=DETAIL's twin
    return g


def peer_rank(op, group, rank, group_rank, name, default=None):
    """The global rank a call names, given torch 2's pair of arguments: a
    global rank (`src`, `dst`) or a rank in `group` (`group_src`,
    `group_dst`), at most one of them. Neither: `default` (global rank 0 for
    gather, scatter and the object collectives, as torch), else ValueError."""
    if group_rank is not None:
        if rank is not None:
            raise ValueError(f"{op}: give {name} or group_{name}, not both (got {name}={rank}, "
                             f"group_{name}={group_rank})")
        return _C.get_global_rank(group, operator.index(group_rank))
    if rank is None:
        if default is not None:
            return default
        raise ValueError(f"{op}: give {name} (a global rank) or group_{name} (a rank in the group)")
    return rank


def _rank_list(op, ranks):
    """`ranks` as a list of ints; TypeError for a string (whose characters
    are not ranks) or for entries that are not integers."""
    if isinstance(ranks, (str, bytes)):
        raise TypeError(f"{op}: ranks must be a list of ints, not {type(ranks).__name__} {ranks!r}")
    try:
        return [operator.index(r) for r in ranks]
    except TypeError:
        raise TypeError(f"{op}: ranks must be a list of ints, got {ranks!r}") from None


def get_group_rank(group, global_rank):
    """The rank in `group` of global rank `global_rank`; DistInvalidArgument
    if it is not a member."""
    g = resolve_group(group, "get_group_rank")
    if g is NOT_MEMBER:
        raise DistInvalidArgument("get_group_rank: this rank is not a member of the group")
    rank = _C.get_group_rank(g, global_rank)
    if rank < 0:
        raise DistInvalidArgument(f"get_group_rank: global rank {global_rank} is not part of the group "
                                  f"(global ranks {_C.get_process_group_ranks(g)})")
    return rank


def get_global_rank(group, group_rank):
    """The global rank of rank `group_rank` of `group`."""
    g = resolve_group(group, "get_global_rank")
    if g is NOT_MEMBER:
        raise DistInvalidArgument("get_global_rank: this rank is not a member of the group")
    return _C.get_global_rank(g, group_rank)


def get_process_group_ranks(group):
    """The global ranks of the members of `group`, in group-rank order."""
    g = resolve_group(group, "get_process_group_ranks")
    if g is NOT_MEMBER:
        raise DistInvalidArgument("get_process_group_ranks: this rank is not a member of the group")
    return list(_C.get_process_group_ranks(g))


# The collectives, point-to-point and object calls (and the store, work and
# debug names torch's module holds too), reachable here as in
# torch.distributed.distributed_c10d (their modules import this one, so
# they are bound on first use instead of at import).
_REEXPORTED = {
    "tdist.collectives": ("all_gather", "all_gather_into_tensor", "all_gather_into_tensor_uneven", "all_reduce",
                          "all_to_all", "all_to_all_single", "barrier", "broadcast", "gather", "reduce",
                          "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_tensor_uneven", "scatter"),
    "tdist.p2p": ("P2POp", "batch_isend_irecv", "irecv", "isend", "recv", "send"),
    "tdist.objects": ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list"),
    "tdist.monitored": ("monitored_barrier",),
    "tdist._C": ("DistStoreError", "PrefixStore", "Store"),
    "tdist._work": ("Work",),
    "tdist.debug": ("DebugLevel", "get_debug_level"),
}
_REEXPORT_MODULE = {name: module for module, names in _REEXPORTED.items() for name in names}


def __getattr__(name):
    module = _REEXPORT_MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_REEXPORT_MODULE))
