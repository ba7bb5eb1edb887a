"""How long the survivors take to go on without a killed rank: on N forked
ranks (file:// rendezvous on this host, so that no rank hosts the store), the
last rank notes the time (CLOCK_MONOTONIC, one clock for every process of
the host) and kills itself with SIGKILL after a barrier; the others call
tdist.shrink() as soon as they read that time in the store, note when it
returned, and check an all_reduce on the shrunk group. Prints, over the trials, the median,
p99 and worst of the time from the SIGKILL to the last survivor's return
from shrink, and of the shrink call alone.

    PYTHONPATH=build/python /usr/bin/python3 tools/measure/shrink_time.py [--ranks 4 8] [--trials 20]
    TDIST_TRANSPORT=tcp PYTHONPATH=build/python /usr/bin/python3 tools/measure/shrink_time.py

The shrink includes finding out that the rank died (nobody is in a call
when it dies), the agreement through the store and the new group's
connections.
"""

import argparse
import os
import signal
import statistics
import tempfile
import time
from datetime import timedelta

import numpy as np

import tdist


def _percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _rank(rank, n, tmp):
    store = tdist.FileStore(os.path.join(tmp, "times"), n + 1)  # the ranks and the parent
    tdist.init_process_group("tdist", init_method="file://" + os.path.join(tmp, "pg"), rank=rank, world_size=n,
                             timeout=timedelta(seconds=60))
    tdist.barrier()
    # The victim dies once every rank has left the barrier (dying as soon as
    # it left, it could cut off a message of the barrier a peer still reads).
    if store.add("left_barrier", 1) == n:
        store.set("all_left_barrier", "1")
    store.wait(["all_left_barrier"])
    if rank == n - 1:
        store.set("killed_at", str(time.monotonic_ns()))
        os.kill(os.getpid(), signal.SIGKILL)
    store.wait(["killed_at"])
    entered = time.monotonic_ns()
    shrunk = tdist.shrink(timeout=timedelta(seconds=30))
    returned = time.monotonic_ns()
    x = np.ones(16, np.float32)
    tdist.all_reduce(x, group=shrunk)
    if x[0] != n - 1:
        raise RuntimeError(f"all_reduce on the shrunk group gave {x[0]}, expected {n - 1}")
    store.set(f"times/{rank}", f"{entered} {returned}")
    if store.add("done", 1) == n - 1:
        store.set("all_done", "1")
    store.wait(["all_done"])


def _trial(n):
    with tempfile.TemporaryDirectory(prefix="tdist_shrink_time_") as tmp:
        pids = []
        for rank in range(n):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    _rank(rank, n, tmp)
                except BaseException as e:  # noqa: BLE001 - reported, then the child exits
                    print(f"rank {rank}: {e}", flush=True)
                    code = 1
                os._exit(code)
            pids.append(pid)
        for rank, pid in enumerate(pids):
            _, status = os.waitpid(pid, 0)
            ok = os.WIFSIGNALED(status) if rank == n - 1 else os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            if not ok:
                raise RuntimeError(f"rank {rank} ended with status {status}")
        store = tdist.FileStore(os.path.join(tmp, "times"), n + 1)
        killed = int(store.get("killed_at"))
        spans = [tuple(map(int, store.get(f"times/{r}").decode().split())) for r in range(n - 1)]
        return (max(r for _, r in spans) - killed) / 1e6, max(r - e for e, r in spans) / 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    transport = os.environ.get("TDIST_TRANSPORT", "auto")
    for n in args.ranks:
        after_kill, call = zip(*(_trial(n) for _ in range(args.trials)))
        print(f"{n} ranks, transport {transport}, {args.trials} trials: SIGKILL to the last survivor's shrink "
              f"returning median {statistics.median(after_kill):.1f} ms, p99 {_percentile(after_kill, 99):.1f} ms, "
              f"worst {max(after_kill):.1f} ms; the shrink call alone median {statistics.median(call):.1f} ms, "
              f"worst {max(call):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
