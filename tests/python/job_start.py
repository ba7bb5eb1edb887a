"""Ranks of a test job, each started as its own process, begin
init_process_group together.

A job that tests a failing collective gives its group a timeout of a few
seconds, and that timeout also bounds init_process_group's wait for the
other ranks: on a loaded machine one rank's start (Python, numpy, tdist)
came more than 3 s after another's, whose init then timed out (a run of
the suite failed so). So every rank writes <directory>/started.<rank> and
waits, bounded, until all have."""

import os
import sys
import time


def start_together(directory, limit_s=60):
    """Waits until each of $WORLD_SIZE ranks has written its file in
    `directory`; ends the process with a message after `limit_s`."""
    rank, world = os.environ["RANK"], int(os.environ["WORLD_SIZE"])
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, "started.%s" % rank), "w").close()
    deadline = time.monotonic() + limit_s
    while not all(os.path.exists(os.path.join(directory, "started.%d" % r)) for r in range(world)):
        if time.monotonic() > deadline:
            sys.exit("rank %s: the other ranks did not start within %d s" % (rank, limit_s))
        time.sleep(0.01)
