# The spec's test program for gather (spec 002), unchanged.
# The spec gives only the body (after the blank line); the prologue imports
# torch, adds `import tdist.torch` and initializes with backend "tdist".
import torch
import torch.distributed as dist
import tdist.torch  # added: registers the "tdist" backend

dist.init_process_group("tdist")  # env://, as the spec's send program initializes

tensor = torch.tensor([dist.get_rank()])
if dist.get_rank() == 0:
    gather_list = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
else:
    gather_list = None
dist.gather(tensor, gather_list, dst=0)
if dist.get_rank() == 0:
    print(f"Gathered result: {gather_list}")
