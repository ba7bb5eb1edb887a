"""What tools/measure/ddp_bench.py and tools/measure/fsdp_bench.py share: the rounds in
which several copies of a model take turns training, timed per step, and
the parsing of their list options."""

import argparse
import json
import statistics
import sys
import time


def mlp(nn):
    """The "mlp" model of both: 6 Linear(2048, 2048) with ReLU between, 25M
    parameters."""
    layers = []
    for i in range(6):
        layers.append(nn.Linear(2048, 2048))
        if i < 5:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def parse_list(text, conv, allowed=None):
    """"a,b,c" as a list of conv(item); argparse's error for an empty list
    or an item not in `allowed`."""
    items = [conv(x) for x in text.split(",") if x]
    if not items:
        raise argparse.ArgumentTypeError("empty list")
    for item in items:
        if allowed is not None and item not in allowed:
            raise argparse.ArgumentTypeError("%r is not one of %s" % (item, ", ".join(map(str, allowed))))
    return items


def slowest(seconds, dist, torch, group):
    """The largest of every rank's `seconds` (all_reduce MAX over `group`)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t[0])


def time_rounds(runs, step, data, rounds, warmup, dist, torch, group):
    """Warms every run up (`warmup` untimed steps), then in each of `rounds`
    rounds lets every run take len(data) steps back to back, after a
    barrier of `group`; step(run, x, y) is one training step. The order of
    the runs rotates from round to round, so that drift and what one run
    leaves in the caches weigh on all alike.

    Returns (wall, main_cpu, other_cpu): per run, a list with each round's
    seconds per step (the slowest rank's) of wall time, of CPU time of this
    thread (forward, backward, optimizer) and of CPU time of all the
    process's other threads (the backend's and torch's)."""
    for run in runs:
        for s in range(warmup):
            step(run, *data[s % len(data)])
    wall = {run: [] for run in runs}
    main_cpu = {run: [] for run in runs}
    other_cpu = {run: [] for run in runs}
    runs = tuple(runs)
    for i in range(rounds):
        for run in runs[i % len(runs):] + runs[:i % len(runs)]:
            dist.barrier(group=group)
            start, process0, thread0 = time.perf_counter(), time.process_time(), time.thread_time()
            for x, y in data:
                step(run, x, y)
            elapsed = time.perf_counter() - start
            thread = time.thread_time() - thread0
            process = time.process_time() - process0
            wall[run].append(slowest(elapsed, dist, torch, group) / len(data))
            main_cpu[run].append(slowest(thread, dist, torch, group) / len(data))
            other_cpu[run].append(slowest(process - thread, dist, torch, group) / len(data))
    return wall, main_cpu, other_cpu


def check_and_record(tool, what, row, world, started, line_of, lines, jsonl):
    """A configuration's row: False (after saying why) if the tdist run's
    final weights differ from gloo's (bit for bit at 2 ranks, within 1e-5
    beyond, where gloo adds in another order); the table line is printed
    and kept in `lines`, the row appended to `jsonl` as a JSON line."""
    tol = 0.0 if world <= 2 else 1e-5
    ok = row["weights_max_diff"] <= tol  # NaN fails too
    if not ok:
        print("%s: %s: the tdist run's weights differ from gloo's by %g (allowed: %g)"
              % (tool, what, row["weights_max_diff"], tol), file=sys.stderr, flush=True)
    row["started"] = started
    lines.append(line_of(row))
    print(lines[-1], flush=True)
    if jsonl:
        with open(jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
    return ok


def write_markdown(path, header, lines):
    with open(path, "w") as f:
        f.write(header + "\n" + "|" + "---|" * (header.count("|") - 1) + "\n" + "\n".join(lines) + "\n")


def summarize(wall, main_cpu, other_cpu, floor, tdist_params, gloo_params):
    """The figures of a configuration (milliseconds, medians over the
    rounds): each run's step ("<run>_ms"), tdist's and gloo's overhead over
    the `floor` run paired round by round (the machine's drift between
    rounds cancels out), the CPU times, every round's step, and how far the
    tdist run's final parameters are from the gloo run's."""
    def ms(values):
        return statistics.median(values) * 1e3

    def overhead(run):
        return ms([t - n for t, n in zip(wall[run], wall[floor])])

    diff = max(float((a - b).abs().max()) for a, b in zip(tdist_params, gloo_params))
    out = {run + "_ms": ms(v) for run, v in wall.items()}
    out.update({
        "tdist_overhead_ms": overhead("tdist"), "gloo_overhead_ms": overhead("gloo"),
        "weights_equal": diff == 0.0, "weights_max_diff": diff,
        "main_cpu_ms": {run: ms(v) for run, v in main_cpu.items()},
        "other_cpu_ms": {run: ms(v) for run, v in other_cpu.items()},
        "rounds_ms": {run: [round(t * 1e3, 2) for t in v] for run, v in wall.items()},
    })
    return out


def add_common_arguments(ap):
    """The options both benchmarks take beside their models (and, for
    ddp_bench.py, buckets): --world, --threads, --steps, --rounds,
    --warmup, --timeout, --jsonl, --markdown."""
    ap.add_argument("--world", type=lambda s: parse_list(s, int), default=[2, 4])
    ap.add_argument("--threads", type=lambda s: parse_list(s, int), default=[1],
                    help="compute threads per rank (torch.set_num_threads)")
    ap.add_argument("--steps", type=int, default=5, help="steps each run takes back to back in a round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the figures are their medians")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--timeout", type=int, default=900, help="seconds allowed for each configuration")
    ap.add_argument("--jsonl", help="append every row to this file as a JSON line")
    ap.add_argument("--markdown", help="write the table to this file")


def check_common_arguments(ap, args):
    if args.steps < 1 or args.rounds < 1 or args.warmup < 1 or args.timeout < 1:
        ap.error("--steps, --rounds, --warmup and --timeout must be at least 1")
    if min(args.threads) < 1:
        ap.error("--threads: at least 1 compute thread")
    if min(args.world) < 1:
        ap.error("--world: ranks must be at least 1")


def start_table(header):
    """Prints the table's header; returns when the run started (UTC)."""
    print(header)
    print("|" + "---|" * (header.count("|") - 1), flush=True)
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
