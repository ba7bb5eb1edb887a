"""monitored_barrier: a barrier that names the ranks that did not arrive.

Built on point-to-point messages, as gloo's is: every rank reports to the
group's first rank, which waits for each with a deadline and then releases
them. The messages use a reserved negative tag, so they never meet user
messages (user tags are >= 0).
"""

import time
from datetime import timedelta

from tdist import _C
from tdist._C import DistError, DistTimeoutError
from tdist.distributed_c10d import NOT_MEMBER, get_process_group_ranks, get_rank, resolve_group
from tdist.p2p import _irecv_reserved as irecv
from tdist.p2p import _isend_reserved as isend

_TAG = -2  # reserved for monitored_barrier


def _remaining(deadline):
    return timedelta(seconds=max(0.0, deadline - time.monotonic()))


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier that fails, instead of hanging, when ranks do not arrive.

    The group's first rank waits up to `timeout` (a ``datetime.timedelta``;
    default: the group's timeout) for every other rank and raises
    DistTimeoutError naming the first rank that did not arrive, or, with
    ``wait_all_ranks=True``, all of them. The other ranks raise
    DistTimeoutError if the first rank does not release them in time. For
    debugging: it costs 2 messages per rank through one rank.
    """
    import numpy

    g = resolve_group(group, "monitored_barrier")
    if g is NOT_MEMBER:
        return
    c_group = g if g is not None else _C.default_group()
    if timeout is None:
        timeout = c_group.timeout
    deadline = time.monotonic() + timeout.total_seconds()
    ranks = get_process_group_ranks(c_group)
    root, me = ranks[0], get_rank()
    if me != root:
        isend(numpy.zeros(1, numpy.uint8), root, g, _TAG).wait()
        try:
            irecv(numpy.zeros(1, numpy.uint8), root, g, _TAG).wait(_remaining(deadline))
        except DistTimeoutError:
            raise DistTimeoutError(f"monitored_barrier: rank {me} was not released by rank {root} within "
                                   f"{timeout} (rank {root} failed, or another rank did not arrive)") from None
        return
    arrivals = {r: irecv(numpy.zeros(1, numpy.uint8), r, g, _TAG) for r in ranks[1:]}
    missing = []
    for r, work in arrivals.items():
        try:
            work.wait(_remaining(deadline))
        except DistTimeoutError:
            missing.append(r)
            if not wait_all_ranks:
                break
        except DistError as error:
            raise type(error)(f"monitored_barrier: rank {r} failed before arriving: {error}") from None
    if missing:
        which = "Ranks " + ", ".join(map(str, missing)) if len(missing) > 1 else f"Rank {missing[0]}"
        raise DistTimeoutError(f"monitored_barrier: {which} failed to pass monitoredBarrier in {timeout} "
                               f"(group's global ranks {ranks})")
    for work in [isend(numpy.zeros(1, numpy.uint8), r, g, _TAG) for r in ranks[1:]]:
        work.wait()
