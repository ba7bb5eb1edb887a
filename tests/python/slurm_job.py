"""One rank of the jobs of test_slurm.py, started by Slurm's srun: nothing
but srun's variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...) and
MASTER_ADDR/MASTER_PORT says who it is. It joins an env:// process group,
all_reduces [rank + 1, (rank + 1) ** 2, 2 ** rank] and prints one JSON line:
what srun set, what tdist made of it, and the reduced values (the test
computes the expected sums itself)."""

import json
import os
from datetime import timedelta

import numpy

import tdist


def main():
    launched = tdist._C.launch_environment()  # what tdist reads before any rendezvous
    tdist.init_process_group("tdist", init_method="env://", timeout=timedelta(seconds=60))
    rank, world_size = tdist.get_rank(), tdist.get_world_size()
    values = numpy.array([rank + 1, (rank + 1) ** 2, 2 ** rank], dtype=numpy.float64)
    tdist.all_reduce(values)
    slurm = {name: os.environ.get(name) for name in
             ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURMD_NODENAME")}
    other = {name: os.environ.get(name) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    print(json.dumps({"rank": rank, "world_size": world_size, "launch_environment": launched, "slurm": slurm,
                      "torch_launcher_variables": other, "reduced": values.tolist(),
                      "torchelastic": tdist.is_torchelastic_launched()}), flush=True)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
