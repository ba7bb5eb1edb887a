"""Device meshes, as ``torch.distributed.device_mesh``: an n-dimensional
array of global ranks with named dimensions, and one process group per
dimension::

    mesh = tdist.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    mesh["tp"].get_group()        # this rank's tensor-parallel group
    mesh.get_local_rank("dp")     # its coordinate along "dp"

The rank arithmetic is C++ (tdist/mesh.h). Process groups are created when
first asked for, only for the slices this rank is in, with
``new_group(..., use_local_synchronization=True)``: a 1,000-rank mesh does
not make 1,000 groups on every rank. Every member of a slice must ask for
its group (directly, or through a DTensor collective) in the same order
relative to its other groups, as with new_group.

Only the "cpu" device type exists (tdist runs on CPUs).
"""

import threading

from tdist import _C
from tdist._C import DistInvalidArgument
from tdist import distributed_c10d as _c10d

__all__ = ["DeviceMesh", "current_mesh", "init_device_mesh"]

# Groups already made for a member list, shared by every mesh (and sub-mesh)
# of this process: the same ranks along a dimension are the same group.
_GROUPS = {}
# The meshes entered with ``with mesh:``, innermost last, per thread (as
# torch keeps them).
_MESHES = threading.local()


def _mesh_stack():
    if not hasattr(_MESHES, "stack"):
        _MESHES.stack = []
    return _MESHES.stack


def current_mesh():
    """This thread's innermost mesh entered with ``with mesh:``; None outside every block."""
    stack = _mesh_stack()
    return stack[-1] if stack else None


def _forget_groups():
    """Drops the cached groups (destroy_process_group of the default group)."""
    _GROUPS.clear()


_c10d._ON_DESTROY_DEFAULT.append(_forget_groups)


def _group_of(ordered):
    """The group of the ascending global ranks `ordered` (made on first use;
    the default group if they are the whole world)."""
    key = tuple(ordered)
    group = _GROUPS.get(key)
    if group is None:
        if ordered == list(range(_c10d.get_world_size())):
            group = _c10d.group.WORLD
        else:
            group = _c10d.new_group(ordered, use_local_synchronization=True)
        _GROUPS[key] = group
    return group


def _check_device_type(device_type):
    if str(device_type).lower() != "cpu":
        raise DistInvalidArgument(f"DeviceMesh: device type {device_type!r} is not available: tdist runs on "
                                  "CPUs, so the only device type is 'cpu'")
    return "cpu"


def _flatten(mesh):
    """(shape, row-major ranks) of a nested list, NumPy array or torch tensor of ranks."""
    if hasattr(mesh, "tolist"):
        mesh = mesh.tolist()
    if isinstance(mesh, int):
        return [], [mesh]
    if not isinstance(mesh, (list, tuple)) or not mesh:
        raise DistInvalidArgument(f"DeviceMesh: mesh must be a non-empty (nested) list of ranks, got {mesh!r}")
    parts = [_flatten(m) for m in mesh]
    shapes = {tuple(p[0]) for p in parts}
    if len(shapes) != 1:
        raise DistInvalidArgument(f"DeviceMesh: mesh rows have different shapes: {sorted(shapes)}")
    inner = list(shapes.pop())
    return [len(mesh)] + inner, [r for p in parts for r in p[1]]


class DeviceMesh:
    """An n-d array of global ranks (torch.distributed.device_mesh.DeviceMesh).

    Args:
        device_type: "cpu".
        mesh: nested list (or NumPy array, or torch tensor) of distinct global ranks.
        mesh_dim_names: optional names, one per dimension.
    """

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, _init_process_groups=True, _layout=None):
        self.device_type = _check_device_type(device_type)
        if (_init_process_groups and _layout is None and not _c10d.is_initialized()
                and type(self) is DeviceMesh):
            _c10d.init_process_group()  # as torch's DeviceMesh does (env://)
        if _layout is None:
            shape, ranks = _flatten(mesh)
            if not shape:
                raise DistInvalidArgument("DeviceMesh: mesh must have at least one dimension")
            names = [str(n) for n in mesh_dim_names] if mesh_dim_names is not None else []
            _layout = _C._MeshLayout(shape, [int(r) for r in ranks], names)
        self._layout = _layout
        world = _c10d.get_world_size() if _c10d.is_initialized() else None
        if world is not None and any(r >= world for r in _layout.ranks):
            raise DistInvalidArgument(f"DeviceMesh: {_layout} names ranks beyond the world size {world}")
        self._rank = _c10d.get_rank() if _c10d.is_initialized() else None

    # ---- the current mesh (``with mesh:``) ----
    def __enter__(self):
        """Makes this mesh the current one (``current_mesh()``) inside the
        block: DTensor calls given no device_mesh use it, as in torch."""
        _mesh_stack().append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        _mesh_stack().pop()
        return False

    # ---- shape ----
    @property
    def mesh(self):
        """The ranks as a NumPy array of the mesh's shape."""
        import numpy
        return numpy.array(self._layout.ranks, dtype=numpy.int64).reshape(self._layout.shape)

    @property
    def ndim(self):
        return self._layout.ndim

    @property
    def shape(self):
        return tuple(self._layout.shape)

    @property
    def mesh_dim_names(self):
        names = self._layout.dim_names
        return tuple(names) if names else None

    def size(self, mesh_dim=None):
        """Number of ranks in the mesh, or along `mesh_dim` (index or name)."""
        if mesh_dim is None:
            return len(self._layout.ranks)
        return self._layout.size(self._dim(mesh_dim))

    def _dim(self, mesh_dim):
        if mesh_dim is None:
            if self.ndim != 1:
                raise DistInvalidArgument(f"DeviceMesh: this mesh has {self.ndim} dimensions; name the one "
                                          "you mean (mesh_dim=...)")
            return 0
        if isinstance(mesh_dim, str):
            return self._layout.dim_index(mesh_dim)
        dim = int(mesh_dim)
        if not 0 <= dim < self.ndim:
            raise DistInvalidArgument(f"DeviceMesh: mesh_dim {dim} is not in [0, {self.ndim})")
        return dim

    # ---- this rank ----
    def get_rank(self):
        """This process's global rank."""
        return _c10d.get_rank()

    def get_coordinate(self):
        """This rank's coordinate in the mesh (a list), or None if it is not in it."""
        coordinate = self._layout.coordinate_of(self._my_rank())
        return None if coordinate is None else list(coordinate)

    def get_local_rank(self, mesh_dim=None):
        """This rank's coordinate along `mesh_dim` (its rank in that dimension's group)."""
        return self._coordinate()[self._dim(mesh_dim)]

    def _my_rank(self):
        if self._rank is None:
            if not _c10d.is_initialized():
                raise DistInvalidArgument("DeviceMesh: the default process group is not initialized "
                                          "(call init_process_group, or with tdist.paddle init_parallel_env)")
            self._rank = _c10d.get_rank()
        return self._rank

    def _coordinate(self):
        coordinate = self.get_coordinate()
        if coordinate is None:
            raise DistInvalidArgument(f"DeviceMesh: rank {self._my_rank()} is not in {self._layout}")
        return coordinate

    # ---- groups ----
    def get_group(self, mesh_dim=None):
        """The process group along `mesh_dim` that this rank is in (made on first use)."""
        return self._group(self._dim(mesh_dim))[0]

    def get_all_groups(self):
        """This rank's group along every dimension, in order."""
        return [self.get_group(d) for d in range(self.ndim)]

    def _group(self, dim):
        """(group, group rank of each mesh position along dim) for this rank's slice."""
        members = self._layout.group_ranks(dim, self._my_rank())
        ordered = sorted(members)
        return _group_of(ordered), [ordered.index(r) for r in members]

    def _world_group(self):
        """A group of every rank of the mesh (for distribute_tensor's broadcast)."""
        return _group_of(sorted(self._layout.ranks))

    # ---- slicing ----
    def __getitem__(self, mesh_dim_names):
        """The sub-mesh through this rank that keeps the named dimensions (in the mesh's order)."""
        names = (mesh_dim_names,) if isinstance(mesh_dim_names, str) else mesh_dim_names
        if not isinstance(names, (tuple, list)) or not all(isinstance(n, str) for n in names):
            raise DistInvalidArgument(f"DeviceMesh: slice by dimension names (mesh['tp'] or mesh['dp', 'tp']), "
                                      f"got {mesh_dim_names!r}")
        names = tuple(names)
        if not self._layout.dim_names:
            raise DistInvalidArgument("DeviceMesh: slicing needs mesh_dim_names")
        dims = [self._layout.dim_index(n) for n in names]
        return DeviceMesh(self.device_type, None, _layout=self._layout.slice(dims, self._my_rank()))

    def __eq__(self, other):
        return other is self or (isinstance(other, DeviceMesh) and self._layout.shape == other._layout.shape
                and self._layout.ranks == other._layout.ranks
                and self._layout.dim_names == other._layout.dim_names)

    def __hash__(self):
        return hash((tuple(self._layout.shape), tuple(self._layout.ranks), tuple(self._layout.dim_names)))

    def __repr__(self):
        return repr(self._layout)


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None):
    """A mesh of `mesh_shape` over global ranks 0..N-1 in row-major order
    (torch.distributed.device_mesh.init_device_mesh). Initializes the
    default process group from the environment (env://) if it is not yet;
    the shape's product must equal the world size."""
    _check_device_type(device_type)
    shape = [int(s) for s in (mesh_shape if isinstance(mesh_shape, (list, tuple)) else (mesh_shape,))]
    if mesh_dim_names is not None and len(mesh_dim_names) != len(shape):
        raise DistInvalidArgument(f"init_device_mesh: {len(mesh_dim_names)} mesh_dim_names for a mesh of "
                                  f"{len(shape)} dimensions")
    if not _c10d.is_initialized():
        _c10d.init_process_group()
    world = _c10d.get_world_size()
    count = 1
    for s in shape:
        count *= s
    if count != world:
        raise DistInvalidArgument(f"init_device_mesh: mesh_shape {tuple(shape)} holds {count} ranks but the world "
                                  f"size is {world}")
    layout = _C._MeshLayout(shape, list(range(world)), [str(n) for n in mesh_dim_names or []])
    return DeviceMesh(device_type, None, _layout=layout)
