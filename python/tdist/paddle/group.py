"""paddle's ``Group`` and its registry: ids, names and membership as
paddle.distributed numbers and names them.

The global group has id 0 and name ``_default_pg``; groups made by
``new_group`` get ids 10, 11, ... (paddle's ``_start_ring_id`` plus
``max(nrings, 9)``) and names ``_default_pg<id>``. A rank outside a group,
and every rank of a one-rank group, is not a member (``is_member()`` is
False, as in paddle): most operations on such a group warn and do nothing.
"""

import numbers
import warnings

import tdist
from tdist._C import DistInvalidArgument


class Group:
    """A communication group (paddle.distributed.communication.group.Group)."""

    def __init__(self, rank_in_group, id, ranks, pg=None, name=None):
        self._rank_in_group = rank_in_group
        self._world_size = len(ranks) if rank_in_group >= 0 else -1
        self._id = id
        self._ranks = ranks
        self._pg = pg
        self._name = name

    @property
    def rank(self):
        """This process's rank in the group; -1 if it is not a member."""
        return self._rank_in_group

    @property
    def ranks(self):
        """The global ranks of the members, ascending."""
        return self._ranks

    @property
    def nranks(self):
        """The number of members."""
        return len(self._ranks)

    @property
    def world_size(self):
        """The number of members; -1 on a rank that is not one (as paddle)."""
        return self._world_size

    @property
    def name(self):
        return self._name

    @property
    def id(self):
        return self._id

    @property
    def process_group(self):
        """tdist's ProcessGroup of the group (None on non-members)."""
        return self._pg

    @property
    def backend(self):
        """"GLOO": tdist stands in for paddle's CPU backend."""
        return "GLOO"

    def is_member(self):
        """True if this rank belongs to the group and the group has 2 or more ranks."""
        return self.rank >= 0 and self.nranks >= 2

    def get_group_rank(self, rank):
        """The group rank of global rank `rank` (-1 on a non-member);
        ValueError if `rank` is not in the group."""
        if self.is_member():
            return self.ranks.index(rank)
        return -1

    def __repr__(self):
        ranks = ", ".join(map(str, self.ranks))
        return f"rank: {self.rank}, nranks: {self.nranks}, id: {self.id}, ranks: {ranks}; name: {self.name or 'None'}"


GLOBAL_GROUP_ID = 0
DEFAULT_GROUP_NAME = "_default_pg"
_groups = {}  # id -> Group
_next_id = [0]  # paddle's _start_ring_id: never reset, as paddle never resets it


def add_group(group):
    if group.id in _groups:
        raise RuntimeError(f"The group with id {group.id} already exist.")
    _groups[group.id] = group


def new_group_id():
    _next_id[0] += 1
    return _next_id[0] + 9  # paddle: _start_ring_id + max(nrings, 9), nrings being 1


def global_group():
    """The global Group; RuntimeError (paddle's) before init_parallel_env."""
    group = _groups.get(GLOBAL_GROUP_ID)
    if group is None:
        raise RuntimeError("The global group is not initialized.")
    return group


def is_initialized():
    return GLOBAL_GROUP_ID in _groups


def global_group_or_none():
    """The global Group, or None before init_parallel_env (one rank alone)."""
    return _groups.get(GLOBAL_GROUP_ID)


def groups():
    return _groups


def check_group(group, fn):
    """TypeError unless `group` is None or a Group."""
    if group is not None and not isinstance(group, Group):
        raise TypeError(f"{fn}: group must be a tdist.paddle Group (from new_group) or None, "
                        f"not {type(group).__name__}")


def skip_non_member(group, fn):
    """paddle's _warn_cur_rank_not_in_group: True (after a warning) if this
    rank is not a member of `group`, so the caller does nothing."""
    check_group(group, fn)
    if group is not None and not group.is_member():
        rank = tdist.get_rank() if tdist.is_initialized() else -1
        warnings.warn(f"Current global rank {rank} is not in group {group.name}")
        return True
    return False


def raise_non_member(group, fn):
    """What paddle's all_gather and recv do on a non-member: RuntimeError."""
    check_group(group, fn)
    if group is not None and not group.is_member():
        raise RuntimeError("The group should not be None and all ranks which invoke this operation should be the "
                           "member of this group.")


def resolve(group):
    """`group`, or the global group for None."""
    return global_group() if group is None else group


def tdist_group(group):
    """The group argument for tdist's functions: None for the global group."""
    return None if group.id == GLOBAL_GROUP_ID else group.process_group


def group_rank_or_throw(global_rank, group, fn, arg):
    """The group rank of `global_rank`; DistInvalidArgument (a ValueError,
    as paddle's list.index raises) if it is not in the group."""
    if not isinstance(global_rank, numbers.Integral) or isinstance(global_rank, bool):
        raise TypeError(f"{fn}: {arg} must be an int (a global rank), not {type(global_rank).__name__}")
    global_rank = int(global_rank)
    if global_rank not in group.ranks:
        raise DistInvalidArgument(f"{fn}: the input rank {global_rank} can not be found inside the group "
                             f"{group.name} (global ranks {group.ranks})")
    return group.ranks.index(global_rank)


def get_group(id=0):
    """The Group with id `id` (0: the global group); None with a warning if
    there is none."""
    if id in _groups:
        return _groups[id]
    warnings.warn(f"Group {id} is not initialized.")
    return None
