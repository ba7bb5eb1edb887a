"""Runs a redistribution plan (tdist/placement.h's plan_redistribute) on a
rank's local tensor with tdist's collectives, one step per mesh dimension.

Groups list their ranks in ascending global rank while a mesh orders them by
coordinate, so every step maps mesh positions to group ranks before it
passes sizes or pieces to a collective.
"""

import time

from tdist import _C
from tdist import collectives as _coll
from tdist.tensor import _local

# What redistribution has moved in this process: collectives run, bytes this
# rank moved (the plans' count) and seconds spent in redistribute.
counters = {"collectives": 0, "bytes": 0, "seconds": 0.0}

# Plans by (mesh, coordinate, shape, element size, from, to): planning is a
# search, and training loops redistribute the same layouts every step.
_PLANS = {}
_MAX_PLANS = 4096


def plan(mesh, global_shape, element_size, src, dst):
    """The plan (cached) that takes this rank's block from layout `src` to `dst`."""
    coordinate = mesh._coordinate()
    layout = mesh._layout
    key = (tuple(layout.shape), tuple(layout.ranks), tuple(layout.dim_names), tuple(coordinate),
           tuple(global_shape), element_size, tuple(map(repr, src)), tuple(map(repr, dst)))
    found = _PLANS.get(key)
    if found is None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        found = _C._plan_redistribute(mesh._layout, coordinate, list(global_shape), element_size,
                                      [p._spec() for p in src], [p._spec() for p in dst])
        _PLANS[key] = found
    return found


def run(mesh, local, steps):
    """`local` after every step: a new contiguous tensor, or `local` itself
    if every step is a relabel."""
    coordinate = mesh._coordinate()
    started = time.perf_counter()
    for step in steps:
        me = coordinate[step.mesh_dim]
        # Only collectives need the group (made on first use, with every member).
        group, positions = mesh._group(step.mesh_dim) if step.kind in _COLLECTIVES else (None, None)
        local = _STEPS[step.kind](step, local, group, positions, me)
        if _local.shape(local) != tuple(step.shape_after):  # never hand back a block of the wrong shape
            raise _C.DistBackendError(f"redistribute: {step.kind} over mesh dim {step.mesh_dim} gave a block of "
                                      f"shape {_local.shape(local)}, the plan says {tuple(step.shape_after)}")
        counters["collectives"] += step.kind in _COLLECTIVES
        counters["bytes"] += step.bytes
    counters["seconds"] += time.perf_counter() - started
    return local


def _in_group_order(values, positions):
    """Values listed by mesh position, reordered by group rank."""
    ordered = [None] * len(values)
    for position, group_rank in enumerate(positions):
        ordered[group_rank] = values[position]
    return ordered


def _numel(shape_):
    n = 1
    for s in shape_:
        n *= s
    return n


def _rows(shape_, dim):
    """Elements per unit length of dimension `dim` (the product of the others)."""
    return _numel(s for i, s in enumerate(shape_) if i != dim)


def _all_gather(step, local, group, positions, me):
    d = step.src[1]
    per_row = _rows(step.shape_before, d)
    front = _local.reshape(_local.dim_first(local, d), [-1])
    sizes = [n * per_row for n in step.from_lengths]
    out = _local.empty(local, [sum(sizes)])
    _coll.all_gather_into_tensor_uneven(out, front, output_split_sizes=_in_group_order(sizes, positions),
                                        group=group)
    rest = [s for i, s in enumerate(step.shape_before) if i != d]
    if positions == sorted(positions):  # mesh order is group order: the buffer is the result
        return _local.dim_back(_local.reshape(out, [sum(step.from_lengths)] + rest), d)
    # Pieces arrive by group rank; put them back in mesh order along d.
    offsets, start = [0] * len(sizes), 0
    for group_rank in range(len(sizes)):
        position = positions.index(group_rank)
        offsets[position] = start
        start += sizes[position]
    pieces = [_local.reshape(out[offsets[p]:offsets[p] + sizes[p]], [step.from_lengths[p]] + rest)
              for p in range(len(sizes))]
    return _local.dim_back(_local.concatenate(pieces, 0), d)


def _all_reduce(step, local, group, positions, me):
    out = _local.contiguous_copy(local)
    _coll.all_reduce(out, op=step.src[1], group=group)
    return out


def _reduce_scatter(step, local, group, positions, me):
    e = step.dst[1]
    per_row = _rows(step.shape_before, e)
    pieces = _local.split(_local.dim_first(local, e), 0, step.to_lengths)
    ordered = _in_group_order(pieces, positions)
    flat = _local.concatenate([_local.reshape(p, [-1]) for p in ordered], 0)
    sizes = [n * per_row for n in step.to_lengths]
    out = _local.empty(local, [sizes[me]])
    _coll.reduce_scatter_tensor_uneven(out, flat, input_split_sizes=_in_group_order(sizes, positions),
                                       op=step.src[1], group=group)
    rest = [s for i, s in enumerate(step.shape_before) if i != e]
    return _local.dim_back(_local.reshape(out, [step.to_lengths[me]] + rest), e)


def _all_to_all(step, local, group, positions, me):
    d, e = step.src[1], step.dst[1]
    # Piece p of this rank's block along e goes to mesh position p.
    sends = [_local.reshape(p, [-1]) for p in _local.split(local, e, step.to_lengths)]
    shapes = []
    for p in range(len(step.from_lengths)):
        s = list(step.shape_before)
        s[d], s[e] = step.from_lengths[p], step.to_lengths[me]
        shapes.append(s)
    recvs = [_local.empty(local, [_numel(s)]) for s in shapes]
    _coll.all_to_all(_in_group_order(recvs, positions), _in_group_order(sends, positions), group=group)
    return _local.concatenate([_local.reshape(r, s) for r, s in zip(recvs, shapes)], d)


def _local_slice(step, local, group, positions, me):
    e = step.dst[1]
    return _local.narrow(local, e, sum(step.to_lengths[:me]), step.to_lengths[me])


def _local_partial(step, local, group, positions, me):
    # The first rank of the dimension keeps the value; the others hold the
    # op's identity (or the value itself where reducing copies gives it back).
    if me == 0 or step.fill == "keep":
        return _local.contiguous_copy(local)
    if step.fill == "ones":
        return _local.fill(local, 1)
    return _local.fill(local, _local.negative_zero(local))  # x + -0.0 is x, bit for bit, even for x = -0.0


def _relabel(step, local, group, positions, me):
    return local  # a mesh dimension of one rank: the block is already right


_COLLECTIVES = ("all_gather", "all_reduce", "reduce_scatter", "all_to_all")

_STEPS = {
    "relabel": _relabel,
    "all_gather": _all_gather,
    "all_reduce": _all_reduce,
    "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all,
    "local_slice": _local_slice,
    "local_partial": _local_partial,
}
