"""Exclusive OS locks that a second holder waits for: on an open file (``flock``; ``msvcrt`` on
Windows), the evidence store's writer lock; on a folder, the commit of a set of output files."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterator
from typing import IO, Any

if sys.platform == "win32":  # pragma: no cover - Windows
    import msvcrt
else:
    import fcntl

__all__ = [
    "folder_held",
    "in_forked_worker",
    "lock_file",
    "try_lock_file",
    "unlock_file",
]

#: Descriptors of the locks this process holds (a forked worker closes its copies of them).
_HELD: set[int] = set()


def in_forked_worker(parent: int) -> None:
    """Initializer of a forked worker: close its copies of the parent's lock descriptors, and
    (Linux) die with the parent, whose pid the parent passes (``initargs=(os.getpid(),)``). A
    worker that kept them held the parent's locks after a ``kill -9`` of the parent, for ever,
    and every later ingest waited on them."""
    for fd in tuple(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)  # closing a copy does not release the parent's lock
    _HELD.clear()
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no prctl
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the call
        os._exit(1)


def lock_file(f: IO[Any]) -> None:
    """Block until this process holds the exclusive lock on the open file ``f``."""
    if sys.platform == "win32":  # pragma: no cover - Windows
        f.seek(0)
        while True:
            try:
                msvcrt.locking(f.fileno(), msvcrt.LK_LOCK, 1)
                return
            except OSError:
                continue
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    _HELD.add(f.fileno())


def try_lock_file(f: IO[Any]) -> bool:
    """Take the exclusive lock on the open file ``f`` if no one holds it: whether it was taken."""
    if sys.platform == "win32":  # pragma: no cover - Windows
        f.seek(0)
        try:
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    _HELD.add(f.fileno())
    return True


def unlock_file(f: IO[Any]) -> None:
    """Release the lock taken by :func:`lock_file`."""
    if sys.platform == "win32":  # pragma: no cover - Windows
        f.seek(0)
        msvcrt.locking(f.fileno(), msvcrt.LK_UNLCK, 1)
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    _HELD.discard(f.fileno())


@contextlib.contextmanager
def folder_held(path: str | os.PathLike) -> Iterator[bool]:
    """Hold the exclusive lock of the folder ``path`` for the block, waiting for another holder;
    the block gets whether the lock is held.

    The lock is taken on the folder itself (``flock`` of its descriptor): no file is left in it.
    Where a folder cannot be locked, the block runs without the lock (False), as before locks
    existed: a folder that may be written but not listed (mode 0333), a file system without
    ``flock`` on folders (NFS without ``local_lock``), Windows.
    """
    if sys.platform == "win32":  # pragma: no cover - Windows
        yield False
        return
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # ENOLCK, EBADF (NFS), EOPNOTSUPP...
            locked = False
        else:
            locked = True
            _HELD.add(fd)
        yield locked  # the lock ends with the descriptor
    finally:
        _HELD.discard(fd)
        os.close(fd)
