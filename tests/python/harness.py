"""Helpers of the tdist Python tests: run a function on N ranks (forked
processes after env:// rendezvous on 127.0.0.1) and collect what each rank
returns, with a deadline on the whole run.

Ranks are forked from the pytest process (cheap: numpy and torch are already
loaded), so the pytest process itself never initializes tdist.
"""

import os
import pickle
import tempfile
import traceback
from datetime import timedelta

import pytest

import tdist

# The full suite (TDIST_FULL_SUITE=1: .ci/run, or scripts/test.sh under
# CI=true) runs the soak and scale cases at full depth; elsewhere they run
# lighter or skip (README.md, "Quick start").
FULL_SUITE = os.environ.get("TDIST_FULL_SUITE") == "1"


def full_suite_only(cost):
    """Skips the case outside the full suite; `cost` says why."""
    return pytest.mark.skipif(not FULL_SUITE, reason=f"{cost}: runs in the full suite (CI, TDIST_FULL_SUITE=1)")


# Every multi-rank run ends within this many seconds or fails.
DEADLINE = 90
# Collectives give up after this long (a desynchronized test fails, not hangs).
PG_TIMEOUT = timedelta(seconds=40)


def _rank_main(rank, fn, nprocs, args, out_dir, init):
    result = None
    try:
        if init:
            tdist.init_process_group("tdist", timeout=PG_TIMEOUT)
        result = ("ok", fn(rank, nprocs, *args))
        if init:
            tdist.barrier()
            tdist.destroy_process_group()
    except BaseException:  # reported to the parent as the rank's result
        result = ("error", traceback.format_exc())
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)


def run_ranks(fn, nprocs, *args, init=True, timeout=DEADLINE, env=None):
    """Runs fn(rank, nprocs, *args) on `nprocs` ranks; returns the list of return values.

    With `init`, each rank first joins a default process group (env://) and
    leaves it afterwards. Raises AssertionError with the rank's traceback if
    a rank raised.
    """
    with tempfile.TemporaryDirectory(prefix="tdist_test_") as out_dir:
        tdist.spawn(_rank_main, args=(fn, nprocs, args, out_dir, init), nprocs=nprocs, start_method="fork",
                    timeout=timeout, env=env)
        results = []
        for rank in range(nprocs):
            with open(os.path.join(out_dir, f"rank{rank}.pkl"), "rb") as f:
                status, value = pickle.load(f)
            if status != "ok":
                raise AssertionError(f"rank {rank} failed:\n{value}")
            results.append(value)
        return results
