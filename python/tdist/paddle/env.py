"""paddle.distributed's environment: ``ParallelEnv`` and the variables a
launcher sets, and where ``init_parallel_env`` meets the other ranks.

Variables, first found wins:

- rank: ``PADDLE_TRAINER_ID``, then ``RANK``; default 0.
- world size: ``PADDLE_TRAINERS_NUM``, then ``WORLD_SIZE``; default 1.
- rendezvous (rank 0's TCPStore), as paddle: ``MASTER_ADDR``:``MASTER_PORT``
  when both are set, else ``PADDLE_MASTER`` (``host:port``), else the first
  entry of ``PADDLE_TRAINER_ENDPOINTS``.

paddle's launcher sets the PADDLE_* ones, torchrun/tdistrun the others;
``python3 -m tdist.paddle.launch`` sets both, with the same values.
"""

import os

from tdist._C import DistInvalidArgument


def _int_env(names, default, what):
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise DistInvalidArgument(f"tdist.paddle: {name}={value!r} is not an integer ({what})") from None
    return default


class ParallelEnv:
    """The values of the launcher's environment variables
    (paddle.distributed.ParallelEnv), read when the object is created."""

    def __init__(self):
        self._rank = _int_env(["PADDLE_TRAINER_ID", "RANK"], 0, "the rank")
        self._world_size = _int_env(["PADDLE_TRAINERS_NUM", "WORLD_SIZE"], 1, "the world size")
        self._device_type = os.environ.get("PADDLE_XCCL_BACKEND", "")
        selected = os.environ.get("FLAGS_selected_gpus") or os.environ.get("FLAGS_selected_xpus") or "0"
        try:
            self._device_id = int(selected.split(",")[0])
        except ValueError:
            self._device_id = 0
        self._trainer_endpoints = os.environ.get("PADDLE_TRAINER_ENDPOINTS", "").split(",")
        self._current_endpoint = os.environ.get("PADDLE_CURRENT_ENDPOINT", "")
        self._nrings = _int_env(["FLAGS_nccl_nrings"], 1, "FLAGS_nccl_nrings")

    @property
    def rank(self):
        """This process's global rank (PADDLE_TRAINER_ID, else RANK; default 0)."""
        return self._rank

    @property
    def world_size(self):
        """The number of ranks (PADDLE_TRAINERS_NUM, else WORLD_SIZE; default 1)."""
        return self._world_size

    @property
    def device_id(self):
        """The first of FLAGS_selected_gpus (or _xpus); 0 on a CPU-only job."""
        return self._device_id

    @property
    def device_type(self):
        """PADDLE_XCCL_BACKEND ("" unless a custom device is configured)."""
        return self._device_type

    @property
    def current_endpoint(self):
        """PADDLE_CURRENT_ENDPOINT ("host:port"; "" if unset)."""
        return self._current_endpoint

    @property
    def trainer_endpoints(self):
        """PADDLE_TRAINER_ENDPOINTS split at commas ([""] if unset)."""
        return self._trainer_endpoints

    @property
    def nrings(self):
        """FLAGS_nccl_nrings (default 1); tdist has no rings, it is only reported."""
        return self._nrings

    # paddle's aliases (local_rank is the global rank there too).
    local_rank = rank
    nranks = world_size
    dev_id = device_id

    def __repr__(self):
        return f"ParallelEnv(rank={self.rank}, world_size={self.world_size})"


def rendezvous_endpoint():
    """(host, port) of rank 0's store, by paddle's rule; ValueError naming
    the variables if none is set."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    endpoint = f"{addr}:{port}" if addr and port else None
    source = "MASTER_ADDR/MASTER_PORT"
    if endpoint is None and os.environ.get("PADDLE_MASTER"):
        endpoint, source = os.environ["PADDLE_MASTER"], "PADDLE_MASTER"
    if endpoint is None and os.environ.get("PADDLE_TRAINER_ENDPOINTS"):
        endpoint, source = os.environ["PADDLE_TRAINER_ENDPOINTS"].split(",")[0], "PADDLE_TRAINER_ENDPOINTS"
    if not endpoint:
        raise ValueError("init_parallel_env: no rendezvous address: set MASTER_ADDR and MASTER_PORT, or "
                         "PADDLE_MASTER=host:port, or PADDLE_TRAINER_ENDPOINTS, or start the job with "
                         "python3 -m tdist.paddle.launch or tdist.paddle.spawn")
    host, sep, port_text = endpoint.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"init_parallel_env: {source} gives {endpoint!r}, expected host:port")
    return host.strip("[]"), int(port_text)
