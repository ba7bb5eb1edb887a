"""The console scripts tdist-trace and tdist-bench of a pip install: each
replaces this process with the program of the same name shipped inside the
package (tdist/bin/), passing its arguments on."""

import os
import sys


def _exec(name):
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
    if not os.access(binary, os.X_OK):
        print("%s: the program is missing from the package (%s); reinstall tdist" % (name, binary), file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(binary, [name] + sys.argv[1:])  # argv[0]: what the user typed, for the help's usage line
    return 1  # not reached


def trace():
    """tdist-trace: merges the ranks' flight-recorder dumps (docs/debugging.md)."""
    return _exec("tdist-trace")


def bench():
    """tdist-bench: every collective, timed and checked (docs/benchmark.md)."""
    return _exec("tdist-bench")
