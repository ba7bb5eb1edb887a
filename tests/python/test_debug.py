"""Debugging: debug levels (TDIST_DEBUG / TORCH_DISTRIBUTED_DEBUG), the
DETAIL checks before each collective with their per-rank report, INFO's
group creation log, TORCH_SHOW_CPP_STACKTRACES=1, breakpoint(rank), and
groups' sequence numbers."""

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import tdist as dist
from harness import PG_TIMEOUT, run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
DEBUG_VARIABLES = ("TDIST_DEBUG", "TORCH_DISTRIBUTED_DEBUG", "TORCH_SHOW_CPP_STACKTRACES", "TDIST_LOG_LEVEL",
                   "TORCH_CPP_LOG_LEVEL", "PYTHONBREAKPOINT")


def run_python(code, timeout=60, **env):
    """Runs `code` in a fresh interpreter with the debug variables in `env` only."""
    environ = {k: v for k, v in os.environ.items() if k not in DEBUG_VARIABLES}
    environ.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=environ)


# ---- debug levels ----

def test_the_debug_level_is_off_by_default_and_can_be_set():
    out = run_python("import tdist as dist\n"
                     "print(dist.get_debug_level())\n"
                     "dist.set_debug_level(dist.DebugLevel.INFO); print(dist.get_debug_level())\n"
                     "dist.set_debug_level_from_env(); print(dist.get_debug_level())\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["DebugLevel.OFF", "DebugLevel.INFO", "DebugLevel.OFF"]


@pytest.mark.parametrize("env, level", [
    ({"TORCH_DISTRIBUTED_DEBUG": "detail"}, "DETAIL"),
    ({"TDIST_DEBUG": "INFO"}, "INFO"),
    ({"TDIST_DEBUG": "OFF", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, "OFF"),  # tdist's own variable wins
    ({"TDIST_DEBUG": "", "TORCH_DISTRIBUTED_DEBUG": "INFO"}, "INFO"),  # empty is unset
])
def test_the_environment_sets_the_level_on_import(env, level):
    out = run_python("import tdist as dist; print(dist.get_debug_level().name)", **env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == level


def test_a_bad_value_fails_the_import_naming_the_variable():
    # As torch: "The value of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO, or DETAIL."
    out = run_python("import tdist", TDIST_DEBUG="verbose")
    assert out.returncode != 0
    assert "DistInvalidArgument: The value of TDIST_DEBUG must be OFF, INFO, or DETAIL (any case), got " \
           "'verbose'" in out.stderr, out.stderr


def test_debug_level_names_are_torchs():
    torch_dist = pytest.importorskip("torch.distributed")
    assert list(dist.DebugLevel.__members__) == list(torch_dist.DebugLevel.__members__)
    assert [int(v) for v in dist.DebugLevel.__members__.values()] == \
           [int(v) for v in torch_dist.DebugLevel.__members__.values()]


def test_info_logs_group_creation():
    code = ("import tdist as dist\n"
            "dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)\n"
            "dist.new_group([0]); dist.destroy_process_group()\n")
    out = run_python(code, TDIST_DEBUG="INFO")
    assert out.returncode == 0, out.stderr
    assert "init_process_group: rank 0 of 1, backend tdist, timeout 1800000 ms, init_method (explicit store), " \
           "debug level INFO" in out.stderr, out.stderr
    assert "new_group group/0: global ranks [0], this rank is group rank 0, backend tdist" in out.stderr
    # torch's variable alone changes the log level only with TORCH_CPP_LOG_LEVEL=INFO (the spec's table).
    quiet = run_python(code, TORCH_DISTRIBUTED_DEBUG="INFO")
    assert quiet.returncode == 0 and "init_process_group:" not in quiet.stderr, quiet.stderr
    loud = run_python(code, TORCH_DISTRIBUTED_DEBUG="INFO", TORCH_CPP_LOG_LEVEL="INFO")
    assert "init_process_group: rank 0 of 1" in loud.stderr, loud.stderr


# ---- DETAIL: every collective checked across ranks ----

def _mismatch(fn):
    """The message of the DistBackendError fn raises (None if it raises nothing)."""
    try:
        fn()
    except dist.DistBackendError as error:
        return str(error)
    return None


def _detail_job(rank, world):
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    dist.init_process_group("tdist", timeout=PG_TIMEOUT)
    world_pg, out = dist.group.WORLD, {}
    n = world * (world + 1) // 2

    # Matching calls pass the checks and compute what they should.
    seq = world_pg._get_sequence_number_for_group()
    x = np.full((2, 3), rank + 1, np.float32)
    dist.all_reduce(x)
    assert (x == n).all(), x
    out["seq_delta"] = world_pg._get_sequence_number_for_group() - seq  # the checks run on a twin group
    gathered = [np.zeros((2, 2), np.int64) for _ in range(world)]
    dist.all_gather(gathered, np.full((2, 2), rank, np.int64))
    assert all((g == r).all() for r, g in enumerate(gathered))
    # all_to_all with other shapes per peer: rank r sends rank s r + s + 1 elements.
    inputs = [np.full(rank + s + 1, 10 * rank + s, np.int32) for s in range(world)]
    outputs = [np.zeros(s + rank + 1, np.int32) for s in range(world)]
    dist.all_to_all(outputs, inputs)
    assert all((o == 10 * s + rank).all() for s, o in enumerate(outputs)), outputs
    # all_to_all_single with split sizes: rank r sends rank s s + 1 rows of 2.
    send = np.concatenate([np.full((s + 1, 2), rank, np.float64) for s in range(world)])
    recv = np.zeros(((rank + 1) * world, 2))
    dist.all_to_all_single(recv, send, [rank + 1] * world, [s + 1 for s in range(world)])
    assert (recv == np.repeat(np.arange(world), rank + 1)[:, None]).all(), recv
    # gather_list and scatter_list exist on their root only.
    mine = np.array([rank], np.int64)
    dist.gather(mine, [np.zeros(1, np.int64) for _ in range(world)] if rank == 0 else None, dst=0)
    dist.scatter(mine, [np.array([r * 7], np.int64) for r in range(world)] if rank == 0 else None, src=0)
    assert mine[0] == 7 * rank
    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    assert objects == [{"rank": r} for r in range(world)]
    dist.barrier()

    # Same element count, other shape: the core cannot see it, DETAIL can.
    out["shape"] = _mismatch(lambda: dist.all_reduce(np.ones((2, 3) if rank != 1 else (3, 2), np.float32)))
    # One entry of a list with another shape (and the Python stack of the call).
    dist._C._set_show_cpp_stacktraces(True)
    out["list"] = _mismatch(lambda: dist.all_gather(
        [np.zeros((2, 3) if (rank, i) != (1, world - 1) else (3, 2)) for i in range(world)], np.zeros((2, 3))))
    dist._C._set_show_cpp_stacktraces(False)
    # all_to_all: what rank 0 sends rank 1 must have the shape rank 1 receives it into.
    inputs = [np.zeros(4) for _ in range(world)]
    outputs = [np.zeros(4) if (rank, s) != (1, 0) else np.zeros((2, 2)) for s in range(world)]
    out["pairs"] = _mismatch(lambda: dist.all_to_all(outputs, inputs))
    # Different collectives.
    t = np.ones(3)
    out["ops"] = _mismatch(lambda: dist.all_reduce(t) if rank == 0 else dist.broadcast(t, 0))
    # A subgroup of ranks 1.. names group ranks beside the global ones.
    sub = dist.new_group(list(range(1, world)))
    if rank >= 1:
        out["sub"] = _mismatch(lambda: dist.all_reduce(np.ones((4, 1) if rank == 1 else (1, 4)), group=sub))
    # Nothing ran on the checked groups: they still work.
    y = np.array([float(rank + 1)])
    dist.all_reduce(y)
    assert y[0] == n
    dist.barrier()
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_detail_reports_what_every_rank_passed(world):
    results = run_ranks(_detail_job, world, init=False)
    for rank, out in enumerate(results):
        assert out["seq_delta"] == 1, out
        for case in ("shape", "list", "pairs", "ops"):
            assert out[case] is not None, f"rank {rank}: no mismatch raised for {case}"
            assert out[case].startswith("Detected mismatch between collectives on ranks (TDIST_DEBUG=DETAIL): ")
            assert f"(this is rank {rank})." in out[case], out[case]
        shape = out["shape"]
        assert "all_reduce (call #" in shape and "tensor is float32[2, 3] on rank 0 but float32[3, 2] on rank 1" \
               in shape, shape
        assert "\n  rank 0: all_reduce (call #" in shape and "tensor=float32[2, 3], op=ReduceOp.SUM\n" in shape
        assert "tensor=float32[3, 2], op=ReduceOp.SUM   <- tensor differs" in shape, shape
        if world == 3:
            assert "\n  rank 2: all_reduce (call #" in shape, shape
        last = world - 1
        assert f"tensor_list[{last}] is float64[2, 3] on rank 0 but float64[3, 2] on rank 1" in out["list"]
        assert f"<- tensor_list[{last}] differs" in out["list"] and "Stack of the call" in out["list"]
        assert "test_debug.py" in out["list"], out["list"]
        assert "rank 0 sends input_tensor_list[1] of float64[4] to rank 1, which receives it into " \
               "output_tensor_list[0] of float64[2, 2]" in out["pairs"], out["pairs"]
        assert "rank 0 is running collective all_reduce (call #" in out["ops"], out["ops"]
        assert "but rank 1 is running collective broadcast (call #" in out["ops"], out["ops"]
        if world == 3 and rank >= 1:
            assert "tensor is float64[4, 1] on rank 1 (group rank 0) but float64[1, 4] on rank 2 (group rank 1)" \
                in out["sub"], out["sub"]
            assert "\n  rank 2 (group rank 1): all_reduce (call #" in out["sub"], out["sub"]


def _off_job(rank, world):
    assert dist.get_debug_level() == dist.DebugLevel.OFF
    x = np.ones((2, 3) if rank == 0 else (3, 2))
    dist.all_reduce(x)  # the core matches counts only: the same 6 elements pass
    return float(x.sum())


def test_off_checks_no_shapes():
    assert run_ranks(_off_job, 2) == [12.0, 12.0]


# ---- TORCH_SHOW_CPP_STACKTRACES ----

STACK_CODE = """
import numpy, tdist as dist
dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
try:
    dist.broadcast(numpy.ones(1), 5)
except dist.DistInvalidArgument as error:
    print(str(error))
"""


def test_show_cpp_stacktraces_adds_the_cpp_stack_to_errors():
    out = run_python(STACK_CODE, TORCH_SHOW_CPP_STACKTRACES="1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("broadcast: src 5 is not a member of the group (global ranks 0)\n"
                           "Exception raised from "), text
    assert " (most recent call first):\nframe #0: " in text, text
    # The frames are named (static functions included) with their source lines.
    first = text.split("frame #0: ")[1].split("\n")[0]
    assert "group_rank_or_throw" in first and "distributed.cc:" in first, text
    assert ": tdist::broadcast(tdist::Tensor const&, int, " in text, text
    plain = run_python(STACK_CODE)
    assert plain.returncode == 0 and "frame #" not in plain.stdout, plain.stdout


# ---- breakpoint(rank) ----

def _run_breakpoint_job(commands, **env):
    """(stdout, stderr, what each rank found after the breakpoint)."""
    out_dir = tempfile.mkdtemp(prefix="tdist_breakpoint_")
    environ = {k: v for k, v in os.environ.items() if k not in DEBUG_VARIABLES}
    environ.update(env)
    stdin = {"input": commands} if commands is not None else {"stdin": subprocess.DEVNULL}
    # A session of its own: no controlling terminal to fall back on.
    result = subprocess.run([sys.executable, os.path.join(HERE, "breakpoint_job.py"), out_dir], **stdin,
                            capture_output=True, text=True, timeout=90, env=environ, start_new_session=True)
    assert result.returncode == 0, result.stdout + result.stderr
    after = [open(os.path.join(out_dir, f"after{r}")).read() for r in range(2)]
    return result.stdout, result.stderr, after


def test_breakpoint_stops_one_rank_in_pdb_while_the_others_wait():
    # pdb starts in breakpoint() itself, before its barrier: "up" reaches the
    # caller, whose locals the next commands use.
    stdout, _, after = _run_breakpoint_job("up\np marker\n!open(flag, 'w').close()\nc\n")
    assert "tdist.breakpoint(rank=0)" in stdout, stdout
    assert "'marker-of-rank-0'" in stdout, stdout
    # Rank 1 left its breakpoint only after rank 0's debugger had run the commands.
    assert after == ["flag there", "flag there"], (after, stdout)


def test_pythonbreakpoint_0_skips_the_debugger():
    stdout, _, after = _run_breakpoint_job("", PYTHONBREAKPOINT="0")
    assert "(Pdb)" not in stdout and after == ["flag missing", "flag missing"], (after, stdout)


def test_without_a_terminal_the_rank_warns_instead_of_stopping():
    # Standard input /dev/null (as under tdistrun) and no controlling
    # terminal: pdb would read end of input and quit the program.
    stdout, stderr, after = _run_breakpoint_job(None)
    assert "(Pdb)" not in stdout and after == ["flag missing", "flag missing"], (after, stdout)
    assert "tdist.breakpoint(rank=0): no terminal to read debugger commands from" in stderr, stderr


# ---- sequence numbers ----

def _sequence_job(rank, world):
    w = dist.group.WORLD
    start = w._get_sequence_number_for_group()
    dist.all_reduce(np.ones(2))
    dist.broadcast(np.ones(2), 0)
    dist.barrier()
    dist.all_reduce(np.ones(2), async_op=True).wait()
    after_four = w._get_sequence_number_for_group()
    if rank == 0:
        dist.send(np.ones(1), 1)
    elif rank == 1:
        dist.recv(np.ones(1), 0)
    after_p2p = w._get_sequence_number_for_group()  # point to point is not counted
    sub = dist.new_group([0, 1])
    sub_start = sub._get_sequence_number_for_group() if rank <= 1 else None
    if rank <= 1:
        dist.all_reduce(np.ones(1), group=sub)
    sub_delta = sub._get_sequence_number_for_group() - sub_start if rank <= 1 else None
    world_after_sub = w._get_sequence_number_for_group()
    return start, after_four - start, after_p2p - start, sub_delta, world_after_sub - start


def test_sequence_numbers_count_each_groups_collectives():
    results = run_ranks(_sequence_job, 3)
    starts = {r[0] for r in results}
    assert len(starts) == 1, results  # alike on every rank
    for rank, (_, four, p2p, sub, world_after) in enumerate(results):
        assert (four, p2p, world_after) == (4, 4, 4), results
        assert sub == (1 if rank <= 1 else None), results
