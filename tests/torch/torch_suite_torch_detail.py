"""torch's own DETAIL level on tdist groups (run by torch_worker.py under
TORCH_DISTRIBUTED_DEBUG=DETAIL): torch 2 wraps the tdist backend in its
checking wrapper, as it wraps gloo's, so a call that differs across ranks
fails on every rank with torch's report before tdist runs it, matching calls
give correct results, and the group works on. tdist's own checks
(TDIST_DEBUG=DETAIL, torch_suite_detail.py) stay off."""

import torch
import torch.distributed as dist

import tdist.torch

from torch_checks import assert_equal, expect_error


def check_torch_wraps_the_tdist_backend(ctx):
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert hasattr(backend, "wrapped_pg"), type(backend)
    assert isinstance(tdist.torch.backend_of(), tdist.torch.ProcessGroupTdist)
    assert not tdist.torch.backend_of().detail_checks


def check_matching_calls_pass(ctx):
    t = torch.full((4,), float(ctx.rank + 1))
    dist.all_reduce(t)
    assert_equal(t, torch.full((4,), float(sum(r + 1 for r in ctx.ranks))), "all_reduce under torch's DETAIL")
    out = torch.empty(2 * ctx.world_size)
    dist.all_gather_into_tensor(out, torch.full((2,), float(ctx.rank)))
    want = torch.tensor([float(r) for r in ctx.ranks for _ in range(2)])
    assert_equal(out, want, "all_gather_into_tensor under torch's DETAIL")


def check_a_shape_mismatch_fails_on_every_rank_and_the_group_works_on(ctx):
    if ctx.world_size == 1:
        return
    shape = (2, 6) if ctx.rank == 0 else (6, 2)
    expect_error(lambda: dist.all_reduce(torch.ones(shape)), "Detected mismatch between collectives")
    t = torch.ones(3)
    dist.all_reduce(t)
    assert_equal(t, torch.full((3,), float(ctx.world_size)), "all_reduce after a mismatch")
