"""shard_tensor and reshard over placement transitions, written with
paddle's auto-parallel API; test_paddle_auto_parallel.py runs it under
tdist.paddle.launch as written and under paddle.distributed.launch with its
one tdist import line replaced by paddle's. Every rank writes, as JSON lines
into $AUTO_PARALLEL_OUT/rank<r>.jsonl, its local block of each layout made
straight by shard_tensor, and of each transition its blocks before and after
the reshard, or the error it raised.

$SHAPES (e.g. "8x6;7x5") gives the tensors' shapes; $PAIRS ("S0,R>R,R;...")
limits the transitions, else every pair of layouts is run. A layout names
one placement per mesh dimension: R (Replicate), S0/S1 (Shard), P (Partial).
"""

import json
import os

import numpy as np
import paddle

import tdist.paddle as dist

dist.init_parallel_env()
is_paddle = dist.__name__ == "paddle.distributed"
rank = dist.get_rank()
world = dist.get_world_size()
placements = {"R": dist.Replicate(), "S0": dist.Shard(0), "S1": dist.Shard(1), "P": dist.Partial()}
if world == 2:
    mesh = dist.ProcessMesh([0, 1], dim_names=["x"])
    layouts = {k: [v] for k, v in placements.items()}
elif world == 4:
    mesh = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["x", "y"])
    layouts = {f"{a},{b}": [placements[a], placements[b]] for a in placements for b in placements}
else:
    raise SystemExit(f"auto_parallel_placements.py runs on 2 or 4 ranks, not {world}")
pairs = None
if os.environ.get("PAIRS"):
    pairs = [tuple(p.split(">")) for p in os.environ["PAIRS"].split(";")]
shapes = [tuple(int(n) for n in s.split("x")) for s in os.environ.get("SHAPES", "8x6").split(";")]


def local(d):
    value = d._local_value()
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value).tolist()


def shard(a, layout):
    return dist.shard_tensor(paddle.to_tensor(a) if is_paddle else a, mesh, layout)


with open(os.path.join(os.environ["AUTO_PARALLEL_OUT"], f"rank{rank}.jsonl"), "w") as out:
    for shape in shapes:
        a = np.arange(1, 1 + int(np.prod(shape)), dtype="float32").reshape(shape)
        for name, layout in layouts.items():
            out.write(json.dumps({"shape": list(shape), "layout": name, "direct": local(shard(a, layout))}) + "\n")
        for src, src_layout in layouts.items():
            for dst, dst_layout in layouts.items():
                if pairs is not None and (src, dst) not in pairs:
                    continue
                row = {"shape": list(shape), "src": src, "dst": dst}
                try:
                    d = shard(a, src_layout)
                    row["before"] = local(d)
                    row["after"] = local(dist.reshard(d, mesh, dst_layout))
                except Exception as e:  # noqa: BLE001 - what each library raises is compared
                    row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
                out.write(json.dumps(row) + "\n")
                out.flush()
