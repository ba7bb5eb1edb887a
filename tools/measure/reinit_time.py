"""What reinit_process_group costs: on 2 and 4 ranks (tdist.spawn, this
host), 20 calls with rebuild_link=True and 20 with rebuild_link=False, each
after a barrier; prints rank 0's median and worst in milliseconds.

    PYTHONPATH=build/python /usr/bin/python3 tools/measure/reinit_time.py
    TDIST_TRANSPORT=tcp PYTHONPATH=build/python /usr/bin/python3 tools/measure/reinit_time.py
"""

import os
import statistics
import time

import numpy as np

import tdist

CALLS = 20


def _timed(rebuild_link):
    times = []
    x = np.ones(4, np.float32)
    for _ in range(CALLS):
        tdist.barrier()
        start = time.perf_counter()
        tdist.reinit_process_group(rebuild_link=rebuild_link)
        times.append((time.perf_counter() - start) * 1e3)
        tdist.all_reduce(x)  # the group works after each call
    return times


def _job(rank, world_size):
    tdist.init_process_group("tdist")
    rebuilt, kept = _timed(True), _timed(False)
    if rank == 0:
        transport = os.environ.get("TDIST_TRANSPORT", "auto")
        print(f"{world_size} ranks, transport {transport}: rebuild_link=True median {statistics.median(rebuilt):.2f} "
              f"ms (worst {max(rebuilt):.2f}); rebuild_link=False median {statistics.median(kept):.3f} ms "
              f"(worst {max(kept):.3f})", flush=True)
    tdist.destroy_process_group()


if __name__ == "__main__":
    for n in (2, 4):
        tdist.spawn(_job, args=(n,), nprocs=n)
