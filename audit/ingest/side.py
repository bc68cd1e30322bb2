"""Work done beside the caller: a function run in a forked process while this one goes on.

A report from the evidence store reads two independent things, each then analysed on its own:
the first receipts (the incident fold's input) and the deliveries (attempts and events). Each
uses one core for most of its time; :func:`aside` lets the first run on the other core while
the caller reads the second, and hands its result over when asked
(:meth:`Pending.result`).

The outcome never depends on where the work ran. The child's warnings are issued again in the
caller when the result is taken. When the child fails in any way (it raised, it was killed, its
result cannot be sent), the caller runs the function itself, so that an error is the same
error, raised where it would have been raised without the child. Where ``fork`` is not
available, or this process may use only one CPU, the function runs in the caller at once.
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from audit.ingest.load import default_workers
from audit.locks import in_forked_worker

__all__ = ["Pending", "aside"]

T = TypeVar("T")


class Pending(Generic[T]):
    """The result of a function run by :func:`aside`, taken once with :meth:`result`."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn: Callable[[], T] | None = fn
        self._conn = None
        self._process = None
        self._stop = None
        if default_workers() < 2:
            return  # no fork, or one CPU: run in the caller when the result is asked for
        ctx = multiprocessing.get_context("fork")
        receive, send = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_child, args=(fn, send, os.getpid()), daemon=True)
        process.start()
        send.close()  # the child's end: only the child holds it now (EOF when it ends)
        self._conn, self._process = receive, process
        # A result never taken (the caller failed first): the child is stopped with its holder.
        self._stop = weakref.finalize(self, _stop, process, receive)

    def result(self) -> T:
        """The function's result (its warnings issued here); raises what the function raises.

        May be called once.
        """
        fn = self._fn
        if fn is None:
            raise RuntimeError("this result was already taken")
        self._fn = None
        got = None
        if self._conn is not None:
            try:
                got = self._conn.recv()
            except (EOFError, OSError):  # the child died (killed, out of memory) or failed
                got = None
            except Exception:
                got = None
            self._stop()
        if got is None:
            return fn()  # the same work here: the same result, or the same error
        value, caught = got
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return value


def aside(fn: Callable[[], T]) -> Pending[T]:
    """Start ``fn()`` in a forked process (:mod:`audit.ingest.side`); take it with
    ``.result()``."""
    return Pending(fn)


def _child(fn: Callable[[], object], send, parent: int) -> None:
    """The forked process: run ``fn``, send (result, warnings), or nothing when it fails (the
    caller then runs ``fn`` itself)."""
    in_forked_worker(parent)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = fn()
        send.send((value, [_Caught(w) for w in caught]))
    except BaseException:
        pass
    finally:
        send.close()


class _Caught:
    """A warning as the child met it (what ``warnings.warn_explicit`` needs), picklable."""

    def __init__(self, w: warnings.WarningMessage) -> None:
        self.message = w.message if isinstance(w.message, Warning) else str(w.message)
        self.category = w.category
        self.filename = w.filename
        self.lineno = w.lineno


def _stop(process, conn) -> None:
    conn.close()
    if process.is_alive():
        process.kill()
    process.join()
