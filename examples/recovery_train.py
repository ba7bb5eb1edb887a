#!/usr/bin/env python3
"""Data-parallel training that goes on after a rank is killed and replaced.

Run it under tdistrun with the failed-rank restart policy:

    build/bin/tdistrun --standalone --nproc-per-node 4 --restart-policy=failed --max-restarts 1 \\
        examples/recovery_train.py --steps 200 --kill-rank 2 --kill-step 57 --out /tmp/run1

Every rank fits the same linear model to its own batches (seeded by step and
rank) and sums the gradients with all_reduce; after each step it keeps the
weights and the step in memory (its checkpoint). At --kill-step, rank
--kill-rank kills itself with SIGKILL (only its first incarnation does).
Then:

- the survivors' all_reduce fails (the peer is gone); each restores its
  checkpoint and calls reinit_process_group(), which waits for the group's
  next generation;
- tdistrun starts rank 2 again alone (TDIST_RESTART_COUNT=1, same RANK, same
  store, which tdistrun hosts); it calls init_process_group like any rank,
  and its first connect is that same next generation, so all four meet;
- every rank says how many steps its checkpoint holds (all_gather; the new
  rank has none), and the one furthest on broadcasts its weights and step
  (a survivor may have finished the step that the others saw fail);
- training goes on. The final weights equal those of a run without the kill,
  bit for bit: the same batches are summed in the same order.

With --out DIR each rank writes DIR/weights_<rank>.npy at the end, the kill
time (DIR/killed, time.monotonic(), which is CLOCK_MONOTONIC: one clock for
every process of the host) and, after a recovery, the time it trains again
(DIR/resumed_<rank>), and when the replacement's Python has started and
imported everything (DIR/started_<rank>); tools/measure/recovery_time.py and
tests/python/test_recovery.py read them.
"""

import argparse
import os
import signal
import sys
import time
from datetime import timedelta

import numpy as np

import tdist as dist

DIM = 32
BATCH = 64
LEARNING_RATE = 0.05


def batch(step, rank):
    """This rank's batch of step `step`: the same in every run."""
    rng = np.random.default_rng([step, rank])
    x = rng.standard_normal((BATCH, DIM))
    true_w = np.linspace(-1.0, 1.0, DIM)
    y = x @ true_w + 0.01 * rng.standard_normal(BATCH)
    return x, y


def gradient(w, x, y):
    """Gradient of the mean squared error of x @ w against y."""
    return 2.0 * x.T @ (x @ w - y) / len(y)


def write_time(path):
    with open(path + ".tmp", "w") as f:
        f.write(repr(time.monotonic()))
    os.replace(path + ".tmp", path)  # readers never see half a number


def agree_on_state(w, step, has_state):
    """Every rank ends with the weights and step of the rank whose
    checkpoint holds the most steps (ties: the lowest rank). Collective: the
    survivors after reinit_process_group, the replacement after
    init_process_group, in the same order of calls."""
    world = dist.get_world_size()
    mine = np.array([step if has_state else -1], dtype=np.int64)
    steps = [np.zeros(1, dtype=np.int64) for _ in range(world)]
    dist.all_gather(steps, mine)
    steps = [int(s[0]) for s in steps]
    root = max(range(world), key=lambda r: (steps[r], -r))
    if steps[root] < 0:
        raise RuntimeError("no rank holds a checkpoint: the whole job was restarted")
    dist.broadcast(w, src=root)
    return steps[root], root


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--kill-rank", type=int, default=-1, help="rank that kills itself (-1: none)")
    parser.add_argument("--kill-step", type=int, default=-1, help="the step at which it does")
    parser.add_argument("--out", default="", help="directory for the weights and timings")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a call gives up")
    args = parser.parse_args()
    if args.out:
        os.makedirs(args.out, exist_ok=True)  # every rank: whichever comes first makes it

    replacement = int(os.environ.get("TDIST_RESTART_COUNT", "0")) > 0
    if replacement and args.out:
        # Python and its imports are done: the rest is tdist's.
        write_time(os.path.join(args.out, f"started_{os.environ['RANK']}"))
    dist.init_process_group("tdist", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()

    w = np.zeros(DIM)
    step = 0
    if replacement:
        # A new process in a running job: take the state from a peer.
        step, root = agree_on_state(w, step, has_state=False)
        print(f"rank {rank}: replacement, got step {step} from rank {root}", flush=True)
        if args.out:
            write_time(os.path.join(args.out, f"resumed_{rank}"))
    checkpoint = (w.copy(), step)  # in memory: the weights after `step` steps

    while step < args.steps:
        if rank == args.kill_rank and step == args.kill_step and not replacement:
            if args.out:
                write_time(os.path.join(args.out, "killed"))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            g = gradient(w, *batch(step, rank))
            dist.all_reduce(g)
            w -= LEARNING_RATE * g / world
            step += 1
            checkpoint = (w.copy(), step)
        except dist.DistError as e:
            print(f"rank {rank}: step {step} failed ({type(e).__name__}); rebuilding the group", flush=True)
            w, step = checkpoint[0].copy(), checkpoint[1]
            dist.reinit_process_group()
            step, root = agree_on_state(w, step, has_state=True)
            checkpoint = (w.copy(), step)
            print(f"rank {rank}: rebuilt, going on from step {step} (state of rank {root})", flush=True)
            if args.out:
                write_time(os.path.join(args.out, f"resumed_{rank}"))

    if args.out:
        np.save(os.path.join(args.out, f"weights_{rank}.npy"), w)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
