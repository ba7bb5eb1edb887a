"""torch_npu's additions to torch.distributed, for groups on the tdist backend.

``torch_npu.distributed`` adds these to programs written for Ascend's HCCL;
the same calls work on tdist groups (``import tdist.torch``, then use
``tdist.torch.<name>`` where the program says ``torch_npu.distributed.<name>``):

- ``reinit_process_group(group=None, rebuild_link=True)``
- ``all_gather_into_tensor_uneven(output, input, output_split_sizes=None, group=None, async_op=False)``
- ``reduce_scatter_tensor_uneven(output, input, input_split_sizes=None, op=ReduceOp.SUM, group=None,
  async_op=False)``
- ``get_comm_name(group=None)``; also
  ``group._get_backend(device).get_hccl_comm_name(rank)``, torch_npu's spelling
- ``is_tdist_available()``, also as ``torch.distributed.is_tdist_available``
  (torch_npu adds ``is_hccl_available`` there)

docs/torch_npu.md lists each with how it behaves.
"""

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from tdist.torch.backend import backend_of


def is_tdist_available():
    """True: the tdist backend is registered (this module imported it)."""
    return True


def _tdist_group(group, op):
    """The ProcessGroupTdist for `group` (None: the default group), or None
    on a rank that is not a member. Raises ValueError for another backend."""
    if not dist.is_initialized():
        raise RuntimeError(f"{op}: the default process group is not initialized (call init_process_group first)")
    if c10d._rank_not_in_group(group):
        return None
    pg = backend_of(group)
    if pg is None:
        raise ValueError(f"{op}: the group runs on backend {dist.get_backend(group)!r}; "
                         "only groups of the 'tdist' backend have it")
    return pg


def _splits(sizes, op, name):
    if sizes is None:
        return []
    try:
        return [int(s) for s in sizes]
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {name} must be a list of ints or None, got {sizes!r}") from None


def _finish(work, async_op):
    if async_op:
        return work
    work.wait()
    return None


def all_gather_into_tensor_uneven(output, input, output_split_sizes=None, group=None, async_op=False):
    """all_gather_into_tensor with unequal parts: group rank r contributes
    ``output_split_sizes[r]`` rows (dim 0) of `output`, which holds their sum
    in rank order; no padding, no copies. None: equal parts, which must divide
    output's rows. Sizes must have one entry per rank and sum to output's
    rows (ValueError otherwise, naming both)."""
    op = "all_gather_into_tensor_uneven"
    pg = _tdist_group(group, op)
    if pg is None:
        return None
    return _finish(pg._all_gather_into_tensor_uneven(output, input, _splits(output_split_sizes, op,
                                                                            "output_split_sizes")), async_op)


def reduce_scatter_tensor_uneven(output, input, input_split_sizes=None, op=dist.ReduceOp.SUM, group=None,
                                 async_op=False):
    """reduce_scatter_tensor with unequal parts: group rank r receives the
    reduction (`op`) of rows ``input_split_sizes[r]`` of every rank's
    `input`. None: equal parts, which must divide input's rows."""
    name = "reduce_scatter_tensor_uneven"
    pg = _tdist_group(group, name)
    if pg is None:
        return None
    return _finish(pg._reduce_scatter_tensor_uneven(output, input, _splits(input_split_sizes, name,
                                                                           "input_split_sizes"), op), async_op)


def reinit_process_group(group=None, rebuild_link=True):
    """Rebuilds the group's connections in place (None: the default group).

    Every member calls it at the same point of its calls, with no other
    thread using the group. Operations issued before it finish first.
    ``rebuild_link=True``: the sockets and shared memory are closed and made
    anew through the group's store; the group then numbers its collectives
    from 0 again, like a new group, and keeps its comm name. Pending
    point-to-point works fail. ``rebuild_link=False``: the connections stay,
    and a barrier over them checks that every member is there. A rank that
    is not a member returns at once. If a member never comes, the rebuild
    raises after the group's timeout and every later call on the group
    raises."""
    pg = _tdist_group(group, "reinit_process_group")
    if pg is not None:
        pg.reinit(bool(rebuild_link))


def get_comm_name(group=None):
    """The group's communicator name: unique in the job, equal on every
    member, the same for the group's life (reinit included). None on a rank
    that is not a member."""
    pg = _tdist_group(group, "get_comm_name")
    return None if pg is None else pg.get_comm_name()


__all__ = ["all_gather_into_tensor_uneven", "get_comm_name", "is_tdist_available", "reduce_scatter_tensor_uneven",
           "reinit_process_group"]
