"""torch_npu's additions on tdist groups (run by torch_worker.py), written as
a torch_npu program writes them with ``torch_npu.distributed`` replaced by
``tdist.torch``: the uneven all-gather and reduce-scatter (split sizes given
and None, zero rows, async, errors), reinit_process_group with and without
rebuilding the links, the communicator name and is_tdist_available.

Every rank computes every rank's input (a function of the rank), so the
expected results are computed here, apart from tdist.
"""

from datetime import timedelta

import torch
import torch.distributed as dist

import tdist.torch as npu_dist
from torch_checks import assert_equal, expect_error, make_input

COLS = 3


def _rows(rank):
    """Rank r's row count: uneven, rank 1 has none (when it exists)."""
    return 0 if rank == 1 else rank + 2


def _input(rank, rows, salt=0, dtype=torch.float32):
    return make_input(rank, rows * COLS, dtype, salt=salt, high=50).reshape(rows, COLS)


def _gathered(ctx, rows_of, salt=0):
    return torch.cat([_input(r, rows_of(r), salt) for r in ctx.ranks])


def _names(group=None):
    """Every member's comm name, gathered over the group."""
    names = [None] * dist.get_world_size(group)
    dist.all_gather_object(names, npu_dist.get_comm_name(group), group=group)
    return names


def check_all_gather_into_tensor_uneven(ctx):
    splits = [_rows(r) for r in ctx.ranks]
    output = torch.full((sum(splits), COLS), -1.0)
    assert npu_dist.all_gather_into_tensor_uneven(output, _input(ctx.rank, splits[ctx.rank]),
                                                  output_split_sizes=splits) is None
    assert_equal(output, _gathered(ctx, _rows), "all_gather_into_tensor_uneven")
    # None: equal parts.
    output = torch.zeros(2 * ctx.world_size, COLS)
    npu_dist.all_gather_into_tensor_uneven(output, _input(ctx.rank, 2, salt=1))
    assert_equal(output, _gathered(ctx, lambda r: 2, salt=1), "all_gather_into_tensor_uneven (None)")
    # async_op: a work whose wait() leaves the result.
    output = torch.zeros(sum(splits), COLS)
    work = npu_dist.all_gather_into_tensor_uneven(output, _input(ctx.rank, splits[ctx.rank], salt=2), splits,
                                                  async_op=True)
    work.wait()
    assert_equal(output, _gathered(ctx, _rows, salt=2), "all_gather_into_tensor_uneven (async)")


def check_reduce_scatter_tensor_uneven(ctx):
    splits = [_rows(r) for r in ctx.ranks]
    total = sum(splits)
    inputs = [_input(r, total, salt=3) for r in ctx.ranks]
    first = sum(splits[:ctx.rank])
    mine = slice(first, first + splits[ctx.rank])
    output = torch.full((splits[ctx.rank], COLS), -1.0)
    npu_dist.reduce_scatter_tensor_uneven(output, inputs[ctx.rank], input_split_sizes=splits)
    assert_equal(output, sum(i[mine] for i in inputs), "reduce_scatter_tensor_uneven SUM")
    output = torch.zeros(splits[ctx.rank], COLS)
    npu_dist.reduce_scatter_tensor_uneven(output, inputs[ctx.rank], splits, op=dist.ReduceOp.MAX)
    assert_equal(output, torch.stack([i[mine] for i in inputs]).amax(0), "reduce_scatter_tensor_uneven MAX")
    # None: equal parts, async.
    inputs = [_input(r, 3 * ctx.world_size, salt=4) for r in ctx.ranks]
    output = torch.zeros(3, COLS)
    npu_dist.reduce_scatter_tensor_uneven(output, inputs[ctx.rank], async_op=True).wait()
    rows = slice(3 * ctx.rank, 3 * ctx.rank + 3)
    assert_equal(output, sum(i[rows] for i in inputs), "reduce_scatter_tensor_uneven (None, async)")


def check_uneven_split_sizes_are_validated(ctx):
    n = ctx.world_size
    # The wrong number of entries, a sum that is not the row count, a
    # negative entry: raised before any message, on the rank that passed them
    # (every rank here).
    expect_error(lambda: npu_dist.all_gather_into_tensor_uneven(torch.zeros(n + 1, COLS), torch.zeros(1, COLS),
                                                                [1] * (n + 1)),
                 "output_split_sizes has %d entries but the group has %d ranks" % (n + 1, n))
    expect_error(lambda: npu_dist.reduce_scatter_tensor_uneven(torch.zeros(1, COLS), torch.zeros(n + 1, COLS),
                                                               [1] * n),
                 "input_split_sizes sum to %d but the tensor has %d rows" % (n, n + 1))
    if n > 1:
        expect_error(lambda: npu_dist.all_gather_into_tensor_uneven(
            torch.zeros(n, COLS), torch.zeros(2, COLS), [2, -1] + [1] * (n - 2) if n > 2 else [2, -1]),
            "output_split_sizes[1] is negative")
        # None with rows that do not divide.
        expect_error(lambda: npu_dist.all_gather_into_tensor_uneven(torch.zeros(n + 1, COLS),
                                                                    torch.zeros(1, COLS)),
                     "do not divide among %d ranks" % n)
    try:
        npu_dist.all_gather_into_tensor_uneven(torch.zeros(n, COLS), torch.zeros(1, COLS), "abc")
    except TypeError as e:
        assert "output_split_sizes must be a list of ints" in str(e), e
    else:
        raise AssertionError("a string of split sizes was accepted")
    dist.barrier()  # the group still works


def check_comm_name_is_shared_stable_and_unique(ctx):
    world = _names()
    assert len(set(world)) == 1 and world[0], world
    # torch_npu's spellings reach the same name.
    pg = dist.distributed_c10d._get_default_group()
    assert pg._get_backend(torch.device("cpu")).get_hccl_comm_name(ctx.rank) == world[0]
    # A new group has its own name, alike on its members.
    sub = dist.new_group(ranks=list(ctx.ranks), backend="tdist")
    names = _names(sub)
    assert len(set(names)) == 1 and names[0] != world[0], (names, world)
    assert npu_dist.get_comm_name() == world[0], "the default group's name changed"
    assert npu_dist.is_tdist_available() and dist.is_tdist_available()


def check_reinit_process_group_rebuilds_the_links(ctx):
    name = npu_dist.get_comm_name()
    t = make_input(ctx.rank, 7, torch.float32)
    dist.all_reduce(t)
    # Operations issued before it finish first.
    pending = [torch.full((5,), float(ctx.rank + k)) for k in range(3)]
    works = [dist.all_reduce(p, async_op=True) for p in pending]
    npu_dist.reinit_process_group()
    for k, (p, w) in enumerate(zip(pending, works)):
        w.wait()
        assert_equal(p, torch.full((5,), float(sum(r + k for r in ctx.ranks))), "all_reduce issued before reinit")
    # The rebuilt group counts from 0 and moves data: collectives and messages.
    assert npu_dist.backend_of()._get_sequence_number_for_group() == 0
    for count in (0, 1, 1001):
        t = make_input(ctx.rank, count, torch.int64)
        dist.all_reduce(t)
        assert_equal(t, sum(make_input(r, count, torch.int64) for r in ctx.ranks), "all_reduce after reinit")
    if ctx.world_size > 1:
        nxt, prv = (ctx.rank + 1) % ctx.world_size, (ctx.rank - 1) % ctx.world_size
        got = torch.zeros(4, dtype=torch.int32)
        ops = [dist.P2POp(dist.isend, torch.full((4,), ctx.rank, dtype=torch.int32), nxt),
               dist.P2POp(dist.irecv, got, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert_equal(got, torch.full((4,), prv, dtype=torch.int32), "ring after reinit")
    assert npu_dist.get_comm_name() == name, "reinit changed the comm name"
    # Keeping the links: a barrier, the counts go on.
    before = npu_dist.backend_of()._get_sequence_number_for_group()
    npu_dist.reinit_process_group(rebuild_link=False)
    assert npu_dist.backend_of()._get_sequence_number_for_group() == before + 1
    t = torch.ones(3)
    dist.all_reduce(t)
    assert_equal(t, torch.full((3,), float(ctx.world_size)), "all_reduce after reinit(rebuild_link=False)")


def check_reinit_of_a_subgroup_and_on_non_members(ctx):
    members = [r for r in ctx.ranks if r % 2 == 0]
    sub = dist.new_group(ranks=members, backend="tdist", timeout=timedelta(seconds=60))
    # Non-members return at once; members rebuild.
    npu_dist.reinit_process_group(sub)
    if ctx.rank in members:
        t = torch.full((2,), float(ctx.rank))
        dist.all_reduce(t, group=sub)
        assert_equal(t, torch.full((2,), float(sum(members))), "subgroup all_reduce after reinit")
    else:
        assert npu_dist.get_comm_name(sub) is None
    dist.barrier()


def check_other_backends_are_refused(ctx):
    gloo = dist.new_group(ranks=list(ctx.ranks), backend="gloo")
    for fn in (lambda: npu_dist.reinit_process_group(gloo), lambda: npu_dist.get_comm_name(gloo)):
        try:
            fn()
        except ValueError as e:
            assert "only groups of the 'tdist' backend" in str(e), e
        else:
            raise AssertionError("a gloo group was accepted")


def check_work_abort_fails_the_groups_calls_and_reinit_recovers(ctx):
    # A gloo group orders the ranks around the abort without using the group
    # being aborted.
    order = dist.new_group(ranks=list(ctx.ranks), backend="gloo")
    t = torch.ones(6)
    if ctx.rank == 0:
        # The others have not issued theirs yet (they wait below), so this
        # all_reduce is still running when its work aborts the group.
        work = dist.all_reduce(t, async_op=True)
        work.abort()
        if ctx.world_size > 1:
            expect_error(work.wait, "aborted by rank 0", "Work.abort() was called on its all_reduce")
        work.abort()  # a second abort changes nothing
    dist.barrier(group=order)
    # Every rank's next call on the group fails, naming rank 0 and the reason.
    expect_error(lambda: dist.all_reduce(torch.ones(2)), "aborted", "rank 0", "Work.abort() was called")
    dist.barrier(group=order)
    npu_dist.reinit_process_group()
    t = torch.full((5,), float(ctx.rank + 1))
    dist.all_reduce(t)
    assert_equal(t, torch.full((5,), float(sum(r + 1 for r in ctx.ranks))), "all_reduce after Work.abort and reinit")
