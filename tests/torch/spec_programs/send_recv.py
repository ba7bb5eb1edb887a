# The spec's test program for send and recv (spec 002, "send"; "recv" is the
# same program). Changes: backend "gloo" -> "tdist", the `import tdist.torch`
# line, and `rank=0` -> this process's rank (`import os` added for it): with
# rank=0 hard-coded, two processes cannot form a group on any backend.
import os
import torch
import torch.distributed as dist
import tdist.torch

dist.init_process_group("tdist", rank=int(os.environ["RANK"]), world_size=2)
tensor = torch.tensor([1, 2, 3])
if dist.get_rank() == 0:
    dist.send(tensor=tensor, dst=1)
elif dist.get_rank() == 1:
    recv_tensor = torch.empty(3)
    dist.recv(tensor=recv_tensor, src=0)
    print(recv_tensor)
