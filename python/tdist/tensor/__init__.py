"""Sharded tensors, as ``torch.distributed.tensor`` (torch's DTensor) on CPU
NumPy arrays and torch tensors::

    from tdist.device_mesh import init_device_mesh
    from tdist.tensor import distribute_tensor, Shard, Replicate

    mesh = init_device_mesh("cpu", (4,))
    d = distribute_tensor(x, mesh, [Shard(0)])   # uneven shapes are fine
    d.redistribute(mesh, [Replicate()]).to_local()

DTensors add, multiply, matmul, sum and transpose with the placement rules
of docs/mesh.md, which also lists the layout transitions and the collective
each uses.
"""

from tdist.tensor._api import DTensor, distribute_tensor
from tdist.tensor._ops import elementwise
from tdist.tensor._redistribute import counters as _counters


def communication_counters(reset=False):
    """What redistributions have moved in this process since the last reset:
    {"collectives": count, "bytes": bytes this rank moved (nccl-tests' bus
    convention), "seconds": time spent redistributing}."""
    snapshot = dict(_counters)
    if reset:
        _counters.update(collectives=0, bytes=0, seconds=0.0)
    return snapshot
from tdist.tensor.placement_types import Partial, Placement, Replicate, Shard

__all__ = ["DTensor", "Partial", "Placement", "Replicate", "Shard", "communication_counters", "distribute_tensor",
           "elementwise"]
