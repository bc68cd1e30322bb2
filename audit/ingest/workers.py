"""The worker processes that parse and verify capture logs: forked, started, stopped.

:func:`fork_pool` forks them all at once (they inherit the loaded modules and the caller's
inputs, release its locks, die with it and ignore ^C); :func:`forked_workers` stops them when
the caller is interrupted; :func:`default_workers` says how many to use.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

from audit.interrupts import deliver_noted, note, restore
from audit.locks import in_forked_worker
from audit.memory import cpu_limit

__all__ = ["default_workers", "fork_pool", "forked_workers"]


def fork_pool(workers: int) -> ProcessPoolExecutor:
    """Worker processes forked from this one, started: they release its locks, die with it and
    ignore ^C (use :func:`forked_workers`, which stops them when the caller is interrupted).

    A ^C goes to the whole process group. A worker that ended on it could end half way through
    sending a result: the pool's manager thread then waited for the rest of it for ever (the
    caller holds the pipe open), and so did the caller. A worker that raised on it printed
    multiprocessing's traceback. So workers ignore it and the caller handles it: it cancels the
    tasks not started, and each worker ends the piece it holds. A ^C while the workers are
    forked is noted and delivered once they are made (:mod:`audit.interrupts`)."""
    # fork: workers inherit the loaded modules and never re-import the caller's __main__
    # (spawn and forkserver would re-run an unguarded script). Only pure-Python parsing and
    # Arrow array building run in the children.
    noted: list[int] = []
    pool = None
    try:
        handler = note(noted)
        try:
            pool = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_forked_worker,
                initargs=(os.getpid(),),
            )
            pool.submit(int)  # forks every worker now: the fork method starts them all at once
        finally:
            restore(handler)
        deliver_noted(noted)
    except BaseException:  # a ^C, or a fork refused half way: no worker is left behind
        if pool is not None:
            _stop(pool)
        deliver_noted(noted)  # a ^C noted before a fork failed is the caller's first news
        raise
    return pool


@contextlib.contextmanager
def forked_workers(workers: int) -> Iterator[ProcessPoolExecutor]:
    """:func:`fork_pool` for a block: left normally, it waits for the tasks; left by an error
    (a ^C), it cancels the tasks not started and waits only for those the workers hold."""
    pool = fork_pool(workers)
    try:
        yield pool
    except BaseException:
        _wait_for(pool, cancel=True)
        raise
    _wait_for(pool, cancel=False)


def _wait_for(pool: ProcessPoolExecutor, *, cancel: bool) -> None:
    """``pool.shutdown(wait=True)``, a ^C meanwhile noted and delivered once it is done (the
    wait lasts as long as the pieces the workers hold). Interrupted, Python 3.11-3.12's join of
    the pool's manager thread took the thread for stopped: the interpreter's exit then closed
    the queue the thread still had to use, and waited for the workers for ever (a second ^C
    hung the command)."""
    noted: list[int] = []
    handler = note(noted)
    try:
        pool.shutdown(wait=True, cancel_futures=cancel)
    finally:
        restore(handler)
    deliver_noted(noted)


def _stop(pool: ProcessPoolExecutor) -> None:
    """End a pool's workers now (a pool left running keeps the interpreter from exiting); only
    while they start, before any of them sends a result."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError):
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


def _forked_worker(parent: int) -> None:
    """A worker's initializer: ^C ignored (the caller stops the pool: :func:`fork_pool`), then
    :func:`audit.locks.in_forked_worker`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    in_forked_worker(parent)


def default_workers() -> int:
    """Worker processes to use: the CPUs this process may run on (at most 8), fewer under a
    cgroup CPU quota (a container's ``--cpus 1.5``: 2; :func:`audit.memory.cpu_limit`).

    1 where the ``fork`` start method is not available (Windows, and macOS by policy).
    """
    if "fork" not in multiprocessing.get_all_start_methods() or sys.platform == "darwin":
        return 1
    cpus = len(os.sched_getaffinity(0))
    quota = cpu_limit()
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, min(cpus, 8))
