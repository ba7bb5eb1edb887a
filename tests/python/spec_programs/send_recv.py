# The spec's send and recv test program (003_22eb7e5c4c7d0095.txt; recv uses
# the same code), unchanged except for the import of tdist as dist.
import torch
import tdist as dist
dist.init_process_group("gloo", rank=0, world_size=2)
tensor = torch.tensor([1, 2, 3])
if dist.get_rank() == 0:
    dist.send(tensor=tensor, dst=1)
elif dist.get_rank() == 1:
    recv_tensor = torch.empty(3)
    dist.recv(tensor=recv_tensor, src=0)
    print(recv_tensor)
