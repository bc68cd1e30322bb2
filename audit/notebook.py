"""``audit`` in IPython and Jupyter: an :class:`~audit.errors.AuditError` is one line.

A deliberate error of the toolkit (a path that does not exist, a bad period, an unknown id)
already says in its message what is wrong; the 24-32 lines of library frames IPython draws
above it only hide that line. When ``audit`` is imported in an IPython shell (a Jupyter kernel,
papermill's kernel, a terminal ``ipython``), :func:`one_line_errors` is switched on: such an
error raised by a cell shows as ::

    InputError: /x: not an evidence store (no manifest.json); run audit ingest  [%tb: the traceback]

It is still an error (a Jupyter ``error`` output, the cell fails, papermill raises
``PapermillExecutionError`` with this ``ename`` and ``evalue``), ``%tb`` shows the full
traceback and ``%debug`` opens the debugger at it. Any other exception keeps IPython's
traceback.

Off: set ``AUDIT_TRACEBACK=full`` in the environment (before ``import audit``: it is then
never switched on; later, the next error shows in full), or call
``audit.notebook.one_line_errors(False)``. A handler the user set with IPython's
``set_custom_exc`` is left in place. Plain Python (no IPython shell) is never touched.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any

from audit.errors import AuditError
from audit.redaction import for_terminal, scrub

__all__ = ["ENV", "error_line", "one_line_errors", "shell"]

#: The environment variable that turns the one-line form off (``full``).
ENV = "AUDIT_TRACEBACK"

#: Said after the line: where the rest went.
HINT = "  [%tb: the traceback]"


def shell() -> Any:
    """The running IPython shell, or None (plain Python, or IPython imported but not running).

    IPython is never imported here: a shell exists only where IPython was imported already.
    """
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    return get() if callable(get) else None


def _full() -> bool:
    return os.environ.get(ENV, "").strip().lower() == "full"


def error_line(error: BaseException) -> str:
    """The one line shown for ``error``: ``ClassName: message``, known secrets cut and control
    characters escaped (a message may quote what the user typed).

    >>> from audit.errors import ParameterError
    >>> error_line(ParameterError("period: the end must be after the start"))
    'ParameterError: period: the end must be after the start'
    """
    message = " ".join(str(error).split("\n"))
    return for_terminal(scrub(f"{type(error).__name__}: {message}"))


def _show(
    ip: Any,
    etype: type[BaseException],
    value: BaseException,
    tb: TracebackType | None,
    tb_offset: int | None = None,
) -> None:
    """IPython's custom exception handler for :class:`AuditError` (run in place of its
    traceback): the error as one line, sent as the cell's error (IPython's own
    ``_showtraceback``: in a kernel an ``error`` message, in a terminal printed)."""
    if _full():
        ip.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return
    ip._get_exc_info((etype, value, tb))  # sys.last_*: what %tb and %debug read
    ip._showtraceback(etype, value, [error_line(value) + HINT])
    if getattr(ip, "call_pdb", False):  # %pdb on: as IPython does after a traceback
        ip.debugger(force=True)


def one_line_errors(on: bool = True) -> bool:
    """In the running IPython shell, show an :class:`~audit.errors.AuditError` raised by a cell
    as one line (``on``), or with IPython's full traceback again (``on=False``).

    Idempotent. Returns whether the one-line form is now on: False outside IPython, with
    ``AUDIT_TRACEBACK=full`` when switching on, and when another custom exception handler was
    set (it is kept).
    """
    ip = shell()
    if ip is None:
        return False
    current = tuple(getattr(ip, "custom_exceptions", ()))
    ours = current == (AuditError,)
    if not on:
        if ours:
            ip.set_custom_exc((), None)
        return False
    if ours:
        return True
    if current or _full():  # someone else's handler, or asked for full tracebacks
        return False
    ip.set_custom_exc((AuditError,), _show)
    return True
