"""A rank of test_stopped_rank.py, started as its own process with env://
variables (rank 0 hosts the group's TCPStore): a loop of all_reduces in
which one rank stops itself (SIGSTOP) before iteration K. The others write
what their failing call raised, and how long it took, to $JOB_OUT/<rank>.json.

    stopped_rank_job.py VICTIM K TIMEOUT_S
"""

import json
import os
import signal
import sys
import time
from datetime import timedelta

import numpy as np

import tdist as dist


def main():
    victim, k, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    dist.init_process_group("tdist", timeout=timedelta(seconds=timeout))
    rank = dist.get_rank()
    x = np.ones(1000, np.float32)
    result = {"rank": rank, "error": None}
    for i in range(k + 1):
        if rank == victim and i == k:
            os.kill(os.getpid(), signal.SIGSTOP)
        began = time.monotonic()
        try:
            dist.all_reduce(x)
        except dist.DistError as e:
            result.update(error=type(e).__name__, message=str(e), elapsed=time.monotonic() - began, call=i)
            break
    with open(os.path.join(os.environ["JOB_OUT"], "%d.json" % rank), "w") as f:
        json.dump(result, f)
    # The group cannot be destroyed in order with a rank stopped; the test
    # has what it needs.
    os._exit(0)


if __name__ == "__main__":
    main()
