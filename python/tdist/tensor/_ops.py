"""Operator rules: how placements flow through the few operations a sharded
model needs (docs/mesh.md has the table). Each rule looks at one mesh
dimension at a time; where the operands' placements do not fit a rule, the
operands are first redistributed to ones that do (as torch's sharding
propagation does), so a result is never silently wrong.

- elementwise (+, -, *, /, unary functions): placements kept; Partial(sum)
  of a float or complex tensor survives only linear use (Partial + Partial,
  Partial * or / Replicate or a scalar); otherwise, and always for integer
  and bool tensors (whose dtype may change or whose sum is an OR), it is
  all_reduced first.
- matmul (a @ b, b 2-d): Shard(row dim of a) x Replicate -> Shard(row dim);
  Replicate x Shard(1) (column-wise weight) -> Shard(last); Shard(last) x
  Shard(0) (row-wise weight) -> Partial(sum); Partial(sum) with Replicate ->
  Partial(sum).
- sum over dims: a sharded dim summed -> Partial(sum); the others keep their
  shard (renumbered); Partial(sum) of a float or complex tensor stays.
- transpose (.T of a 2-d tensor): Shard(0) <-> Shard(1).
"""

import numbers

from tdist._C import DistInvalidArgument
from tdist.tensor import _local
from tdist.tensor.placement_types import Partial, Replicate, Shard

_SUM = Partial("sum")


def _check_same_mesh(op, a, b):
    if a.device_mesh != b.device_mesh:
        raise DistInvalidArgument(f"{op}: the operands live on different meshes ({a.device_mesh!r} and "
                                  f"{b.device_mesh!r})")


def _wrap(like, local, placements, shape):
    from tdist.tensor._api import DTensor
    return DTensor(local, like.device_mesh, placements, shape, _checked=True)


def _linear(d, ops=(_SUM,)):
    """The Partials that may pass through a linear operation on `d`: none
    for integers and bool, whose sums wrap or saturate (bool SUM is OR)."""
    return ops if _local.kind(d.to_local()) in ("float", "complex") else ()


def _member(op, d):
    if d.device_mesh.get_coordinate() is None:
        raise DistInvalidArgument(f"{op}: this rank is not in {d.device_mesh!r}; DTensor operators run on the "
                                  "mesh's ranks only")


def _without_partial(d, allowed=()):
    """`d` with every Partial not in `allowed` reduced to Replicate."""
    _member("DTensor", d)
    target = [Replicate() if p.is_partial() and p not in allowed else p for p in d.placements]
    return d if list(target) == list(d.placements) else d.redistribute(d.device_mesh, target)


def binary(op, a, b, fn):
    """Elementwise `fn(a, b)` for a DTensor `a` and a DTensor or Python number `b`."""
    from tdist.tensor._api import DTensor
    if not isinstance(b, DTensor):
        if not isinstance(b, numbers.Number):
            raise DistInvalidArgument(f"{op}: a DTensor combines with a DTensor or a Python number, not "
                                      f"{type(b).__name__}")
        # Scaling keeps a partial sum linear; adding a constant to each part would not.
        keep = _linear(a) if op in ("mul", "truediv") else ()
        a = _without_partial(a, keep)
        return _wrap(a, fn(a.to_local(), b), a.placements, a._shape)
    _check_same_mesh(op, a, b)
    _member(op, a)
    linear = bool(_linear(a)) and bool(_linear(b))
    if a._shape != b._shape:
        raise DistInvalidArgument(f"{op}: shapes {a._shape} and {b._shape} differ (DTensor ops do not broadcast)")
    left, right, out = zip(*(_binary_rule(op, pa, pb, linear) for pa, pb in zip(a.placements, b.placements)))
    a = a.redistribute(a.device_mesh, left)
    b = b.redistribute(b.device_mesh, right)
    return _wrap(a, fn(a.to_local(), b.to_local()), out, a._shape)


def _binary_rule(op, pa, pb, linear):
    """(a's, b's, out's) placement on one mesh dim for an elementwise op."""
    if pa == pb and not pa.is_partial():
        return pa, pb, pa
    if linear and pa == _SUM and (op in ("add", "sub") and pb == _SUM or op == "truediv" and pb.is_replicate()):
        return pa, pb, _SUM
    if linear and op == "mul" and {pa, pb} == {_SUM, Replicate()}:
        return pa, pb, _SUM
    # Otherwise both take a's placement, or b's if a's is partial: Replicate
    # if both are (a partial sum survives only linear use).
    t = pa if not pa.is_partial() else (pb if not pb.is_partial() else Replicate())
    return t, t, t


def binary_reflected(op, d, number, fn):
    """`fn(number, d)` for a number on the left of a DTensor."""
    keep = _linear(d) if op == "mul" else ()
    d = _without_partial(d, keep)
    return _wrap(d, fn(number, d.to_local()), d.placements, d._shape)


def elementwise(fn, d, *, linear=False):
    """A DTensor of fn(local) for an elementwise function `fn` (relu, exp, a
    mask...). Partial placements are reduced first unless `linear` says fn
    commutes with the sum (fn(x + y) == fn(x) + fn(y))."""
    d = _without_partial(d, _linear(d) if linear else ())
    return _wrap(d, fn(d.to_local()), d.placements, d._shape)


def _matmul_rule(pa, pb, last):
    """(a's, b's, out's) placement on one mesh dim, or None if none fits."""
    if pa.is_replicate() and pb.is_replicate():
        return pa, pb, pa
    if pa.is_shard() and pa.dim < last and pb.is_replicate():
        return pa, pb, pa
    if pa.is_replicate() and pb.is_shard(1):
        return pa, pb, Shard(last)
    if pa.is_shard(last) and pb.is_shard(0):
        return pa, pb, _SUM
    if pa == _SUM and pb.is_replicate():
        return pa, pb, _SUM
    if pa.is_replicate() and pb == _SUM:
        return pa, pb, _SUM
    return None


def _matmul_fit(pa, pb, last):
    """The placements to move a and b to when no rule fits as they are."""
    if pa.is_shard() and pa.dim < last:
        return pa, Replicate()  # keep a's rows split, gather b
    if pb.is_shard(1):
        return Replicate(), pb  # keep b's columns split, gather a
    if pa.is_shard(last):
        return pa, Shard(0)  # split b's rows like a's columns
    if pb.is_shard(0):
        return Shard(last), pb
    return Replicate(), Replicate()


def matmul(a, b):
    """a @ b for DTensors: a of 2 or more dims, b of 2 (docs/mesh.md's rules)."""
    from tdist.tensor._api import DTensor
    if not isinstance(a, DTensor) or not isinstance(b, DTensor):
        raise DistInvalidArgument("matmul: both operands must be DTensors")
    _check_same_mesh("matmul", a, b)
    _member("matmul", a)
    if a.ndim < 2 or b.ndim != 2:
        raise DistInvalidArgument(f"matmul: needs a of 2 or more dimensions and b of 2, got {a.ndim} and {b.ndim}")
    if a._shape[-1] != b._shape[0]:
        raise DistInvalidArgument(f"matmul: shapes {a._shape} and {b._shape} do not chain")
    last = a.ndim - 1
    # Sums distribute over matmul for every dtype with wrapping (or, for bool,
    # OR) arithmetic that stays in the dtype, so the rules hold for all.
    left, right, out = zip(*(_matmul_rule(pa, pb, last) or _matmul_rule(*_matmul_fit(pa, pb, last), last)
                             for pa, pb in zip(a.placements, b.placements)))
    a = a.redistribute(a.device_mesh, left)
    b = b.redistribute(b.device_mesh, right)
    return _wrap(a, a.to_local() @ b.to_local(), out, a._shape[:-1] + (b._shape[1],))


def reduce_sum(d, dim=None, keepdim=False):
    """sum over `dim` (an int, a tuple, or None for all): summed sharded dims become Partial(sum)."""
    _member("sum", d)
    dims = tuple(range(d.ndim)) if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
    for x in dims:
        if not -d.ndim <= x < d.ndim:
            raise DistInvalidArgument(f"sum: dim {x} is out of range for a tensor of {d.ndim} dimensions")
    dims = tuple(sorted({x % d.ndim for x in dims}))
    d = _without_partial(d, _linear(d))
    placements = []
    for p in d.placements:
        if p.is_shard() and p.dim in dims:
            placements.append(_SUM)
        elif p.is_shard() and not keepdim:
            placements.append(Shard(p.dim - sum(1 for x in dims if x < p.dim)))
        else:
            placements.append(p)
    summed = _local.sum_over(d.to_local(), dims, keepdim)
    shape = tuple(1 if i in dims else s for i, s in enumerate(d._shape)) if keepdim else \
        tuple(s for i, s in enumerate(d._shape) if i not in dims)
    return _wrap(d, summed, placements, shape)


def transpose(d):
    """The transpose of a 2-d DTensor."""
    if d.ndim != 2:
        raise DistInvalidArgument(f"transpose: needs a 2-d DTensor, got {d.ndim} dimensions")
    placements = [Shard(1 - p.dim) if p.is_shard() else p for p in d.placements]
    _member("transpose", d)
    return _wrap(d, _local.contiguous_copy(d.to_local().T), placements, (d._shape[1], d._shape[0]))
