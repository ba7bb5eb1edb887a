"""tdist on a Ray cluster of two nodes on this machine (ray.cluster_utils:
a head node and a worker node, two CPUs each): a group of Ray actors made
by tdist.ray.init_group, an actor that cannot join named at once, and Ray
Train's TorchTrainer on backend "tdist" with a worker killed mid-job, named
by the survivors, and the job restarted by Ray and run to the end.

The same cases run in test_ray_testbed.py across two testbed hosts, which
needs root and network namespaces. This file runs only where that one
cannot: each Ray cluster's start and each group of actors costs CPU-seconds
(the TorchTrainer case about a minute), and one run of each case per suite
is enough."""

import os

import pytest

# Ray's nodes, and so the addresses its workers are given, on 127.0.0.1
# instead of the machine's interface address (read when ray is imported;
# on Linux it changes nothing else).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray  # noqa: E402 - python/requirements-dev.txt
from ray.cluster_utils import Cluster  # noqa: E402

import ray_cases  # noqa: E402 - the checks, shared with the testbed's Ray test (test_ray_testbed.py)
from harness import full_suite_only  # noqa: E402
from testbed_tool import ray_testbed_unavailable  # noqa: E402
from ray_cases import (actors_on_two_nodes, check_a_dead_actor_is_named, check_an_unknown_api_is_refused,  # noqa: E402
                       check_sums, check_torch_sum, group, train)

# A skip mark, not pytest.skip(allow_module_level=True): a file all of whose
# tests skip that way counts as "no tests collected", a failure for ctest.
pytestmark = pytest.mark.skipif(ray_testbed_unavailable() is None,
                                reason="test_ray_testbed.py runs these cases across two testbed hosts")


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
    # The workers cannot import ray_cases: its functions travel by value.
    ray.cloudpickle.register_pickle_by_value(ray_cases)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def test_actors_on_two_nodes_form_a_group(cluster):
    # Four actors, two on each node (group() checks), give the NumPy results.
    with group() as placed:
        check_sums([w for w, _ in placed])


def test_actors_with_torch_distributed(cluster):
    with group(api="torch") as placed:
        check_torch_sum([w for w, _ in placed])
        check_an_unknown_api_is_refused([w for w, _ in placed])


def test_an_actor_that_cannot_join_is_named_at_once(cluster):
    with actors_on_two_nodes() as placed:
        check_a_dead_actor_is_named([w for w, _ in placed])


@full_suite_only("a minute of CPU")
def test_torch_trainer_on_backend_tdist_names_a_killed_worker_and_ray_restarts_it(cluster, tmp_path):
    # DDP on 4 workers, two on each node. Rank 2 dies by SIGKILL in the first
    # attempt: the survivors that saw the loss name it, and Ray's restart
    # (max_failures=1) runs the job to the end with equal weights, the right
    # sum and no error: a whole run on backend "tdist" (one TorchTrainer job
    # instead of two: each start of its workers costs CPU-seconds).
    train(tmp_path, kill_rank=2)
