"""Work done beside the caller: a function run in a forked process while this one goes on.

A report from the evidence store reads two independent things, each then analysed on its own:
the first receipts (the incident fold's input) and the deliveries (attempts and events). Much
of each runs on one core (pandas); :func:`aside` lets the first run in another process while
the caller does the second, and hands its result over when asked (:meth:`Pending.result`):
the month's warm report takes 0.87x its time ("Seventeenth pass" of ``docs/scale.md``, in git
history).

The outcome never depends on where the work ran. The child's warnings are issued again in the
caller when the result is taken. When the child fails in any way (it raised, it was killed, its
result cannot be sent), the caller runs the function itself, so that an error is the same
error, raised where it would have been raised without the child.

A fork is only safe in a process with one thread: a lock another thread held at the fork (an
import, a library's start-up) is held for ever in the child. So :func:`aside` gives None, and
the caller does the work itself, unless this process runs no other Python thread (a Jupyter
kernel always does), is not itself a daemonic worker, may use two CPUs, and the fork works.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

import audit.memory
from audit.ingest.workers import default_workers
from audit.interrupts import Handler, deliver_noted, note, restore
from audit.locks import in_forked_worker

__all__ = ["Pending", "aside", "aside_if_room", "cancelled_on_error"]

T = TypeVar("T")


class Pending(Generic[T]):
    """The result of a function run by :func:`aside`, taken once with :meth:`result`."""

    def __init__(self, fn: Callable[[], T] | None, pid: int, conn: Connection) -> None:
        self._fn = fn  # None: not run again here (``aside(..., rerun=False)``)
        self._open = True
        self._conn = conn
        # A result never taken (the caller failed first): the child is stopped with its holder.
        self._stop = weakref.finalize(self, _stop, pid, conn)

    def result(self) -> T:
        """The function's result (its warnings issued here); raises what the function raises.

        May be called once. Without a function to run again (``rerun=False``), a child that
        failed gives :class:`ChildProcessError`.
        """
        fn = self._fn
        if not self._open:
            raise RuntimeError("this result was already taken (or cancelled)")
        self._fn, self._open = None, False
        try:
            got = self._conn.recv()
        except Exception:  # died (killed, out of memory), failed, or unreadable
            got = None
        finally:  # also on a ^C while waiting: the child is stopped and reaped
            self._stop()
        if got is None:
            if fn is None:
                raise ChildProcessError("the process working aside failed")
            return fn()  # the same work here: the same result, or the same error
        value: T
        caught: list[_Caught]
        value, caught = got
        for w in caught:
            w.issue()
        return value

    def cancel(self) -> None:
        """Stop the child; the result is not wanted (the caller failed, or is done)."""
        self._fn, self._open = None, False
        self._stop()


def aside(fn: Callable[[], T], *, rerun: bool = True) -> Pending[T] | None:
    """Start ``fn()`` in a forked process and return its :class:`Pending` result, or None when
    this process cannot fork safely (:mod:`audit.ingest.side`): the caller then runs ``fn``.

    ``rerun=False``: this process keeps no reference to ``fn`` (nor to what it holds, which it
    may then free while the child works on its own copy); a failed child's work is not done
    again here.
    """
    if (
        not hasattr(os, "fork")  # Windows
        or default_workers() < 2
        or threading.active_count() > 1
        or multiprocessing.current_process().daemon
    ):
        return None
    parent = os.getpid()
    receive, send = os.pipe()
    # A ^C (sent to the whole process group, and taken by whichever thread of this process
    # the system picks) is noted, not raised, while the child is made: landing in Python's
    # after-fork hooks, it was printed there as "Exception ignored" and lost. Once the child is
    # handed over, it is delivered again as the caller had it handled (and stops the child).
    noted: list[int] = []
    handler = note(noted)
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns at a fork beside threads of its libraries (an allocator's, the
            # kernel client's ZMQ threads), which it cannot tell from Python's: those are not a
            # caller's warning (the child uses none of those libraries' locks it may not own).
            warnings.filterwarnings("ignore", _MULTI_THREADED, DeprecationWarning)
            pid = os.fork()
    except OSError:  # no memory for the fork, a limit on processes: the caller does the work
        restore(handler)
        os.close(receive)
        os.close(send)
        deliver_noted(noted)
        return None
    if pid == 0:  # the child: never returns into the caller's code
        code = 1
        try:
            os.close(receive)
            code = _child(fn, Connection(send, readable=False), parent, handler, noted)
        finally:
            os._exit(code)
    os.close(send)  # the child's end: only the child holds it now (EOF when it ends)
    pending = Pending(fn if rerun else None, pid, Connection(receive, writable=False))
    restore(handler)
    try:
        deliver_noted(noted)
    except BaseException:
        pending.cancel()
        raise
    return pending


def aside_if_room(fn: Callable[[], T], *, share: float, rerun: bool = True) -> Pending[T] | None:
    """:func:`aside`, unless this process holds over ``share`` of the memory still available
    (or either cannot be read): None then, and the caller runs ``fn``. A child keeps alive,
    until it ends, every page this process frees meanwhile: the two may hold twice as much."""
    held, free = audit.memory.resident_memory(), audit.memory.available_memory()
    if held is None or free is None or held > share * free:
        return None
    return aside(fn, rerun=rerun)


#: The start of Python 3.12's warning at a fork in a process with other threads.
_MULTI_THREADED = r"This process \(pid=\d+\) is multi-threaded"


@contextlib.contextmanager
def cancelled_on_error(pending: Pending[Any] | None) -> Iterator[None]:
    """Cancel ``pending`` (if any) when the block raises (an error, a ^C): its process is
    stopped then, not left holding memory until the object is collected."""
    try:
        yield
    except BaseException:
        if pending is not None:
            pending.cancel()
        raise


def _child(
    fn: Callable[[], object],
    send: Connection,
    parent: int,
    handler: Handler,
    noted: list[int],
) -> int:
    """The forked process: run ``fn``, send (result, warnings), or nothing when it fails (the
    caller then runs ``fn`` itself); the exit code. ``handler``: the caller's SIGINT handler,
    restored; a ^C ``noted`` while the child was made ends it here, quietly."""
    try:
        restore(handler)
        if noted:
            return 1
        in_forked_worker(parent)
        # The out-of-memory killer's first pick: the caller then does the work, rather than die.
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = fn()
        send.send((value, [_Caught(w) for w in caught]))
        return 0
    except BaseException:  # the caller runs fn again and meets the error itself
        return 1
    finally:
        send.close()


class _Caught:
    """A warning as the child met it, picklable, issued again in the caller as if there."""

    def __init__(self, w: warnings.WarningMessage) -> None:
        self.message = w.message if isinstance(w.message, Warning) else str(w.message)
        self.category = w.category
        self.filename = w.filename
        self.lineno = w.lineno
        # The module that warned (for filters by module, and its once-per-place registry).
        self.module = next(
            (
                name
                for name, m in tuple(sys.modules.items())
                if getattr(m, "__file__", None) == w.filename
            ),
            None,
        )

    def issue(self) -> None:
        module = sys.modules.get(self.module) if self.module else None
        registry = None if module is None else module.__dict__.setdefault("__warningregistry__", {})
        warnings.warn_explicit(
            self.message,
            self.category,
            self.filename,
            self.lineno,
            module=self.module,
            registry=registry,
        )


def _stop(pid: int, conn: Connection) -> None:
    """Close the caller's end, stop the child if it still runs, and reap it."""
    conn.close()
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG) == (0, 0):  # still running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
