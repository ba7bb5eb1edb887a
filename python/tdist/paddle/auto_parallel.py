"""paddle.distributed's auto-parallel API on tdist's DTensor layer, for
NumPy arrays and CPU torch tensors (paddle tensors are not wrapped here)::

    import tdist.paddle as dist

    mesh = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    w = dist.shard_tensor(numpy_weight, mesh, [dist.Replicate(), dist.Shard(1)])
    w2 = dist.reshard(w, mesh, [dist.Shard(0), dist.Replicate()])
    w2._local_value()                       # this rank's block

Distributed tensors are tdist DTensors with paddle's names added
(``process_mesh``, ``placements``, ``_local_value()``, ``is_dist()``).
docs/mesh.md lists what is provided and how it differs from paddle.
"""

import itertools

from tdist import _C
from tdist._C import DistInvalidArgument
from tdist import distributed_c10d as _c10d
from tdist.device_mesh import DeviceMesh
from tdist._tensors import is_tensor
from tdist.tensor import placement_types as _pt
from tdist.tensor._api import DTensor, distribute_tensor

__all__ = [
    "ColWiseParallel", "DistTensor", "Linear", "Partial", "ProcessMesh", "ReduceType", "Replicate", "RowWiseParallel",
    "Shard", "dtensor_from_fn", "get_mesh", "parallelize", "reshard", "set_mesh", "shard_layer", "shard_tensor",
    "split",
]

Shard = _pt.Shard
Replicate = _pt.Replicate


class ReduceType:
    """paddle.distributed.ReduceType: the reduction of a Partial placement."""
    kRedSum = 0  # noqa: N815 - paddle's names
    kRedMax = 1  # noqa: N815
    kRedMin = 2  # noqa: N815
    kRedProd = 3  # noqa: N815
    kRedAvg = 4  # noqa: N815
    kRedAny = 5  # noqa: N815
    kRedAll = 6  # noqa: N815


_REDUCE_NAMES = {ReduceType.kRedSum: "sum", ReduceType.kRedMax: "max", ReduceType.kRedMin: "min",
                 ReduceType.kRedProd: "product", ReduceType.kRedAvg: "avg", ReduceType.kRedAny: "bor",
                 ReduceType.kRedAll: "band"}


class Partial(_pt.Partial):
    """paddle's Partial(reduce_type=ReduceType.kRedSum)."""

    def __init__(self, reduce_type=ReduceType.kRedSum):
        if reduce_type not in _REDUCE_NAMES:
            raise DistInvalidArgument(f"Partial: reduce_type {reduce_type!r} is not a ReduceType")
        super().__init__(_REDUCE_NAMES[reduce_type])
        self.reduce_type = reduce_type


class ProcessMesh(DeviceMesh):
    """paddle.distributed.ProcessMesh: a DeviceMesh of process ids, with
    dimensions named "d0", "d1", ... unless `dim_names` says otherwise."""

    def __init__(self, mesh=None, dim_names=None, shape=None, process_ids=None):
        if mesh is None:
            if shape is None or process_ids is None:
                raise DistInvalidArgument("ProcessMesh: give mesh, or shape and process_ids")
            import numpy
            mesh = numpy.array(process_ids).reshape(shape).tolist()
        if hasattr(mesh, "tolist"):
            mesh = mesh.tolist()
        ndim, level = 0, mesh
        while isinstance(level, (list, tuple)):
            ndim, level = ndim + 1, level[0] if level else None
        names = list(dim_names) if dim_names is not None else [f"d{i}" for i in range(ndim)]
        super().__init__("cpu", mesh, mesh_dim_names=names)

    @property
    def shape(self):
        return list(self._layout.shape)

    @property
    def process_ids(self):
        return list(self._layout.ranks)

    @property
    def dim_names(self):
        return list(self._layout.dim_names)

    def get_dim_size(self, dim):
        return self.size(dim)

    def get_mesh_with_dim(self, dim_name, index=None):
        """The mesh with `dim_name` moved first; with `index`, its slice at that index (paddle's semantics)."""
        import numpy
        d = self._layout.dim_index(dim_name)
        order = [d] + [i for i in range(self.ndim) if i != d]
        ids = numpy.transpose(self.mesh, order)
        names = [self.dim_names[i] for i in order]
        if index is None:
            return ProcessMesh(ids.tolist(), names)
        if self.ndim == 1:
            return ProcessMesh([int(ids[index])], names)
        return ProcessMesh(ids[index].tolist(), names[1:])

    def __contains__(self, rank):
        return rank in self._layout.ranks

    def __repr__(self):
        return f"ProcessMesh(shape={self.shape}, process_ids={self.process_ids}, dim_names={self.dim_names})"


class DistTensor(DTensor):
    """A DTensor with paddle's attribute names."""

    @property
    def process_mesh(self):
        return self.device_mesh

    def _local_value(self):
        return self._local_tensor

    def is_dist(self):
        return True


def _dist(d):
    return DistTensor(d._local_tensor, d.device_mesh, d.placements, d._shape, _checked=True)


def _as_tensor(data, dtype=None):
    if is_tensor(data):
        return data if dtype is None else data.astype(dtype) if hasattr(data, "astype") else data.to(dtype)
    import numpy
    return numpy.asarray(data, dtype=dtype)


_MESH = [None]


def set_mesh(mesh):
    """Sets the global ProcessMesh (paddle.distributed.set_mesh)."""
    _MESH[0] = mesh


def get_mesh():
    """The global ProcessMesh set by set_mesh, or None."""
    return _MESH[0]


def shard_tensor(data, mesh, placements, dtype=None, place=None, stop_gradient=None):
    """A distributed tensor cut from `data` (the whole tensor, the same on
    every rank, as in paddle: nothing is sent). Partial keeps the value on
    the first rank of that mesh dimension and the op's identity elsewhere,
    so the reduction gives `data` back exactly."""
    tensor = _as_tensor(data, dtype)
    return _dist(distribute_tensor(tensor, mesh, placements, src_data_rank=None))


def dtensor_from_fn(fn, mesh, placements, *args, **kwargs):
    """shard_tensor(fn(*args, **kwargs), mesh, placements)."""
    return shard_tensor(fn(*args, **kwargs), mesh, placements)


def reshard(dist_tensor, mesh, placements):
    """The same tensor in the layout `placements` on `mesh` (its own mesh only)."""
    if not isinstance(dist_tensor, DTensor):
        raise DistInvalidArgument("reshard: dist_tensor must come from shard_tensor, dtensor_from_fn or reshard")
    return _dist(dist_tensor.redistribute(mesh, placements))


# ---- layers ----

def _xavier(rows, cols, seed):
    """Xavier-uniform float32 weights, as paddle's default, seeded alike on every rank."""
    import numpy
    bound = (6.0 / (rows + cols)) ** 0.5
    return numpy.random.default_rng(seed).uniform(-bound, bound, (rows, cols)).astype(numpy.float32)


class Linear:
    """A linear layer y = x @ weight + bias with paddle's weight layout
    ([in_features, out_features]); weight and bias are arrays or tensors,
    made distributed by shard_layer or the parallel plans."""

    def __init__(self, in_features, out_features, weight=None, bias=None, seed=0):
        import numpy
        self.weight = weight if weight is not None else _xavier(in_features, out_features, seed)
        self.bias = bias if bias is not None else numpy.zeros(out_features, numpy.float32)
        self._gather_output = False

    def named_sublayers(self, include_self=False):
        return [("", self)] if include_self else []

    def parameters(self):
        return [self.weight, self.bias]

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):
        if not isinstance(self.weight, DTensor):
            return x @ self.weight + self.bias
        mesh = self.weight.device_mesh
        if not isinstance(x, DTensor):
            x = distribute_tensor(_as_tensor(x), mesh, [Replicate()] * mesh.ndim, src_data_rank=None)
        y = x @ self.weight
        # A row-parallel product is partial: reduce it before the bias (adding
        # the bias to each part would add it once per rank).
        y = y.redistribute(mesh, [Replicate() if p.is_partial() else p for p in y.placements])
        y = _add_bias(y, self.bias)
        if self._gather_output:
            y = y.redistribute(mesh, [Replicate()] * mesh.ndim)
        return _dist(y)


def _add_bias(y, bias):
    """y + bias over y's last dim, with the bias laid out like that dim."""
    last = y.ndim - 1
    if not isinstance(bias, DTensor):
        bias = distribute_tensor(_as_tensor(bias), y.device_mesh, [Replicate()] * y.device_mesh.ndim,
                                 src_data_rank=None)
    want = [Shard(0) if p.is_shard(last) else Replicate() for p in y.placements]
    bias = bias.redistribute(y.device_mesh, want)
    return DTensor(y.to_local() + bias.to_local(), y.device_mesh, y.placements, y._shape, _checked=True)


def shard_layer(layer, process_mesh, shard_fn=None, input_fn=None, output_fn=None):
    """Makes `layer`'s parameters distributed: shard_fn(name, sublayer,
    process_mesh) for each sublayer (it may assign shard_tensor results to
    the parameters); any parameter still plain is then replicated. input_fn
    and output_fn, if given, wrap the layer's forward (paddle's hooks)."""
    for name, sub in layer.named_sublayers(include_self=True):
        if shard_fn is not None:
            shard_fn(name, sub, process_mesh)
        for attr in ("weight", "bias"):
            value = getattr(sub, attr, None)
            if value is not None and not isinstance(value, DTensor):
                setattr(sub, attr, shard_tensor(value, process_mesh, [Replicate()] * process_mesh.ndim))
    if input_fn is not None or output_fn is not None:
        forward = layer.forward

        def hooked(x):
            if input_fn is not None:
                x = input_fn(x, process_mesh)
            y = forward(x)
            return output_fn(y, process_mesh) if output_fn is not None else y
        layer.forward = hooked
    return layer


def _on_mp(mesh, placement):
    """`placement` on the mesh's "mp" dimension (its last if none is called
    so), Replicate on the others."""
    names = mesh.dim_names
    mp = names.index("mp") if "mp" in names else mesh.ndim - 1
    return [placement if m == mp else Replicate() for m in range(mesh.ndim)]


class ColWiseParallel:
    """Splits a Linear's weight by columns (and its bias) over the mesh's
    "mp" dimension (its last if none is called so); the output stays split
    by columns unless gather_output."""

    def __init__(self, gather_output=False):
        self.gather_output = gather_output

    def apply(self, layer, mesh):
        layer.weight = shard_tensor(layer.weight, mesh, _on_mp(mesh, Shard(1)))
        layer.bias = shard_tensor(layer.bias, mesh, _on_mp(mesh, Shard(0)))
        layer._gather_output = self.gather_output
        return layer


class RowWiseParallel:
    """Splits a Linear's weight by rows over the mesh's "mp" dimension; the
    bias is replicated and the output is reduced (Replicate)."""

    def __init__(self, is_input_parallel=True):
        self.is_input_parallel = is_input_parallel

    def apply(self, layer, mesh):
        layer.weight = shard_tensor(layer.weight, mesh, _on_mp(mesh, Shard(0)))
        layer.bias = shard_tensor(layer.bias, mesh, [Replicate()] * mesh.ndim)
        return layer


def parallelize(model, optimizer=None, mesh=None, config=None):
    """Applies config["mp_config"]["parallelize_plan"] ({sublayer name:
    ColWiseParallel() or RowWiseParallel()}) to `model`'s attributes of
    those names; returns (model, optimizer). Other parallel configs
    (dp_config, pp_config) are not provided."""
    mesh = mesh or get_mesh()
    if mesh is None:
        raise DistInvalidArgument("parallelize: no mesh (pass mesh= or call set_mesh)")
    config = config or {}
    unknown = set(config) - {"mp_config"}
    if unknown:
        raise DistInvalidArgument(f"parallelize: {sorted(unknown)} are not provided by tdist (mp_config only)")
    for name, plan in config.get("mp_config", {}).get("parallelize_plan", {}).items():
        layer = getattr(model, name, None)
        if layer is None:
            raise DistInvalidArgument(f"parallelize: the model has no sublayer {name!r}")
        plan.apply(layer, mesh)
    return model, optimizer


# ---- paddle.distributed.split ----

_SPLIT_CALLS = itertools.count()


def split(x, size, operation, axis=0, num_partitions=1, gather_out=True, weight_attr=None, bias_attr=None,
          name=None):
    """paddle.distributed.split over all ranks (num_partitions must equal
    the world size): a linear layer (size=(in, out); axis=0 splits the
    weight by rows, 1 by columns) or an embedding (size=(vocab, dim), split
    by rows). weight_attr is the whole weight (the same array on every
    rank) or None for Xavier-uniform weights seeded alike on every rank;
    bias_attr likewise (linear only; False for none). Returns the output,
    whole if gather_out else this rank's split of it."""
    world = _c10d.get_world_size()
    if num_partitions != world:
        raise DistInvalidArgument(f"split: num_partitions {num_partitions} must equal the world size {world}")
    mesh = ProcessMesh(list(range(world)), ["mp"])
    call = next(_SPLIT_CALLS)
    rows, cols = size
    import numpy
    if weight_attr is None:
        weight_attr = _xavier(rows, cols, call)
    if operation == "linear":
        if axis not in (0, 1):
            raise DistInvalidArgument(f"split: axis must be 0 or 1 for linear, got {axis}")
        # No bias (False) and the default one (None) are both zeros.
        bias = numpy.zeros(cols, numpy.float32) if bias_attr is None or bias_attr is False else bias_attr
        layer = Linear(rows, cols, weight=_as_tensor(weight_attr), bias=bias)
        (RowWiseParallel() if axis == 0 else ColWiseParallel(gather_output=gather_out)).apply(layer, mesh)
        out = layer(x)  # a row split cuts x's last dim to match (the matmul rule)
        return out.full_tensor() if gather_out else out._local_value()
    if operation == "embedding":
        if axis != 0:
            raise DistInvalidArgument("split: an embedding is split by rows (axis=0)")
        weight = shard_tensor(weight_attr, mesh, [Shard(0)])
        ids = numpy.asarray(x)
        first = _C._chunk_extent(rows, world, mesh.get_local_rank(0))[0]
        local = weight._local_value()
        mine = (ids >= first) & (ids < first + local.shape[0])
        out = numpy.zeros(ids.shape + (cols,), dtype=local.dtype)
        out[mine] = local[ids[mine] - first]  # each row lives on one rank; the others add zeros
        partial = DTensor.from_local(out, mesh, [_pt.Partial()], shape=out.shape)
        return partial.full_tensor()
    raise DistInvalidArgument(f"split: operation must be 'linear' or 'embedding', got {operation!r}")
