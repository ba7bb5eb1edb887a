"""DTensor: a rank's local tensor plus where it lies in the global tensor
(mesh, one placement per mesh dimension, global shape), as torch's
``torch.distributed.tensor.DTensor`` on CPU NumPy arrays and torch tensors.
"""

import operator

from tdist import _C
from tdist import collectives as _coll
from tdist._C import DistInvalidArgument
from tdist.device_mesh import current_mesh
from tdist._tensors import dtype_name, is_tensor, is_torch_tensor
from tdist.tensor import _local, _ops, _redistribute
from tdist.tensor.placement_types import Placement, Replicate, Shard

__all__ = ["DTensor", "distribute_tensor"]


_INTEGRAL = ("int", "uint", "bool")


def _check_placements(op, mesh, placements, tensor_ndim, like=None):
    """The placements as a tuple, checked; with `like` (a tensor), also that
    every Partial's op is defined for its dtype."""
    if placements is None:
        placements = [Replicate()] * mesh.ndim
    placements = list(placements)
    for i, p in enumerate(placements):
        if not isinstance(p, Placement):
            raise DistInvalidArgument(f"{op}: placement {i} is {p!r}, not Shard, Replicate or Partial")
        if p.is_shard() and p.dim < 0:  # torch allows Shard(-1)
            placements[i] = Shard(p.dim + tensor_ndim)
    _C._validate_placements(op, [p._spec() for p in placements], mesh.ndim, tensor_ndim)
    if like is not None:
        dtype = dtype_name(like)
        for p in placements:
            if not p.is_partial():
                continue
            # Replicate -> Partial(avg) keeps a copy on every rank; summing k
            # copies in a small integer type overflows before the division.
            if not _C.is_reduce_supported(dtype, p._op) or (p.reduce_op == "avg" and dtype.startswith(_INTEGRAL)):
                raise DistInvalidArgument(f"{op}: {p!r} is not defined for {dtype} tensors here"
                                          + (" (avg of integers could overflow)" if p.reduce_op == "avg" else ""))
    return tuple(placements)


def _default_mesh(op, device_mesh):
    """`device_mesh`, else the mesh of the innermost ``with mesh:`` block."""
    if device_mesh is None:
        device_mesh = current_mesh()
    if device_mesh is None:
        raise DistInvalidArgument(f"{op}: a device_mesh is needed: pass one, or call inside ``with mesh:``")
    return device_mesh


def _contiguous_strides(shape):
    strides, n = [], 1
    for s in reversed(shape):
        strides.append(n)
        n *= s
    return tuple(reversed(strides))


class DTensor:
    """A tensor sharded, replicated or partial over a DeviceMesh.

    Make one with distribute_tensor() or DTensor.from_local(); read it with
    to_local() (this rank's block) or full_tensor() (the whole, on every
    rank); move it with redistribute().
    """

    def __init__(self, local_tensor, device_mesh, placements, shape, *, _checked=False):
        if not _checked:
            raise DistInvalidArgument("DTensor: use DTensor.from_local or distribute_tensor to make one")
        self._local_tensor = local_tensor
        self.device_mesh = device_mesh
        self.placements = tuple(placements)
        self._shape = tuple(int(s) for s in shape)

    # ---- what it is ----
    @property
    def shape(self):
        """The global shape (a tuple; torch gives a torch.Size)."""
        if is_torch_tensor(self._local_tensor):
            import torch
            return torch.Size(self._shape)
        return self._shape

    def size(self, dim=None):
        return self.shape if dim is None else self._shape[dim]

    @property
    def ndim(self):
        return len(self._shape)

    def dim(self):
        return len(self._shape)

    def stride(self):
        """The global tensor's strides if it were contiguous."""
        return _contiguous_strides(self._shape)

    @property
    def dtype(self):
        return self._local_tensor.dtype

    def numel(self):
        n = 1
        for s in self._shape:
            n *= s
        return n

    def __repr__(self):
        return (f"DTensor(local_tensor={self._local_tensor!r}, device_mesh={self.device_mesh!r}, "
                f"placements={self.placements!r}, shape={self._shape})")

    # ---- in and out ----
    @staticmethod
    def from_local(local_tensor, device_mesh=None, placements=None, *, run_check=False, shape=None,
                   stride=None):
        """A DTensor from every rank's block. Without `shape` the global shape
        assumes even shards (local size x mesh size per Shard), as torch does;
        pass `shape` for uneven ones. run_check=True compares every rank's
        block shape with what the layout says and raises DistInvalidArgument
        on every rank if one differs."""
        mesh = _default_mesh("DTensor.from_local", device_mesh)
        if not is_tensor(local_tensor):
            raise DistInvalidArgument(f"DTensor.from_local: local_tensor must be a NumPy array or torch tensor, "
                                      f"got {type(local_tensor).__name__}")
        placements = _check_placements("DTensor.from_local", mesh, placements, local_tensor.ndim, local_tensor)
        if shape is None:
            global_shape = list(_local.shape(local_tensor))
            for m, p in enumerate(placements):
                if p.is_shard():
                    global_shape[p.dim] *= mesh.size(m)
        else:
            global_shape = [int(s) for s in shape]
            if len(global_shape) != local_tensor.ndim:
                raise DistInvalidArgument(f"DTensor.from_local: shape {tuple(shape)} has {len(global_shape)} "
                                          f"dimensions but local_tensor has {local_tensor.ndim}")
        if stride is not None and tuple(stride) != _contiguous_strides(global_shape):
            raise DistInvalidArgument("DTensor.from_local: only contiguous global strides are supported, got "
                                      f"{tuple(stride)} for shape {tuple(global_shape)}")
        if mesh.get_coordinate() is None:  # not in the mesh: nothing to check or hold (as torch)
            return DTensor(_local.empty(local_tensor, [0]), mesh, placements, global_shape, _checked=True)
        expected = [n for _, n in _C._local_block(global_shape, list(mesh.shape), mesh._coordinate(),
                                                   [p._spec() for p in placements])]
        if run_check:
            _check_blocks_agree(mesh, global_shape, _local.shape(local_tensor), expected)
        elif list(_local.shape(local_tensor)) != expected:
            raise DistInvalidArgument(f"DTensor.from_local: this rank's block has shape "
                                      f"{tuple(_local.shape(local_tensor))} but global shape {tuple(global_shape)} "
                                      f"with placements {placements} gives it {tuple(expected)}")
        return DTensor(local_tensor, mesh, placements, global_shape, _checked=True)

    def to_local(self):
        """This rank's block (the tensor itself, not a copy)."""
        return self._local_tensor

    def full_tensor(self):
        """The whole tensor on every rank of the mesh (all Replicate)."""
        return self.redistribute(self.device_mesh, [Replicate()] * self.device_mesh.ndim).to_local()

    def redistribute(self, device_mesh=None, placements=None, *, async_op=False):
        """The same tensor in another layout, moved with the collectives the
        plan picks (explain_redistribute() shows it). Runs synchronously."""
        mesh = device_mesh if device_mesh is not None else self.device_mesh
        if mesh != self.device_mesh:
            raise DistInvalidArgument("DTensor.redistribute: moving to another mesh is not supported "
                                      f"({self.device_mesh!r} -> {mesh!r})")
        placements = _check_placements("DTensor.redistribute", mesh, placements, self.ndim, self._local_tensor)
        if mesh.get_coordinate() is None:  # not in the mesh: an empty block, as torch gives
            return DTensor(self._local_tensor, mesh, placements, self._shape, _checked=True)
        steps = self._plan(placements).steps
        local = _redistribute.run(mesh, self._local_tensor, steps) if steps else self._local_tensor
        return DTensor(local, mesh, placements, self._shape, _checked=True)

    def explain_redistribute(self, placements):
        """The plan redistribute(placements) would run, as text: one line per
        step (collective, mesh dim, shapes, bytes this rank moves), then the total."""
        placements = _check_placements("DTensor.explain_redistribute", self.device_mesh, placements, self.ndim)
        return self._plan(placements).explain(self.device_mesh._layout)

    # ---- operators (docs/mesh.md's rules; tdist.tensor._ops) ----
    def __add__(self, other):
        return _ops.binary("add", self, other, operator.add)

    def __radd__(self, other):
        return _ops.binary_reflected("add", self, other, operator.add)

    def __sub__(self, other):
        return _ops.binary("sub", self, other, operator.sub)

    def __rsub__(self, other):
        return _ops.binary_reflected("sub", self, other, operator.sub)

    def __mul__(self, other):
        return _ops.binary("mul", self, other, operator.mul)

    def __rmul__(self, other):
        return _ops.binary_reflected("mul", self, other, operator.mul)

    def __truediv__(self, other):
        return _ops.binary("truediv", self, other, operator.truediv)

    def __rtruediv__(self, other):
        return _ops.binary_reflected("truediv", self, other, operator.truediv)

    def __neg__(self):
        return _ops.elementwise(operator.neg, self, linear=True)

    def __matmul__(self, other):
        return _ops.matmul(self, other)

    def sum(self, dim=None, keepdim=False):
        return _ops.reduce_sum(self, dim, keepdim)

    @property
    def T(self):  # noqa: N802 - torch's name
        return _ops.transpose(self)

    def _plan(self, placements):
        return _redistribute.plan(self.device_mesh, self._shape, _local.element_size(self._local_tensor),
                                  self.placements, placements)


def _check_blocks_agree(mesh, global_shape, have, expected):
    """Raises on every rank of the mesh if the ranks' global shapes differ or
    any rank's block shape differs from what its layout gives."""
    from tdist.objects import all_gather_object
    mine = (tuple(global_shape), tuple(have), tuple(expected))
    everyone = [None] * mesh.size()
    all_gather_object(everyone, mine, group=mesh._world_group())
    ranks = sorted(mesh._layout.ranks)  # the group's order
    shapes = sorted({g for g, _, _ in everyone})
    wrong = [f"rank {r} has {tuple(h)} where the layout gives {tuple(e)}"
             for r, (_, h, e) in zip(ranks, everyone) if h != e]
    if len(shapes) > 1:
        raise DistInvalidArgument(f"DTensor.from_local(run_check=True): the ranks disagree on the global shape "
                                  f"({', '.join(map(str, shapes))}); pass shape= for uneven shards")
    if wrong:
        raise DistInvalidArgument(f"DTensor.from_local(run_check=True): {len(wrong)} rank(s) hold a block that does "
                                  f"not match global shape {shapes[0]} and the placements: {'; '.join(wrong)}")


def distribute_tensor(tensor, device_mesh=None, placements=None, *, src_data_rank=0):
    """Shards or replicates `tensor` over `device_mesh` by `placements`
    (default: Replicate on every dimension). Every rank of the mesh passes a
    tensor of the same shape and dtype. As in torch, `src_data_rank` is a
    rank within each mesh dimension's group: the data of the rank at mesh
    coordinate (src_data_rank, ..., src_data_rank) -- by default the mesh's
    first rank -- is what gets distributed (one broadcast over the mesh).
    With src_data_rank=None each rank's own tensor is cut, without any
    communication."""
    mesh = _default_mesh("distribute_tensor", device_mesh)
    if not is_tensor(tensor):
        raise DistInvalidArgument(f"distribute_tensor: tensor must be a NumPy array or torch tensor, got "
                                  f"{type(tensor).__name__}")
    placements = _check_placements("distribute_tensor", mesh, placements, tensor.ndim, tensor)
    if mesh.get_coordinate() is None:  # not in the mesh: an empty block, as torch gives
        return DTensor(_local.empty(tensor, [0]), mesh, placements, _local.shape(tensor), _checked=True)
    full = _local.contiguous_copy(tensor)
    if src_data_rank is not None:
        k = int(src_data_rank)
        if not all(0 <= k < s for s in mesh.shape):
            raise DistInvalidArgument(f"distribute_tensor: src_data_rank {k} is a rank within each mesh dimension's "
                                      f"group and must be below every dimension's size {mesh.shape}")
        source = mesh._layout.rank_at([k] * mesh.ndim)
        _coll.broadcast(full, src=source, group=mesh._world_group())
    replicated = DTensor(full, mesh, [Replicate()] * mesh.ndim, _local.shape(full), _checked=True)
    return replicated.redistribute(mesh, placements)
