#!/usr/bin/env python3
"""Runs the code snippets of README.md and docs/*.md, so that a doc cannot
drift from the code.

Every fenced block tagged python, cpp, sh or cmake must be preceded (on the
line before its fence, blank lines allowed) by a marker that says what to do
with it; a block without one fails the run. JSON blocks must parse. Blocks
without a language (program output) are left alone.

    <!-- doctest: run -->               run it (python: a script; cpp: the
                                        #include lines first, the rest inside
                                        main(), linked with the build's
                                        libtdist.so; sh: bash -eu, from the
                                        repository's root)
    <!-- doctest: run ranks=N -->       the same, under tdistrun --standalone
                                        --nproc-per-node N
    <!-- doctest: run after -->         python: the previous python block of
                                        the file followed by this one, as one
                                        program (options as for run)
    <!-- doctest: compile -->           python: compile(); cpp: compiled, not
                                        run; sh: bash -n; cmake: not checked
                                        beyond the marker
    <!-- doctest: skip REASON -->       not run, for the REASON given (a
                                        benchmark of minutes, another host,
                                        root-only setup, ...)

Python runs under $TDIST_PYTHON (default .venv/bin/python) with
PYTHONPATH=BUILD/python; sh blocks see BUILD/bin and that interpreter's
directory first on PATH, and run in a scratch copy of nothing: their
working directory is the repository's root, so keep them harmless.

    tests/docs/doc_snippets.py [--build DIR] [--list] [FILE...]
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHECKED = ("python", "cpp", "sh", "cmake")
FENCE = re.compile(r"^(\s*)```(\w[\w+-]*)?\s*$")
MARKER = re.compile(r"^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$")


class Snippet:
    def __init__(self, path, line, lang, body, marker):
        self.path, self.line, self.lang, self.body, self.marker = path, line, lang, body, marker

    @property
    def where(self):
        return "%s:%d" % (os.path.relpath(self.path, REPO), self.line)


def snippets(path):
    """Every fenced block of `path`: (line of the fence, language, body, marker or None)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:j]]
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = MARKER.match(lines[k]).group(1) if k >= 0 and MARKER.match(lines[k]) else None
        if lang:
            out.append(Snippet(path, i + 1, lang, "\n".join(body) + "\n", marker))
        i = j + 1
    return out


def parse_marker(text):
    """("run"|"compile"|"skip", options dict, reason)."""
    words = text.split()
    if not words:
        raise ValueError("empty doctest marker")
    mode = words[0]
    if mode == "skip":
        reason = " ".join(words[1:])
        if not reason:
            raise ValueError("'skip' needs a reason")
        return mode, {}, reason
    if mode not in ("run", "compile"):
        raise ValueError("unknown doctest mode %r (run, compile or skip)" % mode)
    options = {}
    for word in words[1:]:
        if word == "after":
            options["after"] = True
        elif re.match(r"^ranks=[1-9][0-9]*$", word):
            options["ranks"] = int(word.split("=")[1])
        elif re.match(r"^timeout=[1-9][0-9]*$", word):
            options["timeout"] = int(word.split("=")[1])
        else:
            raise ValueError("unknown doctest option %r" % word)
    return mode, options, ""


class Runner:
    def __init__(self, build, python):
        self.build, self.python = os.path.abspath(build), python
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.path.join(self.build, "python")
        self.env["PATH"] = os.pathsep.join([os.path.join(self.build, "bin"), os.path.dirname(python),
                                            self.env.get("PATH", "")])
        self.env["TDIST_PYTHON"] = python
        self.env.pop("TDIST_TRACE_DIR", None)

    def _run(self, argv, timeout, cwd):
        try:
            p = subprocess.run(argv, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timed out after %d s" % timeout
        if p.returncode != 0:
            return "exit %d\n--- stdout\n%s\n--- stderr\n%s" % (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
        return None

    def _launch(self, argv, options):
        ranks = options.get("ranks")
        if ranks:
            return [os.path.join(self.build, "bin", "tdistrun"), "--standalone", "--nproc-per-node", str(ranks)] + argv
        return argv

    def python_block(self, mode, options, code, tmp):
        if mode == "compile":
            try:
                compile(code, "<snippet>", "exec")
            except SyntaxError as e:
                return "does not compile: %s" % e
            return None
        script = os.path.join(tmp, "snippet.py")
        with open(script, "w") as f:
            f.write(code)
        return self._run(self._launch([self.python, script], options), options.get("timeout", 180), tmp)

    def cpp_block(self, mode, options, code, tmp):
        includes = [line for line in code.split("\n") if line.startswith("#include")]
        rest = [line for line in code.split("\n") if not line.startswith("#include")]
        source = os.path.join(tmp, "snippet.cc")
        with open(source, "w") as f:
            f.write("\n".join(includes + ["#include <chrono>", "#include <string>", "#include <vector>",
                                          "int main() {"] + rest + ["  return 0;", "}", ""]))
        binary = os.path.join(tmp, "snippet")
        compiler = os.environ.get("CXX", "g++")
        why = self._run([compiler, "-std=c++20", "-O0", "-I", os.path.join(REPO, "include"), source, "-o", binary,
                         "-L", os.path.join(self.build, "lib"), "-Wl,-rpath," + os.path.join(self.build, "lib"),
                         "-ltdist", "-pthread"], 180, tmp)
        if why or mode == "compile":
            return why and "does not compile: " + why
        return self._run(self._launch([binary], options), options.get("timeout", 120), tmp)

    def sh_block(self, mode, options, code, tmp):
        if mode == "compile":
            return self._run(["bash", "-n", "-c", code], 30, tmp)
        return self._run(["bash", "-eu", "-o", "pipefail", "-c", code], options.get("timeout", 300), REPO)


def check(files, runner, only_list=False):
    failures, counts = [], {"run": 0, "compile": 0, "skip": 0, "json": 0}
    for path in files:
        previous_python = ""
        for s in snippets(path):
            if s.lang == "json":
                counts["json"] += 1
                for n, line in enumerate(s.body.strip().split("\n")):
                    try:
                        json.loads(line)
                    except ValueError as e:
                        failures.append("%s: JSON line %d does not parse: %s" % (s.where, n + 1, e))
                continue
            if s.lang not in CHECKED:
                failures.append("%s: a ```%s block; tag it python, cpp, sh or cmake (or leave output untagged)"
                                % (s.where, s.lang))
                continue
            if s.marker is None:
                failures.append("%s: a ```%s block without a <!-- doctest: ... --> marker before it "
                                "(tests/docs/doc_snippets.py says which)" % (s.where, s.lang))
                continue
            try:
                mode, options, reason = parse_marker(s.marker)
            except ValueError as e:
                failures.append("%s: %s" % (s.where, e))
                continue
            code = s.body
            if s.lang == "python":
                if options.get("after"):
                    code = previous_python + code
                previous_python = code
            counts[mode] += 1
            if only_list:
                print("%-28s %-7s %-8s %s" % (s.where, s.lang, mode, reason or " ".join(
                    "%s=%s" % kv for kv in options.items())))
                continue
            if mode == "skip" or s.lang == "cmake":
                continue
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="tdist-doctest.") as tmp:
                why = getattr(runner, s.lang + "_block")(mode, options, code, tmp)
            status = "FAILED" if why else "ok"
            print("%s %s (%s %s, %.1f s)" % (status, s.where, s.lang, mode, time.monotonic() - started), flush=True)
            if why:
                failures.append("%s (%s %s): %s" % (s.where, s.lang, mode, why))
    return failures, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="Markdown files (default: README.md and docs/*.md)")
    ap.add_argument("--build", default=os.environ.get("TDIST_BUILD_DIR", os.path.join(REPO, "build")))
    ap.add_argument("--list", action="store_true", help="list the blocks and their markers; run nothing")
    args = ap.parse_args()
    files = args.files or [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    python = os.environ.get("TDIST_PYTHON") or os.path.join(REPO, ".venv", "bin", "python")
    failures, counts = check(files, Runner(args.build, python), args.list)
    print("doc snippets: %d run, %d compiled, %d skipped (with reasons), %d JSON blocks parsed"
          % (counts["run"], counts["compile"], counts["skip"], counts["json"]))
    for f in failures:
        print("\n" + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
