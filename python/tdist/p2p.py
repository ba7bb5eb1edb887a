"""Point-to-point communication: send, recv, sendrecv, isend, irecv, P2POp
and batch_isend_irecv. Ranks (dst, src, peer) are global ranks, as in torch.

Messages match by (source, tag) in the order they were sent. Each carries
its dtype and element count: the receiving tensor must have the sender's
(its shape may differ), or the receive raises DistBackendError naming both
sides and leaves the tensor as it was (docs/errors.md says when the sender
learns of it).
"""

import numbers

from tdist import _C, _work
from tdist._C import DistInvalidArgument
from tdist.distributed_c10d import NOT_MEMBER, peer_rank, resolve_group

_MAX_TAG = 2**31 - 1


def _check_tag(op, tag):
    """Raises unless `tag` is a user tag: an int from 0 to 2**31 - 1. Negative
    tags are tdist's own (torch's Gloo rejects them too: "Tag must be
    nonnegative"); larger ones do not fit the 32 bits tags travel in."""
    if not isinstance(tag, numbers.Integral):
        raise TypeError(f"{op}: tag must be an int, not {type(tag).__name__}")
    if tag < 0:
        raise DistInvalidArgument(f"{op}: tag {tag} is invalid: tags must be non-negative (0 to {_MAX_TAG}); "
                                  "negative tags are reserved for tdist's own messages")
    if tag > _MAX_TAG:
        raise DistInvalidArgument(f"{op}: tag {tag} is invalid: tags must be at most {_MAX_TAG} "
                                  "(they travel as 32-bit integers)")
    return int(tag)


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Sends `tensor` to global rank `dst` (or group rank `group_dst`) and
    returns once it is sent.

    Does nothing on a rank outside `group`. Raises DistInvalidArgument if
    `dst` is this rank or not in the group.
    """
    tag = _check_tag("send", tag)
    g = resolve_group(group, "send")
    if g is not NOT_MEMBER:
        _C.send(tensor, peer_rank("send", g, dst, group_dst, "dst"), g, tag)


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receives into `tensor` from global rank `src` (or group rank
    `group_src`; neither: any rank) and returns the sender's global rank (-1
    on a rank outside `group`).

    Raises DistBackendError if the message's dtype or element count differs
    from the tensor's, DistInvalidArgument if `src` is this rank.
    """
    tag = _check_tag("recv", tag)
    g = resolve_group(group, "recv")
    if g is NOT_MEMBER:
        return -1
    if group_src is not None:
        src = peer_rank("recv", g, src, group_src, "src")
    return _C.recv(tensor, src, g, tag)


def sendrecv(send_tensor, dst, recv_tensor, src=None, group=None, tag=0):
    """Sends `send_tensor` to global rank `dst` while receiving into
    `recv_tensor` from global rank `src` (None: any rank), as MPI_Sendrecv;
    returns the sender's global rank once both are done (-1 on a rank
    outside `group`). A ring of ranks that each send to the next and receive
    from the previous cannot deadlock, whatever the sizes. tdist's own:
    torch.distributed has no sendrecv (there, ``batch_isend_irecv`` of the
    two and a wait for both).
    """
    tag = _check_tag("sendrecv", tag)
    g = resolve_group(group, "sendrecv")
    if g is NOT_MEMBER:
        return -1
    return _C.sendrecv(send_tensor, dst, recv_tensor, src, g, tag)


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Starts sending `tensor` to global rank `dst` (or group rank
    `group_dst`); returns a Work (None outside `group`). `tensor` is kept
    alive until the send completes; do not modify it before."""
    return _start_send(_C.isend, tensor, dst, group, _check_tag("isend", tag), group_dst)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    """Starts receiving into `tensor` from global rank `src` (or group rank
    `group_src`; neither: any rank); returns a Work (None outside `group`)
    whose ``source_rank()`` names the sender."""
    return _start_recv(_C.irecv, tensor, src, group, _check_tag("irecv", tag), group_src)


def _start_send(post, tensor, dst, group, tag, group_dst=None):
    g = resolve_group(group, "isend")
    if g is NOT_MEMBER:
        return None
    dst = peer_rank("isend", g, dst, group_dst, "dst")
    return _work.wrap(post(tensor, dst, g, tag), "isend", (tensor,), [tensor])


def _start_recv(post, tensor, src, group, tag, group_src=None):
    """The Work of a posted receive; it keeps its group to name the sender."""
    g = resolve_group(group, "irecv")
    if g is NOT_MEMBER:
        return None
    if group_src is not None:
        src = peer_rank("irecv", g, src, group_src, "src")
    work = _work.wrap(post(tensor, src, g, tag), "irecv", (tensor,), [tensor])
    if work is not None:
        work._group = g
    return work


class P2POp:
    """One operation of ``batch_isend_irecv``: ``P2POp(tdist.isend, tensor, peer)``
    or ``P2POp(tdist.irecv, tensor, peer)``, with optional group and tag."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (isend, irecv):
            raise DistInvalidArgument("P2POp: op must be tdist.isend or tdist.irecv")
        if peer is None and group_peer is None:
            raise DistInvalidArgument("P2POp: give peer (a global rank) or group_peer")
        if peer is None:
            peer = _C.get_global_rank(resolve_group(group, "P2POp"), group_peer)
        self.op = op
        self.tensor = tensor
        self.peer = peer
        self.group = group
        self.tag = tag

    def __repr__(self):
        return f"P2POp({self.op.__name__}, peer={self.peer}, tag={self.tag})"


def batch_isend_irecv(p2p_op_list):
    """Posts every P2POp of the list (its sends, then its receives) and returns
    their Work handles, in the list's order.

    All operations must use the same group. Posting is non-blocking, so rings
    of sends and receives (each rank sending right and receiving left) work.
    """
    if not isinstance(p2p_op_list, (list, tuple)) or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise DistInvalidArgument("batch_isend_irecv: expected a list of P2POp")
    if not p2p_op_list:
        raise DistInvalidArgument("batch_isend_irecv: the list of operations is empty")
    default = _C.default_group() if _C.is_initialized() else None
    groups = {None if g is default else g for g in (resolve_group(p.group, "batch_isend_irecv") for p in p2p_op_list)}
    if len(groups) > 1:
        raise DistInvalidArgument("batch_isend_irecv: all operations must use the same group")
    for p in p2p_op_list:  # every tag, before the first operation is posted
        _check_tag("batch_isend_irecv", p.tag)
    # The sends first, then the receives, each in the list's order (as the
    # C++ batch_isend_irecv): a receive posted after its peer's send of the
    # same batch has come finishes inside its post. Messages match per
    # sender, receiver and tag, so the order between the kinds pairs nothing
    # differently. The works come back in the list's order.
    works = [None] * len(p2p_op_list)
    for kind in (isend, irecv):
        for i, p in enumerate(p2p_op_list):
            if p.op is kind:
                works[i] = p.op(p.tensor, p.peer, p.group, p.tag)
    return works
