"""tdist.paddle: paddle.distributed's collective, stream, group and
environment API (paddle_programs/paddle_cases.py) on 2 and 4 ranks, the
gloo_* context, spawn, and ``python3 -m tdist.paddle.launch``."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "paddle_programs")
sys.path.insert(0, PROGRAMS)

import paddle_cases  # noqa: E402

try:
    # One case passes a torch tensor: imported once here, the ranks forked
    # below have it, instead of 1.5 s of import in each of them.
    import torch  # noqa: E402, F401
except ImportError:  # pragma: no cover - torch is optional
    pass
import tdist.paddle as dist  # noqa: E402
from harness import run_ranks  # noqa: E402
from tdist._spawn import free_port  # noqa: E402

CASE_NAMES = [name for name, _ in paddle_cases.CASES]
TIMEOUT = 90
_results = {}


def results_for(world_size, tensors):
    """Every case's outcome at `world_size`, on real paddle tensors
    ("paddle") or on fake_paddle's DLPack-only ones ("fake": what any other
    DLPack producer gets)."""
    key = (world_size, tensors)
    if key not in _results:
        per_rank = run_ranks(paddle_cases.run_all, world_size, tensors == "fake", init=False)
        merged = {}
        for rank, results in enumerate(per_rank):
            for name, error in results.items():
                if error is not None and merged.get(name) is None:
                    merged[name] = f"rank {rank}:\n{error}"
                else:
                    merged.setdefault(name, None)
        _results[key] = merged
    return _results[key]


@pytest.mark.parametrize("tensors", ["paddle", "fake"])
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("case", CASE_NAMES)
def test_case(world_size, case, tensors):
    results = results_for(world_size, tensors)
    assert case in results, f"{case} did not run (an earlier case failed)"
    assert results[case] is None, results[case]


# The cases written with paddle's tensors and calls alone, which paddle's own
# CPU backend (paddle 3.3.1) also runs: the same calls pass the same NumPy
# checks there. The other cases pass NumPy arrays or torch tensors (tdist
# takes any DLPack tensor; paddle's calls take paddle.Tensor only) or use
# what paddle's CPU backend does otherwise or not at all: docs/paddle.md,
# "Beside paddle's own backend". At 4 ranks paddle's broadcast_object_list
# with src=1 times out inside gloo.
ON_PADDLES_BACKEND = ["all_reduce_doc_example", "broadcast_doc_example", "all_gather_object_doc_example",
                      "scatter_doc_example", "scatter_object_list_doc_example", "gather_doc_example",
                      "send_recv_doc_example", "broadcast_object_list_doc_example", "use_calc_stream_needs_sync_op"]


@pytest.mark.parametrize("world_size", [2, 4])
def test_the_paddle_only_cases_pass_on_paddles_own_backend_too(world_size, tmp_path):
    from paddle_launch import launch
    names = [name for name in ON_PADDLES_BACKEND
             if not (world_size == 4 and name == "broadcast_object_list_doc_example")]
    logs = launch(os.path.join(PROGRAMS, "cases_on_paddle.py"), world_size, "paddle", str(tmp_path), None,
                  {"CASES": ",".join(names)})
    for name in names:
        assert logs.count(f"passed {name}\n") == world_size, (name, logs[-3000:])


def test_every_function_paddle_also_has_takes_paddles_parameters():
    """Names, order and defaults of the parameters of every function that
    tdist.paddle and tdist.paddle.stream share with paddle.distributed and
    its stream module, as installed (python/requirements-dev.txt pins
    paddle): a paddle program's keyword and positional calls mean the same
    on both."""
    import inspect

    import paddle.distributed
    import tdist.paddle.stream

    def parameters(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    compared = []
    for theirs, ours in ((paddle.distributed, dist), (paddle.distributed.communication.stream, tdist.paddle.stream)):
        for name in sorted(dir(ours)):
            if name.startswith("_") or not hasattr(theirs, name):
                continue
            their_fn, our_fn = getattr(theirs, name), getattr(ours, name)
            if inspect.isclass(their_fn) or not callable(their_fn) or not callable(our_fn):
                continue
            assert parameters(our_fn) == parameters(their_fn), f"{ours.__name__}.{name}"
            compared.append(name)
    assert {"all_reduce", "alltoall", "alltoall_single", "init_parallel_env", "new_group", "gather"} <= set(compared)
    assert len(compared) > 40


@pytest.mark.parametrize("world_size", [2, 4])
def test_gloo_context(world_size):
    endpoint = f"127.0.0.1:{free_port()}"
    assert run_ranks(paddle_cases.gloo_context, world_size, endpoint, init=False) == [True] * world_size


def test_environment_before_init(monkeypatch):
    monkeypatch.setenv("PADDLE_TRAINER_ID", "3")
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "8")
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.1:6171")
    monkeypatch.setenv("PADDLE_CURRENT_ENDPOINT", "10.0.0.1:6171")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    env = dist.ParallelEnv()
    assert (env.rank, env.world_size, env.local_rank, env.nranks) == (3, 8, 3, 8)
    assert env.trainer_endpoints == ["10.0.0.1:6170", "10.0.0.1:6171"]
    assert env.current_endpoint == "10.0.0.1:6171"
    assert dist.get_rank() == 3 and dist.get_world_size() == 8 and not dist.is_initialized()
    from tdist.paddle.env import rendezvous_endpoint
    assert rendezvous_endpoint() == ("10.0.0.1", 6170)
    monkeypatch.setenv("PADDLE_MASTER", "10.0.0.9:7000")
    assert rendezvous_endpoint() == ("10.0.0.9", 7000)
    monkeypatch.setenv("MASTER_ADDR", "h")
    monkeypatch.setenv("MASTER_PORT", "1234")
    assert rendezvous_endpoint() == ("h", 1234)
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "1")
    with pytest.warns(UserWarning, match="not a parallel execution environment"):
        assert dist.init_parallel_env() is None
    with pytest.raises(RuntimeError, match="global group is not initialized"):
        dist.all_reduce(__import__("numpy").zeros(1))


def test_spawn_runs_a_training_program():
    import train
    for nprocs in (2, 4):
        ctx = dist.spawn(train.train, args=(2,), nprocs=nprocs, start_method="fork", timeout=TIMEOUT)
        weights = [ctx.return_queues[i].get() for i in range(nprocs)]
        assert len(weights) == nprocs and all(w == weights[0] for w in weights) and any(weights[0])
        assert all(not p.is_alive() and p.exitcode == 0 for p in ctx.processes)


def test_spawn_errors():
    import spawn_targets_paddle
    with pytest.raises(Exception, match="Process 1 terminated with the following error"):
        dist.spawn(spawn_targets_paddle.fail_on_rank_1, nprocs=2, start_method="fork", timeout=TIMEOUT)
    with pytest.raises(ValueError, match="not supported"):
        dist.spawn(spawn_targets_paddle.fail_on_rank_1, nprocs=2, bogus=1)
    with pytest.raises(ValueError, match="accelerators"):
        dist.spawn(spawn_targets_paddle.fail_on_rank_1, nprocs=2, gpus="0,1")
    ctx = dist.spawn(spawn_targets_paddle.rank_and_size, nprocs=2, join=False, start_method="fork", timeout=TIMEOUT)
    while not ctx.join():
        pass
    assert sorted(ctx.return_queues[i].get() for i in range(2)) == [(0, 2, "0"), (1, 2, "1")]


def launch(*args, timeout=TIMEOUT, cwd=None):
    cmd = [sys.executable, "-m", "tdist.paddle.launch", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("nprocs", [2, 4])
def test_launch_runs_a_training_script(nprocs):
    result = launch("--nproc_per_node", str(nprocs), "--job_id", "job7", "--run_mode=collective",
                    os.path.join(PROGRAMS, "train.py"), "--lr", "0.1")
    assert result.returncode == 0, result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.strip())
    assert len(lines) == nprocs, result.stdout
    for rank, line in enumerate(lines):
        assert line == (f"[rank {rank}]: rank {rank}/{nprocs} trainer_id={rank} trainers_num={nprocs} "
                        f"env_rank={rank} endpoints={nprocs} current=True local_rank={rank} job=job7 "
                        f"same_weights=True args=['--lr', '0.1']"), line


@pytest.mark.parametrize("nproc_per_node", [1, 2])
def test_launch_without_rank_ranks_the_nodes_as_they_join(nproc_per_node):
    """Two nodes on this host, neither given --rank: paddle's master ranks
    them as they come (tdistrun's c10d rendezvous at --master)."""
    master = f"127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "tdist.paddle.launch", "--nnodes", "2", "--master", master, "--job_id", "two",
           "--nproc_per_node", str(nproc_per_node), os.path.join(PROGRAMS, "train.py")]
    nodes = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = []
    try:
        for node in nodes:
            out, err = node.communicate(timeout=TIMEOUT)
            assert node.returncode == 0, err
            outputs.append(out)
    finally:
        for node in nodes:
            node.kill()
    world = 2 * nproc_per_node
    lines = sorted(line.split("]: ", 1)[1] for out in outputs for line in out.splitlines() if line.strip())
    assert len(lines) == world, outputs
    for rank, line in enumerate(lines):
        assert line.startswith(f"rank {rank}/{world} trainer_id={rank} trainers_num={world} env_rank={rank} "), line
        assert "same_weights=True" in line and "job=two" in line, line


def test_launch_log_dir_and_devices(tmp_path):
    result = launch("--devices", "0,1", "--log_dir", str(tmp_path / "log"), os.path.join(PROGRAMS, "train.py"))
    assert result.returncode == 0, result.stderr
    logs = sorted(p.name for p in (tmp_path / "log").rglob("rank_*.stdout.log"))
    assert logs == ["rank_0.stdout.log", "rank_1.stdout.log"]


@pytest.mark.parametrize("args, message", [
    (["--run_mode=ps"], "collective jobs only"),
    (["--servers", "127.0.0.1:6000"], "parameter-server mode"),
    (["--nnodes", "2"], "needs --master"),
    (["--nnodes", "2:4", "--rank", "1", "--master", "127.0.0.1:6000"], "ranked in the order they join"),
    (["--nnodes", "3:2", "--master", "127.0.0.1:6000"], "expected 1 <= MIN <= MAX"),
    (["--master", "etcd://127.0.0.1:2379"], "elastic"),
])
def test_launch_refuses_what_tdist_does_not_provide(args, message):
    result = launch(*args, os.path.join(PROGRAMS, "train.py"))
    assert result.returncode == 2 and message in result.stderr, result.stderr
