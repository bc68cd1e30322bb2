"""Work done beside the caller: a function run in a forked process while this one goes on.

A report from the evidence store reads two independent things, each then analysed on its own:
the first receipts (the incident fold's input) and the deliveries (attempts and events). Each
uses one core for most of its time; :func:`aside` lets the first run on the other core while
the caller reads the second, and hands its result over when asked
(:meth:`Pending.result`).

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
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from audit.ingest.load import default_workers
from audit.locks import in_forked_worker

__all__ = ["Pending", "aside", "cancelled_on_error"]

T = TypeVar("T")


class Pending(Generic[T]):
    """The result of a function run by :func:`aside`, taken once with :meth:`result`."""

    def __init__(self, fn: Callable[[], T], process, conn) -> None:
        self._fn: Callable[[], T] | None = fn
        self._conn = conn
        # A result never taken (the caller failed first): the child is stopped with its holder.
        self._stop = weakref.finalize(self, _stop, process, conn)

    def result(self) -> T:
        """The function's result (its warnings issued here); raises what the function raises.

        May be called once.
        """
        fn = self._fn
        if fn is None:
            raise RuntimeError("this result was already taken (or cancelled)")
        self._fn = None
        try:
            got = self._conn.recv()
        except Exception:  # died (killed, out of memory), failed, or unreadable
            got = None
        self._stop()
        if got is None:
            return fn()  # the same work here: the same result, or the same error
        value, caught = got
        for w in caught:
            w.issue()
        return value

    def cancel(self) -> None:
        """Stop the child; the result is not wanted (the caller failed)."""
        self._fn = None
        self._stop()


def aside(fn: Callable[[], T]) -> Pending[T] | None:
    """Start ``fn()`` in a forked process and return its :class:`Pending` result, or None when
    this process cannot fork safely (:mod:`audit.ingest.side`): the caller then runs ``fn``."""
    if (
        default_workers() < 2
        or threading.active_count() > 1
        or multiprocessing.current_process().daemon
    ):
        return None
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(fn, send, os.getpid()), daemon=True)
    try:
        process.start()
    except OSError:  # no memory for the fork, a limit on processes: the caller does the work
        receive.close()
        send.close()
        return None
    send.close()  # the child's end: only the child holds it now (EOF when it ends)
    return Pending(fn, process, receive)


@contextlib.contextmanager
def cancelled_on_error(pending: Pending | None) -> Iterator[None]:
    """Cancel ``pending`` (if any) when the block raises (an error, a ^C): its process is
    stopped then, not left holding memory until the object is collected."""
    try:
        yield
    except BaseException:
        if pending is not None:
            pending.cancel()
        raise


def _child(fn: Callable[[], object], send, parent: int) -> None:
    """The forked process: run ``fn``, send (result, warnings), or nothing when it fails (the
    caller then runs ``fn`` itself)."""
    in_forked_worker(parent)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = fn()
        send.send((value, [_Caught(w) for w in caught]))
    except BaseException:  # the caller runs fn again and meets the error itself
        pass
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


def _stop(process, conn) -> None:
    conn.close()
    if process.is_alive():
        process.kill()
    process.join()
