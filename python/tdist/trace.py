"""The flight recorder from Python (docs/debugging.md).

Every process keeps its last ``TDIST_TRACE_BUFFER_SIZE`` calls (default
2000; 0 turns it off) of every group: op, sequence number, dtype, element
count, root, state, timestamps and, on shared memory, which rank arrived
last. ``dump_trace()`` writes it as JSON; with ``TDIST_TRACE_DIR`` set it is
also written there when a call fails or times out, and on ``SIGUSR1``.
``tdist-trace DIR`` merges the ranks' files.

A torch program that uses the plugin (``import tdist.torch``) records in the
plugin's copy of tdist; ``dump_trace`` writes that one too (as
``rank<R>.torch.json``).
"""

import json
import sys
import time

from tdist import _C


def _copies():
    """The tdist copies loaded in this process: (module, file suffix)."""
    copies = [(_C, "")]
    plugin = sys.modules.get("tdist.torch._plugin")
    if plugin is not None and hasattr(plugin, "_dump_trace"):
        copies.append((plugin, ".torch"))
    return copies


def _has_calls(module):
    return bool(json.loads(module._trace_json())["entries"])


def dump_trace(path=None):
    """Writes the flight recorder as JSON and returns the files written.

    ``path`` names the file; without it the file is
    ``$TDIST_TRACE_DIR/rank<R>.json``. With the torch plugin loaded, its
    recorder goes to the same name with ``.torch`` before ``.json``. A copy
    that has recorded nothing is skipped unless it is the only one.
    """
    copies = _copies()
    if len(copies) > 1:
        copies = [c for c in copies if _has_calls(c[0])] or copies[:1]
    written = []
    for module, suffix in copies:
        target = path
        if path is not None and suffix:
            target = path[:-5] + suffix + ".json" if path.endswith(".json") else path + suffix
        written.append(module._dump_trace(target or ""))
    return written


def trace_entries():
    """The flight recorder of every loaded copy as parsed JSON documents."""
    return [json.loads(module._trace_json()) for module, _ in _copies()]


class trace_calls:
    """Writes a Chrome trace of the calls made inside the block on every rank.

    ::

        with tdist.trace_calls("trace.json"):
            train_step()

    Every rank of ``group`` (default: the whole job) must enter and leave
    the block together: on leaving, the ranks' flight recorders are gathered
    to the group's rank 0, which writes ``path`` with one process per rank,
    one track per group and each call split into "wait" (until the last rank
    arrived) and "transfer". Perfetto (ui.perfetto.dev) and chrome://tracing
    open it. Only the calls the recorder still holds are in it
    (``TDIST_TRACE_BUFFER_SIZE``, default 2000 per process).
    """

    def __init__(self, path, group=None):
        self.path = path
        self.group = group
        self._start_ns = None

    def __enter__(self):
        self._start_ns = time.monotonic_ns()  # CLOCK_MONOTONIC, the recorder's clock
        return self

    def __exit__(self, exc_type, exc, tb):
        docs = []
        for module, _ in _copies():
            doc = json.loads(module._trace_json())
            doc["entries"] = [e for e in doc["entries"] if e["queued_ns"] >= self._start_ns]
            docs.append(doc)
        mine = next((d for d in docs if d["entries"]), docs[0])
        dist = _collectives()
        dumps = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(dumps, json.dumps(mine), group=self.group)
        if dist.get_rank(self.group) == 0:
            with open(self.path, "w") as f:
                f.write(_C._chrome_trace(dumps))
        return False


def _collectives():
    """tdist's own functions, or torch.distributed's in a program that uses the plugin."""
    import tdist

    if tdist.is_initialized():
        return tdist
    torch_dist = sys.modules.get("torch.distributed")
    if torch_dist is not None and torch_dist.is_initialized():
        return torch_dist
    raise RuntimeError("trace_calls: no process group is initialized (tdist.init_process_group or "
                       "torch.distributed.init_process_group first)")
