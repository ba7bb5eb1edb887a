# The spec's test program for all_reduce (spec 002), unchanged.
# The spec gives only the body (after the blank line); the prologue imports
# torch, adds `import tdist.torch` and initializes with backend "tdist".
import torch
import torch.distributed as dist
import tdist.torch  # added: registers the "tdist" backend

dist.init_process_group("tdist")  # env://, as the spec's send program initializes

tensor = torch.tensor([dist.get_rank() + 1])
dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
print(f"Rank {dist.get_rank()}: {tensor}")
