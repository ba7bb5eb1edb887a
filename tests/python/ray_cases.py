"""The checks of tdist on a Ray cluster, shared by test_ray.py (two Ray nodes
on this machine) and ray_testbed_driver.py (a Ray node in each of two
testbed hosts, test_ray_testbed.py): a group of 4 Ray actors made by
tdist.ray.init_group, checked against NumPy; a dead actor named by
init_group at once, and an unknown api refused; Ray Train's TorchTrainer
on backend "tdist"; a worker killed mid-job, named by the survivors and
restarted by Ray.

The caller has connected to the cluster (ray.init) and registered this
module for pickling by value: the workers cannot import it."""

import collections
import contextlib
import json
import os
import re
import signal
from datetime import timedelta

import numpy
import ray

import tdist.ray

WORLD = 4
SIZES = (0, 1, 1001)


def _where():
    """Where the calling process runs: its Ray node, that node's address,
    its network namespace (inode) and the host identity tdist gives it."""
    return {"node": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
            "netns": os.stat("/proc/self/ns/net").st_ino, "host_id": os.environ.get("TDIST_HOST_ID")}


@ray.remote(num_cpus=1)
class Worker:
    def where(self):
        return _where()

    def sums(self, n):
        import tdist
        rank = tdist.get_rank()
        x = numpy.arange(n, dtype=numpy.float64) * (rank + 1)
        tdist.all_reduce(x)
        gathered = numpy.empty(3 * tdist.get_world_size(), numpy.int32)
        tdist.all_gather_into_tensor(gathered, numpy.full(3, rank, numpy.int32))
        return rank, x, gathered

    def all_reduce_is_right(self, n):
        """An all_reduce of n float64, checked here: only a bool goes back
        to the driver, so Ray moves no array (the testbed counts the bytes
        on the link around this call)."""
        import tdist
        x = numpy.arange(n, dtype=numpy.float64) * (tdist.get_rank() + 1)
        tdist.all_reduce(x)
        return bool(numpy.array_equal(x, numpy.arange(n, dtype=numpy.float64) * sum(range(1, WORLD + 1))))

    def torch_sum(self):
        import torch
        import torch.distributed as dist
        t = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(t)
        return dist.get_backend(), float(t)


@contextlib.contextmanager
def actors_on_two_nodes():
    """WORLD actors, checked to sit two on each node: yields [(actor, where)];
    kills the actors after."""
    workers = [Worker.remote() for _ in range(WORLD)]
    try:
        places = ray.get([w.where.remote() for w in workers])
        assert sorted(collections.Counter(p["node"] for p in places).values()) == [2, 2], places
        yield list(zip(workers, places))
    finally:
        for w in workers:
            ray.kill(w)


@contextlib.contextmanager
def joined(workers, api="tdist"):
    """`workers` (rank = position) as one group for the block; they leave it after."""
    tdist.ray.init_group(workers, api=api)
    try:
        yield
    finally:
        tdist.ray.destroy_group(workers, api=api)


@contextlib.contextmanager
def group(api="tdist"):
    """A tdist group of WORLD actors, two on each node (rank = position):
    yields [(actor, where)]; leaves the group and kills the actors after."""
    with actors_on_two_nodes() as placed, joined([w for w, _ in placed], api):
        yield placed


def check_a_dead_actor_is_named(workers):
    """Kills the last of `workers` (in no group) and asks init_group to make
    a group of all of them: the error names the dead actor's rank at once,
    long before the others' rendezvous (here 20 s) would give up. The
    caller kills the others."""
    ray.kill(workers[-1])
    try:
        tdist.ray.init_group(workers, timeout=timedelta(seconds=20))
    except RuntimeError as error:
        # Every other rank still waiting: the error came before their
        # rendezvous gave up, which needs the dead rank.
        last = len(workers) - 1
        pattern = r"the actor of rank %d failed to join the group .*ranks %s still" % (
            last, re.escape(str(list(range(last)))))
        assert re.search(pattern, str(error)), error
    else:
        raise AssertionError("init_group returned for a group with a dead actor")


def check_sums(workers):
    """all_reduce and all_gather_into_tensor at every size of SIZES, against NumPy."""
    for n in SIZES:
        for rank, x, gathered in ray.get([w.sums.remote(n) for w in workers]):
            assert numpy.array_equal(x, numpy.arange(n, dtype=numpy.float64) * sum(range(1, WORLD + 1))), (n, rank)
            assert numpy.array_equal(gathered, numpy.repeat(numpy.arange(WORLD, dtype=numpy.int32), 3)), (n, rank)


def check_an_unknown_api_is_refused(workers):
    try:
        tdist.ray.init_group(workers, api="mpi")
    except ValueError as error:
        assert "api must be" in str(error), error
    else:
        raise AssertionError("init_group took api='mpi'")


def check_torch_sum(workers):
    assert ray.get([w.torch_sum.remote() for w in workers]) == [("tdist", 10.0)] * WORLD


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
    import ray.train
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "tdist"
    # Read before DDP's first broadcast: no rank of the first attempt can
    # see the marker yet (it is made two steps after that broadcast).
    attempt = 2 if os.path.exists(config["marker"]) else 1
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        if step == 2 and config["kill_rank"] == rank and attempt == 1:
            open(config["marker"], "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.full((2, 4), float(rank + step))
        try:
            loss = model(x).pow(2).mean()
            loss.backward()
        except Exception as error:
            with open(os.path.join(config["errors"], f"attempt{attempt}-rank{rank}.txt"), "w") as f:
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
        json.dump({**outcome, "where": _where()}, f)
    ray.train.report(outcome)


def train(tmp_path, kill_rank=2):
    """TorchTrainer runs train_loop on WORLD workers, on backend "tdist";
    rank `kill_rank` dies in the first attempt and Ray's restart
    (max_failures=1) must finish the job. Checks the outcome of every rank:
    equal weights, the right sum, two ranks on each node; that the first
    attempt's survivors that saw the loss (before Ray stopped them) name
    the dead rank; and that the second attempt, a whole run of its own,
    reported no error. Returns where each rank ran: {rank: where}."""
    paths = {name: tmp_path / name for name in ("errors", "results")}
    for path in paths.values():
        path.mkdir()
    config = {name: str(path) for name, path in paths.items()}
    config.update(kill_rank=kill_rank, marker=str(tmp_path / "killed"))
    result = trainer(train_loop, config, tmp_path, max_failures=1).fit()
    assert result.error is None  # the second attempt ran to the end
    outcomes = {int(p.stem[len("rank"):]): json.loads(p.read_text()) for p in paths["results"].iterdir()}
    assert sorted(outcomes) == list(range(WORLD)), outcomes
    places = {rank: outcome.pop("where") for rank, outcome in outcomes.items()}
    for outcome in outcomes.values():
        assert outcome == {"same_weights": True, "total": float(sum(range(1, WORLD + 1))), "world": WORLD}
    assert sorted(collections.Counter(p["node"] for p in places.values()).values()) == [2, 2], places
    assert os.path.exists(config["marker"]), f"rank {kill_rank} was never killed"
    reports = {p.name: p.read_text() for p in paths["errors"].iterdir()}
    first = {name: text for name, text in reports.items() if name.startswith("attempt1-")}
    assert first, "no surviving rank reported an error"
    assert all(f"rank {kill_rank}" in text for text in first.values()), first
    assert reports.keys() == first.keys(), f"the second attempt reported errors: {reports}"
    return places
