# The spec's test program for reduce_scatter (spec 002), unchanged.
# The spec gives only the body (after the blank line); the prologue imports
# torch, adds `import tdist.torch` and initializes with backend "tdist".
import torch
import torch.distributed as dist
import tdist.torch  # added: registers the "tdist" backend

dist.init_process_group("tdist")  # env://, as the spec's send program initializes

input = [torch.tensor([dist.get_rank() + 1]) for _ in range(dist.get_world_size())]
output = torch.empty(1)
dist.reduce_scatter(output, input, op=dist.ReduceOp.SUM)
print(f"Rank {dist.get_rank()}: {output}")
