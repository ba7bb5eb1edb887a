"""tdist's DETAIL checks of tdist groups (run by torch_worker.py under
TDIST_DEBUG=DETAIL).

Calls that tdist's own matching accepts (the same element count in another
shape, list entries of other shapes) must now fail on every rank with the
report of who passed what; matching calls, including those whose shapes
legitimately differ per rank (uneven all_gather and all_to_all lists, split
sizes), must pass with correct results. After a mismatch the group works on.
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

import tdist.torch

from torch_checks import assert_equal, expect_error

HEADER = "Detected mismatch between collectives on ranks"


def _others(ctx):
    return ", ".join(str(r) for r in range(1, ctx.world_size))


def _still_works(ctx, group=None):
    t = torch.ones(3)
    dist.all_reduce(t, group=group)
    assert_equal(t, torch.full((3,), float(dist.get_world_size(group))), "all_reduce after a mismatch")


def check_detail_is_on(ctx):
    assert tdist.torch.backend_of().detail_checks
    # TDIST_DEBUG turns the checks on without torch's own debug level.
    if os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF").upper() != "DETAIL":
        assert dist.get_debug_level() == dist.DebugLevel.OFF


def check_matching_calls_pass(ctx):
    n, r = ctx.world_size, ctx.rank
    t = torch.full((2, 3), float(r))
    dist.all_reduce(t)
    assert_equal(t, torch.full((2, 3), float(sum(ctx.ranks))), "all_reduce")
    # all_gather with entries of different shapes: rank i passes [i + 1, 2].
    out = [torch.zeros(i + 1, 2) for i in range(n)]
    dist.all_gather(out, torch.full((r + 1, 2), float(r)))
    for i in range(n):
        assert_equal(out[i], torch.full((i + 1, 2), float(i)), "uneven all_gather entry %d" % i)
    # all_to_all lists: rank r sends i + r + 1 elements to rank i.
    ins = [torch.full((i + r + 1,), float(r)) for i in range(n)]
    outs = [torch.zeros(r + i + 1) for i in range(n)]
    dist.all_to_all(outs, ins)
    for i in range(n):
        assert_equal(outs[i], torch.full((r + i + 1,), float(i)), "all_to_all from %d" % i)
    # all_to_all_single with split sizes: first dimensions differ per rank.
    splits_in = [i + 1 for i in range(n)]
    out = torch.zeros(n * (r + 1), 2)
    dist.all_to_all_single(out, torch.full((sum(splits_in), 2), float(r)), [r + 1] * n, splits_in)
    assert_equal(out, torch.cat([torch.full((r + 1, 2), float(i)) for i in range(n)]), "all_to_all_single")
    # gather, scatter and reduce_scatter against the root's / own lists.
    g = [torch.zeros(2, 2) for _ in range(n)] if r == 0 else None
    dist.gather(torch.full((2, 2), float(r)), g, dst=0)
    if r == 0:
        for i in range(n):
            assert_equal(g[i], torch.full((2, 2), float(i)), "gather %d" % i)
    s = torch.zeros(3, 1)
    dist.scatter(s, [torch.full((3, 1), float(i)) for i in range(n)] if r == 0 else None, src=0)
    assert_equal(s, torch.full((3, 1), float(r)), "scatter")
    o = torch.zeros(2, 2)
    dist.reduce_scatter(o, [torch.full((2, 2), float(i)) for i in range(n)])
    assert_equal(o, torch.full((2, 2), float(r * n)), "reduce_scatter")
    dist.barrier()
    # An async sparse all_reduce, then checked calls while it still gathers
    # sizes: their checks wait behind it, in call order on every rank.
    sp = torch.sparse_coo_tensor(torch.tensor([[r % 3]]), torch.ones(1), (3,))
    work = dist.all_reduce(sp, async_op=True)
    t = torch.ones(2)
    dist.all_reduce(t)
    work.wait()
    expected = torch.zeros(3)
    for i in ctx.ranks:
        expected[i % 3] += 1
    assert_equal(sp.to_dense(), expected, "sparse all_reduce")
    assert_equal(t, torch.full((2,), float(n)), "all_reduce after an async sparse one")


def check_checks_cost_one_all_gather(ctx):
    # The documented price: each checked collective is preceded by one
    # all_gather of (length, hash), which the sequence number counts.
    before = tdist.torch.backend_of()._get_sequence_number_for_group()
    dist.all_reduce(torch.ones(2))
    assert tdist.torch.backend_of()._get_sequence_number_for_group() == before + 2


def check_same_numel_other_shape(ctx):
    if ctx.world_size < 2:
        return
    shape = (2, 6) if ctx.rank == 0 else (6, 2)
    message = expect_error(lambda: dist.all_reduce(torch.ones(shape)), HEADER)
    assert "Rank %d is running collective: all_reduce(tensor=float32[%d, %d])" % ((ctx.rank,) + shape) in message
    assert "\n  rank 0: all_reduce(tensor=float32[2, 6])" in message, message
    others = "rank" + ("s " if ctx.world_size > 2 else " ") + _others(ctx)
    assert "\n  %s: all_reduce(tensor=float32[6, 2])" % others in message, message
    _still_works(ctx)


def check_list_entries_of_other_shapes(ctx):
    n = ctx.world_size
    if n > 1:
        shape = (2, 3) if ctx.rank == 0 else (3, 2)
        out = [torch.zeros(shape) for _ in range(n)]
        message = expect_error(lambda: dist.all_gather(out, torch.ones(shape)), HEADER, "tensor_list differs")
        assert "rank 0: all_gather(tensor_list=[float32[2, 3] x%d], tensor=float32[2, 3])" % n in message, message
        # One entry off on one rank, every rank's own entry right.
        out = [torch.zeros(2, 3) for _ in range(n)]
        if ctx.rank == n - 1:
            out[0] = torch.zeros(3, 2)
        expect_error(lambda: dist.all_gather(out, torch.ones(2, 3)), HEADER, "tensor_list differs")
    # A rank's tensor against its own entry: same numel, other shape.
    out = [torch.zeros(2, 3) for _ in range(n)]
    inp = torch.ones(3, 2) if ctx.rank == 0 else torch.ones(2, 3)
    expect_error(lambda: dist.all_gather(out, inp), HEADER,
                 "tensor of rank 0 is float32[3, 2] but tensor_list[0] of rank 0 is float32[2, 3]")
    _still_works(ctx)


def check_other_op_dtype_and_layout(ctx):
    if ctx.world_size < 2:
        return
    r = ctx.rank
    t = torch.ones(4)
    call = (lambda: dist.all_reduce(t)) if r == 0 else (lambda: dist.broadcast(t, src=0))
    message = expect_error(call, HEADER, "all_reduce(tensor=float32[4])", "broadcast(tensor=float32[4], root=0)")
    t = torch.ones(4, dtype=torch.float64 if r == 1 else torch.float32)
    expect_error(lambda: dist.all_reduce(t), HEADER, "float64[4]", "float32[4]")
    dense = torch.ones(3)
    sparse = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.ones(1), (3,))
    expect_error(lambda: dist.all_reduce(sparse if r == 0 else dense), HEADER, "float32[3] Sparse")
    _still_works(ctx)
    del message


def check_all_to_all_and_scatter_against_peers(ctx):
    n, r = ctx.world_size, ctx.rank
    if n < 2:
        return
    # Rank 0 sends [2, 3] to rank 1, which expects [3, 2] from it.
    ins = [torch.ones(2, 3) for _ in range(n)]
    outs = [torch.zeros(2, 3) for _ in range(n)]
    if r == 1:
        outs[0] = torch.zeros(3, 2)
    expect_error(lambda: dist.all_to_all(outs, ins), HEADER,
                 "output_tensor_list[0] of rank 1 is float32[3, 2] but input_tensor_list[1] of rank 0 is "
                 "float32[2, 3]")
    # The root scatters [2, 2] pieces; the last rank's output is [4].
    out = torch.zeros(4) if r == n - 1 else torch.zeros(2, 2)
    pieces = [torch.ones(2, 2) for _ in range(n)] if r == 0 else None
    expect_error(lambda: dist.scatter(out, pieces, src=0), HEADER,
                 "tensor of rank %d is float32[4] but scatter_list[%d] of rank 0 is float32[2, 2]" % (n - 1, n - 1))
    _still_works(ctx)


def check_subgroup_reports_global_ranks(ctx):
    n = ctx.world_size
    if n < 3:
        return
    ranks = [1, 2]
    group = dist.new_group(ranks, backend="tdist")
    if ctx.rank in ranks:
        assert tdist.torch.backend_of(group).detail_checks
        shape = (2, 2) if ctx.rank == 1 else (4,)
        message = expect_error(lambda: dist.all_reduce(torch.ones(shape), group=group), HEADER)
        assert "\n  rank 0 (global rank 1): all_reduce(tensor=float32[2, 2])" in message, message
        assert "\n  rank 1 (global rank 2): all_reduce(tensor=float32[4])" in message, message
        _still_works(ctx, group)
    dist.destroy_process_group(group)


def check_a_rank_that_never_comes(ctx):
    # The check's exchange fails at the group's timeout and names the call.
    if ctx.world_size < 2:
        return
    group = dist.new_group(list(ctx.ranks), backend="tdist", timeout=timedelta(seconds=2))
    if ctx.rank == 0:
        expect_error(lambda: dist.all_reduce(torch.ones(2), group=group),
                     "all_reduce: the DETAIL check before it (an all_gather of every rank's call) failed",
                     "timed out")
    dist.barrier()  # the others wait here until rank 0 has timed out
    dist.destroy_process_group(group)
