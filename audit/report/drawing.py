"""Figures drawn once, by whichever of two processes comes to them first.

The report's figures are drawn ahead of the notebook's kernel, which goes from the first, by a
forked child or a thread of the ``audit report`` process (:mod:`audit.report.ahead`). Each
figure is drawn under an exclusive lock on ``<run>/.figures/<name>.lock`` and kept as
``<name>.html``:

* the kernel takes each lock, waiting while the other side draws that figure, then uses
  the kept HTML or draws the figure itself (:func:`shared`, :func:`drawn_once`);
* the other side only takes a free lock (:func:`lock_if_free`): it stops at the first figure
  the kernel holds or has drawn (the kernel has the rest), or turns to the last ones;
* a child takes the next figure's lock before it releases the last one's (hand over hand),
  so that a kernel close behind it waits for each figure rather than take the next one's free
  lock in the moment between and draw it itself.

A process that dies releases its lock (``flock``), so nothing waits on it; a figure it did not
finish is drawn by the other. Without a ``.figures`` folder of this user (a notebook run by
hand, a run folder rendered again, a link planted there), a figure is simply drawn. The
pipeline removes the folder before the run folder is renamed into place.

This module knows nothing of the figures or the run folder: :mod:`audit.report.figures` and
:mod:`audit.report.rundir` build on it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import warnings
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import BinaryIO, Literal, Protocol, TypeVar, overload

from audit.locks import lock_file, try_lock_file, unlock_file
from audit.report.format import HTML

__all__ = [
    "FOLDER",
    "TABLES_LOCK",
    "drawn_once",
    "figures_folder",
    "in_report_style",
    "is_ours",
    "keep",
    "lock_if_free",
    "release",
    "remove_figures_folder",
    "shared",
    "tables_pending",
    "tables_written",
]

#: The folder of a run folder where figures are kept while the report renders.
FOLDER = ".figures"


class Run(Protocol):
    """What a figure is drawn from (a :class:`~audit.report.rundir.RunData`): here, only
    where its run folder is, if anywhere."""

    @property
    def run_dir(self) -> Path | None: ...


R = TypeVar("R", bound=Run)
T = TypeVar("T")


@overload
def drawn_once(
    folder: Path, name: str, draw: Callable[[], HTML], *, wait: Literal[True] = True
) -> HTML: ...
@overload
def drawn_once(folder: Path, name: str, draw: Callable[[], HTML], *, wait: bool) -> HTML | None: ...
def drawn_once(
    folder: Path, name: str, draw: Callable[[], HTML], *, wait: bool = True
) -> HTML | None:
    """The figure ``name``: kept in ``folder`` by whoever drew it, or drawn now and kept.

    With ``wait`` false, returns None instead of waiting when the other process holds the lock
    or has drawn the figure already (the report process's way to stop). Where the lock cannot
    be taken at all (a file system without ``flock``), the kernel draws every figure itself and
    the report process none.
    """
    if not wait:
        taken = lock_if_free(folder, name)
        if taken is None:
            return None
        try:
            html = draw()
            keep(folder, name, html)
            return html
        finally:
            release(taken)
    lock = _lock_file_of(folder, name)
    if lock is None:
        return draw()
    with lock:
        try:
            lock_file(lock)
        except OSError:  # ENOLCK, EOPNOTSUPP...: no sharing
            return draw()
        try:
            kept = _kept(folder / f"{name}.html")
            if kept is not None:
                return kept
            html = draw()
            keep(folder, name, html)
            return html
        finally:
            unlock_file(lock)


def lock_if_free(folder: Path, name: str) -> BinaryIO | None:
    """The figure's lock taken without waiting (an open file: :func:`release`), or None when
    the other side holds it or has drawn the figure, or where no lock can be taken."""
    lock = _lock_file_of(folder, name)
    if lock is None:
        return None
    try:
        taken = try_lock_file(lock)
    except OSError:  # ENOLCK, EOPNOTSUPP...: no sharing
        taken = False
    if not taken:
        lock.close()
        return None
    if _kept(folder / f"{name}.html") is not None:  # drawn already
        release(lock)
        return None
    return lock


def _lock_file_of(folder: Path, name: str) -> BinaryIO | None:
    """The figure's lock file, open (made if need be, never through a link), or None."""
    try:
        fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    except OSError:
        return None
    return os.fdopen(fd, "r+b")


def keep(folder: Path, name: str, html: HTML) -> None:
    """Keep the figure ``name`` in ``folder`` (its lock held): written aside, then renamed."""
    tmp = folder / f".{name}.html.tmp"
    with os.fdopen(os.open(tmp, _WRITE, 0o600), "w", encoding="utf-8") as f:
        f.write(str(html))
    os.replace(tmp, folder / f"{name}.html")


def release(lock: BinaryIO | None) -> None:
    """Unlock and close a lock of :func:`lock_if_free` (None: nothing to do)."""
    if lock is not None:
        with lock, contextlib.suppress(OSError):
            unlock_file(lock)


#: In the figures' folder: locked while the tables only the figures read are still being
#: written (:class:`audit.report.rundir.LateWrites`, once the figures were drawn aside).
TABLES_LOCK = "tables.lock"


def tables_pending(folder: Path) -> BinaryIO:
    """Lock the figures' ``folder``'s :data:`TABLES_LOCK` (made now, before the notebook runs)
    and return the open file: whoever draws a figure from the run folder waits until it is
    released (:class:`~audit.report.rundir.LateWrites` does once the tables are written)."""
    f = os.fdopen(os.open(folder / TABLES_LOCK, _WRITE | os.O_NONBLOCK, 0o600), "r+b")
    try:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # a pipe planted there
            raise OSError(f"{folder / TABLES_LOCK}: not a regular file")
        lock_file(f)
    except BaseException:
        f.close()
        raise
    return f


def tables_written(folder: Path) -> None:
    """Wait until the tables the figures' ``folder``'s :data:`TABLES_LOCK` stands for are
    written (no such lock: no wait)."""
    try:
        fd = os.open(folder / TABLES_LOCK, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError:  # no late tables (or a link planted there: never followed)
        return
    with os.fdopen(fd, "rb") as f, contextlib.suppress(OSError):
        if stat.S_ISREG(os.fstat(fd).st_mode):  # not a pipe or a device planted there
            lock_file(f)
            unlock_file(f)


def _kept(done: Path) -> HTML | None:
    """The figure kept in ``done``; None when there is none (or something other than a file
    there, such as a symbolic link: never followed, and replaced by the figure drawn)."""
    try:
        with os.fdopen(os.open(done, os.O_RDONLY | _NOFOLLOW), encoding="utf-8") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            return HTML(f.read())
    except OSError:  # none yet; a link (ELOOP)
        return None


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW


def shared(draw: Callable[[R], HTML]) -> Callable[[R], HTML]:
    """Decorate a figure function of a :class:`~audit.report.rundir.RunData`: drawn in
    matplotlib's default style (whatever a user's ``matplotlibrc`` or IPython start-up files
    set, in either process: the same picture whoever draws it), and, when the run folder has
    a :data:`FOLDER`, drawn once for both processes."""

    @wraps(draw)
    def figure(run: R) -> HTML:
        folder = run.run_dir / FOLDER if run.run_dir is not None else None
        if folder is None or not is_ours(folder):  # none (or a link planted: never followed)
            return in_report_style(draw, run)
        return drawn_once(folder, draw.__name__, lambda: in_report_style(draw, run))

    return figure


def in_report_style(draw: Callable[[T], HTML], run: T) -> HTML:
    """``draw(run)`` in the report's one style: matplotlib's defaults, times in UTC (a style
    never sets ``timezone``, so it is set here), and no warning shown (a label in a script the
    font lacks would warn into the report when the kernel draws it, and nowhere when the report
    process does)."""
    import matplotlib.style  # start-up: matplotlib (0.3 s) only where a figure is drawn

    with (
        warnings.catch_warnings(),
        matplotlib.style.context("default"),
        matplotlib.rc_context({"timezone": "UTC"}),
    ):
        warnings.simplefilter("ignore")
        return draw(run)


def remove_figures_folder(run_dir: Path) -> None:
    """Remove the figures' folder of ``run_dir``, or whatever else is there (a link is
    removed, never followed)."""
    folder = run_dir / FOLDER
    if is_ours(folder):
        shutil.rmtree(folder, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            os.unlink(folder)


def figures_folder(run_dir: Path) -> Path:
    """Make the figures' folder of ``run_dir`` (private to this user), where a child of
    :func:`audit.report.ahead.drawing_aside` leaves the figures it drew."""
    folder = run_dir / FOLDER
    folder.mkdir(mode=0o700)
    return folder


def is_ours(folder: Path) -> bool:
    """Whether ``folder`` is a directory of this user (not a link planted in its place)."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
