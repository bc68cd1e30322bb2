"""Progress of a long command where a person waits: files done of a total, records, their rate.

The library functions that do long work (``audit.ingest.store.ingest``,
``audit.ingest.verdicts.verdict_table``, ``audit.demo.simulate``) take an optional
:class:`Progress` and count into it where the work happens: a file as it is finished, records
as each piece of a file is finished. A plain :class:`Progress` only counts; a
:class:`TerminalProgress` also draws one line on a terminal, redrawn in place (``\\r``) at most
a few times a second and ended with a newline. :func:`on_terminal` gives one only when the
stream is a terminal and the user did not ask for ``--quiet``: piped or redirected, a command's
stderr holds exactly what it held without progress.

In Python (:func:`audit.open`), a load draws a ``tqdm`` bar instead: :func:`bar_class` picks
the widget bar in a Jupyter kernel that has ``ipywidgets``, else the text bar, without the
``TqdmWarning: IProgress not found`` that ``tqdm.auto`` prints where ``ipywidgets`` is missing.
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TextIO

__all__ = ["Progress", "TerminalProgress", "bar_class", "counting", "on_terminal"]

#: The shortest time between two drawings of the line (at most four a second).
EVERY_S = 0.25


class Progress:
    """Counts of the work done so far: files done of ``files_total``, records."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.files_total: int | None = None
        self.files_done = 0
        self.records = 0
        self._clock = clock
        self.started = clock()

    def expect_files(self, total: int) -> None:
        """``total`` files are to be done (shown as ``done/total``)."""
        self.files_total = total
        self.changed()

    def file_done(self, count: int = 1) -> None:
        """``count`` more files are finished."""
        self.files_done += count
        self.changed()

    def files_finished(self, count: int) -> None:
        """The first ``count`` files are finished (files done in order: a piece of the next
        one has come back)."""
        if count > self.files_done:
            self.file_done(count - self.files_done)

    def add_records(self, count: int) -> None:
        """``count`` more records are done (read and verified, or made)."""
        self.records += count
        self.changed()

    def elapsed_s(self) -> float:
        return max(0.0, self._clock() - self.started)

    def line(self) -> str:
        """The counts in words: ``12/31 files, 48,210 records, 95,120 records/s, 0.5 s``."""
        words = []
        if self.files_total is not None:
            words.append(f"{self.files_done}/{self.files_total} files")
        words.append(f"{self.records:,} records")
        elapsed = self.elapsed_s()
        if elapsed > 0 and self.records:
            words.append(f"{self.records / elapsed:,.0f} records/s")
        words.append(f"{elapsed:.1f} s")
        return ", ".join(words)

    def changed(self) -> None:
        """Called after every count (a plain Progress shows nothing)."""


def counting(progress: Progress | None) -> Progress:
    """``progress``, or a fresh :class:`Progress` that only counts (for ``progress=None``)."""
    return Progress() if progress is None else progress


class TerminalProgress(Progress):
    """A :class:`Progress` drawn on ``stream`` (a terminal) as one line, ``label: counts``,
    redrawn in place (``\\r``) at most every ``every_s`` seconds, the first time ``every_s``
    after the start (a command done sooner shows only its final line); :meth:`close` ends it."""

    def __init__(
        self,
        stream: TextIO,
        label: str,
        *,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(clock)
        self._stream = stream
        self._label = label
        self._every_s = every_s
        self._drawn_at = self.started  # when the line was last drawn (or the start)
        self._width = 0  # the length of the line on the screen (0: none is shown)
        self.drawn = 0  # how many times the line was drawn
        self.closed = False

    def changed(self) -> None:
        if self.closed:
            return
        now = self._clock()
        if now - self._drawn_at >= self._every_s:
            self._draw(now)

    def _draw(self, now: float) -> None:
        text = f"{self._label}: {self.line()}"
        pad = " " * max(0, self._width - len(text))  # what is left of a longer line
        self._write(f"\r{text}{pad}")
        self._width = len(text)
        self._drawn_at = now
        self.drawn += 1

    def clear(self) -> None:
        """Take the line off the screen (before another message); the next count redraws it."""
        if self._width:
            self._write("\r" + " " * self._width + "\r")
            self._width = 0
            self._drawn_at = self._clock() - self._every_s

    def close(self, *, done: bool = True) -> None:
        """End the line (once): ``done``, with the final counts; else (the work failed) with
        the counts so far if a line was shown, else nothing is written."""
        if self.closed:
            return
        self.closed = True
        if done or self.drawn:
            self._draw(self._clock())
            self._write("\n")

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed terminal: nothing to show
            self._stream.write(text)
            self._stream.flush()


@contextlib.contextmanager
def on_terminal(
    label: str, *, quiet: bool = False, stream: TextIO | None = None, every_s: float = EVERY_S
) -> Iterator[TerminalProgress | None]:
    """A :class:`TerminalProgress` on ``stream`` (default: stderr) for a block, closed when the
    block ends (with the final counts; after an error, only if a line was shown, so the error
    starts a line of its own); None when ``quiet`` or when the stream is not a terminal (a
    pipe, a file). While it is shown, a warning first takes the line off the screen."""
    out = sys.stderr if stream is None else stream
    if quiet or not _is_terminal(out):
        yield None
        return
    progress = TerminalProgress(out, label, every_s=every_s)
    shown = warnings.showwarning

    def show(*args: Any, **kwargs: Any) -> None:
        progress.clear()
        shown(*args, **kwargs)

    warnings.showwarning = show
    try:
        yield progress
    except BaseException:
        progress.close(done=False)
        raise
    finally:
        warnings.showwarning = shown
        progress.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method, or closed
        return False


def bar_class() -> Any:
    """The ``tqdm`` class for a progress bar in Python: ``tqdm.notebook.tqdm`` (a widget) in a
    Jupyter kernel where ``ipywidgets`` can be imported, else ``tqdm.std.tqdm`` (text on
    stderr: a terminal, or a kernel without widgets such as one papermill or nbclient runs);
    None without tqdm. Never warns: ``tqdm.auto`` warns ``IProgress not found`` where
    ``ipywidgets`` is missing, in red at the top of a notebook.
    """
    try:
        from tqdm.std import tqdm  # type: ignore[import-untyped]  # optional; no stubs
    except ImportError:
        return None
    if not _in_kernel():
        return tqdm
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from tqdm.notebook import IProgress  # type: ignore[import-untyped]  # no stubs
            from tqdm.notebook import tqdm as widget  # optional, as above
        except ImportError:
            return tqdm
    return tqdm if IProgress is None else widget


def _in_kernel() -> bool:
    """Whether this is a Jupyter kernel (where a widget could be shown); IPython is never
    imported here."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    shell = get() if callable(get) else None
    return "ipykernel.zmqshell" in sys.modules and type(shell).__name__ == "ZMQInteractiveShell"
