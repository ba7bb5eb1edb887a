"""tools/testbed.py as a module for the tests that play several hosts
(test_testbed.py, test_slurm.py), and whether this machine lets them; any
other tool of tools/ as a module too (load_tool)."""

import importlib.util
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, os.pardir, os.pardir, "tools")
TOOL = os.path.join(TOOLS, "testbed.py")


def load_tool(name):
    """tools/<name>.py (or tools/measure/<name>.py), imported as the module `name`."""
    path = os.path.join(TOOLS, name + ".py")
    if not os.path.exists(path):
        path = os.path.join(TOOLS, "measure", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


testbed = load_tool("testbed")


def namespaces_unavailable():
    """None if this process can make network namespaces, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces); run the tests as root to include it"
    probe = f"tb{os.getpid()}-h998"
    try:
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    except FileNotFoundError:
        return "iproute2 (ip, tc) is not installed"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None if made.returncode == 0 else f"cannot make network namespaces here: {made.stderr.strip()}"
