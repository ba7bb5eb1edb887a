"""paddle.distributed.stream: the collectives with paddle's stream
signatures (output first, tensor-or-list arguments) and the
``use_calc_stream`` flag.

On CPUs there are no streams: ``use_calc_stream`` changes nothing but is
checked as paddle checks it (True only together with ``sync_op=True``,
else RuntimeError). Every function returns a task (complete already when
``sync_op=True``), or None on a rank outside `group` (after a warning;
``all_gather`` and ``recv`` raise RuntimeError there instead, as paddle's do).
Ranks (src, dst) are global ranks.
"""

import warnings

import tdist
from tdist.paddle import group as _group
from tdist.paddle._task import task_of
from tdist.paddle._tensors import as_tdist, as_tdist_list, empty_like, is_tensor, shape_of, split_rows
from tdist.paddle.reduce_op import ReduceOp, to_tdist


def _check_calc_stream(sync_op, use_calc_stream, true_word="true"):
    if not sync_op and use_calc_stream:
        raise RuntimeError(f"use_calc_stream can only be {true_word} in sync op behavior.")


def _start(group, fn, sync_op, use_calc_stream, true_word="true"):
    """The Group to use, or None when this rank is not a member (warned)."""
    if _group.skip_non_member(group, fn):
        return None
    _check_calc_stream(sync_op, use_calc_stream, true_word)
    return _group.resolve(group)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, sync_op=True, use_calc_stream=False):
    """Reduces `tensor` over the group with `op`; every rank gets the result in place."""
    g = _start(group, "all_reduce", sync_op, use_calc_stream)
    if g is None:
        return None
    t = as_tdist(tensor, "all_reduce", "tensor")
    work = tdist.all_reduce(t, to_tdist(op, "all_reduce"), _group.tdist_group(g), async_op=not sync_op)
    return task_of(work, "all_reduce", g)


def all_gather(tensor_or_tensor_list, tensor, group=None, sync_op=True, use_calc_stream=False):
    """Gathers every rank's `tensor` into a list (filled with new tensors like
    `tensor` when empty) or into one tensor of group-size times the rows."""
    _group.raise_non_member(group, "all_gather")
    _check_calc_stream(sync_op, use_calc_stream)
    g = _group.resolve(group)
    inp = as_tdist(tensor, "all_gather", "tensor")
    pg = _group.tdist_group(g)
    if is_tensor(tensor_or_tensor_list):
        out = as_tdist(tensor_or_tensor_list, "all_gather", "tensor_or_tensor_list")
        expected = shape_of(inp)
        if expected:
            expected[0] *= g.nranks
        if shape_of(out) != expected:
            raise RuntimeError(f"The tensor for all_gather is not correctly-sized: shape {shape_of(out)}, "
                               f"expected {expected}.")
        return task_of(tdist.all_gather_into_tensor(out, inp, pg, async_op=not sync_op), "all_gather", g)
    if not isinstance(tensor_or_tensor_list, list):
        raise TypeError(f"all_gather: tensor_or_tensor_list must be a tensor or a list of tensors, not "
                        f"{type(tensor_or_tensor_list).__name__}")
    if len(tensor_or_tensor_list) == 0:
        tensor_or_tensor_list += [empty_like(tensor) for _ in range(g.nranks)]
    elif len(tensor_or_tensor_list) != g.nranks or any(
            shape_of(t) != shape_of(inp) for t in tensor_or_tensor_list):
        raise RuntimeError(f"The tensor_list for all_gather is not correctly-sized: expected {g.nranks} tensors "
                           f"of shape {shape_of(inp)}.")
    outs = as_tdist_list(tensor_or_tensor_list, "all_gather", "tensor_list")
    return task_of(tdist.all_gather(outs, inp, pg, async_op=not sync_op), "all_gather", g)


def alltoall(out_tensor_or_tensor_list, in_tensor_or_tensor_list, group=None, sync_op=True,
             use_calc_stream=False):
    """Sends part r of the input (list entry r, or row block r of a tensor) to
    group rank r and receives rank r's part into part r of the output (an
    empty output list is filled with new tensors like the inputs)."""
    g = _start(group, "alltoall", sync_op, use_calc_stream)
    if g is None:
        return None
    if out_tensor_or_tensor_list is None:
        raise RuntimeError("The output should be specified.")
    if in_tensor_or_tensor_list is None:
        raise RuntimeError("The input should be specified.")
    pg = _group.tdist_group(g)
    out_is_tensor, in_is_tensor = is_tensor(out_tensor_or_tensor_list), is_tensor(in_tensor_or_tensor_list)
    if out_is_tensor and in_is_tensor:
        out = as_tdist(out_tensor_or_tensor_list, "alltoall", "out_tensor")
        inp = as_tdist(in_tensor_or_tensor_list, "alltoall", "in_tensor")
        return task_of(tdist.all_to_all_single(out, inp, group=pg, async_op=not sync_op), "alltoall", g)
    if out_is_tensor or in_is_tensor:
        raise RuntimeError("The output and input should be both tensor or tensor list.")
    if len(in_tensor_or_tensor_list) == 0:
        raise RuntimeError("The input tensor_list should not be empty.")
    if not isinstance(out_tensor_or_tensor_list, list):
        raise TypeError(f"alltoall: the output must be a tensor or a list, not "
                        f"{type(out_tensor_or_tensor_list).__name__}")
    if len(out_tensor_or_tensor_list) == 0:
        out_tensor_or_tensor_list += [empty_like(t) for t in in_tensor_or_tensor_list]
    outs = as_tdist_list(out_tensor_or_tensor_list, "alltoall", "out_tensor_list")
    ins = as_tdist_list(in_tensor_or_tensor_list, "alltoall", "in_tensor_list")
    return task_of(tdist.all_to_all(outs, ins, pg, async_op=not sync_op), "alltoall", g)


def alltoall_single(out_tensor, in_tensor, out_split_sizes=None, in_split_sizes=None, group=None, sync_op=True,
                    use_calc_stream=False):
    """all-to-all on one tensor each: `in_tensor` is cut along its first
    dimension (equally, or by `in_split_sizes` rows) and part r goes to group
    rank r; `out_tensor` receives rank r's part at its r-th split."""
    g = _start(group, "alltoall_single", sync_op, use_calc_stream)
    if g is None:
        return None
    out = as_tdist(out_tensor, "alltoall_single", "out_tensor")
    inp = as_tdist(in_tensor, "alltoall_single", "in_tensor")
    work = tdist.all_to_all_single(out, inp, _sizes(out_split_sizes), _sizes(in_split_sizes),
                                   group=_group.tdist_group(g), async_op=not sync_op)
    return task_of(work, "alltoall_single", g)


def _sizes(sizes):
    return None if sizes is None or len(sizes) == 0 else [int(s) for s in sizes]


def broadcast(tensor, src, group=None, sync_op=True, use_calc_stream=False):
    """Copies `tensor` of global rank `src` into `tensor` on every rank."""
    g = _start(group, "broadcast", sync_op, use_calc_stream, "True")
    if g is None:
        return None
    _group.group_rank_or_throw(src, g, "broadcast", "src")
    t = as_tdist(tensor, "broadcast", "tensor")
    return task_of(tdist.broadcast(t, int(src), _group.tdist_group(g), async_op=not sync_op), "broadcast", g)


def reduce(tensor, dst=0, op=ReduceOp.SUM, group=None, sync_op=True, use_calc_stream=False):
    """Reduces `tensor` over the group with `op` into `tensor` of global rank
    `dst`; the others' tensors are left as they were."""
    g = _start(group, "reduce", sync_op, use_calc_stream)
    if g is None:
        return None
    _group.group_rank_or_throw(dst, g, "reduce", "dst")
    t = as_tdist(tensor, "reduce", "tensor")
    work = tdist.reduce(t, int(dst), to_tdist(op, "reduce"), _group.tdist_group(g), async_op=not sync_op)
    return task_of(work, "reduce", g)


def reduce_scatter(tensor, tensor_or_tensor_list, op=ReduceOp.SUM, group=None, sync_op=True,
                   use_calc_stream=False):
    """Reduces input part r (list entry r, or row block r of a tensor) over
    the group into `tensor` of group rank r."""
    g = _start(group, "reduce_scatter", sync_op, use_calc_stream)
    if g is None:
        return None
    out = as_tdist(tensor, "reduce_scatter", "tensor")
    pg = _group.tdist_group(g)
    red = to_tdist(op, "reduce_scatter")
    if is_tensor(tensor_or_tensor_list):
        inp = as_tdist(tensor_or_tensor_list, "reduce_scatter", "tensor_or_tensor_list")
        return task_of(tdist.reduce_scatter_tensor(out, inp, red, pg, async_op=not sync_op), "reduce_scatter", g)
    ins = as_tdist_list(tensor_or_tensor_list, "reduce_scatter", "tensor_list")
    return task_of(tdist.reduce_scatter(out, ins, red, pg, async_op=not sync_op), "reduce_scatter", g)


def scatter(tensor, tensor_or_tensor_list=None, src=0, group=None, sync_op=True, use_calc_stream=False):
    """Sends part r of global rank `src`'s input (list entry r, or row block
    r of a tensor) into `tensor` of group rank r. Other ranks' input is
    ignored (with a warning if given)."""
    g = _start(group, "scatter", sync_op, use_calc_stream)
    if g is None:
        return None
    out = as_tdist(tensor, "scatter", "tensor")
    if src != tdist.get_rank():
        if tensor_or_tensor_list is not None:
            warnings.warn("Specific `tensor_or_tensor_list` is meaningless for rank which is not src.")
        parts = None
    elif is_tensor(tensor_or_tensor_list):
        parts = split_rows(as_tdist(tensor_or_tensor_list, "scatter", "tensor_or_tensor_list"), g.nranks,
                           "scatter", "tensor_or_tensor_list")
    else:
        if not tensor_or_tensor_list:
            raise RuntimeError("The tensor_list should not be empty on src rank.")
        parts = as_tdist_list(tensor_or_tensor_list, "scatter", "tensor_list")
    _group.group_rank_or_throw(src, g, "scatter", "src")
    work = tdist.scatter(out, parts, int(src), _group.tdist_group(g), async_op=not sync_op)
    return task_of(work, "scatter", g)


def gather(tensor, gather_list=None, dst=0, group=None, sync_op=True, use_calc_stream=False):
    """Gathers every rank's `tensor` into `gather_list` of global rank `dst`
    (filled with new tensors like `tensor` when empty); other ranks' lists
    are ignored (with a warning if given)."""
    g = _start(group, "gather", sync_op, use_calc_stream)
    if g is None:
        return None
    inp = as_tdist(tensor, "gather", "tensor")
    if dst != tdist.get_rank():
        if gather_list is not None:
            warnings.warn("Specific `gather_list` is meaningless for rank which is not dst.")
        outs = None
    else:
        if gather_list is None:
            raise AssertionError("gather: gather_list must not be None on the dst rank")
        if len(gather_list) == 0:
            gather_list += [empty_like(tensor) for _ in range(g.nranks)]
        if len(gather_list) != g.nranks:
            raise AssertionError(f"gather: gather_list has {len(gather_list)} tensors but the group has "
                                 f"{g.nranks} ranks")
        outs = as_tdist_list(gather_list, "gather", "gather_list")
    _group.group_rank_or_throw(dst, g, "gather", "dst")
    return task_of(tdist.gather(inp, outs, int(dst), _group.tdist_group(g), async_op=not sync_op), "gather", g)


def send(tensor, dst=0, group=None, sync_op=True, use_calc_stream=False):
    """Sends `tensor` to global rank `dst`."""
    g = _start(group, "send", sync_op, use_calc_stream, "True")
    if g is None:
        return None
    _group.group_rank_or_throw(dst, g, "send", "dst")
    t = as_tdist(tensor, "send", "tensor")
    pg = _group.tdist_group(g)
    if sync_op:
        tdist.send(t, int(dst), pg)
        return task_of(None, "send")
    return task_of(tdist.isend(t, int(dst), pg), "send")


def recv(tensor, src=0, group=None, sync_op=True, use_calc_stream=False):
    """Receives into `tensor` from global rank `src` (None: whichever rank
    sends first, a tdist extension)."""
    _group.raise_non_member(group, "recv")
    _check_calc_stream(sync_op, use_calc_stream, "True")
    g = _group.resolve(group)
    if src is not None:
        _group.group_rank_or_throw(src, g, "recv", "src")
        src = int(src)
    t = as_tdist(tensor, "recv", "tensor")
    pg = _group.tdist_group(g)
    if sync_op:
        tdist.recv(t, src, pg)
        return task_of(None, "recv")
    return task_of(tdist.irecv(t, src, pg), "recv")


__all__ = ["all_gather", "all_reduce", "alltoall", "alltoall_single", "broadcast", "gather", "recv", "reduce",
           "reduce_scatter", "scatter", "send"]
