"""Draws tools/compare's chart from its JSON lines.

usage: /usr/bin/python3 tools/compare_plot.py ROWS.jsonl OUT.png

One panel per op: bus bandwidth (GB/s, top) and latency (mean time per
operation in us, bottom) against message size in bytes, log axes; one colour
per library, one line style per world size. barrier moves no data, so its
panel shows latency bars. Rows with wrong results are drawn with red crosses;
a library that has no rows for an op (Gloo lacks reduce_scatter) is named in
the panel.
"""
import json
import math
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

LIB_ORDER = ["tdist", "gloo", "mpi"]
LIB_LABEL = {"tdist": "tdist", "gloo": "torch Gloo", "mpi": "Open MPI"}
LIB_COLOR = {"tdist": "tab:blue", "gloo": "tab:orange", "mpi": "tab:green"}
STYLES = ["-", "--", ":", "-."]
OP_ORDER = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather",
            "scatter", "sendrecv", "barrier"]


def human(nbytes):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift}{unit}"
    return str(int(nbytes))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = []
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    if not rows:
        sys.exit("compare_plot.py: no rows to plot")

    # series[(op, lib, world)] = sorted [(bytes, busbw, time_us, errors)]
    series = defaultdict(list)
    for r in rows:
        series[(r["op"], r["lib"], r["world_size"])].append(
            (r["bytes"], r["busbw_GBps"], r["time_us"], r.get("errors") or 0))
    for points in series.values():
        points.sort()
    ops = [op for op in OP_ORDER if any(k[0] == op for k in series)]
    libs = [lib for lib in LIB_ORDER if any(k[1] == lib for k in series)]
    worlds = sorted({k[2] for k in series})
    style = {w: STYLES[i % len(STYLES)] for i, w in enumerate(worlds)}

    cols = min(3, len(ops))
    panel_rows = math.ceil(len(ops) / cols)
    fig, axes = plt.subplots(2 * panel_rows, cols, figsize=(5.2 * cols, 6.4 * panel_rows), squeeze=False,
                             gridspec_kw={"hspace": 0.08})
    for i, op in enumerate(ops):
        top, bottom = axes[2 * (i // cols)][i % cols], axes[2 * (i // cols) + 1][i % cols]
        missing = [f"{LIB_LABEL[lib]}, {w} ranks" for lib in libs for w in worlds
                   if (op, lib, w) not in series and any(k[1] == lib and k[2] == w for k in series)]
        if op == "barrier":
            draw_barrier(top, bottom, series, libs, worlds)
        else:
            draw_op(top, bottom, op, series, libs, worlds, style)
        top.set_title(op + ("\nno data: " + "; ".join(missing) if missing else ""), fontsize=10)
    for j in range(len(ops), panel_rows * cols):
        axes[2 * (j // cols)][j % cols].axis("off")
        axes[2 * (j // cols) + 1][j % cols].axis("off")

    handles = [Line2D([], [], color=LIB_COLOR[lib], lw=2, label=LIB_LABEL[lib]) for lib in libs]
    handles += [Line2D([], [], color="black", ls=style[w], label=f"{w} ranks") for w in worlds]
    if any(p[3] for pts in series.values() for p in pts):
        handles.append(Line2D([], [], color="red", marker="x", ls="", label="wrong results"))
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False,
               bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(f"Collectives on one host ({os.cpu_count()} CPUs), float32: bus bandwidth (nccl-tests "
                 "definition) and latency vs message size", y=1.025, fontsize=12)
    fig.savefig(sys.argv[2], dpi=110, bbox_inches="tight")


def draw_op(top, bottom, op, series, libs, worlds, style):
    for lib in libs:
        for w in worlds:
            points = series.get((op, lib, w))
            if not points:
                continue
            x = [p[0] for p in points]
            kw = dict(color=LIB_COLOR[lib], ls=style[w], marker="o", ms=3, lw=1.5)
            bw = [(p[0], p[1]) for p in points if p[1] > 0]  # log axis: drop zeros
            if bw:
                top.plot([b[0] for b in bw], [b[1] for b in bw], **kw)
            bottom.plot(x, [p[2] for p in points], **kw)
            bad = [p for p in points if p[3]]
            for ax, value in ((top, 1), (bottom, 2)):
                ax.plot([p[0] for p in bad if p[value] > 0], [p[value] for p in bad if p[value] > 0], "x",
                        color="red", ms=9, mew=2)
    for ax in (top, bottom):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.3)
    top.set_ylabel("busbw (GB/s)")
    bottom.set_ylabel("latency (us)")
    bottom.set_xlabel("message size (bytes)")
    top.tick_params(labelbottom=False)
    sizes = sorted({p[0] for k, pts in series.items() if k[0] == op for p in pts})
    if sizes:
        bottom.set_xticks(sizes)
        bottom.set_xticklabels([human(s) for s in sizes], rotation=45, fontsize=8)
        top.set_xticks(sizes)
    top.sharex(bottom)


def draw_barrier(top, bottom, series, libs, worlds):
    width = 0.8 / max(1, len(libs))
    for i, lib in enumerate(libs):
        xs, ys = [], []
        for j, w in enumerate(worlds):
            points = series.get(("barrier", lib, w))
            if points:
                xs.append(j + (i - (len(libs) - 1) / 2) * width)
                ys.append(points[0][2])
        top.bar(xs, ys, width=width, color=LIB_COLOR[lib])
    top.set_xticks(range(len(worlds)))
    top.set_xticklabels([f"{w} ranks" for w in worlds])
    top.set_yscale("log")
    top.set_ylabel("latency (us)")
    top.grid(True, axis="y", alpha=0.3)
    bottom.axis("off")


if __name__ == "__main__":
    main()
