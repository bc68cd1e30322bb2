"""Execution: whether work runs in this process or on forked worker processes, and how many.

One switch, the environment variable ``AUDIT_JOBS`` (:func:`jobs`): ``1`` runs everything in
the calling process (no fork, no thread, no side process); ``N`` allows at most N worker
processes; unset (the default), the usable CPUs (at most 8), and none for a small input
(:func:`workers_for`). Every place that forks or starts workers asks :func:`default_workers` or
:func:`workers_for`.

:func:`fork_pool` forks workers all at once (they inherit the loaded modules and the caller's
inputs, release its locks, die with it and ignore ^C); :func:`forked_workers` stops them when
the caller is interrupted.
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

from audit.errors import InputError
from audit.interrupts import deliver_noted, note, restore
from audit.locks import in_forked_worker
from audit.memory import cpu_limit

__all__ = [
    "JOBS_VARIABLE",
    "SMALL_INPUT_BYTES",
    "collector_paused",
    "default_workers",
    "fork_pool",
    "forked_workers",
    "in_process",
    "jobs",
    "parse_jobs",
    "threads",
    "workers_for",
]

#: The environment variable of the switch.
JOBS_VARIABLE = "AUDIT_JOBS"

#: Below this many input bytes in all, one command's work runs in process by default: forking
#: and feeding workers costs more than it saves. Measured on 2 CPUs, 31 daily files:
#: ``audit verify`` of 6.6 MB took 1.0 s in process against 1.4 s on 2 workers, of 36 MB
#: 1.41 s against 1.19 s (medians of 3; ``benchmarks/bench_store.py small``).
SMALL_INPUT_BYTES = 16 * 2**20


def jobs() -> int | None:
    """``AUDIT_JOBS`` as a number of processes, or None when it is unset or empty
    (:func:`parse_jobs`)."""
    return parse_jobs(os.environ.get(JOBS_VARIABLE, ""))


def parse_jobs(raw: str) -> int | None:
    """A value of ``AUDIT_JOBS``: a number of processes, None when empty; InputError (one
    line) for anything but a whole number of at least 1.

    >>> parse_jobs("2"), parse_jobs(" 1 "), parse_jobs("")
    (2, 1, None)
    """
    raw = raw.strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise InputError(f"{JOBS_VARIABLE}={raw!r}: give a whole number of processes, 1 or more")
    return value


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector around a loop that builds many rows of plain
    values (no reference cycles, so nothing is left for it to free): its collections traverse
    every row built so far, again and again. Measured on 200,000 deliveries, the fast path with
    the extraction of ``audit ingest`` took 32% less CPU time
    (``benchmarks/bench_store.py verify``). ``AUDIT_JOBS=1`` leaves the collector running (the
    plain path, with no memory trick); so does a collector already paused by the caller.
    """
    if jobs() == 1 or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def in_process() -> bool:
    """Whether everything must run in this process: ``AUDIT_JOBS=1``, or no ``fork`` here."""
    return default_workers() < 2


def workers_for(total_bytes: int, workers: int | None = None) -> int:
    """Worker processes for one command reading ``total_bytes`` in all: ``workers`` when the
    caller says, else ``AUDIT_JOBS`` when set, else 1 below :data:`SMALL_INPUT_BYTES` and
    :func:`default_workers` above."""
    if workers is not None:
        return max(1, workers)
    if jobs() is None and total_bytes < SMALL_INPUT_BYTES:
        return 1
    return default_workers()


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
    """Worker processes to use: ``AUDIT_JOBS`` when set, else the CPUs this process may run on
    (at most 8), fewer under a cgroup CPU quota (a container's ``--cpus 1.5``: 2;
    :func:`audit.memory.cpu_limit`).

    1 where the ``fork`` start method is not available (Windows, and macOS by policy).
    """
    if "fork" not in multiprocessing.get_all_start_methods() or sys.platform == "darwin":
        return 1
    chosen = jobs()
    if chosen is not None:
        return chosen
    cpus = len(os.sched_getaffinity(0))
    quota = cpu_limit()
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, min(cpus, 8))


def threads(most: int) -> Executor:
    """An executor of at most ``most`` threads, or, when everything runs in this process
    (:func:`in_process`: ``AUDIT_JOBS=1``) or ``most`` is 1, one that runs each task in the
    caller's thread as it is submitted (in the order given)."""
    if most < 2 or in_process():
        return _InCaller()
    return ThreadPoolExecutor(max_workers=min(most, default_workers()))


class _InCaller(Executor):
    """Runs each task when it is submitted, in the caller's thread."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except Exception as e:  # given back by result(), as a thread pool's task's would be
            done.set_exception(e)
        return done
