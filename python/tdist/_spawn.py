"""tdist.spawn: run ``fn(i, *args)`` in `nprocs` processes, as
torch.multiprocessing.spawn, with the environment env:// rendezvous reads
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE),
so ``fn`` can call ``tdist.init_process_group()`` right away.

When a process fails, the others are stopped and the error names the failed
rank with its traceback (or its exit code or signal).
"""

import errno
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import socket
import sys
import time
import traceback

from tdist._C import DistInvalidArgument, DistTimeoutError


class ProcessException(Exception):
    """A spawned process failed; `error_index` is its rank, `pid` its process id."""

    def __init__(self, msg, error_index, pid):
        super().__init__(msg)
        self.msg = msg
        self.error_index = error_index
        self.pid = pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A spawned process raised; the message carries its traceback."""


class ProcessExitedException(ProcessException):
    """A spawned process exited with a non-zero code or was killed by a signal."""

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code = exit_code
        self.signal_name = signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code, self.signal_name)


# Ray's workers listen on ports 10002-19999 by default (ray start's
# --min-worker-port/--max-worker-port), and a job beside Ray took a port
# picked from that range before its store listened.
_PICK_LOW = 20000


def _ephemeral_low():
    """The first port of the range the kernel takes the local ports of
    outgoing connections (and of bind to port 0) from."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def url_host(host):
    """`host` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def free_port(host="127.0.0.1"):
    """A TCP port that was free on `host` a moment ago (for MASTER_PORT).

    It is picked at random between _PICK_LOW and the kernel's ephemeral
    range when there is room: the kernel hands out the ports of outgoing
    connections (and of bind to port 0) from that range, so no outgoing
    connection can take the port between this call and the store's listen,
    as one now and then took a port from bind(port 0) ("Address already in
    use"). Another process picking ports the same way still could; the
    store then says so."""
    # Resolve once: the family and address to bind, an IPv6-only name too
    # ("" is every IPv4 address, as bind takes it).
    family, _, _, _, address = socket.getaddrinfo(host or "0.0.0.0", None, type=socket.SOCK_STREAM)[0]
    low = _ephemeral_low()
    if low - _PICK_LOW >= 1000:
        rng = random.SystemRandom()
        for _ in range(100):
            port = rng.randrange(_PICK_LOW, low)
            with socket.socket(family, socket.SOCK_STREAM) as s:
                try:
                    s.bind((address[0], port) + tuple(address[2:]))
                except OSError as e:
                    if e.errno in (errno.EADDRINUSE, errno.EACCES):
                        continue  # taken (or reserved): another
                    raise
                return port
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((address[0], 0) + tuple(address[2:]))
        return s.getsockname()[1]


def _run(fn, i, args, env, error_queue):
    """Body of each spawned process."""
    os.environ.update(env)
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass  # the parent is stopping us
    except BaseException:  # report any failure, SystemExit with a code included
        error_queue.put(traceback.format_exc())
        sys.exit(1)


class ProcessContext:
    """The processes of one spawn() call (returned when join=False)."""

    def __init__(self, processes, error_queues, deadline=None, grace_period=5.0):
        self.processes = processes
        self.error_queues = error_queues
        self._deadline = deadline
        self._grace = grace_period
        self._sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self):
        """The process ids, by rank."""
        return [p.pid for p in self.processes]

    def _stop_all(self):
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        end = time.monotonic() + self._grace
        for p in self.processes:
            p.join(max(0.0, end - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()

    def join(self, timeout=None):
        """Waits for the processes; True once all exited cleanly, False if
        `timeout` (seconds) passed first. Raises ProcessRaisedException or
        ProcessExitedException (after stopping the others) when one fails, and
        DistTimeoutError when spawn()'s `timeout` passes."""
        if not self._sentinels:
            return True
        wait_for = timeout
        if self._deadline is not None:
            left = max(0.0, self._deadline - time.monotonic())
            wait_for = left if wait_for is None else min(wait_for, left)
        ready = multiprocessing.connection.wait(list(self._sentinels), timeout=wait_for)
        failed = None
        for sentinel in ready:
            i = self._sentinels.pop(sentinel)
            self.processes[i].join()
            if self.processes[i].exitcode != 0 and failed is None:
                failed = i
        if failed is not None:
            self._stop_all()
            self._raise(failed)
        if not self._sentinels:
            return True
        if self._deadline is not None and time.monotonic() >= self._deadline:
            running = sorted(self._sentinels.values())
            self._stop_all()
            raise DistTimeoutError(f"spawn: rank(s) {running} still running when the timeout passed; stopped")
        return False

    def _raise(self, i):
        process = self.processes[i]
        queue = self.error_queues[i]
        if not queue.empty():
            trace = queue.get()
            raise ProcessRaisedException(
                f"\n\n-- process {i} (rank {i}, pid {process.pid}) terminated with the following error:\n{trace}",
                i, process.pid)
        code = process.exitcode
        if code < 0:
            name = signal.Signals(-code).name
            raise ProcessExitedException(f"process {i} (rank {i}, pid {process.pid}) terminated with signal {name}",
                                         i, process.pid, code, name)
        raise ProcessExitedException(f"process {i} (rank {i}, pid {process.pid}) terminated with exit code {code}",
                                     i, process.pid, code)


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn", master_addr="127.0.0.1",
                    master_port=None, env=None, timeout=None):
    """spawn() with an explicit start method ("spawn", "fork" or "forkserver")."""
    if nprocs < 1:
        raise DistInvalidArgument(f"spawn: nprocs must be at least 1, got {nprocs}")
    port = master_port or free_port(master_addr)
    context = multiprocessing.get_context(start_method)
    processes, queues = [], []
    for i in range(nprocs):
        child_env = {
            "MASTER_ADDR": master_addr, "MASTER_PORT": str(port), "RANK": str(i), "WORLD_SIZE": str(nprocs),
            "LOCAL_RANK": str(i), "LOCAL_WORLD_SIZE": str(nprocs),
        }
        child_env.update(env or {})
        queue = context.SimpleQueue()
        process = context.Process(target=_run, args=(fn, i, args, child_env, queue), daemon=daemon)
        process.start()
        processes.append(process)
        queues.append(queue)
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    ctx = ProcessContext(processes, queues, deadline)
    if not join:
        return ctx
    while not ctx.join():
        pass
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn", master_addr="127.0.0.1",
          master_port=None, env=None, timeout=None):
    """Runs ``fn(i, *args)`` for i in [0, nprocs) in new processes
    (torch.multiprocessing.spawn).

    Each process has MASTER_ADDR (`master_addr`), MASTER_PORT (`master_port`,
    default: a free port), RANK and LOCAL_RANK (= i), WORLD_SIZE and
    LOCAL_WORLD_SIZE (= nprocs) and `env` in its environment. With join=True
    waits for all and returns None; otherwise returns a ProcessContext.
    When a process fails, the others are stopped and ProcessRaisedException
    (with the rank and its traceback) or ProcessExitedException (exit code
    or signal) is raised. `timeout` (seconds) bounds the whole run
    (DistTimeoutError). With start_method "spawn" (the default), `fn` and
    `args` must be picklable: define `fn` at module level.
    """
    return start_processes(fn, args, nprocs, join, daemon, start_method, master_addr, master_port, env, timeout)
