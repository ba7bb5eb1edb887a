"""torch 2.13's own distributed tests (distributed_test.py, from the wheel)
pass on tdist wherever they pass on gloo.

torch_own_suite.py runs them with tdist in gloo's place; the tests that pass
on gloo itself (same file, TORCH_OWN_SUITE_BACKEND=gloo) are listed in
torch_own_suite_gloo_passes.txt, one list per world size. Every one of them
must pass on tdist, but for those in CANNOT_PASS, which assert gloo's own
name (docs/torch.md lists them with the same reasons).

Only the listed tests run on tdist: the rest of the suite skips on gloo
(CUDA, NCCL or MPI only, other world sizes), and nothing here reads their
outcome on tdist, so running them (a fork of every rank and a group each)
would cost minutes and check nothing. The listed tests run in parts
(SHARDS), each a ctest entry of its own (tests/torch/CMakeLists.txt), so
that ctest can run them side by side with the other tests.

TORCH_OWN_SUITE_REFRESH=1 first runs the whole suite on gloo and rewrites
the list.
"""

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(HERE, "torch_own_suite.py")
GLOO_PASSES = os.path.join(HERE, "torch_own_suite_gloo_passes.txt")

# The tests that cannot pass with tdist in gloo's place, and why.
CANNOT_PASS = {
    "test_get_backend": "asserts that dist.get_backend() is 'gloo'; on tdist it is 'tdist'",
    "test_ddp_logging_data_cpu": (
        "asserts that DDP's logging data names the group's backend as dist.get_backend() does; DDP "
        "reads the name from torch's ProcessGroup, whose getBackendName() is 'custom' for every "
        "third-party backend"),
}

# Every test runs at 3 ranks; those that need more (gloo skips them at 3)
# run again at the size they ask for.
NEED_8 = ["test_all_gather_coalesced_group", "test_all_gather_group", "test_all_reduce_coalesced_group_max",
          "test_all_reduce_coalesced_group_min", "test_all_reduce_coalesced_group_product",
          "test_all_reduce_coalesced_group_sum", "test_all_reduce_group_max", "test_all_reduce_group_min",
          "test_all_reduce_group_product", "test_all_reduce_group_sum", "test_barrier_group",
          "test_barrier_timeout_group", "test_broadcast_group", "test_gather_group",
          "test_monitored_barrier_failure_order", "test_monitored_barrier_wait_all_ranks", "test_reduce_group_max",
          "test_reduce_group_min", "test_reduce_group_product", "test_reduce_group_sum", "test_scatter_group"]
NEED_4 = ["test_3_level_hierarchical_model_averager", "test_gather_object", "test_gather_object_subgroup",
          "test_new_subgroups_by_enumeration_input_rank_exceeds_world_size", "test_new_subgroups_overlap_not_allowed",
          "test_new_subgroups_with_group_param", "test_new_subgroups_world_size_not_divisible_by_group_size"]
# What TORCH_OWN_SUITE_REFRESH=1 runs on gloo at each world size (None: all).
SELECTIONS = {3: None, 4: NEED_4, 8: NEED_8}
WORLD_SIZES = sorted(SELECTIONS)

# The parts the listed tests run in: a world size, and every `parts`-th
# name of its sorted list from `part` on. Each is a ctest entry,
# torch_plugin.test_torch_own_suite.<id> (tests/torch/CMakeLists.txt, which
# test_ctest_runs_every_shard keeps in step with this).
SHARDS = {
    "3-ranks-1-of-2": (3, 0, 2),
    "3-ranks-2-of-2": (3, 1, 2),
    "4-ranks": (4, 0, 1),
    "8-ranks-1-of-2": (8, 0, 2),
    "8-ranks-2-of-2": (8, 1, 2),
}
CMAKELISTS = os.path.join(HERE, "CMakeLists.txt")
# torch's deadline for one test (its own default is 300 s): the longest
# passes in about 10 s; a test that hangs fails, named, well within the
# ctest entry's deadline.
TEST_DEADLINE_S = 150
# The deadline of one run of torch_own_suite.py on a shard's tests, below
# the ctest entry's (600 s) so that a run that overstays is reported here
# with its output; the whole suite (TORCH_OWN_SUITE_REFRESH=1) has longer.
RUN_DEADLINE_S = 540
WHOLE_SUITE_DEADLINE_S = 1500

pytest.importorskip("expecttest")  # torch's test utilities import it (python/requirements-dev.txt)


def _run(world_size, backend, tmp_path, selected):
    """Runs the tests named in `selected` (None: every test) at
    `world_size` ranks on `backend`; returns {name: (outcome, detail)}."""
    report = tmp_path / ("%s-%d.xml" % (backend, world_size))
    env = dict(os.environ, WORLD_SIZE=str(world_size), TORCH_OWN_SUITE_BACKEND=backend, OMP_NUM_THREADS="1",
               DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=str(TEST_DEADLINE_S))
    if backend == "gloo":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # gloo alone, not even tdist's import
    targets = [SUITE] if selected is None else [SUITE + "::TestDistBackendWithFork::" + n for n in selected]
    deadline = WHOLE_SUITE_DEADLINE_S if selected is None else RUN_DEADLINE_S
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets,
                               "--junitxml", str(report), "-o", "junit_family=xunit1"],
                              cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=deadline)
    except subprocess.TimeoutExpired as e:
        output = [x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr)]
        raise AssertionError("the suite outlived its %d s deadline:\n%s\n%s"
                             % (deadline, output[0][-3000:], output[1][-3000:])) from None
    if not report.exists():
        raise AssertionError("the suite did not run:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        kinds = {child.tag: child for child in case}
        if "failure" in kinds or "error" in kinds:
            detail = (kinds.get("failure") if "failure" in kinds else kinds["error"]).text or ""
            outcomes[case.get("name")] = ("failed", detail[-1500:])
        elif "skipped" in kinds:
            outcomes[case.get("name")] = ("skipped", kinds["skipped"].get("message", ""))
        else:
            outcomes[case.get("name")] = ("passed", "")
    return outcomes


def _gloo_passes():
    passes = {}
    with open(GLOO_PASSES) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                world, name = line.split()
                passes.setdefault(int(world), set()).add(name)
    return passes


def _write_gloo_passes(passes):
    with open(GLOO_PASSES, "w") as f:
        f.write("# The tests of torch 2.13.0's distributed_test.py (torch_own_suite.py) that pass on\n"
                "# gloo itself, by world size. test_torch_own_suite.py rewrites it under\n"
                "# TORCH_OWN_SUITE_REFRESH=1.\n")
        for world in sorted(passes):
            for name in sorted(passes[world]):
                f.write("%d %s\n" % (world, name))


@pytest.fixture(scope="module")
def gloo_passes(tmp_path_factory):
    if os.environ.get("TORCH_OWN_SUITE_REFRESH") == "1":
        passes = {}
        for world in WORLD_SIZES:
            outcomes = _run(world, "gloo", tmp_path_factory.mktemp("gloo"), SELECTIONS[world])
            passes[world] = {n for n, (o, _) in outcomes.items() if o == "passed"}
        _write_gloo_passes(passes)
    return _gloo_passes()


def _shard(names, shard):
    _, part, parts = SHARDS[shard]
    return set(sorted(names)[part::parts])


def test_the_shards_cover_every_listed_test_once(gloo_passes):
    for world in WORLD_SIZES:
        shards = [_shard(gloo_passes[world], s) for s in SHARDS if SHARDS[s][0] == world]
        assert shards, "no shard runs world size %d" % world
        assert sum(len(s) for s in shards) == len(gloo_passes[world]), world
        assert set().union(*shards) == gloo_passes[world], world


def test_ctest_runs_every_shard():
    with open(CMAKELISTS) as f:
        registered = re.findall(r"torch_own_suite_shards ([^)]*)\)", f.read())
    assert registered and set(registered[0].split()) == set(SHARDS), (registered, sorted(SHARDS))


@pytest.mark.parametrize("shard", SHARDS)
def test_every_test_gloo_passes_passes_on_tdist(shard, gloo_passes, tmp_path):
    world_size = SHARDS[shard][0]
    assert gloo_passes.get(world_size), "no gloo results for world size %d" % world_size
    expected = _shard(gloo_passes[world_size], shard)
    assert expected, "shard %s has no tests" % shard
    outcomes = _run(world_size, "tdist", tmp_path, sorted(expected))
    missing = sorted(expected - set(outcomes))
    assert not missing, "tests gloo passes that did not run: %s" % missing
    failed = {n: outcomes[n][1] for n in expected if outcomes[n][0] != "passed" and n not in CANNOT_PASS}
    assert not failed, "\n\n".join("%s: %s\n%s" % (n, outcomes[n][0], d) for n, d in sorted(failed.items()))
    # The list stays true: a test in it that now passes leaves it.
    now_passing = [n for n in CANNOT_PASS if n in expected and outcomes[n][0] == "passed"]
    assert not now_passing, "CANNOT_PASS lists tests that pass: %s" % now_passing
    # Nothing passes on tdist by skipping where gloo ran it.
    ran_on_gloo_skipped_here = [n for n in expected if outcomes[n][0] == "skipped"]
    assert not ran_on_gloo_skipped_here, ran_on_gloo_skipped_here
