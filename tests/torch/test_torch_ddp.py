"""DistributedDataParallel training on backend "tdist" reaches the same
parameters as the same training on gloo: bit for bit at 2 ranks. At 4 ranks
gloo's ring all-reduce adds each chunk's four gradients starting from a
different rank, so its float sums may differ from tdist's in the last bit
(1.5e-8 observed); there the parameters must agree to atol 1e-6. Both runs
must also match a single-process reference that averages the ranks'
gradients itself, to the same tolerance, and every rank must end with
identical parameters.

With a communication hook registered (torch's allreduce hook, PowerSGD) the
tdist run must again agree with the gloo run under the same hook; PowerSGD
compresses the gradients, so it is not compared with the reference.

The variants of one world size train one after the other in the same
processes (JOBS), each on fresh groups of its own."""

import functools
import json

import pytest
import torch

from torch_harness import check_all_ok, run_ranks

# The variants each world size trains, one after the other in one job of
# processes (starting torch and DDP costs more than the training): "none"
# is DDP's own all_reduce, the others a communication hook.
JOBS = {2: ("none", "allreduce", "powersgd"), 3: ("powersgd",), 4: ("none",)}


def _tensors(lists):
    return [torch.tensor(p) for p in lists]


@functools.lru_cache(maxsize=None)
def _job(world_size):
    hooks = JOBS[world_size]
    return run_ranks("torch_ddp_train.py", world_size, ["{ports}", ",".join(hooks)], ports=2 * len(hooks))


def _runs(world_size, hook):
    """Every rank's results of `hook`. A failure in another variant of the
    job fails only the variants it kept from ending (a rank's output says
    which it was in: START lines); the job's last variant also answers for
    the job's end, every rank exiting 0."""
    results = _job(world_size)
    runs = [[json.loads(l.split(" ", 2)[2]) for l in r.lines("RESULT %s " % hook)] for r in results]
    last = hook == JOBS[world_size][-1]
    if not all(len(run) == 1 for run in runs) or (last and any(r.returncode != 0 for r in results)):
        try:
            check_all_ok(results)
        except AssertionError as e:
            raise AssertionError("variant %r of the job %s at %d ranks did not end on every rank:\n%s"
                                 % (hook, ",".join(JOBS[world_size]), world_size, e)) from None
        raise AssertionError("variant %r printed no result on some rank" % hook)
    return [run[0] for run in runs]


@pytest.mark.parametrize("world_size", [2, 4])
def test_ddp_matches_gloo(world_size):
    runs = _runs(world_size, "none")
    for run in runs[1:]:
        assert run["tdist"] == runs[0]["tdist"], "ranks ended with different parameters on tdist"
    tdist_params, gloo_params = _tensors(runs[0]["tdist"]), _tensors(runs[0]["gloo"])
    reference = _tensors(runs[0]["reference"])
    if world_size == 2:
        assert all(torch.equal(a, b) for a, b in zip(tdist_params, gloo_params)), runs[0]["max_abs_diff_to_gloo"]
    for a, b, ref in zip(tdist_params, gloo_params, reference):
        assert torch.allclose(a, b, rtol=0, atol=1e-6), float((a - b).abs().max())
        assert torch.allclose(a, ref, rtol=0, atol=1e-6), float((a - ref).abs().max())
    # Training moved the parameters away from rank 0's initialisation.
    torch.manual_seed(0)
    init = [p.detach() for p in torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                                     torch.nn.Linear(16, 4)).parameters()]
    assert any(not torch.allclose(a, i) for a, i in zip(tdist_params, init))


@pytest.mark.parametrize("world_size,hook", [(2, "allreduce"), (2, "powersgd"), (3, "powersgd")])
def test_ddp_comm_hooks_match_gloo(world_size, hook):
    runs = _runs(world_size, hook)
    for run in runs[1:]:
        assert run["tdist"] == runs[0]["tdist"], "ranks ended with different parameters on tdist"
    tdist_params, gloo_params = _tensors(runs[0]["tdist"]), _tensors(runs[0]["gloo"])
    for a, b in zip(tdist_params, gloo_params):
        assert torch.allclose(a, b, rtol=0, atol=1e-5), float((a - b).abs().max())
    if hook == "allreduce":
        for a, ref in zip(tdist_params, _tensors(runs[0]["reference"])):
            assert torch.allclose(a, ref, rtol=0, atol=1e-6), float((a - ref).abs().max())


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_bench_steps_match_gloo_with_bucket_views(world_size, tmp_path):
    """tools/measure/ddp_bench.py trains the same model on tdist and on gloo (here
    with gradient_as_bucket_view and 1 MB buckets, so DDP all-reduces
    several buckets viewed by the gradients) and fails unless the weights
    agree; its row must describe the buckets it measured."""
    import os
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rows = tmp_path / "rows.jsonl"
    proc = subprocess.run(
        [sys.executable, os.path.join(repo, "tools", "measure", "ddp_bench.py"), "--models", "small", "--world",
         str(world_size), "--bucket-mb", "1", "--gbv", "on", "--steps", "2", "--rounds", "1", "--warmup", "1",
         "--timeout", "200", "--jsonl", str(rows)],
        capture_output=True, text=True, timeout=230)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = json.loads(rows.read_text().splitlines()[-1])
    assert row["world"] == world_size and row["gbv"] is True
    # 100 layers of 100x100 weights and 100 biases in float32, 1 MB buckets.
    assert row["grad_mb"] == pytest.approx(100 * (100 * 100 + 100) * 4 / 1e6)
    assert row["buckets"] >= 4
    assert row["weights_max_diff"] <= (0.0 if world_size == 2 else 1e-5)
    assert all(row[k] > 0 for k in ("noop_ms", "tdist_ms", "gloo_ms", "tdist_raw_ms", "gloo_raw_ms"))
