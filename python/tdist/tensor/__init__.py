"""Sharded tensors, as ``torch.distributed.tensor`` (torch's DTensor) on CPU
NumPy arrays and torch tensors::

    from tdist.device_mesh import init_device_mesh
    from tdist.tensor import distribute_tensor, Shard, Replicate

    mesh = init_device_mesh("cpu", (4,))
    d = distribute_tensor(x, mesh, [Shard(0)])   # uneven shapes are fine
    d.redistribute(mesh, [Replicate()]).to_local()

docs/mesh.md lists the layout transitions and the collective each uses.
"""

from tdist.tensor._api import DTensor, distribute_tensor
from tdist.tensor.placement_types import Partial, Placement, Replicate, Shard

__all__ = ["DTensor", "Partial", "Placement", "Replicate", "Shard", "distribute_tensor"]
