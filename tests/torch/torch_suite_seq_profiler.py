"""Sequence numbers and profiler events of tdist groups (run by torch_worker.py).

- _get_sequence_number_for_group() counts the collectives a group has
  started, on groups from init_process_group and new_group alike (torch calls
  _set_sequence_number_for_group only for gloo and nccl groups), checked
  after every call against a count kept here;
- every operation records one "tdist:<op>" profiler event per call, with the
  input shapes, async, in torch.profiler and the autograd profiler;
- torch's record_param_comms events carry the call's arguments.
"""

import collections

import torch
import torch.distributed as dist

import tdist.torch
from tdist.torch import _plugin
from torch_checks import assert_equal

# tdist collectives one call starts; point to point and monitored_barrier
# (which runs on point-to-point messages) start none. A sparse all_reduce
# gathers descriptions, then indices, then values.
SPARSE_ALL_REDUCE_CALLS = 3


def _sparse(rank):
    return torch.sparse_coo_tensor(torch.tensor([[0, 4, rank % 5], [1, 3, 2]]), torch.tensor([1., 2., 3.]), (5, 4))


def _ring(ctx, shape, blocking=True):
    """Each rank sends to the next and receives from the previous one."""
    n, r = ctx.world_size, ctx.rank
    out, got = torch.full(shape, float(r)), torch.zeros(shape)
    if blocking:
        # Even ranks send first, so blocking calls cannot all wait in recv.
        if r % 2 == 0:
            dist.send(out, (r + 1) % n)
            dist.recv(got, (r - 1) % n)
        else:
            dist.recv(got, (r - 1) % n)
            dist.send(out, (r + 1) % n)
    else:
        works = [dist.isend(out, (r + 1) % n), dist.irecv(got, (r - 1) % n)]
        for w in works:
            w.wait()
    assert_equal(got, torch.full(shape, float((r - 1) % n)), "ring receive")


def _every_op(ctx, group=None):
    """Runs every operation once; returns [(event name, input shapes)] expected
    on this rank and the number of tdist collectives started."""
    n, r = ctx.world_size, ctx.rank
    ev = []
    calls = 0

    def did(name, shapes, collectives=1):
        nonlocal calls
        ev.append((name, [list(s) for s in shapes]))
        calls += collectives

    t = torch.ones(2, 3)
    dist.all_reduce(t)
    assert_equal(t, torch.full((2, 3), float(n)), "all_reduce")
    did("tdist:all_reduce", [[2, 3]])
    dist.broadcast(torch.ones(4), src=0)
    did("tdist:broadcast", [[4]])
    dist.reduce(torch.ones(5), dst=0)
    did("tdist:reduce", [[5]])
    dist.all_gather([torch.zeros(3) for _ in range(n)], torch.ones(3))
    did("tdist:all_gather", [[3]])
    dist.all_gather_into_tensor(torch.zeros(2 * n), torch.ones(2))
    did("tdist:all_gather_into_tensor", [[2]])
    dist.gather(torch.ones(6), [torch.zeros(6) for _ in range(n)] if r == 0 else None, dst=0)
    did("tdist:gather", [[6]])
    dist.scatter(torch.zeros(7), [torch.ones(7) for _ in range(n)] if r == 0 else None, src=0)
    did("tdist:scatter", [[7]] * n if r == 0 else [])  # as gloo's: the root's scatter_list
    dist.reduce_scatter(torch.zeros(2), [torch.ones(2) for _ in range(n)])
    did("tdist:reduce_scatter", [[2]] * n)
    dist.reduce_scatter_tensor(torch.zeros(3), torch.ones(3 * n))
    did("tdist:reduce_scatter_tensor", [[3 * n]])
    dist.all_to_all_single(torch.zeros(n), torch.ones(n))
    did("tdist:all_to_all_single", [[n]])
    dist.all_to_all([torch.zeros(1, 2) for _ in range(n)], [torch.ones(1, 2) for _ in range(n)])
    did("tdist:all_to_all", [[1, 2]] * n)
    dist.barrier()
    did("tdist:barrier", [])
    dist.all_reduce_coalesced([torch.ones(2), torch.ones(3, 1)])
    did("tdist:all_reduce_coalesced", [[2], [3, 1]])
    dist.all_gather_coalesced([[torch.zeros(2), torch.zeros(3)] for _ in range(n)], [torch.ones(2), torch.ones(3)])
    did("tdist:all_gather_coalesced", [[2], [3]])
    s = _sparse(r)
    dist.all_reduce(s)
    did("tdist:sparse_all_reduce", [[5, 4]], SPARSE_ALL_REDUCE_CALLS)
    w = dist.all_reduce(torch.ones(9), async_op=True)
    w.wait()
    did("tdist:all_reduce", [[9]])
    if n > 1:
        _ring(ctx, (4, 4))
        did("tdist:send", [[4, 4]], 0)
        did("tdist:recv", [[4, 4]], 0)
        _ring(ctx, (2, 2), blocking=False)
        did("tdist:send", [[2, 2]], 0)
        did("tdist:recv", [[2, 2]], 0)
        # Receives from any source on rank 0.
        if r == 0:
            senders = sorted(dist.recv(torch.zeros(3)) for _ in range(n - 1))
            assert senders == list(range(1, n)), senders
            for _ in range(n - 1):
                did("tdist:recv_any_source", [[3]], 0)
        else:
            dist.send(torch.ones(3), 0)
            did("tdist:send", [[3]], 0)
        dist.monitored_barrier()
        did("tdist:monitored_barrier", [], 0)
    return ev, calls


def _seq(group=None):
    # torch 2's ProcessGroup answers sequence numbers for its built-in
    # backends only; a custom backend's own binding answers them.
    return tdist.torch.backend_of(group)._get_sequence_number_for_group()


def _agreed(ctx, number, group=None):
    """Every rank's number (one all_gather: one more collective)."""
    size = dist.get_world_size(group)
    out = torch.zeros(size, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.tensor([number]), group=group)
    return out.tolist()


def check_sequence_numbers_count_collectives(ctx):
    start = _seq()
    ev, calls = _every_op(ctx)
    assert _seq() == start + calls, (_seq(), start, calls)
    # Step by step too: point to point changes nothing.
    before = _seq()
    t = torch.ones(3)
    dist.all_reduce(t)
    assert _seq() == before + 1
    works = [dist.all_reduce(torch.ones(2), async_op=True) for _ in range(3)]
    for w in works:
        w.wait()
    assert _seq() == before + 4, (_seq(), before)
    # gloo's setter agrees on a number through the store; tdist's numbers
    # agree from the start, so it changes nothing (and works).
    tdist.torch.backend_of()._set_sequence_number_for_group()
    assert _seq() == before + 4
    numbers = _agreed(ctx, _seq())
    assert numbers == [before + 4] * ctx.world_size, numbers
    assert _seq() == before + 5


def check_sequence_numbers_of_new_groups(ctx):
    world_before = _seq()
    ranks = list(range(ctx.world_size - 1, -1, -1))  # another order than WORLD's
    group = dist.new_group(ranks, backend="tdist")
    assert _seq(group) == 0
    t = torch.ones(2)
    dist.all_reduce(t, group=group)
    dist.broadcast(t, src=ranks[0], group=group)
    dist.barrier(group=group)
    assert _seq(group) == 3, _seq(group)
    assert _agreed(ctx, _seq(group), group) == [3] * ctx.world_size
    assert _seq(group) == 4
    # Each group counts its own calls.
    assert _seq() == world_before
    if ctx.world_size > 1:
        pair = dist.new_group([0, 1], backend="tdist")
        if ctx.rank in (0, 1):
            dist.all_reduce(torch.ones(1), group=pair)
            assert _seq(pair) == 1
    dist.destroy_process_group(group)
    if ctx.world_size > 1:
        dist.destroy_process_group(pair)


def _tdist_events(events):
    return [e for e in events if e.name.startswith("tdist:")]


def _check_events(events, expected, what):
    got = collections.Counter((e.name, repr(e.input_shapes)) for e in events)
    want = collections.Counter((name, repr(shapes)) for name, shapes in expected)
    assert got == want, "%s: events differ:\n got only %s\n expected only %s" % (
        what, dict(got - want), dict(want - got))
    for e in events:
        # Work events start on the caller's thread and end when the work
        # completes, possibly on another: async, as gloo's. monitored_barrier
        # blocks and has no work.
        assert e.is_async == (e.name != "tdist:monitored_barrier"), (e.name, e.is_async)


def check_profiler_events_with_shapes(ctx):
    with torch.profiler.profile(record_shapes=True) as prof:
        expected, _ = _every_op(ctx)
    _check_events(_tdist_events(prof.events()), expected, "torch.profiler")
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        dist.all_reduce(torch.ones(3, 2))
        if ctx.world_size > 1:
            _ring(ctx, (5,))
    expected = [("tdist:all_reduce", [[3, 2]])]
    if ctx.world_size > 1:
        expected += [("tdist:send", [[5]]), ("tdist:recv", [[5]])]
    _check_events(_tdist_events(prof.function_events), expected, "autograd profiler")
    # Without record_shapes the events are still there, without shapes.
    with torch.profiler.profile() as prof:
        dist.barrier()
        dist.all_reduce(torch.ones(2))
    names = sorted(e.name for e in _tdist_events(prof.events()))
    assert names == ["tdist:all_reduce", "tdist:barrier"], names


def check_param_comms_arguments(ctx):
    n, r = ctx.world_size, ctx.rank
    world = dist.group.WORLD
    expected = []

    def expect(op, in_numel, out_numel, dtype, in_splits=(), out_splits=(), group=world, seq=None):
        expected.append(dict(op=op, rank=dist.get_rank(group), in_numel=in_numel, out_numel=out_numel, dtype=dtype,
                             in_splits=list(in_splits), out_splits=list(out_splits),
                             seq=_seq(group) if seq is None else seq, group_name=group.group_name,
                             group_size=dist.get_world_size(group)))

    sub = dist.new_group(list(range(n)), backend="tdist")
    _plugin._start_param_comms_observer()
    try:
        expect("all_reduce", 6, 6, "Float")
        dist.all_reduce(torch.ones(2, 3))
        expect("all_gather", 3, 3 * n, "Double")
        dist.all_gather([torch.zeros(3, dtype=torch.float64) for _ in range(n)], torch.ones(3, dtype=torch.float64))
        splits_in = [i + 1 for i in range(n)]  # rank r sends i + 1 rows to rank i
        splits_out = [r + 1] * n
        expect("all_to_all_single", sum(splits_in), sum(splits_out), "Long", splits_in, splits_out)
        dist.all_to_all_single(torch.zeros(sum(splits_out), dtype=torch.int64), torch.ones(sum(splits_in),
                               dtype=torch.int64), splits_out, splits_in)
        expect("barrier", 0, 0, "Byte")
        dist.barrier()
        expect("all_reduce", 4, 4, "Int", group=sub)
        dist.all_reduce(torch.ones(4, dtype=torch.int32), group=sub)
        if n > 1:
            # Point to point: the group's current number (they take none).
            if r == 0:
                expect("send", 2, 2, "Float")
                dist.send(torch.ones(2), 1)
            elif r == 1:
                expect("recv", 2, 2, "Float")
                dist.recv(torch.zeros(2), 0)
    finally:
        seen = _plugin._stop_param_comms_observer()
    assert seen == expected, "record_param_comms events:\n got      %s\n expected %s" % (seen, expected)
    dist.destroy_process_group(sub)


def check_detail_checks_off_by_default(ctx):
    # Without DETAIL, tdist matches element counts only: the same count in
    # another shape passes (torch_suite_detail.py shows DETAIL catching it).
    assert not tdist.torch.backend_of().detail_checks
    shape = (2, 6) if ctx.rank == 0 else (6, 2)
    t = torch.ones(shape)
    dist.all_reduce(t)
    assert_equal(t, torch.full(shape, float(ctx.world_size)), "all_reduce of [2, 6] against [6, 2]")
    # torch's own setter, before a group is created, makes torch wrap the
    # group's backend in its checking wrapper (tdist's checks stay off).
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        group = dist.new_group(list(range(ctx.world_size)), backend="tdist")
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)
    assert hasattr(group._get_backend(torch.device("cpu")), "wrapped_pg")
    assert not tdist.torch.backend_of(group).detail_checks
    dist.destroy_process_group(group)


def check_flight_recorder_keeps_the_plugins_calls(ctx):
    """The plugin's copy of tdist records its groups' calls (docs/debugging.md),
    numbered as _get_sequence_number_for_group counts them, and
    tdist.dump_trace writes them as rank<R>.torch.json-style files."""
    import json
    import tempfile

    import tdist

    before = _seq()
    dist.all_reduce(torch.ones(5))
    dist.broadcast(torch.zeros(3, dtype=torch.int64), src=ctx.world_size - 1)
    doc = json.loads(_plugin._trace_json())
    assert doc["component"] == "torch", doc["component"]
    # The world group's entries are the newest of any group of this size.
    calls = [(e["op"], e["seq"], e.get("dtype"), e.get("count"), e["state"]) for e in doc["entries"]
             if e.get("seq", -1) >= before and doc["groups"][e["group"]]["size"] == ctx.world_size]
    want = [("all_reduce", before, "float32", 5, "completed"), ("broadcast", before + 1, "int64", 3, "completed")]
    assert calls[-2:] == want, calls
    with tempfile.TemporaryDirectory() as d:
        written = tdist.dump_trace(d + f"/r{ctx.rank}.json")
        assert written == [d + f"/r{ctx.rank}.torch.json"], written
        assert json.load(open(written[0]))["entries"], "an empty dump"
