#!/usr/bin/env python3
"""Writes the paddle-only results that test_paddle_fleet.py compares tdist's
with: each program of SCRIPTS at each size of RANKS, run under paddle's own
launcher and backend. They are stored, not run in each test run, because
paddle's own run is unreliable and slow there:
- fleet_train.py on 4 ranks: the gloo groups paddle makes in fleet.init
  failed 5 attempts of 5 in one fresh-clone run of the suite ("connect
  [127.0.0.1]:PORT: Connection refused", gloo TIMEOUT), 12 of 39 runs with
  one core busy, and 4 of 5 on an idle machine;
- data_parallel_train.py on 2 ranks took 46 s in one run of the whole
  suite (7 s alone): paddle's launcher and imports, under load.
Run it on an idle machine after changing the program or paddle's pinned
version (python/requirements-dev.txt):

    .venv/bin/python tests/python/paddle_reference.py

It runs the program under ``python -m paddle.distributed.launch`` with its
tdist import replaced by paddle's, exactly as the live reference does, and
writes paddle_programs/reference/<program>-<ranks>/rank<r>.npz with
paddle's version and the program's SHA-256 beside them (the test refuses
files of another version or of another program text)."""

import hashlib
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import paddle  # noqa: E402  after the path

from paddle_launch import launch  # noqa: E402

PROGRAMS = os.path.join(HERE, "paddle_programs")
REFERENCE = os.path.join(PROGRAMS, "reference")
SCRIPTS = {
    # script: (its tdist import line, paddle's)
    "fleet_train.py": ("from tdist.paddle import fleet", "from paddle.distributed import fleet"),
    "data_parallel_train.py": ("import tdist.paddle as dist", "import paddle.distributed as dist"),
}
RANKS = (2, 4)


def stored_dir(script, nprocs):
    return os.path.join(REFERENCE, f"{os.path.splitext(script)[0]}-{nprocs}")


def made_from(script):
    """What stored results must have been made with: paddle's version and
    the program's SHA-256, one per line."""
    with open(os.path.join(PROGRAMS, script), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return f"paddle {paddle.__version__}\n{script} sha256 {digest}\n"


def main():
    for script, nprocs in sorted((script, nprocs) for script in SCRIPTS for nprocs in RANKS):
        out = stored_dir(script, nprocs)
        with tempfile.TemporaryDirectory() as tmp:
            run_out = os.path.join(tmp, "out")
            os.makedirs(run_out)
            launch(os.path.join(PROGRAMS, script), nprocs, "paddle", tmp, SCRIPTS[script],
                   {"FLEET_TRAIN_OUT": run_out})
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            for r in range(nprocs):
                shutil.copy(os.path.join(run_out, f"rank{r}.npz"), out)
        with open(os.path.join(out, "made_from.txt"), "w") as f:
            f.write(made_from(script))
        print(f"wrote {os.path.relpath(out, HERE)} (paddle {paddle.__version__})")


if __name__ == "__main__":
    main()
