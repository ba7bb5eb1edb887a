"""A rank of test_stopped_rank.py, started as its own process with env://
variables (rank 0 hosts the group's TCPStore): a loop of all_reduces in
which one rank misbehaves. The others write what their failing call
raised, and how long it took, to $JOB_OUT/<rank>.json.

    stopped_rank_job.py stop VICTIM K TIMEOUT_S
        the victim stops itself (SIGSTOP) before iteration K
    stopped_rank_job.py kill VICTIM K TIMEOUT_S
        every rank writes $JOB_OUT/ready.<rank> after iteration K and goes
        on until a call fails: the test kills the victim meanwhile
"""

import json
import os
import signal
import sys
import time
from datetime import timedelta

import numpy as np

import tdist as dist
from job_start import start_together


def main():
    mode, victim, k, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    out = os.environ["JOB_OUT"]
    start_together(out)
    dist.init_process_group("tdist", timeout=timedelta(seconds=timeout))
    rank = dist.get_rank()
    x = np.ones(1000, np.float32)
    result = {"rank": rank, "error": None}
    # A killed peer fails the loop at once; the bound only keeps a broken
    # test from running for ever.
    for i in range(k + 1 if mode == "stop" else k + 10_000_000):
        if mode == "stop" and rank == victim and i == k:
            os.kill(os.getpid(), signal.SIGSTOP)
        if mode == "kill" and i == k:
            open(os.path.join(out, "ready.%d" % rank), "w").close()
        began = time.monotonic()
        try:
            dist.all_reduce(x)
        except dist.DistError as e:
            result.update(error=type(e).__name__, message=str(e), elapsed=time.monotonic() - began, call=i)
            break
    with open(os.path.join(out, "%d.json" % rank), "w") as f:
        json.dump(result, f)
    if mode == "kill":
        # In order, as a program that catches the error would: a survivor
        # that just vanished would be a dead peer to those still in their
        # call (its transport keeps the connections open a moment on
        # destruction, for them to learn of the death from the dead rank).
        dist.destroy_process_group()
    # The group cannot be destroyed in order with a rank stopped; the test
    # has what it needs.
    os._exit(0)


if __name__ == "__main__":
    main()
