"""all_reduce of sparse COO tensors on tdist groups (run by torch_worker.py).

Every rank builds every rank's input (a pure function of the rank), so each
computes the expected sum itself: densely (the sum of to_dense()), and as
torch sums sparse tensors (their sum, coalesced), which is gloo's result:
the same indices and values, coalesced.
"""

import torch
import torch.distributed as dist
import torch.nn as nn

from torch_checks import assert_equal, expect_error

SIZES = {"matrix": (6, 5), "hybrid": (7, 3), "cube": (3, 4, 2)}


def sparse_input(rank, case, dtype=torch.float32):
    """Rank `rank`'s input: rank + 2 entries (rank 0 none in "some_empty",
    nobody in "all_empty"), one index repeated within the rank, indices
    shared across ranks, uncoalesced."""
    kind = {"some_empty": "matrix", "all_empty": "matrix", "coalesced": "matrix"}.get(case, case)
    sizes = SIZES[kind]
    nnz = rank + 2
    if case == "all_empty" or (case == "some_empty" and rank == 0):
        nnz = 0
    k = torch.arange(nnz)
    rows = (k * (rank + 1) + rank) % sizes[0]
    if nnz > 1:
        rows[-1] = rows[0]  # a duplicate index within this rank
    if kind == "matrix":
        indices = torch.stack([rows, (k + 2 * rank) % sizes[1]])
        if nnz > 1:
            indices[1, -1] = indices[1, 0]
        values = (k + 1 + rank * 10).to(dtype)
    elif kind == "hybrid":  # one sparse dimension, rows of 3 dense values
        indices = rows.unsqueeze(0)
        values = (torch.arange(nnz * 3).reshape(nnz, 3) + rank).to(dtype)
    else:
        indices = torch.stack([rows % sizes[0], (k + rank) % sizes[1], k % sizes[2]])
        if nnz > 1:
            indices[:, -1] = indices[:, 0]
        values = (k * 3 + rank + 1).to(dtype)
    s = torch.sparse_coo_tensor(indices, values, sizes)
    return s.coalesce() if case == "coalesced" else s


def _check_sum(ctx, s, case, dtype):
    inputs = [sparse_input(r, case, dtype) for r in ctx.ranks]
    what = "sparse all_reduce %s %s" % (case, dtype)
    assert s.is_sparse and s.is_coalesced(), what
    assert_equal(s.to_dense(), sum(i.to_dense() for i in inputs), what + " (dense)")
    torch_sum = inputs[0]
    for i in inputs[1:]:
        torch_sum = torch_sum + i
    torch_sum = torch_sum.coalesce()
    assert_equal(s._indices(), torch_sum._indices(), what + " (indices)")
    assert_equal(s._values(), torch_sum._values(), what + " (values)")


def check_sparse_all_reduce_sums(ctx):
    for case in ["matrix", "hybrid", "cube", "some_empty", "all_empty", "coalesced"]:
        for dtype in [torch.float32, torch.float64, torch.int64]:
            s = sparse_input(ctx.rank, case, dtype)
            assert dist.all_reduce(s) is None
            _check_sum(ctx, s, case, dtype)


def check_sparse_all_reduce_async_and_in_order(ctx):
    # Back-to-back async calls: the dense all_reduce is called while the
    # first sparse one is still gathering sizes, and must run after it on
    # every rank, as called.
    a = sparse_input(ctx.rank, "matrix")
    d = torch.full((4,), float(ctx.rank))
    b = sparse_input(ctx.rank, "hybrid", torch.float64)
    works = [dist.all_reduce(a, async_op=True), dist.all_reduce(d, async_op=True),
             dist.all_reduce(b, async_op=True)]
    c = torch.full((3,), float(ctx.rank))
    dist.broadcast(c, src=ctx.world_size - 1)
    for w in works:
        w.wait()
    _check_sum(ctx, a, "matrix", torch.float32)
    _check_sum(ctx, b, "hybrid", torch.float64)
    assert_equal(d, torch.full((4,), float(sum(ctx.ranks))), "dense all_reduce between sparse ones")
    assert_equal(c, torch.full((3,), float(ctx.world_size - 1)), "broadcast after them")
    # The future's value is the input tensor, reduced in place, as gloo's.
    s = sparse_input(ctx.rank, "cube")
    fut = dist.all_reduce(s, async_op=True).get_future()
    got = fut.wait()
    assert got[0] is s, got
    _check_sum(ctx, s, "cube", torch.float32)


def check_sparse_all_reduce_errors(ctx):
    for op in [dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT, dist.ReduceOp.AVG]:
        expect_error(lambda: dist.all_reduce(sparse_input(ctx.rank, "matrix"), op=op),
                     "unsupported reduction operation (allreduce of sparse tensors only works with ReduceOp.SUM)")
    if ctx.world_size > 1:
        # Sizes differ by rank: every rank raises, naming what each passed.
        rows = 4 + ctx.rank
        s = torch.sparse_coo_tensor(torch.tensor([[0], [0]]), torch.ones(1), (rows, 4))
        message = expect_error(lambda: dist.all_reduce(s), "Sparse dimensions do not match")
        for r in ctx.ranks:
            assert "rank %d passed float32[%d, 4] (2 sparse, 0 dense dims)" % (r, 4 + r) in message, message
        # Another dtype on one rank.
        s = sparse_input(ctx.rank, "matrix", torch.float64 if ctx.rank == 1 else torch.float32)
        expect_error(lambda: dist.all_reduce(s), "Sparse dimensions do not match", "float64[6, 5]")
    # The group still works.
    t = torch.ones(2)
    dist.all_reduce(t)
    assert_equal(t, torch.full((2,), float(ctx.world_size)), "all_reduce after sparse errors")
    s = sparse_input(ctx.rank, "matrix")
    dist.all_reduce(s)
    _check_sum(ctx, s, "matrix", torch.float32)


def check_destroying_a_group_during_sparse_all_reduce(ctx):
    # Calls still in flight, or deferred behind the sparse one, finish or
    # fail with an error; nothing hangs or crashes, and WORLD works on.
    for _ in range(5):
        group = dist.new_group(list(ctx.ranks), backend="tdist")
        s = sparse_input(ctx.rank, "matrix")
        d = torch.ones(3)
        works = [dist.all_reduce(s, group=group, async_op=True), dist.all_reduce(d, group=group, async_op=True)]
        dist.destroy_process_group(group)
        del group  # the last reference: the group is destroyed now
        for i, w in enumerate(works):
            try:
                w.wait()
            except RuntimeError:
                continue
            if i == 0:
                _check_sum(ctx, s, "matrix", torch.float32)
            else:
                assert_equal(d, torch.full((3,), float(ctx.world_size)), "all_reduce deferred behind a sparse one")
    t = torch.ones(2)
    dist.all_reduce(t)
    assert_equal(t, torch.full((2,), float(ctx.world_size)), "WORLD after destroying groups")


class _Model(nn.Module):
    def __init__(self, sparse):
        super().__init__()
        self.emb = nn.Embedding(20, 4, sparse=sparse)
        self.lin = nn.Linear(4, 1)

    def forward(self, idx):
        return self.lin(self.emb(idx).mean(dim=1))


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randint(0, 20, (3, 5), generator=g), torch.randn(3, 1, generator=g)


def check_ddp_with_sparse_embedding_gradients(ctx):
    torch.manual_seed(0)
    model = _Model(sparse=True)
    reference = _Model(sparse=False)
    reference.load_state_dict(model.state_dict())
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    for step in range(4):
        opt.zero_grad()
        idx, y = _batch(ctx.rank, step)
        nn.functional.mse_loss(ddp(idx), y).backward()
        assert model.emb.weight.grad.is_sparse
        opt.step()
        # Reference: the gradients of every rank's batch, averaged, as DDP's.
        ref_opt.zero_grad()
        for r in ctx.ranks:
            idx, y = _batch(r, step)
            (nn.functional.mse_loss(reference(idx), y) / ctx.world_size).backward()
        ref_opt.step()
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            if not torch.allclose(p, q, atol=1e-6, rtol=0):
                raise AssertionError("DDP step %d: %s differs by %g" % (step, name, (p - q).abs().max()))
    del ddp
