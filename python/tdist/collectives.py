"""The collectives of torch.distributed, on NumPy arrays and CPU torch tensors.

Every function takes ``group`` (None: the default group) and ``async_op``:
False blocks until the operation is complete and returns None; True returns
a Work at once. A rank outside ``group`` does nothing and gets None. Tensors
are used in place (zero copy) and must be C-contiguous; outputs must be
writable. Ranks (src, dst) are global ranks. The GIL is released while a
rank communicates.

tdist also converts a rank's own inputs to the dtype of its output when the
two differ (same-kind casts only), and accepts whole tensors in
``all_to_all`` (as ``all_to_all_single``); torch.distributed rejects both.
"""

import numbers
from datetime import timedelta

from tdist import _C, _detail, _work
from tdist._detail import rows, same, same_list, value
from tdist._tensors import adopt_dtype, adopt_dtype_list, common_output, is_tensor
from tdist.distributed_c10d import NOT_MEMBER, ReduceOp, get_rank, peer_rank, resolve_group


def _splits(sizes):
    return [] if sizes is None else [int(s) for s in sizes]


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """Copies `tensor` of global rank `src` (or group rank `group_src`) into
    `tensor` on every rank of the group."""
    g = resolve_group(group, "broadcast")
    if g is NOT_MEMBER:
        return None
    src = peer_rank("broadcast", g, src, group_src, "src")
    if _detail.enabled():
        _detail.check(g, "broadcast", [same("tensor", tensor), value("src", src)])
    return _work.wrap(_C.broadcast(tensor, src, g, async_op), "broadcast", (tensor,), [tensor])


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces `tensor` across the group with `op`; every rank gets the result in place."""
    g = resolve_group(group, "all_reduce")
    if g is NOT_MEMBER:
        return None
    if _detail.enabled():
        _detail.check(g, "all_reduce", [same("tensor", tensor), value("op", op)])
    return _work.wrap(_C.all_reduce(tensor, op, g, async_op), "all_reduce", (tensor,), [tensor])


def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """Reduces `tensor` across the group with `op` into `tensor` of global rank
    `dst` (or group rank `group_dst`); the other ranks' tensors are left unchanged."""
    g = resolve_group(group, "reduce")
    if g is NOT_MEMBER:
        return None
    dst = peer_rank("reduce", g, dst, group_dst, "dst")
    if _detail.enabled():
        _detail.check(g, "reduce", [same("tensor", tensor), value("dst", dst), value("op", op)])
    return _work.wrap(_C.reduce(tensor, dst, op, g, async_op), "reduce", (tensor,), [tensor])


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Fills `tensor_list` (one tensor per group rank) with every rank's `tensor`."""
    g = resolve_group(group, "all_gather")
    if g is NOT_MEMBER:
        return None
    tensor = adopt_dtype(tensor, common_output(tensor_list), "all_gather", "tensor")
    if _detail.enabled():
        _detail.check(g, "all_gather", [same_list("tensor_list", tensor_list), same("tensor", tensor)])
    work = _C.all_gather(tensor_list, tensor, g, async_op)
    return _work.wrap(work, "all_gather", (tensor_list, tensor), [tensor_list])


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Gathers every rank's `input_tensor` into `output_tensor`, which holds
    group-size times as many elements: concatenated along the first dimension
    or stacked in a new first dimension."""
    g = resolve_group(group, "all_gather_into_tensor")
    if g is NOT_MEMBER:
        return None
    input_tensor = adopt_dtype(input_tensor, output_tensor, "all_gather_into_tensor", "input_tensor")
    if _detail.enabled():
        _detail.check(g, "all_gather_into_tensor",
                      [same("output_tensor", output_tensor), same("input_tensor", input_tensor)])
    work = _C.all_gather_into_tensor(output_tensor, input_tensor, g, async_op)
    return _work.wrap(work, "all_gather_into_tensor", (output_tensor, input_tensor), [output_tensor])


def all_gather_into_tensor_uneven(output, input, output_split_sizes=None, group=None, async_op=False):
    """Like all_gather_into_tensor with unequal parts (torch_npu's extension):
    rank r contributes ``output_split_sizes[r]`` rows (first dimension) and
    `output` holds their sum, in rank order. No padding, no copies. None
    (or an empty list): equal parts, which must divide output's rows."""
    g = resolve_group(group, "all_gather_into_tensor_uneven")
    if g is NOT_MEMBER:
        return None
    input = adopt_dtype(input, output, "all_gather_into_tensor_uneven", "input")
    if _detail.enabled():
        _detail.check(g, "all_gather_into_tensor_uneven", [same("output", output), rows("input", input),
                                                           value("output_split_sizes", _splits(output_split_sizes))])
    work = _C.all_gather_into_tensor_uneven(output, input, _splits(output_split_sizes), g, async_op)
    return _work.wrap(work, "all_gather_into_tensor_uneven", (output, input), [output])


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """Gathers every rank's `tensor` into `gather_list` of global rank `dst`
    (or group rank `group_dst`; neither: global rank 0), one tensor per group
    rank. `gather_list` must be None (or empty) on the other ranks."""
    g = resolve_group(group, "gather")
    if g is NOT_MEMBER:
        return None
    dst = peer_rank("gather", g, dst, group_dst, "dst", default=0)
    if isinstance(gather_list, (list, tuple)) and gather_list and get_rank() == dst:
        tensor = adopt_dtype(tensor, common_output(gather_list), "gather", "tensor")
    if _detail.enabled():  # gather_list is dst's alone
        _detail.check(g, "gather",
                      [same("tensor", tensor), value("dst", dst), _detail.local("gather_list", gather_list)])
    work = _C.gather(tensor, gather_list, dst, g, async_op)
    return _work.wrap(work, "gather", (tensor, gather_list), [] if gather_list is None else [gather_list])


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """Sends ``scatter_list[r]`` of global rank `src` (or group rank
    `group_src`; neither: global rank 0) to group rank r's `tensor`.
    `scatter_list` must be None (or empty) on the other ranks."""
    g = resolve_group(group, "scatter")
    if g is NOT_MEMBER:
        return None
    src = peer_rank("scatter", g, src, group_src, "src", default=0)
    scatter_list = adopt_dtype_list(scatter_list, tensor, "scatter", "scatter_list")
    if _detail.enabled():  # scatter_list is src's alone
        _detail.check(g, "scatter",
                      [same("tensor", tensor), value("src", src), _detail.local("scatter_list", scatter_list)])
    work = _C.scatter(tensor, scatter_list, src, g, async_op)
    return _work.wrap(work, "scatter", (tensor, scatter_list), [tensor])


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduces ``input_list[r]`` across the group with `op` into group rank r's
    `output` (`input_list` has one tensor per group rank)."""
    g = resolve_group(group, "reduce_scatter")
    if g is NOT_MEMBER:
        return None
    input_list = adopt_dtype_list(input_list, output, "reduce_scatter", "input_list")
    if _detail.enabled():
        _detail.check(g, "reduce_scatter",
                      [same("output", output), same_list("input_list", input_list), value("op", op)])
    work = _C.reduce_scatter(output, input_list, op, g, async_op)
    return _work.wrap(work, "reduce_scatter", (output, input_list), [output])


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """reduce_scatter on one tensor: `input` holds group-size blocks of
    `output`'s size (concatenated along the first dimension or stacked)."""
    g = resolve_group(group, "reduce_scatter_tensor")
    if g is NOT_MEMBER:
        return None
    input = adopt_dtype(input, output, "reduce_scatter_tensor", "input")
    if _detail.enabled():
        _detail.check(g, "reduce_scatter_tensor", [same("output", output), same("input", input), value("op", op)])
    work = _C.reduce_scatter_tensor(output, input, op, g, async_op)
    return _work.wrap(work, "reduce_scatter_tensor", (output, input), [output])


def reduce_scatter_tensor_uneven(output, input, input_split_sizes=None, op=ReduceOp.SUM, group=None,
                                 async_op=False):
    """reduce_scatter_tensor with unequal parts (torch_npu's extension): group
    rank r receives the reduction of ``input_split_sizes[r]`` rows. None (or
    an empty list): equal parts, which must divide input's rows."""
    g = resolve_group(group, "reduce_scatter_tensor_uneven")
    if g is NOT_MEMBER:
        return None
    input = adopt_dtype(input, output, "reduce_scatter_tensor_uneven", "input")
    if _detail.enabled():
        _detail.check(g, "reduce_scatter_tensor_uneven", [rows("output", output), same("input", input),
                                                          value("input_split_sizes", _splits(input_split_sizes)),
                                                          value("op", op)])
    work = _C.reduce_scatter_tensor_uneven(output, input, _splits(input_split_sizes), op, g, async_op)
    return _work.wrap(work, "reduce_scatter_tensor_uneven", (output, input), [output])


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    """Sends ``input_tensor_list[r]`` to group rank r and receives rank r's
    tensor into ``output_tensor_list[r]``. Sizes may differ per peer.

    Given two tensors instead of lists, runs all_to_all_single with equal
    splits (torch.distributed would raise).
    """
    if is_tensor(output_tensor_list) and is_tensor(input_tensor_list):
        return all_to_all_single(output_tensor_list, input_tensor_list, group=group, async_op=async_op)
    g = resolve_group(group, "all_to_all")
    if g is NOT_MEMBER:
        return None
    input_tensor_list = adopt_dtype_list(input_tensor_list, common_output(output_tensor_list), "all_to_all",
                                         "input_tensor_list")
    if _detail.enabled():  # sizes may differ per peer: what r sends s must fit what s receives from r
        _detail.check(g, "all_to_all", [_detail.local("output_tensor_list", output_tensor_list),
                                        _detail.local("input_tensor_list", input_tensor_list)],
                      sends=_detail.per_peer(input_tensor_list), recvs=_detail.per_peer(output_tensor_list),
                      send_name="input_tensor_list", recv_name="output_tensor_list")
    work = _C.all_to_all(output_tensor_list, input_tensor_list, g, async_op)
    return _work.wrap(work, "all_to_all", (output_tensor_list, input_tensor_list), [output_tensor_list])


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False):
    """all_to_all on one tensor: `input` is split along the first dimension
    (equally, or by `input_split_sizes` rows) and part r goes to group rank r;
    `output` receives rank r's part at its r-th split."""
    g = resolve_group(group, "all_to_all_single")
    if g is NOT_MEMBER:
        return None
    input = adopt_dtype(input, output, "all_to_all_single", "input")
    if _detail.enabled():
        _check_all_to_all_single(g, output, input, output_split_sizes, input_split_sizes)
    work = _C.all_to_all_single(output, input, _splits(output_split_sizes), _splits(input_split_sizes), g,
                                async_op)
    return _work.wrap(work, "all_to_all_single", (output, input), [output])


def barrier(group=None, async_op=False, device_ids=None, timeout=None):
    """Blocks until every rank of the group has entered the barrier.
    `device_ids` (None or a list of ints, as torch takes) is accepted for
    compatibility and ignored (CPU only); anything else is a TypeError.
    `timeout` (a positive ``timedelta``) bounds the wait of a blocking
    barrier: DistTimeoutError if the others have not all arrived by then
    (the barrier itself keeps the group's deadline)."""
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
        raise ValueError(f"barrier: timeout must be a positive datetime.timedelta, not {timeout!r}")
    if device_ids is not None and not (isinstance(device_ids, (list, tuple))
                                       and all(isinstance(d, numbers.Integral) for d in device_ids)):
        raise TypeError(f"barrier: device_ids must be None or a list of ints, not {device_ids!r}")
    g = resolve_group(group, "barrier")
    if g is NOT_MEMBER:
        return None
    if _detail.enabled():
        _detail.check(g, "barrier", [])
    if timeout is not None and not async_op:
        _work.wrap(_C.barrier(g, True), "barrier").wait(timeout)
        return None
    return _work.wrap(_C.barrier(g, async_op), "barrier")


def _check_all_to_all_single(g, output, input, output_split_sizes, input_split_sizes):
    """TDIST_DEBUG=DETAIL's check of all_to_all_single: with equal splits
    every rank passes the same shapes; with split sizes the rows rank r sends
    rank s are the rows s receives from r, and the rows' shapes agree."""
    if output_split_sizes is None and input_split_sizes is None:
        _detail.check(g, "all_to_all_single", [same("output", output), same("input", input)])
        return
    size = _C.get_world_size(g)

    def splits(sizes, t):
        if sizes is not None:
            return [f"{int(n)} rows" for n in sizes]
        count = t.shape[0] // size if is_tensor(t) and len(t.shape) > 0 and size > 0 else 0
        return [f"{count} rows"] * size
    fields = [rows("output", output), rows("input", input), _detail.shown("output_split_sizes", output_split_sizes),
              _detail.shown("input_split_sizes", input_split_sizes)]
    _detail.check(g, "all_to_all_single", fields,
                  sends=splits(input_split_sizes, input), recvs=splits(output_split_sizes, output),
                  send_name="input", recv_name="output")
