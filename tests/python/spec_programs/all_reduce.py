# The spec's all_reduce test program (003_22eb7e5c4c7d0095.txt), unchanged. The spec
# gives only the lines after the setup; the three setup lines below are the
# send program's, with tdist imported as dist and the rank and world size left
# to the launcher (the send program's fixed rank=0, world_size=2 cannot run as
# more than one process).
import torch
import tdist as dist
dist.init_process_group("gloo")
# --- the spec's program ---
tensor = torch.tensor([dist.get_rank() + 1])
dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
print(f"Rank {dist.get_rank()}: {tensor}")
