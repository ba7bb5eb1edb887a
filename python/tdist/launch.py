"""``python3 -m tdist.launch [OPTIONS] PROGRAM [ARGS...]``: the legacy launcher
of the spec's "Launch utility" (``torch.distributed.launch``).

It is tdistrun (``python3 -m tdist.run``) with one difference: each rank's
program gets ``--local-rank=N`` as its first argument, as the spec's launch
utility passes it, unless ``--use-env`` (or ``--use_env``, ``--use-env=true``)
is among the options, in which case the program reads ``LOCAL_RANK`` only, as
under torchrun. Every other option is tdistrun's (docs/launcher.md).
"""

import sys

from tdist import run

# The spellings of the flag that asks for torchrun's behaviour.
_USE_ENV = ("--use-env", "--use_env")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _launcher_options(args):
    """The options before PROGRAM, without the values of those that take one
    as a separate word."""
    flags = {"--standalone", "--no-python", "--no_python", "-m", "--module", "--tee", "-h", "--help",
             "--use-env", "--use_env", "--no-use-env", "--no_use_env"}
    options = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--" or not word.startswith("-"):
            break
        options.append(word)
        if "=" not in word and word not in flags:
            i += 1  # its value, not an option
        i += 1
    return options


def wants_env(args):
    """True if the options ask the program to read LOCAL_RANK only."""
    use_env = False
    for word in _launcher_options(args):
        name, _, value = word.partition("=")
        if name in _USE_ENV:
            use_env = value.lower() in _TRUE if value else True
            if value and value.lower() not in _TRUE + _FALSE:
                use_env = True  # tdistrun reports the bad value
        elif name in ("--no-use-env", "--no_use_env"):
            use_env = False
    return use_env


# What --help says first: tdistrun's own help follows, and it describes
# tdistrun's default (--use-env), the opposite of this launcher's.
HELP_PREFACE = """\
python3 -m tdist.launch [OPTIONS] PROGRAM [ARGS...]: torch.distributed.launch's launcher.
It is tdistrun with one difference: each rank's program gets --local-rank=N as its
first argument unless --use-env is given (then it reads LOCAL_RANK only, as under
torchrun). So here --no-use-env is the default, not --use-env as tdistrun's help
below says. Every other option is tdistrun's:

"""


def main(argv=None):
    """Replaces this process with tdistrun, passing --local-rank=N unless --use-env."""
    args = sys.argv[1:] if argv is None else list(argv)
    if any(word in ("-h", "--help") for word in _launcher_options(args)):
        sys.stdout.write(HELP_PREFACE)
    if not wants_env(args):
        args = ["--no-use-env"] + args
    return run.main(args)


if __name__ == "__main__":
    sys.exit(main())
