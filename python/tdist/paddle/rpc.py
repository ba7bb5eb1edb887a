"""paddle.distributed.rpc's API on tdist.rpc (docs/rpc.md)::

    from tdist.paddle import rpc

    rpc.init_rpc("worker0", rank=0, world_size=2, master_endpoint="127.0.0.1:8765")
    print(rpc.rpc_sync("worker1", paddle.add, args=(x, y)))
    rpc.shutdown()

rank, world_size and master_endpoint default to PADDLE_TRAINER_ID,
PADDLE_TRAINERS_NUM and PADDLE_MASTER_ENDPOINT, as in paddle, and a
timeout of 0 or less (the default, -1) means none. Workers are
WorkerInfo(name, rank, ip, port); rpc_async returns a future whose wait()
gives the result.
"""

import os

from tdist import rpc as _rpc
from tdist._C import DistInvalidArgument

__all__ = ["WorkerInfo", "get_all_worker_infos", "get_current_worker_info", "get_worker_info", "init_rpc",
           "rpc_async", "rpc_sync", "shutdown"]

_DEFAULT_RPC_TIMEOUT = -1


class WorkerInfo:
    """paddle's worker record: name, rank, ip, port."""

    __slots__ = ("name", "rank", "ip", "port")

    def __init__(self, name, rank, ip, port):
        self.name, self.rank, self.ip, self.port = name, rank, ip, port

    def __eq__(self, other):
        return isinstance(other, WorkerInfo) and (self.name, self.rank) == (other.name, other.rank)

    def __hash__(self):
        return hash((self.name, self.rank))

    def __repr__(self):
        return f"{{name: {self.name}, rank: {self.rank}, ip: {self.ip}, port: {self.port}}}"


def _env_int(name):
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise DistInvalidArgument(f"{name}={value!r} is not an integer") from None


def init_rpc(name, rank=None, world_size=None, master_endpoint=None):
    """Starts this worker's agent; the others meet at master_endpoint
    ("ip:port", where rank 0 serves the store)."""
    rank = _env_int("PADDLE_TRAINER_ID") if rank is None else rank
    world_size = _env_int("PADDLE_TRAINERS_NUM") if world_size is None else world_size
    master_endpoint = master_endpoint or os.environ.get("PADDLE_MASTER_ENDPOINT")
    if rank is None or world_size is None or not master_endpoint:
        missing = [what for what, value in (("rank (PADDLE_TRAINER_ID)", rank),
                                            ("world_size (PADDLE_TRAINERS_NUM)", world_size),
                                            ("master_endpoint (PADDLE_MASTER_ENDPOINT)", master_endpoint))
                   if value is None or value == ""]
        raise DistInvalidArgument("init_rpc: " + ", ".join(missing) + " not given")
    host, sep, port = master_endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise DistInvalidArgument(f"init_rpc: master_endpoint {master_endpoint!r} is not 'ip:port'")
    options = _rpc.RpcBackendOptions(init_method=f"tcp://{master_endpoint}")
    _rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)


def _timeout(timeout):
    # paddle: a timeout of 0 or less means none.
    return 0 if timeout is None or timeout <= 0 else timeout


def rpc_sync(to, fn, args=None, kwargs=None, timeout=_DEFAULT_RPC_TIMEOUT):
    return _rpc.rpc_sync(to, fn, args=args, kwargs=kwargs, timeout=_timeout(timeout))


def rpc_async(to, fn, args=None, kwargs=None, timeout=_DEFAULT_RPC_TIMEOUT):
    return _rpc.rpc_async(to, fn, args=args, kwargs=kwargs, timeout=_timeout(timeout))


def shutdown():
    _rpc.shutdown(graceful=True)


def _paddle_info(info):
    return WorkerInfo(info.name, info.id, info.ip, info.port)


def get_worker_info(name):
    return _paddle_info(_rpc.get_worker_info(name))


def get_all_worker_infos():
    return [_paddle_info(i) for i in _rpc.get_all_worker_infos()]


def get_current_worker_info():
    return _paddle_info(_rpc.get_worker_info())
