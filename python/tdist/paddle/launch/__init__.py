"""``python3 -m tdist.paddle.launch [paddle's launch flags] SCRIPT [ARGS]``:
paddle.distributed.launch's command line, run by tdist's launcher tdistrun.

The collective flags map onto tdistrun's options (docs/paddle.md has the
table); parameter-server, elastic and auto-parallel flags are refused with
a message. Each rank runs ``tdist.paddle.launch._rank``, which sets paddle's
variables (PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS,
PADDLE_CURRENT_ENDPOINT, PADDLE_MASTER, PADDLE_LOCAL_RANK, ...) from the
ones tdistrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...) and then
runs SCRIPT as ``__main__``.
"""

import argparse
import os
import sys

from tdist.run import launcher_env, launcher_path

# Flags of paddle's launcher that belong to modes tdist does not provide.
_UNSUPPORTED = {
    "servers": "parameter-server mode", "trainers": "parameter-server mode",
    "trainer_num": "parameter-server mode", "server_num": "parameter-server mode",
    "gloo_port": "parameter-server mode", "elastic_level": "elastic training",
    "elastic_timeout": "elastic training", "auto_parallel_config": "auto-parallel",
    "auto_tuner_json": "auto-parallel tuning", "auto_cluster_config": "auto-parallel",
}


class LaunchError(Exception):
    """A command line tdist.paddle.launch cannot run."""


def parser():
    p = argparse.ArgumentParser(prog="python3 -m tdist.paddle.launch",
                                description="paddle.distributed.launch on tdist (collective mode, CPUs)")
    p.add_argument("--master", default=None, help="ip:port of the rendezvous (node 0)")
    p.add_argument("--rank", type=int, default=-1, help="this node's rank (with --nnodes > 1)")
    p.add_argument("--nnodes", default="1", help="number of nodes")
    p.add_argument("--nproc_per_node", type=int, default=None, help="processes on this node (default 1, or the "
                                                                      "number of --devices)")
    p.add_argument("--log_dir", default=None, help="write each rank's output under this directory")
    p.add_argument("--run_mode", default=None, help="collective (the only mode tdist provides)")
    p.add_argument("--job_id", default="default", help="the job's name (PADDLE_JOB_ID)")
    p.add_argument("--devices", "--gpus", "--npus", "--xpus", dest="devices", default=None,
                   help="device list; on CPUs only its length counts (processes per node)")
    p.add_argument("--max_restart", type=int, default=None, help="restart all ranks up to N times on failure")
    p.add_argument("--host", default=None, help="accepted; tdistrun finds its own address")
    p.add_argument("--ips", default=None, help="one address only (use --master and --nnodes for several nodes)")
    p.add_argument("--start_port", type=int, default=None, help="accepted with --ips")
    p.add_argument("--legacy", default=None, help="accepted and ignored")
    for name in ("log_level", "log_overwrite", "sort_ip", "enable_gpu_log"):
        p.add_argument(f"--{name}", default=None, help="accepted and ignored")
    p.add_argument("--with_gloo", default=None, help="accepted and ignored (tdist always communicates on CPUs)")
    for name in _UNSUPPORTED:
        p.add_argument(f"--{name}", default=None, help=argparse.SUPPRESS)
    p.add_argument("training_script", help="the Python script every rank runs")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p


def _node_range(text):
    """--nnodes N or MIN:MAX, as (MIN, MAX)."""
    parts = str(text).split(":")
    try:
        if len(parts) > 2:
            raise ValueError(text)
        low, high = int(parts[0]), int(parts[-1])
    except ValueError:
        raise LaunchError(f"--nnodes={text!r}: expected a number of nodes or MIN:MAX") from None
    if low < 1 or high < low:
        raise LaunchError(f"--nnodes={text}: expected 1 <= MIN <= MAX")
    return low, high


def tdistrun_args(args):
    """tdistrun's arguments for parsed paddle launch `args` (LaunchError if
    they ask for something tdist does not provide)."""
    if args.run_mode not in (None, "collective"):
        raise LaunchError(f"--run_mode={args.run_mode}: tdist.paddle.launch runs collective jobs only "
                          "(parameter-server and RPC modes are not provided)")
    for name, what in _UNSUPPORTED.items():
        if getattr(args, name) is not None:
            raise LaunchError(f"--{name}: {what} is not provided by tdist.paddle.launch")
    nnodes_min, nnodes_max = _node_range(args.nnodes)
    if args.ips and len([ip for ip in args.ips.split(",") if ip.strip()]) > 1:
        raise LaunchError("--ips with several addresses is paddle's legacy launch; use --master ip:port "
                          "--nnodes N --rank K on each node")
    if args.master and args.master.startswith("etcd://"):
        raise LaunchError("--master etcd://...: elastic training is not provided; give ip:port")
    nproc = args.nproc_per_node
    if nproc is None:
        nproc = len([d for d in args.devices.split(",") if d.strip()]) if args.devices else 1
    if nproc < 1:
        raise LaunchError(f"--nproc_per_node={nproc} must be at least 1")
    elastic = nnodes_min != nnodes_max
    nnodes = str(nnodes_min) if not elastic else f"{nnodes_min}:{nnodes_max}"
    out = ["--use-env", "--nproc-per-node", str(nproc), "--nnodes", nnodes]
    if args.master:
        host, sep, port = args.master.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise LaunchError(f"--master={args.master!r}: expected ip:port")
    elif nnodes_max > 1:
        raise LaunchError(f"--nnodes={args.nnodes} needs --master ip:port (a free port of node 0's address, "
                          "the same on every node)")
    if nnodes_max == 1:
        out += ["--standalone"] if not args.master else ["--master-addr", host.strip("[]"), "--master-port", port]
    elif args.rank >= 0 and not elastic:
        # paddle's fixed node ranks: tdistrun's static rendezvous.
        out += ["--master-addr", host.strip("[]"), "--master-port", port, "--node-rank", str(args.rank)]
    elif args.rank >= 0:
        raise LaunchError(f"--rank={args.rank} with --nnodes={args.nnodes}: nodes of an elastic job are "
                          "ranked in the order they join; drop --rank")
    else:
        # No --rank: as paddle's master, rank the nodes in the order they
        # join (tdistrun's c10d rendezvous at --master, keyed by --job_id).
        out += ["--rdzv-backend", "c10d", "--rdzv-endpoint", args.master, "--rdzv-id", args.job_id]
    if args.log_dir:
        out += ["--log-dir", args.log_dir, "--tee"]
    if args.max_restart is not None:
        out += ["--max-restarts", str(args.max_restart)]
    out += ["-m", "tdist.paddle.launch._rank", args.training_script] + list(args.training_script_args)
    return out


def launch(argv=None):
    """Runs the job: replaces this process with tdistrun. Returns an exit
    code (2) only for a command line it refuses."""
    args = parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        tdistrun = tdistrun_args(args)
        binary = launcher_path()
    except (LaunchError, FileNotFoundError) as error:
        print(f"tdist.paddle.launch: {error}", file=sys.stderr)
        return 2
    env = launcher_env()
    env["PADDLE_JOB_ID"] = args.job_id
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(binary, [binary] + tdistrun, env)
    return 1  # not reached


main = launch
