"""The ``audit`` script's entry point (``[project.scripts]``).

The command line loads only click and its group here; each command's module (and what it
needs: pandas, the report pipeline, the service client) is loaded when that command runs,
inside :func:`audit.cli.main.main`, where a ^C meanwhile ends in one line and exit 3 as a ^C
in a command does (before, the commands loaded first, for 0.2-0.3 s, and a ^C then was
Python's traceback of whichever import it landed in).

:func:`script` is what the ``audit`` command runs: :func:`main`, and once Python's exit handlers
have run, the end of the process without tearing the interpreter down (freeing the hundreds of
modules a report loads took 0.13-0.18 s after its last line).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

from audit.cli.main import main as run


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: the process's arguments)."""
    return run(argv)


def script() -> int:
    """The ``audit`` command: :func:`main`; then, after every exit handler registered meanwhile
    (temporary folders, kernels, worker pools, logging) and with stdout and stderr flushed, the
    process ends with :func:`os._exit`. Everything a command writes is closed (and fsynced)
    before it returns; what is left is the interpreter freeing its modules and objects."""
    code: list[int | None] = [None]
    atexit.register(_end_now, code)  # the first registered: run last
    rc = code[0] = main()
    return rc


def _end_now(code: list[int | None]) -> None:
    if code[0] is None:  # the command did not return (an exception): Python's own exit
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(code[0])
