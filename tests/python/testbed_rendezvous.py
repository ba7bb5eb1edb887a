"""Times init_process_group on every rank of a many-host job and prints, on
rank 0, "rendezvous <seconds> <world>": from the first rank's call to the
last rank's return (one machine, one clock: the testbed plays the hosts).
Then a barrier loop and one small all_reduce, checked."""

import sys
import time

import tdist


def main():
    before = time.time()
    tdist.init_process_group("tdist")
    after = time.time()
    world = tdist.get_world_size()
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 50):
        tdist.barrier()
    times = [None] * world
    tdist.all_gather_object(times, (before, after))
    if tdist.get_rank() == 0:
        spread = max(a for _, a in times) - min(b for b, _ in times)
        print(f"rendezvous {spread:.3f} {world}", flush=True)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
