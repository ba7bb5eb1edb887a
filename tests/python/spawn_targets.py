"""Module-level functions for tdist.spawn tests (the "spawn" start method
pickles the function by name, so it must live in an importable module)."""

import json
import os
import signal
from datetime import timedelta

import numpy as np

import tdist as dist

ENV_KEYS = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]


def report_env_and_all_reduce(i, out_dir):
    """Writes this rank's launch variables and an all_reduce result as JSON."""
    dist.init_process_group("tdist", timeout=timedelta(seconds=30))
    t = np.array([float(i + 1)])
    dist.all_reduce(t)
    with open(os.path.join(out_dir, f"{i}.json"), "w") as f:
        json.dump({"env": {k: os.environ.get(k) for k in ENV_KEYS}, "sum": float(t[0]),
                   "rank": dist.get_rank(), "world": dist.get_world_size()}, f)
    dist.destroy_process_group()


def raise_on_rank_1(i):
    if i == 1:
        raise ValueError("boom from rank 1")


def exit_on_rank_1(i, code):
    if i == 1:
        os._exit(code)


def kill_rank_1_in_collective(i, out_dir):
    """Rank 1 dies by SIGKILL; rank 0's next collective must fail, not hang."""
    dist.init_process_group("tdist", timeout=timedelta(seconds=60))
    dist.barrier()
    if i == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    result = {}
    try:
        dist.all_reduce(np.ones(1 << 16, np.float32))
        result["error"] = None
    except dist.DistError as error:
        result = {"error": type(error).__name__, "message": str(error)}
    with open(os.path.join(out_dir, f"{i}.json"), "w") as f:
        json.dump(result, f)
    os._exit(0)  # skip destroy: the peer is gone
