"""What each rank of ``python3 -m tdist.paddle.launch`` runs: sets paddle's
launcher variables from tdistrun's and runs the training script as
``__main__`` (``python3 -m tdist.paddle.launch._rank SCRIPT ARGS``).

PADDLE_TRAINER_ENDPOINTS lists one ``host:port`` name per rank, as paddle's
launcher does; in tdist nothing listens on them (ranks meet at
MASTER_ADDR:MASTER_PORT, which PADDLE_MASTER names too), and every entry
carries MASTER_ADDR as its host.
"""

import os
import runpy
import sys

from tdist._spawn import url_host


def paddle_env(env):
    """paddle's per-rank variables for tdistrun's `env`."""
    rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
    local_rank, local_size = int(env.get("LOCAL_RANK", rank)), int(env.get("LOCAL_WORLD_SIZE", size))
    host, port = env.get("MASTER_ADDR", "127.0.0.1"), int(env.get("MASTER_PORT", "29500"))
    host_text = url_host(host)
    endpoints = [f"{host_text}:{(port + 1 + r - 1024) % (65536 - 1024) + 1024}" for r in range(size)]
    return {
        "PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": str(size),
        "PADDLE_GLOBAL_RANK": str(rank), "PADDLE_GLOBAL_SIZE": str(size),
        "PADDLE_LOCAL_RANK": str(local_rank), "PADDLE_LOCAL_SIZE": str(local_size),
        "PADDLE_RANK_IN_NODE": str(local_rank), "PADDLE_NNODES": env.get("GROUP_WORLD_SIZE", "1"),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints), "PADDLE_CURRENT_ENDPOINT": endpoints[rank],
        "PADDLE_MASTER": f"{host_text}:{port}", "PADDLE_DISTRI_BACKEND": "gloo",
    }


def main():
    if len(sys.argv) < 2:
        print("usage: python3 -m tdist.paddle.launch._rank SCRIPT [ARGS]", file=sys.stderr)
        return 2
    os.environ.update(paddle_env(os.environ))
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
