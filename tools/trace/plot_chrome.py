#!/usr/bin/python3
"""Draws a tdist Chrome trace (tdist.trace_calls, TDIST_TRACE, tdist-trace
--chrome) as a PNG: one row per rank and group, each call a box split into
the time it waited for the last rank ("wait", light) and the time it moved
data ("transfer", dark). For docs and for machines without a browser;
Perfetto (ui.perfetto.dev) opens the JSON itself.

    /usr/bin/python3 tools/trace/plot_chrome.py trace.json trace.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    events = json.load(open(src))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    rows = sorted({(e["pid"], e["tid"]) for e in events if e["ph"] == "X"})
    y_of = {row: i for i, row in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(rows) + 1.2))
    colors = {"wait": "#f4c06b", "transfer": "#2b6cb0"}
    for e in events:
        if e["ph"] != "X":
            continue
        y = y_of[(e["pid"], e["tid"])]
        if e["name"] in colors:
            ax.barh(y, e["dur"] / 1000, left=e["ts"] / 1000, height=0.5, color=colors[e["name"]])
        else:
            ax.barh(y, e["dur"] / 1000, left=e["ts"] / 1000, height=0.7, fill=False, edgecolor="black", lw=0.6)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([names.get(pid, f"pid {pid}") + (f" / group {tid}" if tid else "") for pid, tid in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, ["wait (for the last rank)", "transfer"], loc="upper center", bbox_to_anchor=(0.5, -0.25),
              ncol=2, fontsize=8, frameon=False)
    ax.set_title("tdist calls per rank (boxes: one call each)")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_chrome.py TRACE.json OUT.png")
    main(sys.argv[1], sys.argv[2])
