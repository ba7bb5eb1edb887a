"""tdist groups on a Ray cluster, made from the driver out of Ray actors::

    import ray, tdist.ray

    @ray.remote
    class Worker:
        def total(self):
            x = numpy.ones(4)
            tdist.all_reduce(x)           # or torch.distributed.all_reduce, with api="torch"
            return x

    workers = [Worker.remote() for _ in range(4)]
    tdist.ray.init_group(workers)         # rank = position in the list
    print(ray.get([w.total.remote() for w in workers]))

The actors meet at a free port on the first actor's node, found by that
actor. The group is authenticated: the driver's TDIST_AUTH_TOKEN, or else a
new random token, is handed to each actor in its call (never written to
Ray's key-value store) and set in its environment before it joins.

Ray Train needs none of this: ``TorchTrainer(...,
torch_config=TorchConfig(backend="tdist"))`` works wherever the workers can
import tdist (docs/ray.md). Importing this module imports ray.
"""

import os
import secrets
import socket
from datetime import timedelta

import ray

__all__ = ["destroy_group", "init_group"]


def _endpoint(_actor):
    """The node's address, as Ray knows it, and a port free on it."""
    address = ray.util.get_node_ip_address()
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return address, s.getsockname()[1]


def _join(_actor, address, port, rank, world_size, token, timeout_s, api):
    os.environ["TDIST_AUTH_TOKEN"] = token
    host = f"[{address}]" if ":" in address else address
    init_method = f"tcp://{host}:{port}"
    timeout = timedelta(seconds=timeout_s)
    if api == "torch":
        import torch.distributed as dist

        import tdist.torch  # noqa: F401 - registers the "tdist" backend
        dist.init_process_group("tdist", init_method=init_method, rank=rank, world_size=world_size,
                                timeout=timeout)
    else:
        import tdist
        tdist.init_process_group("tdist", init_method=init_method, rank=rank, world_size=world_size,
                                 timeout=timeout)
    return rank


def _leave(_actor, api):
    if api == "torch":
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    else:
        import tdist
        if tdist.is_initialized():
            tdist.destroy_process_group()


def init_group(actors, *, api="tdist", timeout=timedelta(minutes=30)):
    """Makes `actors` (Ray actor handles; rank = position) one tdist group,
    from the driver; returns once every actor has joined. api="tdist": the
    actors use tdist's own API (tdist.all_reduce, ...); api="torch": they use
    torch.distributed on backend "tdist". A failure in any actor (a port
    taken, a peer that never comes) is raised here, as Ray raises it."""
    if api not in ("tdist", "torch"):
        raise ValueError(f"init_group: api must be 'tdist' or 'torch', not {api!r}")
    actors = list(actors)
    if not actors:
        raise ValueError("init_group: no actors")
    address, port = ray.get(actors[0].__ray_call__.remote(_endpoint))
    token = os.environ.get("TDIST_AUTH_TOKEN") or secrets.token_hex(32)
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    ray.get([actor.__ray_call__.remote(_join, address, port, rank, len(actors), token, seconds, api)
             for rank, actor in enumerate(actors)])


def destroy_group(actors, *, api="tdist"):
    """Leaves the group made by init_group on every actor."""
    ray.get([actor.__ray_call__.remote(_leave, api) for actor in actors])
