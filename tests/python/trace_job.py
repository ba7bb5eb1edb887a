"""A rank of the flight recorder tests (test_flight_recorder.py), started as
its own process with env:// variables: a loop of collectives in which one
rank misbehaves.

    trace_job.py stop K    rank 2 stops itself (SIGSTOP) before iteration K
    trace_job.py skip K    rank 1 skips iteration K's all_reduce
    trace_job.py hang K    rank 2 sleeps for an hour before iteration K
                           (after writing $JOB_MARKER)
    trace_job.py pause K   every rank writes $JOB_MARKER.<rank> before
                           iteration K, then waits for the file $JOB_GO
                           and goes on to the end
"""

import os
import signal
import sys
import time
from datetime import timedelta

import numpy as np

import tdist as dist
from job_start import start_together


def main():
    args = sys.argv[1:]  # tdistrun, as torchrun, adds no --local-rank
    mode, k = args[0], int(args[1])
    if "JOB_START_DIR" in os.environ:  # separate processes with a short timeout: see job_start.py
        start_together(os.environ["JOB_START_DIR"])
    dist.init_process_group("tdist", timeout=timedelta(seconds=float(os.environ.get("JOB_TIMEOUT", "4"))))
    rank = dist.get_rank()
    x = np.ones(1000, np.float32)
    y = np.zeros(7, np.int64)
    for i in range(k + 5):
        if mode == "stop" and rank == 2 and i == k:
            os.kill(os.getpid(), signal.SIGSTOP)
        if mode == "hang" and rank == 2 and i == k:
            open(os.environ["JOB_MARKER"], "w").close()
            time.sleep(3600)
        if mode == "pause" and i == k:
            open("%s.%d" % (os.environ["JOB_MARKER"], rank), "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(os.environ["JOB_GO"]):  # the test's go-ahead, from outside the job
                if time.monotonic() > deadline:
                    raise SystemExit("trace_job: no %s within 60 s" % os.environ["JOB_GO"])
                time.sleep(0.01)
        if not (mode == "skip" and rank == 1 and i == k):
            dist.all_reduce(x)
        if mode == "skip":
            dist.broadcast(y, 0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
