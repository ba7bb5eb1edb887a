"""A short suite for the init-method runs: the group formed over the store
under test carries collectives, point to point and a subgroup."""

import torch
import torch.distributed as dist

from torch_checks import assert_equal, make_input


def check_world(ctx):
    assert dist.get_rank() == ctx.rank and dist.get_world_size() == ctx.world_size


def check_all_reduce_and_broadcast(ctx):
    t = make_input(ctx.rank, 11, torch.float32)
    dist.all_reduce(t)
    assert_equal(t, sum(make_input(r, 11, torch.float32) for r in ctx.ranks), "all_reduce")
    b = make_input(ctx.rank, 3, torch.int64)
    dist.broadcast(b, src=ctx.world_size - 1)
    assert_equal(b, make_input(ctx.world_size - 1, 3, torch.int64), "broadcast")


def check_p2p(ctx):
    if ctx.world_size == 1:
        return
    nxt, prv = (ctx.rank + 1) % ctx.world_size, (ctx.rank - 1) % ctx.world_size
    work = dist.isend(torch.tensor([ctx.rank]), nxt)
    got = torch.zeros(1, dtype=torch.int64)
    assert dist.recv(got) == prv
    work.wait()
    assert_equal(got, torch.tensor([prv]), "recv")


def check_subgroup(ctx):
    group = dist.new_group([0])
    if ctx.rank == 0:
        t = torch.ones(2)
        dist.all_reduce(t, group=group)
        assert_equal(t, torch.ones(2), "group of one")
    dist.barrier()
