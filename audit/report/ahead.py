"""The report's figures drawn ahead of the notebook's kernel, which goes from the first.

Either by a child forked as soon as the report tables exist (:func:`drawing_aside`: it starts
well before the kernel, so it draws in the kernel's order, into memory until the run folder's
``.figures`` is made, then leaves them there; if the kernel catches up, the rest from the
last), or, where no child may be forked, by a thread of the ``audit report`` process while the
kernel runs (:class:`DrawingAhead`, from the last). Each figure is drawn once, under its lock
(:mod:`audit.report.drawing`), by whichever side comes to it first.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import pandas as pd

from audit.ingest.query import SIDE_SHARE
from audit.ingest.side import Pending, aside_if_room
from audit.report import figures
from audit.report.drawing import (
    FOLDER,
    drawn_once,
    in_report_style,
    is_ours,
    keep,
    lock_if_free,
    release,
    remove_figures_folder,
)
from audit.report.format import HTML
from audit.report.params import Period
from audit.report.rundir import RunData, open_run

__all__ = ["DrawingAhead", "draw_from_last", "drawing_aside"]


def _figure(name: str) -> Callable[[RunData], HTML]:
    """The figure function ``name`` of :mod:`audit.report.figures`, undecorated (drawn here,
    not through :func:`~audit.report.drawing.shared`)."""
    function: Callable[[RunData], HTML] = getattr(figures, name).__wrapped__
    return function


class DrawingAhead:
    """Draw ``names`` (figure functions of :mod:`audit.report.figures`) last to first in a
    daemon thread while the kernel renders ``run_dir``; a context manager. ``run``: the
    :class:`~audit.report.rundir.RunData` to draw from (the run's frames, already in memory:
    :func:`audit.report.figures.drawn_tables`), else the run folder is read.

    On exit the thread is asked to stop after its current figure and waited for, and the
    figures' folder is removed. An error in the thread only stops it: the kernel then draws
    that figure itself, and reports any error in its cell.
    """

    def __init__(self, run_dir: Path, names: Sequence[str], run: RunData | None = None) -> None:
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

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.join()
        remove_figures_folder(self._run_dir)

    def join(self) -> None:
        """Wait until the thread has stopped (it has drawn what it could, or was asked to stop)."""
        if self._thread is not None:
            self._thread.join()

    def _work(self) -> None:
        with contextlib.suppress(Exception):
            run = self._run if self._run is not None else open_run(self._run_dir)
            draw_from_last(self.folder, self._names, run, self.drawn, self._stop)


def draw_from_last(
    folder: Path,
    names: Sequence[str],
    run: RunData,
    drawn: list[str] | None = None,
    stop: threading.Event | None = None,
) -> list[str]:
    """Draw the figures ``names`` of ``run`` into ``folder``
    (:func:`~audit.report.drawing.drawn_once`), from the last, until the kernel holds one or
    has drawn it (it has the rest) or ``stop`` is set; the names drawn, appended to ``drawn``
    as they are."""
    drawn = [] if drawn is None else drawn
    for name in reversed(names):
        if stop is not None and stop.is_set():
            break
        drawing = functools.partial(in_report_style, _figure(name), run)
        if drawn_once(folder, name, drawing, wait=False) is None:
            break
        drawn.append(name)
    return drawn


def drawing_aside(
    run_dir: Path, period: Period, tables: dict[str, pd.DataFrame]
) -> Pending[list[str]] | None:
    """Start drawing the report's figures in a forked process (:func:`audit.ingest.side.aside`)
    from the run's ``tables`` as they are now, before the run folder ``run_dir`` exists: the
    figures' 2 CPU-seconds at 1M deliveries then run on the other core while this process
    runs the controls and writes the run folder, rather than while the kernel waits for them
    (``docs/scale.md``).

    The child keeps the figures it draws in memory until this process makes the figures'
    folder (:func:`~audit.report.drawing.figures_folder`, under the run lock), then leaves each
    there under its lock (:func:`~audit.report.drawing.drawn_once`) unless the kernel holds or
    has drawn it, and draws the rest the same way. A child that fails or is killed leaves the
    rest to the kernel: the same figures, only later. Stop it
    (:meth:`~audit.ingest.side.Pending.cancel`) once the notebook has run.

    None when no process was forked (:func:`~audit.ingest.side.aside` refused, or this
    process holds over :data:`~audit.ingest.query.SIDE_SHARE` of the memory available: the
    child keeps what this process frees later alive until it ends).
    """
    run = RunData(
        manifest={"period": period.as_dict()},
        findings=pd.DataFrame(),
        run_dir=run_dir,
        tables=dict(tables),
    )
    # matplotlib (0.3 s) is imported by the child only, where it draws the first figure.
    draw = functools.partial(_drawn_then_left, run_dir / FOLDER, None, run)
    return aside_if_room(draw, share=SIDE_SHARE, rerun=False)


def _drawn_then_left(
    folder: Path, names: Sequence[str] | None, run: RunData, poll_s: float = 0.02
) -> list[str]:
    """The child of :func:`drawing_aside`: the figures ``names`` (None: the report's,
    :data:`audit.report.figures.FIGURES`) drawn in the kernel's order
    (it comes later and needs the first ones first), each left in ``folder`` once it exists,
    hand over hand (the next one's lock taken before the last one's is released: the kernel
    waits for each). Only a kernel that started before the child left its first figures can
    hold or have drawn one the child has not: at the first such, the rest from the last, to
    meet it in the middle. The names it left there, in the order drawn."""
    names = figures.FIGURES if names is None else names

    def draw(name: str) -> Callable[[], HTML]:
        return lambda: in_report_style(_figure(name), run)

    drawn: dict[str, HTML] = {}
    for name in names:
        if is_ours(folder):
            break
        drawn[name] = draw(name)()
    while not is_ours(folder):  # this process is stopped if the folder never comes
        time.sleep(poll_s)

    # Hand over hand (the kernel waits for each figure rather than take the next free lock in
    # between and draw it itself); the figures drawn already are the first ones of ``names``.
    def next_lock(k: int) -> BinaryIO | None:
        return lock_if_free(folder, names[k + 1]) if k + 1 < len(names) else None

    left: list[str] = []
    held = lock_if_free(folder, names[0]) if names else None
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
                keep(folder, name, html)
            except BaseException:
                release(following)
                raise
            finally:
                release(held)
            left.append(name)
        held = following
    return left
