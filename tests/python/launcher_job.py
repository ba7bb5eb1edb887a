"""One rank of the jobs of test_slurm.py and test_mpirun.py, started by
another launcher (Slurm's srun, Open MPI's mpirun): nothing but that
launcher's variables (SLURM_PROCID, OMPI_COMM_WORLD_RANK, ...) and
MASTER_ADDR/MASTER_PORT says who it is. It joins an env:// process group,
all_reduces [rank + 1, (rank + 1) ** 2, 2 ** rank] and prints one JSON line:
what the launcher set, what tdist made of it, the reduced values (the
tests compute the expected sums themselves), TDIST_HOST_ID and the inode of
the rank's network namespace (test_slurm.py's testbed nodes).

With --torch the group is torch.distributed's, on the "tdist" backend of
the plugin (`import tdist.torch`), and the values a torch tensor. With
--out DIR the line also goes to DIR/<rank>.json (mpirun forwards the ranks'
output in pieces that can share a line)."""

import importlib
import json
import os
import sys
from datetime import timedelta

import numpy

import tdist

LAUNCHER_VARIABLES = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURMD_NODENAME",
                      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")


def main():
    launched = tdist._C.launch_environment()  # what tdist reads before any rendezvous
    # torchrun's variables as the job found them (with --torch, importing
    # tdist.torch exports them from the launcher's own).
    seen = {name: os.environ.get(name) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    if "--torch" in sys.argv:
        import torch
        import torch.distributed as dist
        importlib.import_module("tdist.torch")  # registers the backend, exports RANK, ...
        dist.init_process_group("tdist", timeout=timedelta(seconds=60))
        rank, world_size = dist.get_rank(), dist.get_world_size()
        values = torch.tensor([rank + 1, (rank + 1) ** 2, 2 ** rank], dtype=torch.float64)
        dist.all_reduce(values)
        reduced, torchelastic = values.tolist(), None
        dist.destroy_process_group()
    else:
        tdist.init_process_group("tdist", init_method="env://", timeout=timedelta(seconds=60))
        rank, world_size = tdist.get_rank(), tdist.get_world_size()
        values = numpy.array([rank + 1, (rank + 1) ** 2, 2 ** rank], dtype=numpy.float64)
        tdist.all_reduce(values)
        reduced, torchelastic = values.tolist(), tdist.is_torchelastic_launched()
        tdist.destroy_process_group()
    launcher = {name: os.environ.get(name) for name in LAUNCHER_VARIABLES}
    line = json.dumps({"rank": rank, "world_size": world_size, "launch_environment": launched,
                       "launcher": launcher, "torch_launcher_variables": seen, "reduced": reduced,
                       "torchelastic": torchelastic, "host_id": os.environ.get("TDIST_HOST_ID"),
                       "netns_inode": os.stat("/proc/self/ns/net").st_ino})
    print(line, flush=True)
    if "--out" in sys.argv:
        with open(os.path.join(sys.argv[sys.argv.index("--out") + 1], f"{rank}.json"), "w") as f:
            f.write(line)


if __name__ == "__main__":
    main()
