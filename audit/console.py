"""The ``audit`` script's entry point (``[project.scripts]``).

The command line loads only click and its group here; each command's module (and what it
needs: pandas, the report pipeline, the service client) is loaded when that command runs,
inside :func:`audit.cli.main.main`, where a ^C meanwhile ends in one line and exit 3 as a ^C
in a command does (before, the commands loaded first, for 0.2-0.3 s, and a ^C then was
Python's traceback of whichever import it landed in). Run as the ``audit`` script, this module
handles ^C first thing, before it loads the command line (click, the group: another quarter
second): ``audit: aborted``, exit 3, whenever it lands; once the command has returned, a ^C is
ignored (only flushing is left; it once ended in a traceback from an exit handler, or exit 0).

:func:`script` is what the ``audit`` command runs: :func:`main`, and once Python's exit handlers
have run, the end of the process without tearing the interpreter down (freeing the hundreds of
modules a report loads took 0.13-0.18 s after its last line).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the C module: nothing to load before ^C is handled
import os
import sys
import threading


def _abort_loading(signum: int, frame: object) -> None:
    """A ^C while the command line loads: nothing has been written, nothing to undo."""
    os.write(2, b"audit: aborted\n")
    os._exit(3)


#: Whether this process is the ``audit`` script (its ^C handler was installed here).
_SCRIPT = (
    os.path.basename(sys.argv[0] if sys.argv else "") in ("audit", "audit.exe")
    and threading.current_thread() is threading.main_thread()
)
if _SCRIPT and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    # first thing, before the imports below (a quarter second of a short command); the
    # package's top did it already when it was loaded by the script
    _signal.signal(_signal.SIGINT, _abort_loading)

import atexit  # noqa: E402
import contextlib  # noqa: E402

from audit.cli.main import main as run  # noqa: E402


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
    rc: int | None = None
    try:
        if _SCRIPT:  # from here the command line handles ^C ("audit: aborted", exit 3)
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        rc = main()
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # done: only flushing is left
    except KeyboardInterrupt:  # before the command line's own handling began, or as it ended
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
        if rc is None:
            sys.stderr.write("audit: aborted\n")
            rc = 3
    code[0] = rc
    return rc


def _end_now(code: list[int | None]) -> None:
    if code[0] is None:  # the command did not return (an exception): Python's own exit
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(code[0])
