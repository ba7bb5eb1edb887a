"""The Ray driver of test_ray_testbed.py, run in testbed host 0:

    ray_testbed_driver.py CASE DIR

connects to the Ray cluster at RAY_ADDRESS as this host's node
(TESTBED_ADDR), runs one case of ray_cases (which asserts) and prints its
result as the last line of its output, "RESULT <json>"; a failed check
exits non-zero with its traceback. DIR is a fresh directory for Ray Train's
files. The cases:

- actors: 4 actors, 2 on each node, in a group made by tdist.ray.init_group;
  all_reduce and all_gather against NumPy, then a checked all_reduce of
  LINK_BYTES with this host's link counters read around it; then, out of
  the group, one of them killed: init_group names its rank at once;
- torch: the same group on torch.distributed, backend "tdist", and
  init_group refusing an unknown api;
- trainer: TorchTrainer on backend "tdist", rank 2 killed in its first
  attempt and the job restarted by Ray.
"""

import json
import os
import pathlib
import sys

import ray

import ray_cases

# 8 MiB of float64: each host must receive the other host's partial sums
# of all of it, so at least this many bytes cross the link each way.
LINK_BYTES = 8 << 20


def link_counters():
    """Bytes received and sent on this host's link. `ip netns exec` mounted
    the namespace's own /sys, so eth0 is this host's end of its link."""
    def read(name):
        with open(f"/sys/class/net/eth0/statistics/{name}") as f:
            return int(f.read())
    return {"rx": read("rx_bytes"), "tx": read("tx_bytes")}


def actors(_directory):
    with ray_cases.actors_on_two_nodes() as placed:
        workers = [w for w, _ in placed]
        with ray_cases.joined(workers):
            ray_cases.check_sums(workers)
            before = link_counters()
            assert all(ray.get([w.all_reduce_is_right.remote(LINK_BYTES // 8) for w in workers]))
            after = link_counters()
        # The same actors, out of the group now, one of them killed.
        ray_cases.check_a_dead_actor_is_named(workers)
    return {"places": [where for _, where in placed], "bytes": LINK_BYTES,
            "link": {name: after[name] - before[name] for name in after}}


def torch(_directory):
    with ray_cases.group(api="torch") as placed:
        ray_cases.check_torch_sum([w for w, _ in placed])
        ray_cases.check_an_unknown_api_is_refused([w for w, _ in placed])
    return {"places": [where for _, where in placed]}


def trainer(directory):
    return {"places": ray_cases.train(directory, kill_rank=2)}


def main(case, directory):
    # The driver's node is the one at this host's address. Without it, Ray
    # takes any raylet among this machine's processes, preferring the head:
    # the hosts share one process table, so from host 1 that would be
    # host 0's node.
    ray.init(address=os.environ["RAY_ADDRESS"], _node_ip_address=os.environ["TESTBED_ADDR"],
             runtime_env={"env_vars": {"TDIST_AUTH_TOKEN": os.environ["TDIST_AUTH_TOKEN"]}})
    # The workers cannot import ray_cases: its functions travel by value.
    ray.cloudpickle.register_pickle_by_value(ray_cases)
    try:
        result = {"actors": actors, "torch": torch, "trainer": trainer}[case](
            pathlib.Path(directory))
    finally:
        ray.shutdown()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
