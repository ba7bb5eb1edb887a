"""paddle's standalone CPU context: gloo_init_parallel_env, gloo_barrier and
gloo_release. It is independent of init_parallel_env: its own TCPStore,
hosted by rank 0 at `server_endpoint`, on which the barrier counts arrivals
(no process group is made, so it can coexist with the global group)."""

from datetime import timedelta

import tdist
from tdist._C import DistInvalidArgument

# paddle waits up to an hour for the ranks to meet.
_INIT_TIMEOUT = timedelta(seconds=3600)


class _GlooContext:
    def __init__(self, rank, size, store):
        self.rank = rank
        self.size = size
        self.store = store
        self.generation = 0

    def barrier(self):
        """Every rank adds one to this barrier's counter; the last to arrive
        sets its done key, which everyone waits for."""
        self.generation += 1
        key = f"tdist.paddle.gloo/barrier/{self.generation}"
        if self.store.add(key, 1) == self.size:
            self.store.set(key + "/done", b"1")
        self.store.wait([key + "/done"])


_context = None


def gloo_init_parallel_env(rank_id, rank_num, server_endpoint):
    """Sets up the gloo context of `rank_num` ranks meeting at
    `server_endpoint` ("ip:port", where rank 0 listens)."""
    global _context
    if rank_num < 2:
        raise AssertionError("rank_num should greater than or equal to 2 for parallel environment initialzation.")
    if not 0 <= rank_id < rank_num:
        raise DistInvalidArgument(f"gloo_init_parallel_env: rank_id {rank_id} is outside [0, {rank_num})")
    host, sep, port = str(server_endpoint).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise DistInvalidArgument(f"gloo_init_parallel_env: server_endpoint {server_endpoint!r} is not ip:port")
    store = tdist.TCPStore(host.strip("[]"), int(port), rank_num, rank_id == 0, timeout=_INIT_TIMEOUT)
    _context = _GlooContext(rank_id, rank_num, store)
    _context.barrier()  # everyone connected before anyone goes on


def gloo_barrier():
    """Blocks until every rank of the gloo context has called it."""
    if _context is None:
        raise AssertionError("gloo context is not initialzed.")
    _context.barrier()


def gloo_release():
    """Leaves the gloo context. Rank 0, which hosts the store, waits until
    every rank has left, so nobody loses the store mid-request."""
    global _context
    if _context is None:
        return
    ctx, _context = _context, None
    if ctx.store.add("tdist.paddle.gloo/released", 1) == ctx.size:
        ctx.store.set("tdist.paddle.gloo/released/done", b"1")
    if ctx.rank == 0:
        ctx.store.wait(["tdist.paddle.gloo/released/done"])
