# The spec's test program for all_to_all (spec 002), unchanged.
# The spec gives only the body (after the blank line); the prologue imports
# torch, adds `import tdist.torch` and initializes with backend "tdist".
import torch
import torch.distributed as dist
import tdist.torch  # added: registers the "tdist" backend

dist.init_process_group("tdist")  # env://, as the spec's send program initializes

input = torch.tensor([dist.get_rank()] * dist.get_world_size())
output = torch.empty(dist.get_world_size(), dtype=torch.int)
dist.all_to_all(output, input)
print(f"Rank {dist.get_rank()}: {output}")
