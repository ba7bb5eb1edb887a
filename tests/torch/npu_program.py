"""A torch_npu distributed program, as written for Ascend's HCCL, with the
import of torch_npu changed, and the device of the communicator-name path
"cpu" where it said "npu" (the only device here). Every call of the spec's
torch_npu list (docs/torch_npu.md) runs; each rank prints "NPU-OK" at the end."""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

import tdist.torch_npu as torch_npu  # the one line: was `import torch_npu`

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert dist.is_hccl_available()
dist.init_process_group("hccl", timeout=timedelta(seconds=60))
assert dist.get_backend() == "hccl"

# The group's communicator name, as torch_npu programs reach it.
name = dist.distributed_c10d._world.default_pg._get_backend(torch.device("cpu")).get_hccl_comm_name(rank)
names = [None] * world
dist.all_gather_object(names, name)
assert len(set(names)) == 1 and names[0], names

x = torch.full((2, 3), float(rank + 1)).npu()
dist.all_reduce(x)
assert torch.equal(x, torch.full((2, 3), float(world * (world + 1) / 2)))

# Uneven all-gather and reduce-scatter: rank r has r + 1 rows.
rows = [r + 1 for r in range(world)]
out = torch.empty(sum(rows), 2)
torch_npu.distributed.all_gather_into_tensor_uneven(out, torch.full((rank + 1, 2), float(rank)), rows)
assert torch.equal(out, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(world)]))
part = torch.empty(rank + 1, 2)
torch_npu.distributed.reduce_scatter_tensor_uneven(part, torch.ones(sum(rows), 2), rows)
assert torch.equal(part, torch.full((rank + 1, 2), float(world)))

# Rebuild the group's connections in place; it works on, under the same name.
torch_npu.distributed.reinit_process_group()
y = torch.ones(4)
dist.all_reduce(y)
assert torch.equal(y, torch.full((4,), float(world)))
backend = dist.distributed_c10d._world.default_pg._get_backend(torch.device("cpu"))
assert backend.get_hccl_comm_name(rank) == name

# ProcessGroupHCCL(store, rank, size, timeout): a group from a store.
store = dist.PrefixStore("own", dist.distributed_c10d._get_default_store())
pg = dist.ProcessGroupHCCL(store, rank, world, timedelta(seconds=60))
assert pg.get_comm_name()
dist.barrier()
dist.destroy_process_group()
print("NPU-OK", flush=True)
