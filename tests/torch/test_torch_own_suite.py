"""torch 2.13's own distributed tests (distributed_test.py, from the wheel)
pass on tdist wherever they pass on gloo.

torch_own_suite.py runs them with tdist in gloo's place; the tests that pass
on gloo itself (same file, TORCH_OWN_SUITE_BACKEND=gloo) are listed in
torch_own_suite_gloo_passes.txt, one list per world size. Every one of them
must pass on tdist, but for those in CANNOT_PASS, which assert gloo's own
name (docs/torch.md lists them with the same reasons). A test that skips on
gloo (CUDA, NCCL or MPI only, world sizes) skips on tdist alike.

TORCH_OWN_SUITE_REFRESH=1 first runs the suite on gloo and rewrites the list.
"""

import os
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
SELECTIONS = {3: None, 4: NEED_4, 8: NEED_8}
WORLD_SIZES = sorted(SELECTIONS)

pytest.importorskip("expecttest")  # torch's test utilities import it (python/requirements-dev.txt)


def _run(world_size, backend, tmp_path):
    report = tmp_path / ("%s-%d.xml" % (backend, world_size))
    env = dict(os.environ, WORLD_SIZE=str(world_size), TORCH_OWN_SUITE_BACKEND=backend, OMP_NUM_THREADS="1")
    if backend == "gloo":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # gloo alone, not even tdist's import
    selected = SELECTIONS[world_size]
    targets = [SUITE] if selected is None else [SUITE + "::TestDistBackendWithFork::" + n for n in selected]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets,
                           "--junitxml", str(report), "-o", "junit_family=xunit1"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=1500)
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
            outcomes = _run(world, "gloo", tmp_path_factory.mktemp("gloo"))
            passes[world] = {n for n, (o, _) in outcomes.items() if o == "passed"}
        _write_gloo_passes(passes)
    return _gloo_passes()


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_every_test_gloo_passes_passes_on_tdist(world_size, gloo_passes, tmp_path):
    outcomes = _run(world_size, "tdist", tmp_path)
    expected = gloo_passes[world_size]
    assert expected, "no gloo results for world size %d" % world_size
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
