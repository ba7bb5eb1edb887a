"""Continuing without a dead rank: ULFM's revoke, shrink and agree.

One implementation for C++ and Python: these call tdist's C++ ``revoke``,
``shrink`` and ``agree`` (include/tdist/distributed.h). shrink and agree
meet in the group's store, so they work when the group's connections are
broken; every survivor makes its shrink and agree calls on a group in the
same order. docs/fault-tolerance.md ("Continuing without a dead rank")
compares them with MPIX_Comm_revoke, MPIX_Comm_shrink and MPIX_Comm_agree.

A rank counts as failed once the group saw it die (its connection broke
without a goodbye, or its process is gone) or once it has not come within
`timeout` (a ``datetime.timedelta`` or seconds; default: the group's
timeout). A process that is not a member of the group gets
DistInvalidArgument.
"""

from tdist import _C
from tdist._C import DistInvalidArgument
from tdist.distributed_c10d import NOT_MEMBER, _check_timeout, resolve_group


def _member_group(group, op):
    g = resolve_group(group, op)
    if g is NOT_MEMBER:
        raise DistInvalidArgument(f"{op}: this process is not a member of the group "
                                  "(GroupMember.NON_GROUP_MEMBER); only members may call it")
    return g


def revoke(group=None):
    """Revokes `group` (None: the default group). Not collective: any member
    may call it, from any thread. Every pending and later operation of the
    group fails on every member that can be reached, those not in a call at
    their next one; only shrink, agree and destroy_process_group remain
    meant for it."""
    _C.revoke(_member_group(group, "revoke"))


def shrink(group=None, timeout=None):
    """Called by every survivor of `group`: returns a new group of the
    survivors, ranked 0..n-1 in the order of their ranks in `group`, the
    same membership on every survivor; ranks that died (also during the
    call) are left out. A survivor that comes after the others decided
    without it raises DistBackendError. The new group has the old one's
    backend and timeout and is destroyed with the default group."""
    return _C.shrink(_member_group(group, "shrink"), _check_timeout("shrink", timeout))


def agree(flag, group=None, timeout=None):
    """Called by every survivor of `group`: returns the bitwise AND of the
    `flag` (an int that fits in 64 signed bits) of the survivors that took
    part, the same value on every survivor that returns, even if ranks die
    during the call. The flag comes first, as the tensor does in the
    collectives. A survivor that comes after the others decided raises
    DistBackendError."""
    return _C.agree(int(flag), _member_group(group, "agree"), _check_timeout("agree", timeout))
