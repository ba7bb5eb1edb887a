"""paddle.distributed's collective API (the non-stream names, argument
orders and defaults), built on tdist.paddle.stream as paddle builds it on
paddle.distributed.stream. Every function returns a task (complete when
``sync_op=True``) or None on a rank outside `group`."""

from tdist.paddle import _task
from tdist.paddle import group as _group
from tdist.paddle import stream
from tdist.paddle.reduce_op import ReduceOp


def all_reduce(tensor, op=ReduceOp.SUM, group=None, sync_op=True):
    """Reduces `tensor` over the group with `op`, in place on every rank."""
    return stream.all_reduce(tensor, op=op, group=group, sync_op=sync_op, use_calc_stream=False)


def broadcast(tensor, src, group=None, sync_op=True):
    """Copies `tensor` of global rank `src` into `tensor` on every rank."""
    return stream.broadcast(tensor, src, group=group, sync_op=sync_op, use_calc_stream=False)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, sync_op=True):
    """Reduces `tensor` over the group into `tensor` of global rank `dst`."""
    return stream.reduce(tensor, dst=dst, op=op, group=group, sync_op=sync_op, use_calc_stream=False)


def all_gather(tensor_list, tensor, group=None, sync_op=True):
    """Gathers every rank's `tensor` into `tensor_list` (an empty list is
    extended with one new tensor per group rank)."""
    return stream.all_gather(tensor_list, tensor, group, sync_op)


def scatter(tensor, tensor_list=None, src=0, group=None, sync_op=True):
    """Sends ``tensor_list[r]`` of global rank `src` into `tensor` of group rank r."""
    return stream.scatter(tensor, tensor_list, src, group, sync_op)


def gather(tensor, gather_list=None, dst=0, group=None, sync_op=True):
    """Gathers every rank's `tensor` into `gather_list` of global rank `dst`
    (an empty list is extended with one new tensor per group rank)."""
    return stream.gather(tensor, gather_list, dst, group, sync_op)


def reduce_scatter(tensor, tensor_list, op=ReduceOp.SUM, group=None, sync_op=True):
    """Reduces ``tensor_list[r]`` over the group into `tensor` of group rank r."""
    return stream.reduce_scatter(tensor, tensor_list, op, group, sync_op)


def alltoall(out_tensor_list, in_tensor_list, group=None, sync_op=True):
    """Sends ``in_tensor_list[r]`` to group rank r and receives rank r's into
    ``out_tensor_list[r]`` (an empty list is extended). The output comes
    first, as in paddle 3 (paddle 2 put the input first)."""
    return stream.alltoall(out_tensor_list, in_tensor_list, group, sync_op, False)


def alltoall_single(out_tensor, in_tensor, in_split_sizes=None, out_split_sizes=None, group=None, sync_op=True):
    """all-to-all on one tensor each, output first as in paddle 3 (whose
    split sizes come input first, unlike stream.alltoall_single's)."""
    return stream.alltoall_single(out_tensor, in_tensor, out_split_sizes, in_split_sizes, group, sync_op, False)


def send(tensor, dst=0, group=None, sync_op=True):
    """Sends `tensor` to global rank `dst`."""
    return stream.send(tensor, dst=dst, group=group, sync_op=sync_op, use_calc_stream=False)


def recv(tensor, src=0, group=None, sync_op=True):
    """Receives into `tensor` from global rank `src`."""
    return stream.recv(tensor, src=src, group=group, sync_op=sync_op, use_calc_stream=False)


def isend(tensor, dst, group=None):
    """Starts sending `tensor` to `dst`; returns a task (None outside `group`)."""
    return send(tensor, dst, group, sync_op=False)


def irecv(tensor, src=None, group=None):
    """Starts receiving into `tensor` from `src` (None: any rank); returns a task."""
    return recv(tensor, src, group, sync_op=False)


def barrier(group=None):
    """Blocks until every rank of the group has entered the barrier."""
    import tdist
    if group is not None:
        _group.check_group(group, "barrier")
        if not group.is_member():
            return None
    g = _group.resolve(group)
    tdist.barrier(_group.tdist_group(g))
    return None


def wait(tensor, group=None, use_calc_stream=True):
    """paddle's stream synchronization: on a GPU, later computation waits for
    the group's communication. On CPUs: waits for the group's collectives
    started with sync_op=False (raising the first error), so that `tensor`
    holds its results. Point-to-point tasks are left alone: wait on their
    task."""
    _group.check_group(group, "wait")
    g = _group.resolve(group)
    if group is not None and not g.is_member():
        return None
    _task.wait_group(g)
    return None
