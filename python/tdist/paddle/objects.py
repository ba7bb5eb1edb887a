"""Collectives on picklable Python objects, as paddle.distributed defines
them: all_gather_object extends its list, scatter_object_list replaces the
output list's contents with one object, broadcast_object_list replaces the
list's entries. Objects travel as pickles: only use these with ranks you
trust. Every call is blocking."""

import tdist
from tdist.paddle import group as _group


def all_gather_object(object_list, obj, group=None):
    """Appends every group rank's `obj` to `object_list`, in group-rank order."""
    _group.raise_non_member(group, "all_gather_object")
    if not isinstance(object_list, list):
        raise TypeError(f"all_gather_object: object_list must be a list, not {type(object_list).__name__}")
    g = _group.resolve(group)
    received = [None] * g.nranks
    tdist.all_gather_object(received, obj, _group.tdist_group(g))
    object_list.extend(received)


def broadcast_object_list(object_list, src, group=None):
    """Replaces the entries of `object_list` with those of global rank `src`
    (every rank passes a list of the same length)."""
    if _group.skip_non_member(group, "broadcast_object_list"):
        return
    g = _group.resolve(group)
    _group.group_rank_or_throw(src, g, "broadcast_object_list", "src")
    tdist.broadcast_object_list(object_list, int(src), _group.tdist_group(g))


def scatter_object_list(out_object_list, in_object_list=None, src=0, group=None):
    """Sends ``in_object_list[r]`` of global rank `src` to group rank r, whose
    `out_object_list` then holds just that object."""
    if _group.skip_non_member(group, "scatter_object_list"):
        return
    if not isinstance(out_object_list, list):
        raise TypeError(f"scatter_object_list: out_object_list must be a list, not "
                        f"{type(out_object_list).__name__}")
    g = _group.resolve(group)
    _group.group_rank_or_throw(src, g, "scatter_object_list", "src")
    if tdist.get_rank() == src:
        if in_object_list is None or len(in_object_list) != g.nranks:
            got = "None" if in_object_list is None else f"{len(in_object_list)} objects"
            raise tdist.DistInvalidArgument(f"scatter_object_list: in_object_list on src {src} must hold one "
                                            f"object per group rank ({g.nranks}), got {got}")
    out = [None]
    tdist.scatter_object_list(out, list(in_object_list) if tdist.get_rank() == src else None, int(src),
                              _group.tdist_group(g))
    out_object_list.clear()
    out_object_list.append(out[0])
