"""Batched point-to-point operations: P2POp and batch_isend_irecv, as paddle
defines them (``peer`` is a global rank, ``group`` defaults to the global
group)."""

from tdist.paddle import communication
from tdist.paddle import group as _group


class P2POp:
    """One send or receive of ``batch_isend_irecv``:
    ``P2POp(dist.isend, tensor, peer)`` or ``P2POp(dist.irecv, tensor, peer)``."""

    def __init__(self, op, tensor, peer, group=None):
        if op not in (communication.isend, communication.irecv):
            raise RuntimeError("Invalid ``op`` function. Expected ``op`` to be of type "
                               "``paddle.distributed.isend`` or ``paddle.distributed.irecv``.")
        _group.check_group(group, "P2POp")
        self.op = op
        self.tensor = tensor
        self.peer = peer
        self.group = _group.global_group() if group is None else group

    def __repr__(self):
        return f"P2POp({self.op.__name__}, peer={self.peer}, group={self.group.id})"


def batch_isend_irecv(p2p_op_list):
    """Posts every operation of the list, in order, and returns their tasks.
    All must use groups of one backend (paddle's rule; tdist has one)."""
    if not isinstance(p2p_op_list, list) or not p2p_op_list or not all(
            isinstance(p, P2POp) for p in p2p_op_list):
        raise RuntimeError("Invalid ``p2p_op_list``. Each op is expected to to be of type "
                           "``paddle.distributed.P2POp``.")
    if _group.skip_non_member(p2p_op_list[0].group, "batch_isend_irecv"):
        return None
    tasks = []
    for p in p2p_op_list:
        task = p.op(p.tensor, p.peer, p.group)
        if task is not None:
            tasks.append(task)
    return tasks
