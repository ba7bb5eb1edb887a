"""Runs several of the spec's programs one after another in each rank of a
single launcher job (tdist.run), so the test pays the launcher's start and
torch's import once per world size instead of once per program.

Each program runs unchanged, as __main__ (runpy). Between programs the ranks
leave the program's process group, and rank 0 picks a fresh MASTER_PORT for
the next program's env:// rendezvous. "### <name>" lines separate the
programs' output. A program that fails ends the job (exit code 1).
"""

import os
import runpy
import sys

import tdist as dist
from tdist._spawn import free_port

programs = sys.argv[1:]  # tdist.run, as torchrun, passes no --local-rank (LOCAL_RANK says it)
for path in programs:
    print(f"### {os.path.basename(path)}", flush=True)
    runpy.run_path(path, run_name="__main__")
    sys.stdout.flush()
    port = [free_port() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(port, src=0)
    dist.barrier()
    dist.destroy_process_group()
    os.environ["MASTER_PORT"] = str(port[0])
