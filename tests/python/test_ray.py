"""tdist on a Ray cluster of two nodes on this machine (ray.cluster_utils:
a head node and a worker node, two CPUs each): a group of Ray actors made
by tdist.ray.init_group, Ray Train's TorchTrainer on backend "tdist", and a
worker killed mid-job, named by the survivors and restarted by Ray."""

import os
import sys

import numpy
import pytest

# Ray's nodes, and so the addresses its workers are given, on 127.0.0.1
# instead of the machine's interface address (read when ray is imported;
# on Linux it changes nothing else).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray  # noqa: E402 - python/requirements-dev.txt
from ray.cluster_utils import Cluster  # noqa: E402

import tdist.ray  # noqa: E402

WORLD = 4


@pytest.fixture(scope="module")
def cluster():
    # The workers import tdist from the build tree, as this process does;
    # every job of the module shares one token.
    os.environ.setdefault("TDIST_AUTH_TOKEN", "ray-test-token")
    # Both nodes on the loopback address: no traffic leaves through the
    # machine's own interfaces.
    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 2, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    c.add_node(num_cpus=2, node_ip_address="127.0.0.1")
    ray.init(address=c.address, runtime_env={"env_vars": {"TDIST_AUTH_TOKEN": os.environ["TDIST_AUTH_TOKEN"]}})
    # The workers cannot import this file: its functions travel by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@ray.remote(num_cpus=1)
class Worker:
    def node(self):
        return ray.get_runtime_context().get_node_id()

    def sums(self, n):
        import tdist
        rank = tdist.get_rank()
        x = numpy.arange(n, dtype=numpy.float64) * (rank + 1)
        tdist.all_reduce(x)
        gathered = numpy.empty(3 * tdist.get_world_size(), numpy.int32)
        tdist.all_gather_into_tensor(gathered, numpy.full(3, rank, numpy.int32))
        return rank, x, gathered

    def torch_sum(self):
        import torch
        import torch.distributed as dist
        t = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(t)
        return dist.get_backend(), float(t)


def test_actors_on_two_nodes_form_a_group(cluster):
    workers = [Worker.remote() for _ in range(WORLD)]
    assert len(set(ray.get([w.node.remote() for w in workers]))) == 2  # both nodes take part
    tdist.ray.init_group(workers)
    try:
        for n in (0, 1, 1001):
            for rank, x, gathered in ray.get([w.sums.remote(n) for w in workers]):
                assert numpy.array_equal(x, numpy.arange(n, dtype=numpy.float64) * sum(range(1, WORLD + 1)))
                assert numpy.array_equal(gathered, numpy.repeat(numpy.arange(WORLD, dtype=numpy.int32), 3))
    finally:
        tdist.ray.destroy_group(workers)
    for w in workers:
        ray.kill(w)


def test_actors_with_torch_distributed(cluster):
    workers = [Worker.remote() for _ in range(WORLD)]
    tdist.ray.init_group(workers, api="torch")
    try:
        assert ray.get([w.torch_sum.remote() for w in workers]) == [("tdist", 10.0)] * WORLD
    finally:
        tdist.ray.destroy_group(workers, api="torch")
    with pytest.raises(ValueError, match="api must be"):
        tdist.ray.init_group(workers, api="mpi")
    for w in workers:
        ray.kill(w)


def test_an_actor_that_cannot_join_is_named_at_once(cluster):
    from datetime import timedelta
    workers = [Worker.remote() for _ in range(WORLD)]
    ray.get([w.node.remote() for w in workers])
    ray.kill(workers[3])
    # The error comes from the dead actor's call, long before the others'
    # rendezvous (here 20 s) would give up.
    with pytest.raises(RuntimeError, match=r"the actor of rank 3 failed to join the group .*ranks \[.*\] still"):
        tdist.ray.init_group(workers, timeout=timedelta(seconds=20))
    for w in workers[:3]:
        ray.kill(w)


def trainer(loop, config, tmp_path, max_failures=0):
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    return TorchTrainer(loop, train_loop_config=config,
                        scaling_config=ScalingConfig(num_workers=WORLD, use_gpu=False),
                        torch_config=TorchConfig(backend="tdist", timeout_s=60),
                        run_config=RunConfig(storage_path=str(tmp_path / "ray_results"), name="tdist",
                                             failure_config=FailureConfig(max_failures=max_failures)))


def train_loop(config):
    """All ranks: DDP on backend "tdist" for a few steps on rank-dependent
    data, then checks; rank `kill_rank` dies by SIGKILL in the middle of the
    first attempt (a marker file says whether it already did)."""
    import json
    import signal

    import ray.train
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "tdist"
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        if step == 2 and config.get("kill_rank") == rank and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.full((2, 4), float(rank + step))
        try:
            loss = model(x).pow(2).mean()
            loss.backward()
        except Exception as error:
            with open(os.path.join(config["errors"], f"rank{rank}.txt"), "w") as f:
                f.write(f"{type(error).__name__}: {error}")
            raise
        optimizer.step()
        optimizer.zero_grad()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    outcome = {"same_weights": all(torch.equal(g, weights) for g in gathered), "total": float(total), "world": world}
    with open(os.path.join(config["results"], f"rank{rank}.json"), "w") as f:
        json.dump(outcome, f)
    ray.train.report(outcome)


def dirs(tmp_path):
    """The directories the ranks write their errors and results to."""
    made = {name: tmp_path / name for name in ("errors", "results")}
    for path in made.values():
        path.mkdir()
    return made


def check_results(results):
    """Every rank's outcome (written by train_loop): equal weights, the right sum."""
    import json
    outcomes = {p.name: json.loads(p.read_text()) for p in results.iterdir()}
    assert sorted(outcomes) == [f"rank{r}.json" for r in range(WORLD)], outcomes
    for outcome in outcomes.values():
        assert outcome == {"same_weights": True, "total": float(sum(range(1, WORLD + 1))), "world": WORLD}


def test_torch_trainer_on_backend_tdist(cluster, tmp_path):
    paths = dirs(tmp_path)
    result = trainer(train_loop, {name: str(path) for name, path in paths.items()}, tmp_path).fit()
    assert result.error is None
    check_results(paths["results"])
    assert not list(paths["errors"].iterdir())


def test_a_killed_worker_is_named_and_ray_restarts_the_job(cluster, tmp_path):
    paths = dirs(tmp_path)
    config = {"kill_rank": 2, "marker": str(tmp_path / "killed"), **{name: str(p) for name, p in paths.items()}}
    result = trainer(train_loop, config, tmp_path, max_failures=1).fit()
    assert os.path.exists(config["marker"]), "rank 2 was never killed"
    # The second attempt ran to the end.
    assert result.error is None
    check_results(paths["results"])
    # The first attempt's survivors that saw the loss before Ray stopped them
    # name the dead rank.
    reports = {p.name: p.read_text() for p in paths["errors"].iterdir()}
    assert reports, "no surviving rank reported an error"
    assert all("rank 2" in text for text in reports.values()), reports
