"""torch.futures' helpers for tdist's futures: those of RPC calls
(tdist.rpc.rpc_async) and of collectives (Work.get_future()) are one type,
tdist.Future, and combine freely::

    from tdist.futures import collect_all, wait_all

    values = wait_all([rpc.rpc_async("worker1", f), dist.all_reduce(t, async_op=True).get_future()])
"""

import threading

from tdist._work import Future

__all__ = ["Future", "collect_all", "wait_all"]


def collect_all(futures):
    """A Future completed with the list of `futures` once every one of them
    is done (whether it succeeded or failed: wait on each for its value)."""
    futures = list(futures)
    combined = Future()
    if not futures:
        combined.set_result([])
        return combined
    lock = threading.Lock()
    left = [len(futures)]

    def one_done(_):
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            combined.set_result(futures)

    for f in futures:
        f.add_done_callback(one_done)
    return combined


def wait_all(futures):
    """The values of `futures`, in order, once all are done; raises the first
    error among them (in list order)."""
    futures = list(futures)
    for f in futures:
        try:
            f.wait()
        except BaseException:
            pass
    return [f.wait() for f in futures]
