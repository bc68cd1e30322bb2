"""Figures drawn once, by whichever of two processes comes to them first.

The report's figures are drawn ahead of the notebook's kernel, which goes from the first: by a
child forked as soon as the report tables exist (:func:`drawing_aside`: it starts well before
the kernel, so it draws in the kernel's order, into memory until the run folder's ``.figures``
is made, then leaves them there; if the kernel catches up, the rest from the last), or, where
no child may be forked, by a thread of the ``audit report`` process while the kernel runs
(:class:`DrawingAhead`, from the last). Each figure is drawn under an exclusive lock on
``<run>/.figures/<name>.lock`` and kept as ``<name>.html``:

* the kernel takes each lock, waiting while the other side draws that figure, then uses
  the kept HTML or draws the figure itself;
* the other side only takes a free lock: the thread stops at the first figure the kernel
  holds or has drawn (the kernel has the rest), the child then turns to the last ones;
* the child takes the next figure's lock before it releases the last one's (hand over hand),
  so that a kernel close behind it waits for each figure rather than take the next one's free
  lock in the moment between and draw it itself.

A process that dies releases its lock (``flock``), so nothing waits on it; a figure it did not
finish is drawn by the other. Without a ``.figures`` folder of this user (a notebook run by
hand, a run folder rendered again, a link planted there), a figure is simply drawn. The
pipeline removes the folder before the run folder is renamed into place.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from audit.locks import lock_file, try_lock_file, unlock_file
from audit.report.format import HTML

if TYPE_CHECKING:
    from audit.ingest.side import Pending
    from audit.report.params import Period

__all__ = [
    "FOLDER",
    "TABLES_LOCK",
    "DrawingAhead",
    "draw_from_last",
    "drawing_aside",
    "drawn_once",
    "figures_folder",
    "in_report_style",
    "remove_figures_folder",
    "shared",
    "tables_pending",
    "tables_written",
]

#: The folder of a run folder where figures are kept while the report renders.
FOLDER = ".figures"


def drawn_once(folder: Path, name: str, draw: Callable[[], HTML], *, wait: bool = True
               ) -> HTML | None:  # fmt: skip
    """The figure ``name``: kept in ``folder`` by whoever drew it, or drawn now and kept.

    With ``wait`` false, returns None instead of waiting when the other process holds the lock
    or has drawn the figure already (the report process's way to stop). Where the lock cannot
    be taken at all (a file system without ``flock``), the kernel draws every figure itself and
    the report process none.
    """
    if not wait:
        lock = _taken(folder, name)
        if lock is None:
            return None
        try:
            html = draw()
            _keep(folder, name, html)
            return html
        finally:
            _released(lock)
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
            _keep(folder, name, html)
            return html
        finally:
            unlock_file(lock)


def _taken(folder: Path, name: str):
    """The figure's lock taken without waiting (an open file: :func:`_released`), or None when
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
        _released(lock)
        return None
    return lock


def _lock_file_of(folder: Path, name: str):
    """The figure's lock file, open (made if need be, never through a link), or None."""
    try:
        fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    except OSError:
        return None
    return os.fdopen(fd, "r+b")


def _keep(folder: Path, name: str, html: HTML) -> None:
    """Keep the figure ``name`` in ``folder`` (its lock held): written aside, then renamed."""
    tmp = folder / f".{name}.html.tmp"
    with os.fdopen(os.open(tmp, _WRITE, 0o600), "w", encoding="utf-8") as f:
        f.write(str(html))
    os.replace(tmp, folder / f"{name}.html")


def _released(lock) -> None:
    """Unlock and close a lock of :func:`_taken` (None: nothing to do)."""
    if lock is not None:
        with lock, contextlib.suppress(OSError):
            unlock_file(lock)


#: In the figures' folder: locked while the tables only the figures read are still being
#: written (:class:`audit.report.rundir.LateWrites`, once the figures were drawn aside).
TABLES_LOCK = "tables.lock"


def tables_pending(folder: Path):
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


def shared(draw: Callable) -> Callable:
    """Decorate a figure function of a :class:`~audit.report.rundir.RunData`: drawn in
    matplotlib's default style (whatever a user's ``matplotlibrc`` or IPython start-up files
    set, in either process: the same picture whoever draws it), and, when the run folder has
    a :data:`FOLDER`, drawn once for both processes."""

    @wraps(draw)
    def figure(run):
        folder = run.run_dir / FOLDER if run.run_dir is not None else None
        if folder is None or not _ours(folder):  # none (or a link planted: never followed)
            return in_report_style(draw, run)
        return drawn_once(folder, draw.__name__, lambda: in_report_style(draw, run))

    return figure


def in_report_style(draw: Callable, run) -> HTML:
    """``draw(run)`` in the report's one style: matplotlib's defaults, times in UTC (a style
    never sets ``timezone``, so it is set here), and no warning shown (a label in a script the
    font lacks would warn into the report when the kernel draws it, and nowhere when the report
    process does)."""
    import warnings

    import matplotlib
    import matplotlib.style

    with (
        warnings.catch_warnings(),
        matplotlib.style.context("default"),
        matplotlib.rc_context({"timezone": "UTC"}),
    ):
        warnings.simplefilter("ignore")
        return draw(run)


class DrawingAhead:
    """Draw ``names`` (figure functions of :mod:`audit.report.figures`) last to first in a
    daemon thread while the kernel renders ``run_dir``; a context manager. ``run``: the
    :class:`~audit.report.rundir.RunData` to draw from (the run's frames, already in memory:
    :func:`audit.report.figures.drawn_tables`), else the run folder is read.

    On exit the thread is asked to stop after its current figure and waited for, and the
    :data:`FOLDER` is removed. An error in the thread only stops it: the kernel then draws that
    figure itself, and reports any error in its cell.
    """

    def __init__(self, run_dir: Path, names: Sequence[str], run=None) -> None:
        self.folder = run_dir / FOLDER
        self._run_dir = run_dir
        self._run = run  # a RunData of the run's frames in memory; else read from run_dir
        self._names = tuple(names)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.drawn: list[str] = []

    def __enter__(self) -> DrawingAhead:
        self.folder.mkdir(mode=0o700)
        self._thread = threading.Thread(target=self._work, name="audit-figures", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.join()
        remove_figures_folder(self._run_dir)

    def join(self) -> None:
        """Wait until the thread has stopped (it has drawn what it could, or was asked to stop)."""
        if self._thread is not None:
            self._thread.join()

    def _work(self) -> None:
        from audit.report.rundir import open_run

        with contextlib.suppress(Exception):
            run = self._run if self._run is not None else open_run(self._run_dir)
            draw_from_last(self.folder, self._names, run, self.drawn, self._stop)


def draw_from_last(folder: Path, names: Sequence[str], run, drawn: list[str] | None = None,
                   stop: threading.Event | None = None) -> list[str]:  # fmt: skip
    """Draw the figures ``names`` of ``run`` into ``folder`` (:func:`drawn_once`), from the
    last, until the kernel holds one or has drawn it (it has the rest) or ``stop`` is set;
    the names drawn, appended to ``drawn`` as they are."""
    from audit.report import figures

    drawn = [] if drawn is None else drawn
    for name in reversed(names):
        if stop is not None and stop.is_set():
            break
        function = getattr(figures, name).__wrapped__
        drawing = lambda f=function: in_report_style(f, run)  # noqa: E731
        if drawn_once(folder, name, drawing, wait=False) is None:
            break
        drawn.append(name)
    return drawn


def drawing_aside(run_dir: Path, period: Period, tables: dict) -> Pending | None:
    """Start drawing the report's figures in a forked process (:func:`audit.ingest.side.aside`)
    from the run's ``tables`` as they are now, before the run folder ``run_dir`` exists: the
    figures' 2 CPU-seconds at 1M deliveries then run on the other core while this process
    runs the controls and writes the run folder, rather than while the kernel waits for them
    (``docs/scale.md``, "Eighteenth pass").

    The child keeps the figures it draws in memory until this process makes the figures'
    folder (:func:`figures_folder`, under the run lock), then leaves each there under its lock
    (:func:`drawn_once`) unless the kernel holds or has drawn it, and draws the rest the same
    way. A child that fails or is killed leaves the rest to the kernel: the same figures, only
    later. Stop it (:meth:`~audit.ingest.side.Pending.cancel`) once the notebook has run.

    None when no process was forked (:func:`~audit.ingest.side.aside` refused, or this
    process holds over :data:`~audit.ingest.query.SIDE_SHARE` of the memory available: the
    child keeps what this process frees later alive until it ends).
    """
    from audit.ingest.query import SIDE_SHARE
    from audit.ingest.side import aside_if_room
    from audit.report.rundir import RunData

    run = RunData(manifest={"period": period.as_dict()}, findings=pd.DataFrame(),
                  run_dir=run_dir, tables=dict(tables))  # fmt: skip
    # The figures' module (matplotlib: 0.3 s) is imported by the child only.
    draw = functools.partial(_drawn_then_left, run_dir / FOLDER, None, run)
    return aside_if_room(draw, share=SIDE_SHARE, rerun=False)


def remove_figures_folder(run_dir: Path) -> None:
    """Remove the figures' folder of ``run_dir``, or whatever else is there (a link is
    removed, never followed)."""
    folder = run_dir / FOLDER
    if _ours(folder):
        shutil.rmtree(folder, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            os.unlink(folder)


def figures_folder(run_dir: Path) -> Path:
    """Make the figures' folder of ``run_dir`` (private to this user), where a child of
    :func:`drawing_aside` leaves the figures it drew."""
    folder = run_dir / FOLDER
    folder.mkdir(mode=0o700)
    return folder


def _drawn_then_left(folder: Path, names: Sequence[str] | None, run, poll_s: float = 0.02
                     ) -> list[str]:  # fmt: skip
    """The child of :func:`drawing_aside`: the figures ``names`` (None: the report's,
    :data:`audit.report.figures.FIGURES`) drawn in the kernel's order
    (it comes later and needs the first ones first), each left in ``folder`` once it exists,
    hand over hand (the next one's lock taken before the last one's is released: the kernel
    waits for each). Only a kernel that started before the child left its first figures can
    hold or have drawn one the child has not: at the first such, the rest from the last, to
    meet it in the middle. The names it left there, in the order drawn."""
    from audit.report import figures

    names = figures.FIGURES if names is None else names

    def draw(name: str) -> Callable[[], HTML]:
        return lambda: in_report_style(getattr(figures, name).__wrapped__, run)

    drawn: dict[str, HTML] = {}
    for name in names:
        if _ours(folder):
            break
        drawn[name] = draw(name)()
    while not _ours(folder):  # this process is stopped if the folder never comes
        time.sleep(poll_s)

    # Hand over hand (the kernel waits for each figure rather than take the next free lock in
    # between and draw it itself); the figures drawn already are the first ones of ``names``.
    def next_lock(k: int):
        return _taken(folder, names[k + 1]) if k + 1 < len(names) else None

    left: list[str] = []
    held = _taken(folder, names[0]) if names else None
    for k, name in enumerate(names):
        following = None
        if held is None:  # the kernel holds it or has drawn it
            if name not in drawn:  # it caught up: the rest from the last, to meet it
                return left + draw_from_last(folder, names[k + 1 :], run)
            following = next_lock(k)
        else:
            try:
                html = drawn.pop(name) if name in drawn else draw(name)()
                following = next_lock(k)
                _keep(folder, name, html)
            except BaseException:
                _released(following)
                raise
            finally:
                _released(held)
            left.append(name)
        held = following
    return left


def _ours(folder: Path) -> bool:
    """Whether ``folder`` is a directory of this user (not a link planted in its place)."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
