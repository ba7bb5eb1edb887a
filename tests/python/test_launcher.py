"""python3 -m tdist.run (the launcher inside the package), the spec's test
programs run through it at 2 and 4 ranks with their output compared to what
torch.distributed prints, and the install step."""

import os
import re
import subprocess
import sys
import tempfile
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "spec_programs")
PROGRAMS = ["broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter", "reduce_scatter",
            "all_to_all", "barrier"]
TIMEOUT = 100


def launch(nprocs, *args, env=None, cwd=None):
    """Runs python3 -m tdist.run --nproc-per-node N ARGS; returns the CompletedProcess."""
    cmd = [sys.executable, "-m", "tdist.run", "--standalone", "--nproc-per-node", str(nprocs), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=cwd)


def lines_by_rank(stdout):
    """{rank: [line, ...]} from the launcher's "[rank N]: line" output."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"\[rank (\d+)\]: (.*)$", line)
        assert m, f"unexpected launcher output line: {line!r}"
        out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


def expected_output(program, rank, n):
    """What each spec program prints on `rank` of `n` under torch.distributed,
    formatted by torch itself from values computed here."""
    torch = pytest.importorskip("torch")
    total = n * (n + 1) // 2
    listed = [torch.tensor([i]) for i in range(n)]
    return {
        "broadcast": [f"Rank {rank}: {torch.tensor([1])}"],
        "all_reduce": [f"Rank {rank}: {torch.tensor([total])}"],
        "reduce": [f"Reduced result: {torch.tensor([total])}"] if rank == 0 else [],
        "all_gather": [f"Rank {rank}: {listed}"],
        "gather": [f"Gathered result: {listed}"] if rank == 0 else [],
        "scatter": [f"Rank {rank}: {torch.tensor([float(rank)])}"],
        "reduce_scatter": [f"Rank {rank}: {torch.tensor([float(total)])}"],
        "all_to_all": [f"Rank {rank}: {torch.tensor(list(range(n)), dtype=torch.int32)}"],
        "barrier": [f"Rank {rank} reached barrier.", f"Rank {rank} passed barrier."],
    }[program]


def split_programs(lines):
    """{program: [lines]} from one rank's output of spec_driver.py."""
    out, current = {}, None
    for line in lines:
        if line.startswith("### "):
            current = line[4:].removesuffix(".py")
            out[current] = []
        else:
            out[current].append(line)
    return out


@pytest.mark.parametrize("nprocs", [2, 4])
def test_spec_programs_print_what_torch_distributed_prints(nprocs):
    pytest.importorskip("torch")
    # One launcher job runs the nine programs, then the send/recv program,
    # which cannot run as written: it passes rank=0, world_size=2 on every
    # process. torch.distributed fails on it too (two rank 0s: "address
    # already in use", and a recv that waits forever); tdist must fail fast
    # with a message that says why, not hang.
    paths = [os.path.join(SPEC, p + ".py") for p in PROGRAMS + ["send_recv"]]
    result = launch(nprocs, os.path.join(HERE, "spec_driver.py"), *paths)
    by_rank = lines_by_rank(result.stdout)
    assert sorted(by_rank) == list(range(nprocs)), result.stderr[-3000:]
    for rank in range(nprocs):
        printed = split_programs(by_rank[rank])
        assert list(printed) == PROGRAMS + ["send_recv"], (printed.keys(), result.stderr[-3000:])
        for program in PROGRAMS:
            assert printed[program] == expected_output(program, rank, nprocs), (program, rank)
        assert printed["send_recv"] == []
    assert result.returncode != 0
    assert ("rank=0 was passed, but the launcher started this process as rank 1" in result.stderr
            or "tdist.DistStoreError: TCPStore server: cannot listen" in result.stderr), result.stderr[-3000:]


def test_a_spec_program_runs_directly_under_the_launcher():
    pytest.importorskip("torch")
    # Without the driver: the launcher starts the program file itself.
    result = launch(2, os.path.join(SPEC, "all_to_all.py"))
    assert result.returncode == 0, result.stderr
    by_rank = lines_by_rank(result.stdout)
    assert {r: by_rank[r] for r in range(2)} == {r: expected_output("all_to_all", r, 2) for r in range(2)}


def test_tdist_run_gives_ranks_the_launch_environment():
    program = textwrap.dedent("""
        import os, numpy, tdist as dist
        dist.init_process_group()
        x = numpy.array([dist.get_rank() + 1.0])
        dist.all_reduce(x)
        print(os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"], x[0], dist.is_torchelastic_launched())
        dist.destroy_process_group()
    """)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prog.py")
        with open(path, "w") as f:
            f.write(program)
        result = launch(3, path)
    assert result.returncode == 0, result.stderr
    by_rank = lines_by_rank(result.stdout)
    assert by_rank == {r: [f"{r} {r} 3 6.0 True"] for r in range(3)}


ARGV_PROGRAM = textwrap.dedent("""
    import argparse, os, sys
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
    parser.add_argument("--lr", type=float)
    args = parser.parse_args()
    print(os.environ["LOCAL_RANK"], args.local_rank, args.lr, ",".join(sys.argv[1:]))
""")


def run_argv_program(module, nprocs, *options):
    """python3 -m MODULE --standalone --nproc-per-node N OPTIONS prog.py --lr 0.5: {rank: [line]}."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prog.py")
        with open(path, "w") as f:
            f.write(ARGV_PROGRAM)
        cmd = [sys.executable, "-m", module, "--standalone", "--nproc-per-node", str(nprocs), *options, path,
               "--lr", "0.5"]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    return lines_by_rank(result.stdout)


@pytest.mark.parametrize("nprocs", [2, 4])
def test_tdist_run_passes_the_program_only_its_own_arguments(nprocs):
    # As torchrun: python3 train.py gets no --local-rank (it reads LOCAL_RANK).
    assert run_argv_program("tdist.run", nprocs) == {r: [f"{r} None 0.5 --lr,0.5"] for r in range(nprocs)}
    assert run_argv_program("tdist.run", 2, "--use-env") == {r: [f"{r} None 0.5 --lr,0.5"] for r in range(2)}


@pytest.mark.parametrize("nprocs", [2, 4])
def test_tdist_launch_passes_local_rank_as_torch_distributed_launch(nprocs):
    assert run_argv_program("tdist.launch", nprocs) == {
        r: [f"{r} {r} 0.5 --local-rank={r},--lr,0.5"] for r in range(nprocs)}
    for flag in ("--use-env", "--use_env", "--use-env=true"):
        assert run_argv_program("tdist.launch", 2, flag) == {r: [f"{r} None 0.5 --lr,0.5"] for r in range(2)}, flag


def test_tdist_launch_reads_only_the_options_before_the_program():
    from tdist import launch as legacy
    assert not legacy.wants_env(["--nproc-per-node", "2", "prog.py", "--use-env"])
    assert legacy.wants_env(["--nproc-per-node", "2", "--use_env", "prog.py"])
    assert not legacy.wants_env(["--use-env=false", "prog.py"])
    assert not legacy.wants_env(["--use-env", "--no-use-env", "prog.py"])
    assert not legacy.wants_env(["--master-port", "--use-env", "prog.py"])  # the value of --master-port


def test_tdist_launch_help_says_what_differs_from_tdistrun():
    for flag in ("-h", "--help"):
        result = subprocess.run([sys.executable, "-m", "tdist.launch", flag], capture_output=True, text=True,
                                timeout=TIMEOUT)
        assert result.returncode == 0, result.stderr
        first, _, rest = result.stdout.partition("\n\n")
        assert first.startswith("python3 -m tdist.launch [OPTIONS] PROGRAM [ARGS...]"), result.stdout
        assert "gets --local-rank=N as its" in first and "unless --use-env is given" in first, first
        assert "here --no-use-env is the default" in first, first
        assert "--nproc-per-node" in rest, result.stdout  # tdistrun's own help follows


def test_tdist_run_help_and_usage_errors():
    result = subprocess.run([sys.executable, "-m", "tdist.run", "--help"], capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0 and "--nproc-per-node" in result.stdout + result.stderr
    result = subprocess.run([sys.executable, "-m", "tdist.run", "--no-such-option", "x.py"], capture_output=True,
                            text=True, timeout=TIMEOUT)
    assert result.returncode == 2


@pytest.mark.skipif(not os.environ.get("TDIST_BUILD_DIR") or not os.environ.get("TDIST_CMAKE"),
                    reason="needs TDIST_BUILD_DIR and TDIST_CMAKE (set by ctest)")
def test_install_component_python_into_a_prefix():
    with tempfile.TemporaryDirectory() as prefix:
        subprocess.run([os.environ["TDIST_CMAKE"], "--install", os.environ["TDIST_BUILD_DIR"], "--component",
                        "python", "--prefix", prefix], check=True, capture_output=True, timeout=TIMEOUT)
        # The build directory's layout: lib/python3.X/dist-packages, or "."
        # (the wheel's) in a build directory pip configured (scripts/test.sh).
        with open(os.path.join(os.environ["TDIST_BUILD_DIR"], "CMakeCache.txt")) as f:
            configured = [line.split("=", 1)[1].strip() for line in f
                          if line.startswith("TDIST_PYTHON_INSTALL_DIR:")]
        assert configured in ([f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/dist-packages"], ["."])
        site = os.path.normpath(os.path.join(prefix, configured[0]))
        for program in ("tdistrun", "tdist-trace", "tdist-bench"):
            assert os.access(os.path.join(site, "tdist", "bin", program), os.X_OK), program
        assert [f for f in os.listdir(os.path.join(site, "tdist", "torch")) if f.startswith("_plugin")]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TDIST_RUN_BINARY")}
        env["PYTHONPATH"] = site
        code = "import tdist, tdist.run; print(tdist.__file__); print(tdist.run.launcher_path())"
        where = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=prefix,
                               timeout=TIMEOUT)
        assert where.returncode == 0, where.stderr
        assert all(line.startswith(site) for line in where.stdout.split()), where.stdout
        # The installed launcher runs a program that imports the installed package.
        program = os.path.join(prefix, "prog.py")
        with open(program, "w") as f:
            f.write("import numpy, tdist as dist\ndist.init_process_group()\nx = numpy.ones(1)\n"
                    "dist.all_reduce(x)\nprint(x[0], dist.__file__.startswith(%r))\n" % site)
        result = launch(2, program, env=env, cwd=prefix)
        assert result.returncode == 0, result.stderr
        assert lines_by_rank(result.stdout) == {0: ["2.0 True"], 1: ["2.0 True"]}
