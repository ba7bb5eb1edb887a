"""One rank of a job that torchrun or tdistrun starts: init_process_group on
backend "tdist" from the launcher's environment, one all_reduce, a line out."""

import torch
import torch.distributed as dist

import tdist.torch  # noqa: F401 - registers "tdist"

dist.init_process_group("tdist")
t = torch.ones(3) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"launched rank {dist.get_rank()} of {dist.get_world_size()} sum {t.tolist()}", flush=True)
dist.destroy_process_group()
