"""A DDP program that ends with (argv[1] == "destroy") or without
destroy_process_group(), for test_torch_exit.py. With destroy, it also
checks that the group's tdist backend was shut down: a later call on it
raises. With "rank-0-leaves", rank 0 exits while rank 1 calls once more."""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import tdist.torch

dist.init_process_group("tdist")
model = DDP(torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    torch.manual_seed(dist.get_rank() + step)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
w = model.module.weight.detach().clone()
dist.all_reduce(w)
print("rank %d weights agree: %s" % (dist.get_rank(), torch.allclose(w / dist.get_world_size(), model.module.weight)),
      flush=True)
if sys.argv[1] == "rank-0-leaves":
    # Rank 0 is done; rank 1 calls once more and waits for it: its call
    # must fail when rank 0 exits, not hold rank 0's exit for a minute.
    if dist.get_rank() == 1:
        try:
            dist.all_reduce(w)
            print("rank 1: the all_reduce without rank 0 returned", flush=True)
        except Exception as e:  # noqa: BLE001  the error is what is checked
            print("rank 1: without rank 0: %s" % e, flush=True)
    sys.exit(0)
if sys.argv[1] == "destroy":
    backend = tdist.torch.backend_of()
    dist.destroy_process_group()
    try:
        backend.allreduce([torch.ones(2)]).wait()
        print("rank %d: the backend still ran an all_reduce after destroy_process_group" % dist.get_rank())
    except Exception as e:  # noqa: BLE001  the error is what is checked
        print("after destroy: %s" % e, flush=True)
