"""A ^C while child processes are forked: noted, then delivered once they are made.

A ^C goes to the whole process group. Landing in a child that is still starting (Python's
after-fork hooks, multiprocessing's bootstrap), it was printed there as a traceback or as
"Exception ignored", and the child ran on or died mid-start. While children are forked, the
caller's SIGINT handler is replaced by one that only notes the signal (:func:`note`). A child
inherits it: a forked side process (:func:`audit.ingest.side.aside`) restores the caller's
handler (:func:`restore`) and, if a ^C was noted, ends quietly; a pool's worker
(:func:`audit.ingest.workers.fork_pool`) ignores ^C from then on. The caller restores its handler
and has the noted ^C delivered again (:func:`deliver_noted`), as it handles ^C
(``KeyboardInterrupt``: "audit: aborted").
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

#: What :func:`signal.getsignal` gives back: a function, ``SIG_DFL``, ``SIG_IGN``, or None.
Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

__all__ = ["deliver_noted", "note", "restore"]


def note(noted: list[int]) -> Handler:
    """Note SIGINT in ``noted`` instead of handling it; the handler it replaced (None: left as
    it was, which Python cannot restore: one installed outside Python, or not the main
    thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = signal.getsignal(signal.SIGINT)
    if handler is not None:
        signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    return handler


def restore(handler: Handler) -> None:
    """Put back the handler :func:`note` replaced."""
    if handler is not None:
        signal.signal(signal.SIGINT, handler)


def deliver_noted(noted: list[int]) -> None:
    """Deliver again a ^C noted while children were made (as this process handles it now)."""
    if noted:
        signal.raise_signal(signal.SIGINT)
