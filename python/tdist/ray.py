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
from datetime import timedelta

import ray

from tdist._spawn import free_port, url_host

__all__ = ["destroy_group", "init_group"]


_TOKEN = "TDIST_AUTH_TOKEN"
_NO_TOKEN = object()
_token_before = _NO_TOKEN  # the actor's own token, put back by _leave


def _endpoint(_actor):
    """The node's address, as Ray knows it, and a port free on it."""
    address = ray.util.get_node_ip_address()
    return address, free_port(address)


def _library(api):
    """The API the actors use: tdist's own, or torch.distributed with tdist
    registered (both have init_process_group, is_initialized and
    destroy_process_group)."""
    if api == "torch":
        import torch.distributed

        import tdist.torch  # noqa: F401 - registers the "tdist" backend
        return torch.distributed
    import tdist
    return tdist


def _join(_actor, address, port, rank, world_size, token, timeout_s, api):
    global _token_before
    if _token_before is _NO_TOKEN:
        _token_before = os.environ.get(_TOKEN)
    os.environ[_TOKEN] = token
    _library(api).init_process_group("tdist", init_method=f"tcp://{url_host(address)}:{port}", rank=rank,
                                     world_size=world_size, timeout=timedelta(seconds=timeout_s))
    return rank


def _leave(_actor, api):
    global _token_before
    library = _library(api)
    if library.is_initialized():
        library.destroy_process_group()
    if _token_before is not _NO_TOKEN:
        if _token_before is None:
            os.environ.pop(_TOKEN, None)
        else:
            os.environ[_TOKEN] = _token_before
        _token_before = _NO_TOKEN


def init_group(actors, *, api="tdist", timeout=timedelta(minutes=30)):
    """Makes `actors` (Ray actor handles; rank = position) one tdist group,
    from the driver; returns once every actor has joined. api="tdist": the
    actors use tdist's own API (tdist.all_reduce, ...); api="torch": they use
    torch.distributed on backend "tdist". A failure in any actor (a port
    taken, a peer that never comes) is raised here as soon as it happens;
    the actors still waiting for it give up when `timeout` (also the
    group's timeout) runs out."""
    if api not in ("tdist", "torch"):
        raise ValueError(f"init_group: api must be 'tdist' or 'torch', not {api!r}")
    actors = list(actors)
    if not actors:
        raise ValueError("init_group: no actors")
    address, port = ray.get(actors[0].__ray_call__.remote(_endpoint))
    token = os.environ.get(_TOKEN) or secrets.token_hex(32)
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    pending = {actor.__ray_call__.remote(_join, address, port, rank, len(actors), token, seconds, api): rank
               for rank, actor in enumerate(actors)}
    while pending:
        # One at a time, so that the first failure is raised at once, not
        # after the other actors' rendezvous timeouts.
        done, _ = ray.wait(list(pending), num_returns=1)
        rank = pending.pop(done[0])
        try:
            ray.get(done[0])
        except Exception as error:
            raise RuntimeError(f"tdist.ray.init_group: the actor of rank {rank} failed to join the group at "
                               f"{address}:{port} (ranks {sorted(pending.values())} still waiting): {error}") \
                from error


def destroy_group(actors, *, api="tdist"):
    """Leaves the group made by init_group on every actor."""
    ray.get([actor.__ray_call__.remote(_leave, api) for actor in actors])
