"""The key-value stores with torch's API: HashStore, FileStore, PrefixStore,
TCPStore; timeouts as datetime.timedelta; errors as tdist exceptions.
Everything runs in forked children (TCPStore starts threads)."""

import os
import socket
import tempfile
from datetime import timedelta

import pytest

import tdist as dist
from harness import run_ranks


def _exercise(store):
    store.set("key", "value")
    store.set("raw", b"\x00\xff")
    assert store.get("key") == b"value" and store.get("raw") == b"\x00\xff"
    assert store.add("counter", 5) == 5 and store.add("counter", -2) == 3
    assert store.get("counter") == b"3"
    assert store.compare_set("cas", "", "first") == b"first"
    assert store.compare_set("cas", "wrong", "second") == b"first"
    assert store.compare_set("cas", "first", "second") == b"second"
    assert store.check(["key", "counter"]) and not store.check(["key", "missing"])
    store.wait(["key"], timedelta(seconds=5))
    store.set_timeout(timedelta(milliseconds=100))
    assert store.timeout == timedelta(milliseconds=100)
    with pytest.raises(dist.DistStoreTimeoutError) as info:
        store.get("never")
    assert isinstance(info.value, dist.DistTimeoutError) and isinstance(info.value, dist.DistStoreError)
    assert "never" in str(info.value)
    with pytest.raises(dist.DistStoreTimeoutError):
        store.wait(["never"], timedelta(milliseconds=50))


def _hash_and_prefix(rank, world):
    store = dist.HashStore()
    _exercise(store)
    assert store.num_keys() == 4 and store.delete_key("key") and not store.delete_key("key")
    prefixed = dist.PrefixStore("job", store)
    _exercise(prefixed)
    assert store.get("job/key") == b"value" and prefixed.underlying_store is store
    assert isinstance(prefixed, dist.Store)


def test_hash_store_and_prefix_store():
    run_ranks(_hash_and_prefix, 1, init=False)


def _file_store(rank, world, path):
    store = dist.FileStore(path, 1)
    _exercise(store)
    assert store.path == path
    with pytest.raises(dist.DistStoreError):
        store.delete_key("key")  # the spec: FileStore cannot delete keys


def test_file_store():
    with tempfile.TemporaryDirectory() as tmp:
        run_ranks(_file_store, 1, os.path.join(tmp, "store"), init=False)


def _tcp_store(rank, world, port):
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timedelta(seconds=30))
    assert store.port == port and store.host == "127.0.0.1" and store.is_master == (rank == 0)
    # Every rank adds once; each sees the others' keys through the server.
    store.add("joined", 1)
    store.set(f"rank{rank}", str(rank))
    store.wait([f"rank{r}" for r in range(world)])
    assert [store.get(f"rank{r}") for r in range(world)] == [str(r).encode() for r in range(world)]
    if rank == 1:
        _exercise(dist.PrefixStore("private", store))
    # The master, which runs the server, leaves last: after every client's
    # last request (a set) has been answered.
    if rank == 0:
        store.wait([f"left{r}" for r in range(1, world)])
    else:
        store.set(f"left{rank}", "1")


def test_tcp_store_across_processes():
    run_ranks(_tcp_store, 3, dist._spawn.free_port(), init=False)


def _tcp_store_errors(rank, world):
    master = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=10))
    assert master.port > 0  # port 0 picked a free port
    with pytest.raises(dist.DistStoreError, match=str(master.port)):
        dist.TCPStore("127.0.0.1", master.port, None, True)  # port in use
    with pytest.raises(dist.DistStoreTimeoutError):
        dist.TCPStore("127.0.0.1", dist._spawn.free_port(), None, False, timeout=timedelta(milliseconds=300))
    with pytest.raises(ValueError):
        dist.TCPStore("127.0.0.1", 70000)


def test_tcp_store_errors():
    run_ranks(_tcp_store_errors, 1, init=False)


def _explicit_store_init(rank, world, port):
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timedelta(seconds=30))
    dist.init_process_group("tdist", store=dist.PrefixStore("pg", store), rank=rank, world_size=world)
    out = [None] * world
    dist.all_gather_object(out, rank * 10)
    assert out == [r * 10 for r in range(world)]
    dist.barrier()
    dist.destroy_process_group()


def test_init_process_group_with_an_explicit_store():
    run_ranks(_explicit_store_init, 2, dist._spawn.free_port(), init=False)


def _tcp_init_method(rank, world, port):
    dist.init_process_group("tdist", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    assert dist.get_rank() == rank
    dist.barrier()
    dist.destroy_process_group()


def test_init_process_group_tcp_url():
    run_ranks(_tcp_init_method, 2, dist._spawn.free_port(), init=False)


def _file_init_method(rank, world, path):
    dist.init_process_group("tdist", init_method=f"file://{path}", rank=rank, world_size=world)
    x = [None] * world
    dist.all_gather_object(x, rank)
    assert x == list(range(world))
    dist.barrier()
    dist.destroy_process_group()


def test_init_process_group_file_url():
    with tempfile.TemporaryDirectory() as tmp:
        run_ranks(_file_init_method, 2, os.path.join(tmp, "rdzv"), init=False)


def _free_port_serves_a_store(rank, world, host):
    low = dist._spawn._ephemeral_low()
    for _ in range(5):
        port = dist._spawn.free_port(host)
        # Below the kernel's range when there is room, so no outgoing
        # connection can take it before the store listens.
        assert dist._spawn._PICK_LOW <= port < low, (port, low)
        store = dist.TCPStore(host, port, 1, True, timeout=timedelta(seconds=10))
        store.set("k", "v")
        assert store.port == port and store.get("k") == b"v"
        del store


def _loopback_works(host):
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_free_port_is_below_the_ephemeral_range_and_serves_a_store(host):
    if host == "::1" and not _loopback_works(host):
        pytest.skip("no IPv6 loopback here")
    if dist._spawn._ephemeral_low() - dist._spawn._PICK_LOW < 1000:
        pytest.skip("the ephemeral range leaves no room below it")
    run_ranks(_free_port_serves_a_store, 1, host, init=False)
