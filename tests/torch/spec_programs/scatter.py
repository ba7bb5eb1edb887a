# The spec's test program for scatter (spec 002), unchanged.
# The spec gives only the body (after the blank line); the prologue imports
# torch, adds `import tdist.torch` and initializes with backend "tdist".
import torch
import torch.distributed as dist
import tdist.torch  # added: registers the "tdist" backend

dist.init_process_group("tdist")  # env://, as the spec's send program initializes

if dist.get_rank() == 0:
    scatter_list = [torch.tensor([i]) for i in range(dist.get_world_size())]
else:
    scatter_list = None
tensor = torch.empty(1)
dist.scatter(tensor, scatter_list, src=0)
print(f"Rank {dist.get_rank()}: {tensor}")
