"""Runs a benchmark script's ranks as processes on 127.0.0.1 (for
tools/measure/ddp_bench.py and tools/measure/async_overlap.py) and returns rank 0's row."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script, cfg, world, timeout, env=None):
    """Starts `world` processes of `script --rank-config JSON(cfg)` with RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set (plus `env`).
    Returns (row, "") with the JSON object rank 0 printed after "ROW ", or
    (None, why). A rank that fails ends the others at once; all are killed
    after `timeout` seconds."""
    port = free_port()
    procs, logs = [], []
    with tempfile.TemporaryDirectory(prefix="tdist-ranks.") as tmp:
        for rank in range(world):
            rank_env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **(env or {}))
            out = open(os.path.join(tmp, "rank%d.out" % rank), "w+")
            err = open(os.path.join(tmp, "rank%d.err" % rank), "w+")
            logs.append((out, err))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(script), "--rank-config", json.dumps(cfg)],
                                          env=rank_env, stdout=out, stderr=err))
        deadline = time.monotonic() + timeout
        why = ""
        while True:
            states = [p.poll() for p in procs]  # every process, each pass
            if all(state is not None for state in states):
                break
            failed = [r for r, state in enumerate(states) if state not in (None, 0)]
            if failed or time.monotonic() > deadline:
                why = ("rank %d exited with %d" % (failed[0], procs[failed[0]].returncode) if failed
                       else "timed out after %d s" % timeout)
                for p in procs:
                    p.kill()
                for p in procs:
                    p.wait()
                break
            time.sleep(0.1)  # a driver's poll, not synchronisation between ranks
        texts = []
        for out, err in logs:
            out.seek(0)
            err.seek(0)
            texts.append((out.read(), err.read()))
            out.close()
            err.close()
    if not why:
        bad = [r for r, p in enumerate(procs) if p.returncode != 0]
        if bad:
            why = "rank %d exited with %d" % (bad[0], procs[bad[0]].returncode)
    if why:
        culprit = next((r for r, p in enumerate(procs) if p.returncode not in (0, -9)), 0)
        return None, "%s; rank %d's stderr:\n%s" % (why, culprit, texts[culprit][1][-3000:])
    for line in texts[0][0].splitlines():
        if line.startswith("ROW "):
            return json.loads(line[4:]), ""
    return None, "rank 0 printed no row; its stderr:\n" + texts[0][1][-3000:]
