"""Placements of a sharded tensor on one mesh dimension, as torch's
``torch.distributed.tensor.placement_types``: ``Shard(dim)``,
``Replicate()`` and ``Partial(reduce_op="sum")``.

Shard splits like torch.chunk: chunks of ceil(n / k) elements, so with
uneven sizes the last chunks are shorter or empty.
"""

from tdist._C import DistInvalidArgument, ReduceOp

__all__ = ["Placement", "Shard", "Replicate", "Partial"]

_OPS = {
    "sum": ReduceOp.SUM, "avg": ReduceOp.AVG, "product": ReduceOp.PRODUCT, "prod": ReduceOp.PRODUCT,
    "min": ReduceOp.MIN, "max": ReduceOp.MAX, "band": ReduceOp.BAND, "bor": ReduceOp.BOR, "bxor": ReduceOp.BXOR,
}


class Placement:
    """Base of Shard, Replicate and Partial."""

    def is_shard(self, dim=None):
        return False

    def is_replicate(self):
        return False

    def is_partial(self):
        return False

    def _spec(self):
        raise NotImplementedError


class Shard(Placement):
    """The tensor is split along its dimension `dim` over the mesh dimension."""

    def __init__(self, dim):
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise DistInvalidArgument(f"Shard: dim must be an int, got {dim!r}")
        self.dim = dim

    def is_shard(self, dim=None):
        return dim is None or dim == self.dim

    def _spec(self):
        return ("shard", self.dim)

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("shard", self.dim))

    def __repr__(self):
        return f"Shard(dim={self.dim})"


class Replicate(Placement):
    """Every rank along the mesh dimension holds the whole (local) tensor."""

    def is_replicate(self):
        return True

    def _spec(self):
        return ("replicate",)

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return hash("replicate")

    def __repr__(self):
        return "Replicate()"


class Partial(Placement):
    """Every rank along the mesh dimension holds a partial value; the tensor
    is their reduction with `reduce_op` ("sum", "avg", "max", "min",
    "product", "band", "bor", "bxor", or a ReduceOp)."""

    def __init__(self, reduce_op="sum"):
        if isinstance(reduce_op, str):
            name = "product" if reduce_op.lower() == "prod" else reduce_op.lower()
            if name not in _OPS:
                raise DistInvalidArgument(f"Partial: reduce_op {reduce_op!r} is not one of {sorted(_OPS)}")
        else:
            kind = reduce_op.op if isinstance(reduce_op, ReduceOp) else reduce_op
            names = [n for n, k in _OPS.items() if k == kind and n != "prod"]
            if not names:
                raise DistInvalidArgument(f"Partial: reduce_op {reduce_op!r} cannot make a partial tensor "
                                          "(PREMUL_SUM has no single value to reduce to)")
            name = names[0]
        self.reduce_op = name
        self._op = ReduceOp(_OPS[name])

    def is_partial(self):
        return True

    def _spec(self):
        return ("partial", self._op)

    def __eq__(self, other):
        return isinstance(other, Partial) and other.reduce_op == self.reduce_op

    def __hash__(self):
        return hash(("partial", self.reduce_op))

    def __repr__(self):
        return f"Partial({self.reduce_op})"
