"""One rank of a torch 2 higher-layer program, run twice: on backend "tdist",
then on "gloo" (a fresh default group each), printing one JSON line
{"tdist": result, "gloo": result} for test_torch2_layers.py to compare.

Usage: torch2_layers.py PORT_TDIST,PORT_GLOO,PORT_PACKAGE CASE TMPDIR

Cases (each returns plain lists and numbers):
  mesh_dtensor  init_device_mesh, sub-mesh groups, distribute_tensor,
                redistribute between Shard/Replicate/Partial, DTensor ops
  tp            parallelize_module with ColwiseParallel/RowwiseParallel on an MLP
  fsdp2         fully_shard training for several steps (losses, parameters)
  dcp           torch.distributed.checkpoint save and load of a sharded state dict
  own_layer     the same sharding with torch's DTensor and with tdist's own
                tdist.tensor (on the Python package's group): equal results
  ddp           DistributedDataParallel: static_graph, no_sync, unused
                parameters, the fp16 compression hook
  pipelining    torch.distributed.pipelining: one stage per rank, the GPipe
                and 1F1B schedules over 4 microbatches (gradients, losses)
"""

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import tdist.torch  # noqa: F401 - registers "tdist"

torch.set_num_threads(1)
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


def _rows(t):
    return t.detach().to(torch.float64).reshape(-1).tolist()


def case_mesh_dtensor(tmp):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor, DTensor

    out = {}
    if WORLD == 4:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        # Sub-mesh groups: each all_reduce sums over one row or column.
        for name in ("dp", "tp"):
            t = torch.tensor([float(RANK + 1)])
            dist.all_reduce(t, group=mesh[name].get_group())
            out["sum_over_" + name] = t.item()
        placements_2d = [[Shard(0), Shard(1)], [Shard(1), Replicate()], [Replicate(), Shard(0)]]
    else:
        mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("dp",))
        placements_2d = [[Shard(0)], [Shard(1)], [Replicate()]]
    torch.manual_seed(0)
    x = torch.randn(8, 6)
    for i, placements in enumerate(placements_2d):
        d = distribute_tensor(x, mesh, placements)
        out[f"roundtrip_{i}"] = _rows(d.full_tensor())
        r = d.redistribute(mesh, [Replicate()] * mesh.ndim)
        out[f"replicated_{i}"] = _rows(r.to_local())
    # Partial -> Replicate: every rank's local part is summed.
    local = torch.full((3, 2), float(RANK + 1))
    p = DTensor.from_local(local, mesh, [Partial()] * mesh.ndim)
    out["partial_sum"] = _rows(p.redistribute(mesh, [Replicate()] * mesh.ndim).to_local())
    # Ops on sharded tensors.
    a = distribute_tensor(torch.randn(8, 5), mesh, [Shard(0)] + [Replicate()] * (mesh.ndim - 1))
    b = distribute_tensor(torch.randn(5, 4), mesh, [Replicate()] * mesh.ndim)
    out["matmul"] = _rows((a @ b).full_tensor())
    out["sum"] = _rows(a.sum().full_tensor())
    out["mean_dim0"] = _rows(a.mean(dim=0).full_tensor())
    return out


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(8, 16)
        self.w2 = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


def case_tp(tmp):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("tp",))
    torch.manual_seed(0)
    model = MLP()
    parallelize_module(model, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    torch.manual_seed(1)
    x = torch.randn(4, 8)
    y = model(x)
    y.sum().backward()
    return {"out": _rows(y), "grad_w1": _rows(model.w1.weight.grad.full_tensor()),
            "grad_w2": _rows(model.w2.weight.grad.full_tensor())}


def _fsdp_model():
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def case_fsdp2(tmp):
    model = _fsdp_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(4):
        torch.manual_seed(100 + step * WORLD + RANK)  # each rank its own batch
        x, target = torch.randn(6, 8), torch.randn(6, 4)
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(t.item() / WORLD)
    params = [_rows(p.full_tensor()) for p in model.parameters()]
    return {"losses": losses, "params": params}


def case_dcp(tmp):
    import torch.distributed.checkpoint as dcp

    model = _fsdp_model()
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(float(i + 1))  # differs from a fresh model's
    path = os.path.join(tmp, f"ckpt_{dist.get_backend()}")
    dcp.save({"model": model.state_dict()}, checkpoint_id=path)
    fresh = _fsdp_model()
    state = {"model": fresh.state_dict()}
    dcp.load(state, checkpoint_id=path)
    fresh.load_state_dict(state["model"])
    same = all(torch.equal(a.full_tensor(), b.full_tensor()) for a, b in zip(model.parameters(), fresh.parameters()))
    return {"restored": same, "params": [_rows(p.full_tensor()) for p in fresh.parameters()]}


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(8, 16)
        self.used = torch.nn.Linear(16, 4)
        self.unused = torch.nn.Linear(16, 4)  # never in the loss: find_unused_parameters

    def forward(self, x):
        return self.used(torch.relu(self.body(x)))


def case_ddp(tmp):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = {}
    variants = {
        "static_graph": dict(static_graph=True),
        "unused": dict(find_unused_parameters=True),
        "fp16_hook": dict(hook=default_hooks.fp16_compress_hook),
        # (bf16_compress_hook is refused on CPU for every backend: torch asks for NCCL or XCCL.)
        "no_sync": dict(no_sync=True),
    }
    for name, v in variants.items():
        torch.manual_seed(0)
        model = TwoHeads() if name == "unused" else torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                                                         torch.nn.Linear(16, 4))
        kwargs = {k: v[k] for k in ("static_graph", "find_unused_parameters") if k in v}
        ddp = DDP(model, **kwargs)
        if "hook" in v:
            ddp.register_comm_hook(None, v["hook"])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        for step in range(3):
            torch.manual_seed(10 + step * WORLD + RANK)
            x, target = torch.randn(5, 8), torch.randn(5, 4)
            if v.get("no_sync") and step == 0:
                with ddp.no_sync():  # accumulate locally, reduce with the next step
                    torch.nn.functional.mse_loss(ddp(x), target).backward()
                continue
            torch.nn.functional.mse_loss(ddp(x), target).backward()
            opt.step()
            opt.zero_grad()
        out[name] = [_rows(p) for p in ddp.module.parameters()]
    return out


def case_own_layer(tmp):
    import tdist
    from tdist.device_mesh import init_device_mesh as own_mesh
    from tdist.tensor import Replicate as OwnReplicate
    from tdist.tensor import Shard as OwnShard
    from tdist.tensor import distribute_tensor as own_distribute
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    if not tdist.is_initialized():
        tdist.init_process_group("tdist", init_method=f"tcp://127.0.0.1:{PACKAGE_PORT}", rank=RANK, world_size=WORLD)
    torch.manual_seed(0)
    x = torch.randn(7, 5)  # uneven over 2 and 4 ranks on purpose
    theirs = distribute_tensor(x, init_device_mesh("cpu", (WORLD,)), [Shard(0)])
    ours = own_distribute(x, own_mesh("cpu", (WORLD,)), [OwnShard(0)])
    out = {"same_local": torch.equal(theirs.to_local(), torch.as_tensor(ours.to_local()))}
    theirs = theirs.redistribute(placements=[Shard(1)])
    ours = ours.redistribute(placements=[OwnShard(1)])
    out["same_after_redistribute"] = torch.equal(theirs.to_local(), torch.as_tensor(ours.to_local()))
    out["same_full"] = torch.equal(theirs.redistribute(placements=[Replicate()]).to_local(),
                                   torch.as_tensor(ours.redistribute(placements=[OwnReplicate()]).to_local()))
    return out


def case_pipelining(tmp):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.manual_seed(0)
    stages = [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(WORLD)]
    module = stages[RANK]
    stage = PipelineStage(module, RANK, WORLD, torch.device("cpu"))
    out = {}
    for name, schedule_class in (("gpipe", ScheduleGPipe), ("1f1b", Schedule1F1B)):
        module.zero_grad()
        schedule = schedule_class(stage, n_microbatches=4, loss_fn=lambda y, target: ((y - target) ** 2).mean())
        torch.manual_seed(1)
        x, target = torch.randn(8, 8), torch.randn(8, 8)
        losses = []
        if RANK == 0:
            schedule.step(x)
        elif RANK == WORLD - 1:
            schedule.step(target=target, losses=losses)
        else:
            schedule.step()
        out[name + "_grads"] = [_rows(p.grad) for p in module.parameters()]
        out[name + "_losses"] = [float(loss) for loss in losses]
    return out


CASES = {"mesh_dtensor": case_mesh_dtensor, "pipelining": case_pipelining, "tp": case_tp, "fsdp2": case_fsdp2, "dcp": case_dcp, "ddp": case_ddp,
         "own_layer": case_own_layer}
PACKAGE_PORT = 0


def main():
    """argv: ports (2 per case, then one for tdist's own package), the cases
    (comma-separated), a scratch directory. Runs every case on tdist, then
    on gloo, each on a default group of its own, in this one process (a
    process per case would import torch once per case), and prints
    {case: {"tdist": ..., "gloo": ...}} as one JSON line."""
    global PACKAGE_PORT
    ports, cases, tmp = sys.argv[1].split(","), sys.argv[2].split(","), sys.argv[3]
    PACKAGE_PORT = int(ports[-1])
    results = {}
    for i, case in enumerate(cases):
        results[case] = {}
        for backend, port in zip(("tdist", "gloo"), ports[2 * i:2 * i + 2]):
            dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=RANK, world_size=WORLD,
                                    timeout=timedelta(seconds=60))
            case_tmp = os.path.join(tmp, f"{case}-{backend}")
            os.makedirs(case_tmp, exist_ok=True)
            results[case][backend] = CASES[case](case_tmp)
            dist.barrier()
            dist.destroy_process_group()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
