"""The program test_testbed.py runs on every rank of a job spread over
testbed hosts (network namespaces): every collective and point to point,
each checked against values computed here with NumPy, at element counts 0,
1, odd and large. Prints "ok <rank> <world> <host>" at the end."""

import os

import numpy as np

import tdist


def main():
    tdist.init_process_group("tdist")
    r, n = tdist.get_rank(), tdist.get_world_size()
    for count in (0, 1, 7, 100_003):
        def mine(rank, salt=0):
            return ((np.arange(count) * 3 + rank * 5 + salt) % 11).astype(np.float32)

        x = mine(r)
        tdist.all_reduce(x)
        assert np.array_equal(x, sum(mine(q) for q in range(n))), ("all_reduce", count)

        b = mine(r, 1) if r == n - 1 else np.zeros(count, np.float32)
        tdist.broadcast(b, src=n - 1)
        assert np.array_equal(b, mine(n - 1, 1)), ("broadcast", count)

        red = mine(r, 2)
        tdist.reduce(red, dst=1 % n, op=tdist.ReduceOp.MAX)
        if r == 1 % n:
            assert np.array_equal(red, np.max([mine(q, 2) for q in range(n)], axis=0)), ("reduce", count)

        out = np.empty(n * count, np.float32)
        tdist.all_gather_into_tensor(out, mine(r, 3))
        assert np.array_equal(out, np.concatenate([mine(q, 3) for q in range(n)])), ("all_gather", count)

        gathered = [np.empty(count, np.float32) for _ in range(n)] if r == 0 else None
        tdist.gather(mine(r, 4), gathered, dst=0)
        if r == 0:
            assert all(np.array_equal(g, mine(q, 4)) for q, g in enumerate(gathered)), ("gather", count)

        piece = np.empty(count, np.float32)
        tdist.scatter(piece, [mine(q, 5) for q in range(n)] if r == 0 else None, src=0)
        assert np.array_equal(piece, mine(r, 5)), ("scatter", count)

        rs = np.empty(count, np.float32)
        tdist.reduce_scatter_tensor(rs, np.concatenate([mine(r, 6 + q) for q in range(n)]))
        assert np.array_equal(rs, sum(mine(q, 6 + r) for q in range(n))), ("reduce_scatter", count)

        a2a = np.empty(n * count, np.float32)
        tdist.all_to_all_single(a2a, np.concatenate([mine(r, 20 + q) for q in range(n)]))
        assert np.array_equal(a2a, np.concatenate([mine(q, 20 + r) for q in range(n)])), ("all_to_all", count)

        # A ring of send/recv (each rank to the next, across the hosts).
        got = np.empty(count, np.float32)
        ops = [tdist.P2POp(tdist.isend, mine(r, 30), (r + 1) % n), tdist.P2POp(tdist.irecv, got, (r - 1) % n)]
        for work in tdist.batch_isend_irecv(ops):
            work.wait()
        assert np.array_equal(got, mine((r - 1) % n, 30)), ("send/recv", count)
        tdist.barrier()
    print("ok", r, n, os.environ.get("TESTBED_HOST"), flush=True)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
