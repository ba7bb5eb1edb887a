#!/usr/bin/env python3
"""Data-parallel training that goes on after a rank is killed and replaced.

Run it under tdistrun with the failed-rank restart policy:

    build/bin/tdistrun --standalone --nproc-per-node 4 --restart-policy=failed --max-restarts 1 \\
        examples/recovery_train.py --steps 200 --kill-rank 2 --kill-step 57 --out /tmp/run1

Every rank fits the same linear model to its own batches (seeded by step and
rank) and sums the gradients with all_reduce; after each step it keeps the
weights and the step in memory (its checkpoint). At --kill-step, rank
--kill-rank kills itself with SIGKILL (only its first incarnation does;
with --kill-after-save, right after it saved its final weights instead).
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

Every rank runs that agreement right after init_process_group too: when a
rank dies during start-up, its replacement may meet the others' first
connect. A rank whose agreement fails (another rank died meanwhile: a
replacement in its own init, a survivor during the rebuild) rebuilds and
agrees again. A replacement that finds final weights saved (its
predecessor's, or, if that died before it saved them, another rank's: all
ranks hold the same weights) takes them as its checkpoint, and saves them as
its own and exits at once if every other rank has saved its own (or if its
init_process_group fails once they all have).

With --out DIR each rank writes DIR/weights_<rank>.npy at the end, the kill
time (DIR/killed, time.monotonic(), which is CLOCK_MONOTONIC: one clock for
every process of the host) and, after a recovery, the time it trains again
(DIR/resumed_<rank>), and when the replacement's Python has started and
imported everything (DIR/started_<rank>); tools/measure/recovery_time.py and
tests/python/test_recovery.py read them. It also writes its pid to
DIR/init_<rank>.<restart count> before init_process_group (and
DIR/inited_... once it returned) and to
DIR/reinit_<rank>.<restart count>.<attempt> before each
reinit_process_group (and DIR/rebuilt_... once it returned), for
tests/python/test_recovery_convergence.py, which kills ranks at those
moments.
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
# How often a rank rebuilds the group in a row before it gives up: each
# rebuild that fails is one more rank that died during the recovery.
MAX_REBUILDS = 5


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


def mark(path):
    """Writes this process's pid to `path` (whole or not at all)."""
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def restart_count():
    return int(os.environ.get("TDIST_RESTART_COUNT", "0"))


def save_weights(path, w):
    """np.save, atomically: a rank killed while saving leaves no half file."""
    with open(path + ".tmp", "wb") as f:
        np.save(f, w)
    os.replace(path + ".tmp", path)


def agree_on_state(w, step, has_state):
    """The weights and step of the rank whose checkpoint holds the most
    steps (ties: the lowest rank), and that rank: every rank says how far its
    checkpoint goes (all_gather; -1 for none) and that one broadcasts its
    weights. Collective: every rank calls it after init_process_group (a
    replacement may meet its peers' first connect, when the rank it replaces
    died during start-up) and after every reinit_process_group. Returns a new
    array: a broadcast that fails half-way leaves `w`, the checkpoint, whole."""
    world = dist.get_world_size()
    mine = np.array([step if has_state else -1], dtype=np.int64)
    steps = [np.zeros(1, dtype=np.int64) for _ in range(world)]
    dist.all_gather(steps, mine)
    steps = [int(s[0]) for s in steps]
    root = max(range(world), key=lambda r: (steps[r], -r))
    if steps[root] < 0:
        raise RuntimeError("no rank holds a checkpoint: the whole job was restarted")
    out = w.copy()
    dist.broadcast(out, src=root)
    return out, steps[root], root


def synchronize(w, step, has_state, rebuild, rank, out_dir):
    """agree_on_state on the group as it is (rebuild=False: right after
    init_process_group) or after reinit_process_group; if that fails (a
    rank died meanwhile: the replacement of a replacement, a survivor killed
    during the rebuild), rebuild and agree again, up to MAX_REBUILDS times.
    Returns (weights, step, root)."""
    for attempt in range(MAX_REBUILDS + 1):
        try:
            if rebuild:
                if out_dir:
                    # The test that kills a rank during a rebuild waits for this.
                    mark(os.path.join(out_dir, f"reinit_{rank}.{restart_count()}.{attempt}"))
                dist.reinit_process_group()
                if out_dir:
                    mark(os.path.join(out_dir, f"rebuilt_{rank}.{restart_count()}.{attempt}"))
            return agree_on_state(w, step, has_state)
        except dist.DistError as e:
            if attempt == MAX_REBUILDS:
                raise
            print(f"rank {rank}: agreeing on the state failed ({type(e).__name__}: {e}); rebuilding the group",
                  flush=True)
            rebuild = True
    raise AssertionError("unreachable")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--kill-rank", type=int, default=-1, help="rank that kills itself (-1: none)")
    parser.add_argument("--kill-step", type=int, default=-1, help="the step at which it does")
    parser.add_argument("--kill-after-save", action="store_true",
                        help="--kill-rank kills itself right after it saved its final weights instead")
    parser.add_argument("--out", default="", help="directory for the weights and timings")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a call gives up")
    args = parser.parse_args()
    if args.out:
        os.makedirs(args.out, exist_ok=True)  # every rank: whichever comes first makes it

    # The launcher's rank and world size: known before the group is made.
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    replacement = restart_count() > 0
    weights = [os.path.join(args.out, f"weights_{r}.npy") for r in range(world)] if args.out else []
    if weights and not replacement and os.path.exists(weights[rank]):
        # An earlier run's: a replacement must find only this run's final
        # weights (it takes them and may leave at once). Every first
        # incarnation is past this before any rank can die in training.
        os.remove(weights[rank])
    w = np.zeros(DIM)
    step = 0
    has_state = not replacement  # a first incarnation starts from step 0
    saved = [path for path in weights if os.path.exists(path)]
    others_done = bool(weights) and all(os.path.exists(path) for r, path in enumerate(weights) if r != rank)
    finished = replacement and bool(saved)
    if finished:
        # A rank had trained every step and saved its weights: they are
        # every rank's (all hold the same weights), a checkpoint of the last
        # step. Its own, if the rank this process replaces saved them.
        mine = weights[rank] if weights[rank] in saved else saved[0]
        w, step, has_state = np.load(mine), args.steps, True
        if others_done:
            # Every other rank finished and left: so has this one.
            save_weights(weights[rank], w)
            print(f"rank {rank}: replacement, every other rank had finished already", flush=True)
            return 0

    if replacement and args.out:
        # Python and its imports are done: the rest is tdist's.
        write_time(os.path.join(args.out, f"started_{rank}"))
    if args.out:
        # The test that kills a replacement during its init_process_group waits for this.
        mark(os.path.join(args.out, f"init_{rank}.{restart_count()}"))
    try:
        dist.init_process_group("tdist", timeout=timedelta(seconds=args.timeout))
        if args.out:
            mark(os.path.join(args.out, f"inited_{rank}.{restart_count()}"))
        # Every rank, not only a replacement: one that replaces a rank killed
        # during start-up meets the first connect of the others.
        w, step, root = synchronize(w, step, has_state, False, rank, args.out)
    except dist.DistError:
        if finished and all(os.path.exists(path) for r, path in enumerate(weights) if r != rank):
            # The others finished meanwhile, and left: so has this one.
            save_weights(weights[rank], w)
            print(f"rank {rank}: replacement, every other rank finished meanwhile", flush=True)
            return 0
        raise
    if replacement:
        print(f"rank {rank}: replacement, got step {step} from rank {root}", flush=True)
        if args.out:
            write_time(os.path.join(args.out, f"resumed_{rank}"))
    checkpoint = (w.copy(), step)  # in memory: the weights after `step` steps

    while step < args.steps:
        if rank == args.kill_rank and step == args.kill_step and not replacement and not args.kill_after_save:
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
            w, step, root = synchronize(checkpoint[0], checkpoint[1], True, True, rank, args.out)
            checkpoint = (w.copy(), step)
            print(f"rank {rank}: rebuilt, going on from step {step} (state of rank {root})", flush=True)
            if args.out:
                write_time(os.path.join(args.out, f"resumed_{rank}"))

    if args.out:
        save_weights(weights[rank], w)
    if rank == args.kill_rank and args.kill_after_save and not replacement:
        if args.out:
            write_time(os.path.join(args.out, "killed"))
        os.kill(os.getpid(), signal.SIGKILL)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
