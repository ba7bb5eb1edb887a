"""The store of a torch program under tdistrun (issue 49): torch's own
TCPStore listens on every interface and cannot authenticate, so tdistrun's
ranks rendezvous through tdist's store (TDIST_TORCH_STORE=tdist, read by
tdist.torch, which torch loads itself): it listens on MASTER_ADDR only and
refuses clients without the job's token, for gloo programs as for tdist
ones. Only loopback addresses are used."""

import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

# Rank 0 reports, once the group is up: the addresses listening on
# MASTER_PORT in this network namespace (/proc/net/tcp, tcp6), whether
# 127.0.0.2 (loopback too, but not MASTER_ADDR) can connect to it, and whether
# torch's TCPStore client, which holds no token, can read the store.
# No `import tdist`: torch loads tdist.torch through its backend entry point.
_PROGRAM = r"""
import os, socket, sys
from datetime import timedelta
import torch, torch.distributed as dist

def listeners(port):
    found = []
    for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(path) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                addr, hexport = fields[1].split(":")
                if fields[3] != "0A" or int(hexport, 16) != port:  # 0A: LISTEN
                    continue
                raw = bytes.fromhex(addr)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
                found.append(socket.inet_ntop(family, raw))
    return sorted(found)

dist.init_process_group(sys.argv[1], timeout=timedelta(seconds=60))
port = int(os.environ["MASTER_PORT"])
if dist.get_rank() == 0:
    print("listeners:", listeners(port), flush=True)
    try:
        socket.create_connection(("127.0.0.2", port), timeout=5).close()
        print("from 127.0.0.2: accepted", flush=True)
    except OSError as e:
        print("from 127.0.0.2: refused (%s)" % e, flush=True)
    try:
        intruder = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=5))
        print("intruder read %d keys" % intruder.num_keys(), flush=True)
    except Exception as e:  # noqa: BLE001
        print("intruder refused (%s)" % type(e).__name__, flush=True)
t = torch.ones(2) * (dist.get_rank() + 1)
dist.all_reduce(t)
print("rank %d sum %s" % (dist.get_rank(), t.tolist()), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def _env(**extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", TDIST_PYTHON=sys.executable)
    for name in ("TDIST_SOCKET_IFNAME", "TDIST_TORCH_STORE", "TDIST_STORE_LISTEN_HOST", "TDIST_AUTH_TOKEN",
                 "TDIST_AUTH_TOKEN_FILE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(extra)
    return env


def _run(tmp_path, backend, *options, env=None):
    program = tmp_path / "store_program.py"
    program.write_text(_PROGRAM)
    tdistrun = os.path.join(os.environ["TDIST_BUILD_DIR"], "bin", "tdistrun")
    proc = subprocess.run([tdistrun, "--standalone", "--nproc-per-node", "2", *options, str(program), backend],
                          env=env or _env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    for rank in range(2):
        assert f"[rank {rank}]: rank {rank} sum [3.0, 3.0]" in proc.stdout, proc.stdout
    return proc.stdout


def _check_bound_and_authenticated(out):
    assert "[rank 0]: listeners: ['127.0.0.1']" in out, out
    assert "[rank 0]: from 127.0.0.2: refused" in out, out
    assert "[rank 0]: intruder refused" in out, out


@pytest.mark.parametrize("backend", ["gloo", "tdist"])
def test_a_torch_job_under_tdistrun_has_a_store_on_master_addr_only_that_authenticates(tmp_path, backend):
    _check_bound_and_authenticated(_run(tmp_path, backend))


def test_torch_programs_work_under_the_agent_store(tmp_path):
    """--agent-store: tdistrun hosts tdist's store and every rank, torch's
    env:// included, is its client (torch's client could not speak to it)."""
    _check_bound_and_authenticated(_run(tmp_path, "gloo", "--agent-store"))


def test_tdist_torch_store_torch_keeps_torchs_own_store(tmp_path):
    """TDIST_TORCH_STORE=torch: torch's TCPStore, as before, which listens
    on every interface and lets anyone read it: what the tests above
    guard against."""
    out = _run(tmp_path, "gloo", env=_env(TDIST_TORCH_STORE="torch"))
    assert "[rank 0]: listeners: ['127.0.0.1']" not in out, out
    assert "[rank 0]: from 127.0.0.2: accepted" in out, out
    assert "[rank 0]: intruder read" in out, out


def _python(code, **extra):
    return subprocess.run([sys.executable, "-c", code], env=_env(**extra), capture_output=True, text=True,
                          timeout=120)


def test_a_bad_tdist_torch_store_value_is_an_error_naming_it():
    p = _python("import torch.distributed as dist\n"
                "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:29999', rank=0, world_size=1)",
                TDIST_TORCH_STORE="tdsit")
    assert p.returncode != 0
    assert "TDIST_TORCH_STORE must be 'tdist' or 'torch', got 'tdsit'" in p.stderr, p.stderr


def test_tdist_torch_tcpstore_as_the_store_of_init_process_group():
    """tdist.torch.TCPStore by hand: store=, the token, clone(), the port
    picked, and a wrong token refused."""
    code = r"""
from datetime import timedelta
import torch, torch.distributed as dist
import tdist.torch
master = tdist.torch.TCPStore("127.0.0.1", 0, world_size=1, is_master=True, timeout=timedelta(seconds=10),
                              auth_token="s3cret")
assert master.port > 0 and master.host == "127.0.0.1"
dist.init_process_group("gloo", store=master, rank=0, world_size=1)
t = torch.ones(2)
dist.all_reduce(t)
clone = master.clone()
clone.set("k", "v")
assert master.get("k") == b"v" and master.add("n", 2) == 2 and master.check(["k"])
assert master.compare_set("k", "v", "w") == b"w"
try:
    tdist.torch.TCPStore("127.0.0.1", master.port, timeout=timedelta(seconds=5), auth_token="wrong")
    print("wrong token admitted")
except dist.DistStoreError as e:
    print("wrong token refused:", e)
dist.destroy_process_group()
print("ok")
"""
    p = _python(code)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "wrong token refused:" in p.stdout and "ok" in p.stdout, p.stdout + p.stderr


def test_torchrun_with_its_agent_store_is_unchanged(tmp_path):
    """torchrun's agent store is torch's: without TDIST_TORCH_STORE its
    ranks stay torch's clients (test_torch_launchers.py runs tdist jobs
    under it too)."""
    program = tmp_path / "store_program.py"
    program.write_text(_PROGRAM)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(program), "gloo"], env=_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "rank 1 sum [3.0, 3.0]" in proc.stdout, proc.stdout
