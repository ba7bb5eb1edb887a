"""paddle.distributed.spawn: runs ``func(*args)`` in `nprocs` new processes,
each with the environment init_parallel_env reads (paddle's PADDLE_* and
torch's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT variables)."""

import multiprocessing
import os
import signal
import sys
import time
import traceback
import warnings

from tdist._C import DistInvalidArgument
from tdist._spawn import ProcessContext, free_port

_SUPPORTED_OPTIONS = {"start_method", "ips", "backend", "timeout", "print_config"}
_GPU_OPTIONS = {"gpus", "xpus", "selected_devices"}
_DEPRECATED_OPTIONS = {"selected_gpus", "started_port", "cluster_node_ips", "node_ip", "use_paddlecloud"}


def default_nprocs():
    """paddle's default on CPUs: one process per CPU this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def rank_env(rank, nprocs, host, port, endpoint_ports):
    """The environment of rank `rank`: paddle's variables and torch's."""
    endpoints = [f"{host}:{p}" for p in endpoint_ports]
    return {
        "PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": str(nprocs),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints), "PADDLE_CURRENT_ENDPOINT": endpoints[rank],
        "PADDLE_MASTER": f"{host}:{port}", "PADDLE_GLOBAL_RANK": str(rank), "PADDLE_GLOBAL_SIZE": str(nprocs),
        "PADDLE_LOCAL_RANK": str(rank), "PADDLE_LOCAL_SIZE": str(nprocs), "PADDLE_RANK_IN_NODE": str(rank),
        "PADDLE_NNODES": "1", "PADDLE_DISTRI_BACKEND": "gloo",
        "RANK": str(rank), "WORLD_SIZE": str(nprocs), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(nprocs),
        "MASTER_ADDR": host, "MASTER_PORT": str(port),
    }


def _run(func, args, error_queue, return_queue, env):
    os.environ.pop("http_proxy", None)
    os.environ.pop("https_proxy", None)
    os.environ.update(env)
    try:
        return_queue.put(func(*args))
    except KeyboardInterrupt:
        pass
    except BaseException:
        error_queue.put(traceback.format_exc())
        sys.exit(1)


class MultiprocessContext(ProcessContext):
    """The processes of one spawn() (paddle's MultiprocessContext):
    ``processes``, ``error_queues``, ``return_queues`` (each process's return
    value) and ``join(timeout=None)``: tdist's ProcessContext, raising
    paddle's errors."""

    def __init__(self, processes, error_queues, return_queues, deadline=None):
        super().__init__(processes, error_queues, deadline)
        self.return_queues = return_queues

    @property
    def sentinels(self):
        """The processes still running: sentinel -> index, as paddle's."""
        return self._sentinels

    def _raise(self, i):
        if self.error_queues[i].empty():
            code = self.processes[i].exitcode
            if code < 0:
                raise Exception(f"Process {i} terminated with signal {signal.Signals(-code).name}.")
            raise Exception(f"Process {i} terminated with exit code {code}.")
        trace = self.error_queues[i].get()
        raise Exception("\n\n----------------------------------------------\n"
                        f"Process {i} terminated with the following error:\n"
                        "----------------------------------------------\n\n" + trace)


def spawn(func, args=(), nprocs=-1, join=True, daemon=False, **options):
    """Starts `nprocs` processes running ``func(*args)`` for parallel
    training and returns their MultiprocessContext (after joining them with
    join=True). Each can call init_parallel_env() at once.

    nprocs=-1: one process per CPU this process may run on (paddle's CPU
    default). Options: ``start_method`` ("spawn" default, "fork",
    "forkserver"), ``ips`` (one address only: "127.0.0.1" default; ranks meet
    there), ``backend`` ("auto" or "gloo"), and tdist's ``timeout`` (seconds
    for the whole run: DistTimeoutError after it). ``gpus``/``xpus`` raise
    (tdist runs on CPUs); unknown options raise ValueError, as paddle's.
    """
    for key in options:
        if key in _GPU_OPTIONS:
            raise DistInvalidArgument(f"spawn: option {key}={options[key]!r} selects accelerators; tdist runs on "
                                      "CPUs (leave it out)")
        if key in _DEPRECATED_OPTIONS:
            warnings.warn(f"The config option ({key}) of `paddle.distributed.spawn` is deprecated; ignored.",
                          DeprecationWarning)
        elif key not in _SUPPORTED_OPTIONS:
            raise ValueError(f"The config option ({key}) of `paddle.distributed.spawn` is not supported.")
    backend = options.get("backend", "auto")
    if backend not in ("auto", "gloo"):
        raise DistInvalidArgument(f"spawn: backend {backend!r} is not available; tdist runs on CPUs (use 'gloo')")
    if nprocs == -1:
        nprocs = default_nprocs()
    if not isinstance(nprocs, int) or nprocs < 1:
        raise DistInvalidArgument(f"spawn: nprocs must be a positive int or -1, got {nprocs!r}")
    ips = [ip.strip() for ip in str(options.get("ips", "127.0.0.1")).split(",") if ip.strip()]
    if len(ips) != 1:
        raise DistInvalidArgument(f"spawn: ips={options['ips']!r}; spawn starts processes on this node only, so "
                                  "give one address (use python3 -m tdist.paddle.launch for several nodes)")
    host = ips[0]
    port = free_port(host)
    endpoint_ports = [free_port(host) for _ in range(nprocs)]
    context = multiprocessing.get_context(options.get("start_method", "spawn"))
    processes, error_queues, return_queues = [], [], []
    for rank in range(nprocs):
        error_queue, return_queue = context.SimpleQueue(), context.SimpleQueue()
        process = context.Process(target=_run, daemon=daemon,
                                  args=(func, tuple(args), error_queue, return_queue,
                                        rank_env(rank, nprocs, host, port, endpoint_ports)))
        process.start()
        processes.append(process)
        error_queues.append(error_queue)
        return_queues.append(return_queue)
    timeout = options.get("timeout")
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    ctx = MultiprocessContext(processes, error_queues, return_queues, deadline)
    if not join:
        return ctx
    while not ctx.join():
        pass
    return ctx
