"""One rank of the exit test: an async all_reduce whose future has a Python
then() callback, waited for, and then the interpreter exits without
destroy_process_group. The callback is dropped on the plugin's completion
thread while the main thread may already be finalizing; before the atexit
drain (tdist/torch/__init__.py) that aborted the process about half the
time. Prints the chained result; must exit 0."""

import torch
import torch.distributed as dist

import tdist.torch  # noqa: F401  registers "tdist"

dist.init_process_group("tdist")
t = torch.ones(4)
chained = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
print("chained", chained.wait().tolist())
