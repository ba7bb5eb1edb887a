"""Collectives on picklable Python objects: broadcast_object_list,
all_gather_object, gather_object and scatter_object_list.

Objects travel as pickles (the C++ side moves the bytes). As in
torch.distributed, unpickling runs code chosen by the sender: only use these
with ranks you trust. Every call is blocking.
"""

import pickle

from tdist import _C, _detail
from tdist._C import DistInvalidArgument
from tdist.distributed_c10d import NOT_MEMBER, get_rank, get_world_size, peer_rank, resolve_group


def _dumps(obj):
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None):
    """Replaces the objects of `object_list` on every rank with those of
    global rank `src` (or group rank `group_src`; neither: global rank 0).
    Every rank passes a list of the same length (the entries on other ranks
    are placeholders, e.g. None). `device` is ignored."""
    g = resolve_group(group, "broadcast_object_list")
    if g is NOT_MEMBER:
        return
    src = peer_rank("broadcast_object_list", g, src, group_src, "src", default=0)
    if _detail.enabled():
        _detail.check(g, "broadcast_object_list", [_detail.value("len(object_list)", len(object_list)),
                                                   _detail.value("src", src)])
    is_src = get_rank() == src
    pickles = [_dumps(obj) for obj in object_list] if is_src else None
    received = _C.broadcast_object_list(pickles, len(object_list), src, g)
    if not is_src:
        for i, data in enumerate(received):
            object_list[i] = pickle.loads(data)


def all_gather_object(object_list, obj, group=None):
    """Fills ``object_list[r]`` with group rank r's `obj`, on every rank.
    `object_list` must have (at least) one entry per group rank."""
    g = resolve_group(group, "all_gather_object")
    if g is NOT_MEMBER:
        return
    if _detail.enabled():
        _detail.check(g, "all_gather_object", [])
    received = _C.all_gather_object(_dumps(obj), g)
    # Checked after communicating, so a rank with a short list does not leave
    # the others waiting.
    if len(object_list) < len(received):
        raise DistInvalidArgument(f"all_gather_object: object_list has {len(object_list)} entries but the "
                                  f"group has {len(received)} ranks")
    for i, data in enumerate(received):
        object_list[i] = pickle.loads(data)


def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None):
    """Gathers every rank's `obj` into `object_gather_list` of global rank
    `dst` (or group rank `group_dst`; neither: global rank 0), one entry per
    group rank; the other ranks pass None."""
    g = resolve_group(group, "gather_object")
    if g is NOT_MEMBER:
        return
    dst = peer_rank("gather_object", g, dst, group_dst, "dst", default=0)
    is_dst = get_rank() == dst
    if is_dst and object_gather_list is None:
        raise DistInvalidArgument(f"gather_object: object_gather_list is required on dst {dst}")
    if not is_dst and object_gather_list is not None:
        raise DistInvalidArgument(f"gather_object: object_gather_list must be None on ranks other than dst {dst}")
    if is_dst and len(object_gather_list) < get_world_size(group):
        raise DistInvalidArgument(f"gather_object: object_gather_list has {len(object_gather_list)} entries "
                                  f"but the group has {get_world_size(group)} ranks")
    if _detail.enabled():
        _detail.check(g, "gather_object", [_detail.value("dst", dst)])
    received = _C.gather_object(_dumps(obj), is_dst, dst, g)
    if is_dst:
        for i, data in enumerate(received):
            object_gather_list[i] = pickle.loads(data)


def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None, group=None,
                        group_src=None):
    """Sends ``scatter_object_input_list[r]`` of global rank `src` (or group
    rank `group_src`; neither: global rank 0) to group rank r, which finds it
    in ``scatter_object_output_list[0]``. The input list is only read on
    `src` (one object per group rank)."""
    g = resolve_group(group, "scatter_object_list")
    if g is NOT_MEMBER:
        return
    src = peer_rank("scatter_object_list", g, src, group_src, "src", default=0)
    if not isinstance(scatter_object_output_list, list) or len(scatter_object_output_list) < 1:
        raise DistInvalidArgument("scatter_object_list: scatter_object_output_list must be a list with at "
                                  "least one entry")
    if _detail.enabled():
        _detail.check(g, "scatter_object_list", [_detail.value("src", src)])
    is_src = get_rank() == src
    pickles = [_dumps(obj) for obj in scatter_object_input_list] if is_src else None
    data = _C.scatter_object_list(pickles, src, g)
    scatter_object_output_list[0] = pickle.loads(data)
