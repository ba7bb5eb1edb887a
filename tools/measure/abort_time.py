"""How long an abort takes to reach every rank: on N ranks (tdist.spawn,
this host), rank 0 aborts the default group while the others are blocked in
an all_reduce it never joins; each rank notes when its call failed
(CLOCK_MONOTONIC, one clock for every process of the host); the group is
rebuilt (reinit_process_group) and the times gathered. Prints, over the
trials, the median and p99 of the time from rank 0's abort() to the last
rank's error, and to the first rank's.

    PYTHONPATH=build/python /usr/bin/python3 tools/measure/abort_time.py [--ranks 4 8] [--trials 100]
    TDIST_TRANSPORT=tcp PYTHONPATH=build/python /usr/bin/python3 tools/measure/abort_time.py

Rank 0 waits 20 ms after a barrier before it aborts, so that the others are
blocked in their call by then (a benchmark may sleep; the tests do not).
"""

import argparse
import os
import statistics
import time

import numpy as np

import tdist


def _percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _job(rank, world_size, trials):
    tdist.init_process_group("tdist")
    x = np.ones(1024, np.float32)
    last, first = [], []
    for _ in range(trials):
        tdist.barrier()
        if rank == 0:
            time.sleep(0.02)
            when = time.monotonic_ns()
            tdist.abort(reason="abort_time")
        else:
            try:
                tdist.all_reduce(x)
                raise RuntimeError("the all_reduce of an aborted group returned")
            except tdist.DistBackendError:
                when = time.monotonic_ns()
        tdist.reinit_process_group()
        times = [None] * world_size
        tdist.all_gather_object(times, when)
        waits = [(t - times[0]) / 1e3 for t in times[1:]]
        last.append(max(waits))
        first.append(min(waits))
    if rank == 0:
        transport = os.environ.get("TDIST_TRANSPORT", "auto")
        print(f"{world_size} ranks, transport {transport}, {trials} trials: abort to the last rank's error "
              f"median {statistics.median(last):.0f} us, p99 {_percentile(last, 99):.0f} us, worst {max(last):.0f} "
              f"us; to the first rank's median {statistics.median(first):.0f} us", flush=True)
    tdist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--trials", type=int, default=100)
    args = parser.parse_args()
    for n in args.ranks:
        tdist.spawn(_job, args=(n, args.trials), nprocs=n)
