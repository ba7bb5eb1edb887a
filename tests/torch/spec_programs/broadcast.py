# The spec's test program for broadcast (spec 002), unchanged.
# The spec gives only the body (after the blank line); the prologue imports
# torch, adds `import tdist.torch` and initializes with backend "tdist".
import torch
import torch.distributed as dist
import tdist.torch  # added: registers the "tdist" backend

dist.init_process_group("tdist")  # env://, as the spec's send program initializes

tensor = torch.tensor([0])
if dist.get_rank() == 0:
    tensor += 1  # Only rank 0 modifies the tensor
dist.broadcast(tensor, src=0)
print(f"Rank {dist.get_rank()}: {tensor}")
