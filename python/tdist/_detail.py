"""TDIST_DEBUG=DETAIL (or TORCH_DISTRIBUTED_DEBUG=DETAIL): every collective is
checked across the ranks before it runs, as torch's ProcessGroupWrapper does.

The C++ core already matches every call's op, dtype, element count, root
and split sizes (docs/design.md); this adds what it cannot see: the shape of
every tensor (same element count, other shape), each entry of a list op,
the device and layout, and, for all_to_all, that what rank r sends rank s
has the shape rank s receives it into. A mismatch raises DistBackendError on
every rank with a report of what each rank passed.

Each group created while the level is DETAIL gets a twin group of the same
ranks that carries the checks (as torch's wrapper carries them on a helper
gloo group), so the checked group's sequence numbers and flight recorder
see only the user's calls. Before each check the ranks pass a
monitored_barrier on the twin, which names the ranks that never reach the
call.
"""

import pickle
import traceback

from tdist import _C
from tdist._C import DebugLevel, DistBackendError
from tdist._tensors import dtype_name, is_tensor, is_torch_tensor

# id(group) -> (group, twin) of every checked group; the group object is
# kept so that its id stays its own (pybind11 hands out this same object for
# the C++ group while it lives).
_twins = {}
_world = []  # the default group's object while it is checked


def enabled():
    """True if some group is checked: the only cost of DETAIL's hooks when off."""
    return bool(_twins)


def _is_detail():
    return _C.get_debug_level() == DebugLevel.DETAIL


def on_init():
    """After init_process_group: a twin of the default group under DETAIL."""
    if not _is_detail():
        return
    world = _C.default_group()
    _world[:] = [world]
    _twins[id(world)] = (world, _C.new_group([], None, "tdist", False))


def on_new_group(group, ranks, timeout, use_local_synchronization):
    """After new_group (on every rank that called it): the group's twin."""
    if not _is_detail() or not _twins:
        return  # the default group is not checked: neither are its subgroups
    twin = _C.new_group(ranks, timeout, "tdist", use_local_synchronization)
    if isinstance(group, _C.ProcessGroup):
        _twins[id(group)] = (group, twin)


def on_destroy(group):
    """After destroy_process_group(group); None: the default group and all."""
    if group is None or (_world and group is _world[0]):
        _twins.clear()  # the C++ side destroyed the twins with everything else
        _world.clear()
        return
    entry = _twins.pop(id(group), None)
    if entry is not None:
        _C.destroy_process_group(entry[1])


# ---- what a rank passed: fields (name, text, key) compared by key ----

def _spec(t):
    """(dtype, shape, device, layout) of a tensor argument."""
    if not is_tensor(t):
        return (type(t).__name__, None, None, None)
    if is_torch_tensor(t):
        return (dtype_name(t), tuple(t.shape), str(t.device), str(t.layout).replace("torch.", ""))
    return (dtype_name(t), tuple(t.shape), "cpu", "strided")


def _text(spec):
    dtype, shape, device, layout = spec
    if shape is None:
        return dtype
    text = f"{dtype}{list(shape)}"
    return text if (device, layout) == ("cpu", "strided") else f"{text} on {device} ({layout})"


def same(name, t):
    """A tensor every rank passes alike."""
    spec = _spec(t)
    return [(name, _text(spec), spec)]


def rows(name, t):
    """A tensor whose first dimension is the rank's own (uneven ops): the rest must agree."""
    spec = _spec(t)
    key = spec if spec[1] is None else (spec[0], spec[1][1:], spec[2], spec[3])
    return [(name, _text(spec), key)]


def same_list(name, tensors):
    """A list every rank passes alike, entry by entry."""
    if not isinstance(tensors, (list, tuple)):
        return same(name, tensors)
    fields = [(f"len({name})", str(len(tensors)), len(tensors))]
    return fields + [field for i, t in enumerate(tensors) for field in same(f"{name}[{i}]", t)]


def value(name, v):
    """A non-tensor argument every rank passes alike (root, reduce op, splits)."""
    if isinstance(v, _C.ReduceOp.RedOpType):  # ReduceOp.SUM is a RedOpType: show it as a ReduceOp
        v = _C.ReduceOp(v)
    return [(name, repr(v), repr(v))]


def shown(name, v):
    """A non-tensor argument shown in the report, never compared (a rank's own splits)."""
    return [(name, repr(v), None)]


def local(name, v):
    """Shown in the report, never compared (gather_list on dst only, ...)."""
    if isinstance(v, (list, tuple)):
        text = "[" + ", ".join(_text(_spec(t)) for t in v) + "]"
    else:
        text = "None" if v is None else _text(_spec(v))
    return [(name, text, None)]


def per_peer(tensors):
    """Specs of the entries of an all_to_all list, one per group rank."""
    return [_text(_spec(t)) for t in tensors] if isinstance(tensors, (list, tuple)) else None


# ---- the check ----

def check(g, op, fields, sends=None, recvs=None, send_name="", recv_name=""):
    """Checks that every rank of `g` passes this call alike; raises
    DistBackendError with a per-rank report if not. `fields` come from
    same/rows/same_list/value/local; `sends[s]` / `recvs[s]` describe what
    this rank sends to / receives from group rank s (all_to_all)."""
    group = _world[0] if g is None and _world else g
    entry = _twins.get(id(group))
    if entry is None or not _is_detail():
        return
    twin = entry[1]
    seq = group._get_sequence_number_for_group()
    where = f"{op} (call #{seq} in this group)"
    try:
        _C.monitored_barrier(twin, None, True)
    except _C.DistError as error:
        raise type(error)(f"TDIST_DEBUG=DETAIL: the ranks did not all reach {where}: {error}") from None
    mine = {"op": op, "seq": seq, "fields": [(n, t, k) for fs in fields for (n, t, k) in fs],
            "sends": sends, "recvs": recvs}
    everyone = [pickle.loads(b) for b in _C.all_gather_object(pickle.dumps(mine), twin)]
    ranks = _C.get_process_group_ranks(group)

    def name(r):  # global ranks, as everywhere in the API
        return f"rank {ranks[r]}" if ranks[r] == r else f"rank {ranks[r]} (group rank {r})"

    problem = _compare(everyone, name, send_name, recv_name)
    if problem is not None:
        raise DistBackendError(_report(problem, everyone, name, group.rank()))


def _compare(everyone, name, send_name, recv_name):
    """(summary, {group rank: what differs}) for the first difference, or None."""
    first = everyone[0]
    for r, d in enumerate(everyone):
        if (d["op"], d["seq"]) != (first["op"], first["seq"]):
            return (f"{name(0)} is running collective {first['op']} (call #{first['seq']} in this group), but "
                    f"{name(r)} is running collective {d['op']} (call #{d['seq']} in this group)", {r: "the call"})
    keys = [{n: (t, k) for n, t, k in d["fields"] if k is not None} for d in everyone]
    names = [n for n, _, k in first["fields"] if k is not None]
    names += [n for d in keys[1:] for n in d if n not in names]
    for field in names:
        ref = keys[0].get(field, ("(nothing)", None))
        odd = {r: field for r, k in enumerate(keys) if k.get(field, ("(nothing)", None))[1] != ref[1]}
        if odd:
            r = min(odd)
            got = keys[r].get(field, ("(nothing)", None))[0]
            return (f"{first['op']} (call #{first['seq']} in this group): {field} is {ref[0]} on {name(0)} but "
                    f"{got} on {name(r)}", odd)
    if first["sends"] is not None:
        for r, d in enumerate(everyone):
            for s, sent in enumerate(d["sends"] or []):
                recvs = everyone[s]["recvs"] if s < len(everyone) else None
                got = recvs[r] if recvs is not None and r < len(recvs) else "(nothing)"
                if sent != got:
                    return (f"{first['op']} (call #{first['seq']} in this group): {name(r)} sends {send_name}[{s}] "
                            f"of {sent} to {name(s)}, which receives it into {recv_name}[{r}] of {got}",
                            {r: f"{send_name}[{s}]", s: f"{recv_name}[{r}]"})
    return None


def _report(problem, everyone, name, me):
    """The error text: the first difference, then what every rank passed."""
    summary, odd = problem
    lines = [f"Detected mismatch between collectives on ranks (TDIST_DEBUG=DETAIL): {summary}. What each rank "
             "passed:"]
    for r, d in enumerate(everyone):
        args = ", ".join(f"{n}={t}" for n, t, _ in d["fields"])
        mark = f"   <- {odd[r]} differs" if r in odd else ""
        lines.append(f"  {name(r)}: {d['op']} (call #{d['seq']} in this group) {args}{mark}")
    lines.append(f"Every rank must make the same calls in the same order, with tensors of the same shapes, dtypes "
                 f"and devices (this is {name(me)}).")
    if _C._show_cpp_stacktraces():  # TORCH_SHOW_CPP_STACKTRACES=1: the whole stack of the call
        lines.append("Stack of the call (most recent call last):\n" + "".join(traceback.format_stack()[:-2]))
    return "\n".join(lines)
