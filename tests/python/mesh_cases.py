"""Jobs of test_mesh.py: device meshes and sharded tensors on every rank.

The reference is the original array: every redistribution must give back
full_tensor() equal to it bit for bit, and every local block must equal the
slice of the original that torch.chunk's rule gives (computed here with
NumPy's array_split arithmetic written out, not with tdist).
"""

import random

import numpy as np

import tdist
from tdist.device_mesh import DeviceMesh, init_device_mesh
from tdist.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

try:
    import torch
except ImportError:  # pragma: no cover - Debian's python3-torch is installed
    torch = None


def chunk_bounds(n, k, i):
    """torch.chunk's chunk i of k over n elements: (start, stop)."""
    size = -(-n // k) if n else 0
    start = min(i * size, n)
    return start, min(start + size, n)


def expected_block(x, mesh_shape, coordinate, placements):
    """The slice of `x` the rank at `coordinate` holds (nested shards in mesh order)."""
    bounds = [(0, s) for s in x.shape]
    for m, p in enumerate(placements):
        if isinstance(p, Shard):
            lo, hi = bounds[p.dim]
            a, b = chunk_bounds(hi - lo, mesh_shape[m], coordinate[m])
            bounds[p.dim] = (lo + a, lo + b)
    return x[tuple(slice(a, b) for a, b in bounds)]


def random_placements(rng, mesh_ndim, tensor_ndim, ops):
    """A random layout; its Partials share one op (mixing them is refused)."""
    op = rng.choice(ops)
    out = []
    for _ in range(mesh_ndim):
        r = rng.random()
        if r < 0.2:
            out.append(Replicate())
        elif r < 0.4:
            out.append(Partial(op))
        else:
            out.append(Shard(rng.randrange(tensor_ndim)))
    return out


def to_numpy(t):
    return t.numpy() if torch is not None and isinstance(t, torch.Tensor) else np.asarray(t)


def property_job(rank, world_size, mesh_shape, seed, trials, lib):
    """Random shapes, layouts and transitions on one mesh; returns the number checked."""
    mesh = init_device_mesh("cpu", mesh_shape)
    coordinate = mesh.get_coordinate()
    rng = random.Random(seed)  # same seed on every rank: same cases in the same order
    checked = 0
    for trial in range(trials):
        tensor_ndim = rng.randint(1, 3)
        shape = [rng.choice([0, 1, 2, 3, 5, 7, 8, 11]) for _ in range(tensor_ndim)]
        exact_ints = rng.random() < 0.5
        data = np.random.default_rng(seed * 1000 + trial).standard_normal(shape)
        if exact_ints:
            data = np.round(data * 20)
        x = data.astype(np.float32 if trial % 3 else np.float64)
        # AVG of copies is exact only for values whose multiples are exact.
        ops = ["sum", "max", "min"] + (["avg"] if exact_ints else [])
        src = random_placements(rng, len(mesh_shape), tensor_ndim, ops)
        hops = [random_placements(rng, len(mesh_shape), tensor_ndim, ops) for _ in range(2)]
        hops.append([Replicate()] * len(mesh_shape))
        xt = torch.from_numpy(x.copy()) if lib == "torch" else x
        d = distribute_tensor(xt, mesh, src)
        for placements in [src] + hops:
            d = d.redistribute(mesh, placements)
            local = to_numpy(d.to_local())
            if not any(isinstance(p, Partial) for p in placements):
                want = expected_block(x, mesh_shape, coordinate, placements)
                assert local.shape == want.shape and np.array_equal(local, want), \
                    f"{shape} {src} -> {placements}: rank {rank} block {local.shape} differs"
            full = to_numpy(d.full_tensor())
            assert full.dtype == x.dtype and np.array_equal(full, x), \
                f"{shape} {src} -> {placements}: full_tensor differs from the original on rank {rank}"
            checked += 1
    return checked


def permuted_mesh_job(rank, world_size):
    """A mesh whose ranks are not in order: groups follow the mesh, not the rank order."""
    ranks = list(range(world_size))[::-1]
    mesh = DeviceMesh("cpu", np.array(ranks).reshape(2, -1).tolist(), mesh_dim_names=("a", "b"))
    x = np.arange(5 * 7, dtype=np.int64).reshape(5, 7)
    # Only the source's data counts: the rank at coordinate (1, 1).
    source = mesh.mesh[1, 1]
    mine = x if rank == source else np.full_like(x, -1)
    results = []
    for placements in ([Shard(0), Shard(1)], [Shard(1), Shard(0)], [Shard(0), Shard(0)], [Partial(), Shard(1)]):
        d = distribute_tensor(mine, mesh, placements, src_data_rank=1)
        if not any(isinstance(p, Partial) for p in placements):
            want = expected_block(x, mesh.shape, mesh.get_coordinate(), placements)
            assert np.array_equal(d.to_local(), want), (placements, d.to_local(), want)
        for target in ([Shard(1), Shard(1)], [Replicate(), Shard(0)], [Shard(1), Partial()]):
            assert np.array_equal(d.redistribute(mesh, target).full_tensor(), x), (placements, target)
    b = mesh["b"]
    results.append((mesh.get_coordinate(), b.mesh.tolist(), tdist.get_process_group_ranks(b.get_group()),
                    mesh.get_local_rank("a"), mesh.get_local_rank("b")))
    # A DTensor on the 1-d sub-mesh.
    y = np.arange(9, dtype=np.float32)
    e = distribute_tensor(y, b, [Shard(0)])
    assert np.array_equal(e.full_tensor(), y)
    return results


def api_job(rank, world_size):
    """DeviceMesh's queries and from_local against hand-computed answers."""
    mesh = init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("dp", "tp"))
    out = {
        "shape": mesh.shape, "ndim": mesh.ndim, "size": mesh.size(), "size_tp": mesh.size("tp"),
        "names": mesh.mesh_dim_names, "coordinate": mesh.get_coordinate(),
        "tp_ranks": tdist.get_process_group_ranks(mesh.get_group("tp")),
        "dp_ranks": tdist.get_process_group_ranks(mesh.get_group(0)),
        "tp_mesh": mesh["tp"].mesh.tolist(), "repr": repr(mesh),
    }
    # from_local with uneven blocks and an explicit global shape.
    n = 2 * world_size + 1
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    local = expected_block(x, mesh.shape, mesh.get_coordinate(), [Shard(0), Shard(0)])
    d = DTensor.from_local(local.copy(), mesh, [Shard(0), Shard(0)], shape=x.shape, run_check=True)
    assert np.array_equal(d.full_tensor(), x)
    assert d.shape == x.shape and d.stride() == (3, 1) and d.ndim == 2
    # Without shape, even shards are assumed (as torch).
    e = DTensor.from_local(np.ones((2, 3), np.float32), mesh, [Shard(0), Replicate()])
    out["even_shape"] = tuple(e.shape)
    out["plan"] = d.explain_redistribute([Replicate(), Replicate()])
    if torch is not None:
        t = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
        dt = distribute_tensor(t, mesh, [Shard(1), Shard(0)])
        assert isinstance(dt.to_local(), torch.Tensor) and isinstance(dt.shape, torch.Size)
        assert torch.equal(dt.full_tensor(), t)
    return out


def error_job(rank, world_size):
    """Each bad call raises DistInvalidArgument with a reason, on every rank."""
    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("x",))
    messages = {}

    def expect(name, fn, text):
        try:
            fn()
        except tdist.DistInvalidArgument as e:
            assert text in str(e), f"{name}: {text!r} not in {e}"
            messages[name] = str(e)
            return
        raise AssertionError(f"{name}: no error")

    x = np.zeros((4, 4), np.float32)
    expect("device", lambda: init_device_mesh("cuda", (world_size,)), "only device type is 'cpu'")
    expect("shape", lambda: init_device_mesh("cpu", (world_size + 1,)), "world size")
    expect("count", lambda: distribute_tensor(x, mesh, [Shard(0), Shard(1)]), "2 placements for a mesh of 1")
    expect("dim", lambda: distribute_tensor(x, mesh, [Shard(2)]), "outside [0, 2)")
    expect("name", lambda: mesh.get_group("tp"), "no dimension is called 'tp'")
    expect("partial op", lambda: Partial("median"), "not one of")
    expect("not tensor", lambda: distribute_tensor([1, 2], mesh, [Shard(0)]), "NumPy array or torch tensor")
    expect("block", lambda: DTensor.from_local(np.zeros((3, 4), np.float32), mesh, [Shard(0)],
                                               shape=(10 * world_size, 4)), "block has shape")
    # One rank lies about its block: run_check fails everywhere, naming the count.
    local = np.zeros((5 if rank == world_size - 1 else 4, 4), np.float32)
    expect("run_check", lambda: DTensor.from_local(local, mesh, [Shard(0)], shape=(4 * world_size, 4),
                                                   run_check=True), "1 rank(s) hold a block")
    return sorted(messages)


def ops_job(rank, world_size, mesh_shape):
    """Operator rules: results against NumPy on the full arrays, and the
    placements the rules promise (docs/mesh.md's table)."""
    from tdist.tensor import elementwise
    mesh = init_device_mesh("cpu", mesh_shape)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((7, 5))
    b = rng.standard_normal((5, 9))
    c = rng.standard_normal((7, 5))
    seen = {}
    k = len(mesh_shape)

    def on_every(p):
        return [p] * k

    def close(d, want, what):
        got = d.full_tensor()
        assert got.shape == want.shape and np.allclose(got, want, rtol=1e-12, atol=1e-12), what
        seen[what] = tuple(d.placements)

    R, S0, S1, P = Replicate(), Shard(0), Shard(1), Partial()
    for pa in (R, S0, S1, P):
        da = distribute_tensor(a, mesh, on_every(pa))
        for pc in (R, S0, S1, P):
            dc = distribute_tensor(c, mesh, on_every(pc))
            close(da + dc, a + c, f"{pa}+{pc}")
            close(da - dc, a - c, f"{pa}-{pc}")
            close(da * dc, a * c, f"{pa}*{pc}")
        close(da * 3.0, a * 3.0, f"{pa}*3")
        close(2.0 * da, 2.0 * a, f"2*{pa}")
        close(da + 1.0, a + 1.0, f"{pa}+1")
        close(1.0 - da, 1.0 - a, f"1-{pa}")
        close(-da, -a, f"-{pa}")
        close(da / 4.0, a / 4.0, f"{pa}/4")
        close(elementwise(np.tanh, da), np.tanh(a), f"tanh {pa}")
        close(da.T, a.T, f"{pa}.T")
        close(da.sum(), np.array(a.sum()), f"sum {pa}")
        close(da.sum(0), a.sum(0), f"sum0 {pa}")
        close(da.sum(1, keepdim=True), a.sum(1, keepdims=True), f"sum1k {pa}")
        for pb in (R, S0, S1, P):
            db = distribute_tensor(b, mesh, on_every(pb))
            close(da @ db, a @ b, f"{pa}@{pb}")
    return {k_: repr(v) for k_, v in seen.items()}


def paddle_auto_parallel_job(rank, world_size):
    """tdist.paddle's auto-parallel API on NumPy arrays against NumPy."""
    import tdist.paddle as dist
    mesh = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    assert mesh.shape == [2, 2] and mesh.process_ids == [0, 1, 2, 3] and mesh.dim_names == ["dp", "mp"]
    assert mesh.get_dim_size("mp") == 2 and rank in mesh
    assert mesh.get_mesh_with_dim("mp").process_ids == [0, 2, 1, 3]
    assert mesh.get_mesh_with_dim("mp", 1).process_ids == [1, 3]
    assert dist.ProcessMesh([0, 1, 2, 3]).dim_names == ["d0"]
    coordinate = mesh.get_coordinate()

    x = np.arange(7 * 5, dtype=np.float32).reshape(7, 5)
    for placements in ([dist.Shard(0), dist.Shard(1)], [dist.Replicate(), dist.Shard(0)],
                       [dist.Partial(), dist.Shard(1)], [dist.Partial(dist.ReduceType.kRedMax), dist.Replicate()]):
        d = dist.shard_tensor(x, mesh, placements)
        assert d.is_dist() and d.process_mesh == mesh and list(d.shape) == [7, 5]
        if not any(p.is_partial() for p in placements):
            assert np.array_equal(d._local_value(), expected_block(x, mesh.shape, coordinate, placements))
        for target in ([dist.Replicate(), dist.Replicate()], [dist.Shard(1), dist.Shard(0)]):
            r = dist.reshard(d, mesh, target)
            assert isinstance(r, dist.auto_parallel.DistTensor)
            assert np.array_equal(r.full_tensor(), x), (placements, target)
    ones = dist.dtensor_from_fn(np.ones, mesh, [dist.Shard(0), dist.Replicate()], (5, 3))
    assert ones._local_value().shape == ((3, 3) if coordinate[0] == 0 else (2, 3))

    # A two-layer model: column-parallel then row-parallel, via parallelize.
    rng = np.random.default_rng(11)
    w1, b1 = rng.standard_normal((6, 10)).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    w2, b2 = rng.standard_normal((10, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    inp = rng.standard_normal((4, 6)).astype(np.float32)

    class Model:
        def __init__(self):
            self.fc1 = dist.auto_parallel.Linear(6, 10, weight=w1.copy(), bias=b1.copy())
            self.fc2 = dist.auto_parallel.Linear(10, 3, weight=w2.copy(), bias=b2.copy())

    model, _ = dist.parallelize(Model(), None, mesh, {"mp_config": {"parallelize_plan": {
        "fc1": dist.ColWiseParallel(), "fc2": dist.RowWiseParallel()}}})
    assert model.fc1.weight.placements == (dist.Replicate(), dist.Shard(1))
    assert model.fc2.weight.placements == (dist.Replicate(), dist.Shard(0))
    hidden = model.fc1(inp)
    assert hidden.placements == (dist.Replicate(), dist.Shard(1))
    out = model.fc2(hidden)
    assert out.placements == (dist.Replicate(), dist.Replicate())
    want = (inp @ w1 + b1) @ w2 + b2
    assert np.allclose(out.full_tensor(), want, rtol=1e-5, atol=1e-5)

    # shard_layer with a shard_fn; the bias it leaves plain is replicated.
    layer = dist.auto_parallel.Linear(6, 10, weight=w1.copy(), bias=b1.copy())

    def shard_fn(name, sub, m):
        sub.weight = dist.shard_tensor(sub.weight, m, [dist.Shard(0), dist.Shard(1)])
    dist.shard_layer(layer, mesh, shard_fn)
    assert layer.bias.placements == (dist.Replicate(), dist.Replicate())
    assert np.allclose(layer(inp).full_tensor(), inp @ w1 + b1, rtol=1e-5, atol=1e-5)

    # split: a linear layer by rows and by columns, and an embedding.
    for axis in (0, 1):
        y = dist.split(inp, (6, 10), "linear", axis=axis, num_partitions=world_size, weight_attr=w1,
                       bias_attr=b1)
        assert np.allclose(y, inp @ w1 + b1, rtol=1e-5, atol=1e-5), axis
    part = dist.split(inp, (6, 10), "linear", axis=1, num_partitions=world_size, weight_attr=w1, gather_out=False)
    a, b = 3 * rank if rank < 3 else 9, min(3 * rank + 3, 10)  # chunks of 10 over 4: 3, 3, 3, 1
    assert np.allclose(part, (inp @ w1)[:, a:b], rtol=1e-5, atol=1e-5)
    table = rng.standard_normal((9, 4)).astype(np.float32)
    ids = np.array([[0, 8, 3], [5, 5, 1]])
    emb = dist.split(ids, (9, 4), "embedding", num_partitions=world_size, weight_attr=table)
    assert np.array_equal(emb, table[ids])
    return True


def edge_job(rank, world_size):
    """Cases where a careless implementation returns wrong numbers: dtypes
    whose sums are not linear, -0.0, mixed reduce ops, ranks outside the
    mesh, local-only layouts, and shapes the ranks disagree on."""
    mesh = init_device_mesh("cpu", (2, world_size // 2))
    checked = []

    def raises(fn, text):
        try:
            fn()
        except tdist.DistInvalidArgument as e:
            assert text in str(e), (text, str(e))
            return True
        raise AssertionError(f"no error for {text!r}")

    # Local-only layouts need no group: one rank alone may cut its tensor.
    if rank == 0:
        # First thing in the job: no group of the mesh exists yet, and the
        # other ranks are not calling anything that would make one.
        mine = distribute_tensor(np.arange(6.0), mesh, [Shard(0), Partial()], src_data_rank=None)
        assert np.array_equal(mine.to_local(), np.arange(3.0))
    checked.append("local only")
    tdist.barrier()

    # -0.0 survives Replicate -> Partial(sum) -> Replicate, bit for bit.
    x = np.array([-0.0, 0.0, -1.5, np.inf, -0.0], np.float64)
    back = distribute_tensor(x, mesh, [Partial(), Partial()]).full_tensor()
    assert back.tobytes() == x.tobytes(), back
    xc = np.array([complex(-0.0, -0.0), complex(0.0, -0.0)], np.complex128)
    assert distribute_tensor(xc, mesh, [Partial(), Replicate()]).full_tensor().tobytes() == xc.tobytes()
    checked.append("negative zero")

    # Mixed reduce ops over two mesh dims have no single value.
    y = np.arange(4.0)
    raises(lambda: distribute_tensor(y, mesh, [Partial(), Partial("product")]), "share one reduce op")
    d = distribute_tensor(y, mesh, [Partial(), Replicate()])
    raises(lambda: d.redistribute(mesh, [Partial(), Partial("max")]), "share one reduce op")
    assert np.array_equal(d.redistribute(mesh, [Replicate(), Partial("max")]).full_tensor(), y)
    checked.append("mixed ops")

    # avg of integers would overflow in the dtype; undefined ops are refused.
    raises(lambda: distribute_tensor(np.array([100, 120], np.uint8), mesh, [Partial("avg"), Replicate()]),
           "avg of integers")
    raises(lambda: distribute_tensor(np.ones(3, np.float32), mesh, [Partial("bxor"), Replicate()]),
           "not defined for float32")
    checked.append("dtype ops")

    # Integer and bool partial sums are reduced before non-linear use.
    i8 = distribute_tensor(np.array([100, 3], np.int8), mesh, [Partial(), Replicate()])
    parts = DTensor.from_local(np.array([100, 3], np.int8) if mesh.get_local_rank(0) == 0 else
                               np.array([100, 0], np.int8), mesh, [Partial(), Replicate()])
    whole = np.array([100, 3], np.int8) + np.array([100, 0], np.int8)  # wraps to -56 in int8
    assert np.array_equal((parts * 0.5).full_tensor(), whole * 0.5)
    assert np.array_equal(parts.sum().full_tensor(), whole.sum())
    assert np.array_equal((i8 + i8).full_tensor(), np.array([100, 3], np.int8) * 2)
    flags = DTensor.from_local(np.array([True, True]), mesh, [Partial(), Replicate()])
    assert flags.sum().full_tensor() == 2  # the OR of the parts is [True, True]
    checked.append("integer partials")

    raises(lambda: distribute_tensor(np.ones((2, 3)), mesh, [Shard(0), Replicate()]).sum(2), "out of range")
    assert np.array_equal((2.0 / distribute_tensor(np.full(3, 4.0), mesh, [Shard(0), Partial()])).full_tensor(),
                          np.full(3, 0.5))
    checked.append("sum dim, number / DTensor")

    # Without shape=, uneven blocks imply different global shapes: run_check says so everywhere.
    rows = 2 if mesh.get_local_rank(0) == 0 else 1
    raises(lambda: DTensor.from_local(np.zeros((rows, 3)), mesh, [Shard(0), Replicate()], run_check=True),
           "disagree on the global shape")
    checked.append("run_check shapes")


    # Ranks outside a mesh get empty blocks and take part in nothing.
    small = DeviceMesh("cpu", [0, 1])
    z = distribute_tensor(np.arange(5.0), small, [Shard(0)])
    if rank < 2:
        assert np.array_equal(z.to_local(), np.arange(5.0)[:3] if rank == 0 else np.arange(5.0)[3:])
        assert np.array_equal(z.full_tensor(), np.arange(5.0))
    else:
        assert z.to_local().shape == (0,) and z.full_tensor().shape == (0,) and z.shape == (5,)
        raises(lambda: z + z, "not in")
    checked.append("non-member")
    return checked
