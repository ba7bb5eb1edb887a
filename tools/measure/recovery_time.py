#!/usr/bin/env python3
"""How long a job takes to recover from a killed rank, and whether it
recovers exactly (docs/fault-tolerance.md, "Recovering with a replaced rank").

Runs examples/recovery_train.py under tdistrun --restart-policy=failed: once
without a failure (the reference), then --trials times with rank --kill-rank
killing itself with SIGKILL at a random step. Each trial must exit 0 with
every rank's final weights equal, bit for bit, to the reference's. Its
recovery time runs from the kill to the last rank training again (the
survivors after reinit_process_group and the state broadcast, the
replacement after init_process_group and the broadcast), on the host's
CLOCK_MONOTONIC. Prints one line per trial, then the median and maximum,
and exits 1 if a trial failed or took --limit seconds or more.

    PYTHONPATH=build/python /usr/bin/python3 tools/measure/recovery_time.py                  # shared memory
    TDIST_TRANSPORT=tcp PYTHONPATH=build/python /usr/bin/python3 tools/measure/recovery_time.py   # TCP
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, os.pardir, os.pardir, "examples", "recovery_train.py")


def run_job(out_dir, ranks, steps, kill_rank=-1, kill_step=-1, deadline=120.0):
    """Runs the example once under `python3 -m tdist.run`; returns the
    CompletedProcess. Raises subprocess.TimeoutExpired past `deadline`."""
    command = [sys.executable, "-m", "tdist.run", "--standalone", "--nproc-per-node", str(ranks),
               "--restart-policy=failed", "--max-restarts", "1", "--grace-period", "2",
               EXAMPLE, "--steps", str(steps), "--kill-rank", str(kill_rank), "--kill-step", str(kill_step),
               "--out", out_dir, "--timeout", "30"]
    return subprocess.run(command, capture_output=True, text=True, timeout=deadline, check=False)


def read_weights(out_dir, ranks):
    return [np.load(os.path.join(out_dir, f"weights_{r}.npy")) for r in range(ranks)]


def read_time(path):
    with open(path) as f:
        return float(f.read())


def reference(ranks, steps):
    """The final weights of a run without a failure (every rank's must agree)."""
    with tempfile.TemporaryDirectory(prefix="tdist-recovery-ref-") as out:
        done = run_job(out, ranks, steps)
        if done.returncode != 0:
            raise RuntimeError(f"the reference run failed with {done.returncode}:\n{done.stdout}\n{done.stderr}")
        weights = read_weights(out, ranks)
    for r, w in enumerate(weights):
        if not np.array_equal(w, weights[0]):
            raise RuntimeError(f"the reference run's ranks disagree: rank {r} differs from rank 0")
    return weights[0]


def trial(ranks, steps, kill_rank, kill_step, expected, parts=None):
    """One run with a kill: (recovery seconds, None) or (None, what went
    wrong). `parts`, if a list, gets (seconds until the replacement's Python
    had started and imported tdist and NumPy, seconds from then on)."""
    with tempfile.TemporaryDirectory(prefix="tdist-recovery-") as out:
        try:
            done = run_job(out, ranks, steps, kill_rank, kill_step)
        except subprocess.TimeoutExpired as e:
            return None, f"hung (killed after {e.timeout} s)"
        if done.returncode != 0:
            return None, f"tdistrun exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        if "restarting rank " + str(kill_rank) + " alone" not in done.stderr:
            return None, f"tdistrun did not restart rank {kill_rank}:\n{done.stderr}"
        for r, w in enumerate(read_weights(out, ranks)):
            if not np.array_equal(w, expected):
                worst = float(np.max(np.abs(w - expected)))
                return None, f"rank {r}'s final weights differ from the reference (max |diff| {worst:g})"
        killed = read_time(os.path.join(out, "killed"))
        resumed = [read_time(os.path.join(out, f"resumed_{r}")) for r in range(ranks)]
        if parts is not None:
            started = read_time(os.path.join(out, f"started_{kill_rank}"))
            parts[:] = [started - killed, max(resumed) - started]
        return max(resumed) - killed, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--kill-rank", type=int, default=2)
    parser.add_argument("--limit", type=float, default=5.0, help="seconds a recovery must stay under")
    parser.add_argument("--seed", type=int, default=None, help="seed of the kill steps (default: random)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    transport = os.environ.get("TDIST_TRANSPORT", "auto")
    print(f"# {args.ranks} ranks, {args.steps} steps, rank {args.kill_rank} killed (SIGKILL) at a random step; "
          f"TDIST_TRANSPORT={transport}", flush=True)
    expected = reference(args.ranks, args.steps)
    times, starts, failures = [], [], 0
    for t in range(args.trials):
        kill_step = rng.randrange(1, args.steps - 1)
        parts = []
        seconds, error = trial(args.ranks, args.steps, args.kill_rank, kill_step, expected, parts)
        if error is not None:
            failures += 1
            print(f"trial {t + 1}: killed at step {kill_step}: FAILED: {error}", flush=True)
            continue
        times.append(seconds)
        verdict = "ok" if seconds < args.limit else f"OVER {args.limit:g} s"
        starts.append(parts[0])
        print(f"trial {t + 1}: killed at step {kill_step}: recovered in {seconds * 1000:.0f} ms "
              f"(new process up in {parts[0] * 1000:.0f} ms, then {parts[1] * 1000:.0f} ms to rebuild and "
              f"broadcast), final weights equal the reference: {verdict}", flush=True)
    if times:
        print(f"# recovery over {len(times)} trials: median {statistics.median(times) * 1000:.0f} ms, "
              f"max {max(times) * 1000:.0f} ms (of which the new process's start and imports: median "
              f"{statistics.median(starts) * 1000:.0f} ms); {failures} failed")
    slow = sum(1 for s in times if s >= args.limit)
    return 1 if failures or slow or not times else 0


if __name__ == "__main__":
    sys.exit(main())
