"""monitored_barrier: a barrier that names the ranks that did not arrive.

One implementation for C++ and Python: this calls tdist's C++
``monitored_barrier`` (include/tdist/distributed.h), which rank 0 runs with a
deadline over point-to-point messages on tags reserved for it, as gloo does.
"""

from tdist import _C
from tdist.distributed_c10d import NOT_MEMBER, _check_timeout, resolve_group


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier that fails, instead of hanging, when ranks do not arrive.

    The group's first rank waits up to `timeout` (a ``datetime.timedelta``;
    default: the group's timeout) for every other rank and raises
    DistTimeoutError "Rank 1 failed to pass monitoredBarrier in 2000 ms ..."
    naming the first group rank that did not arrive or, with
    ``wait_all_ranks=True``, all of them ("Ranks 1, 2 failed to pass
    monitoredBarrier ..."); the ranks that arrived raise the same report. The
    other ranks wait for the first one up to the longer of `timeout` and the
    group's timeout. A zero timeout, as on gloo, passes only the ranks that
    are already there. For debugging: it costs 2 messages per rank through
    one rank.
    """
    g = resolve_group(group, "monitored_barrier")
    if g is NOT_MEMBER:
        return
    _C.monitored_barrier(g, _check_timeout("monitored_barrier", timeout, zero_allowed=True), bool(wait_all_ranks))
