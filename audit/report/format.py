"""Readable tables: human column labels with units, rounded values, escaped cells.

:func:`table` takes a frame and a column spec ``{column: (label, kind)}``; kinds are ``text``,
``url`` (defanged), ``label`` (an enum value, ``_`` shown as a space), ``file`` (its name;
the full path is in the appendix), ``hash``, ``int``, ``float``, ``pct`` (a share 0-1),
``s``/``ms``/``h`` (durations, in hours and minutes), ``time`` (UTC) and
``status``/``severity`` (badges).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from audit.report.markup import badge, esc, text
from audit.safe import defang

if TYPE_CHECKING:
    from pandas._libs.tslibs.nattype import NaTType

__all__ = ["HTML", "duration", "percent", "table"]

Spec = Mapping[str, tuple[str, str]]


class HTML:
    """Rich-display wrapper (what ``IPython.display.HTML`` does), importable anywhere."""

    def __init__(self, body: str) -> None:
        self.body = body

    def _repr_html_(self) -> str:
        return self.body

    def __str__(self) -> str:
        return self.body

    def __add__(self, other: object) -> HTML:
        return HTML(self.body + str(other))


def duration(seconds: object) -> str:
    """Seconds as ``42 s``, ``12 min``, ``3 h 05 min`` or ``2 d 3 h``; empty when missing.

    >>> [duration(x) for x in (0.042, 4.2, 720, 11_100, 183_600, None)]
    ['42 ms', '4.2 s', '12 min', '3 h 05 min', '2 d 3 h', '']
    """
    if seconds is None or not isinstance(seconds, int | float) or math.isnan(seconds):
        return ""
    s = float(seconds)
    sign, s = ("-" if s < 0 else ""), abs(s)
    if s < 1:
        return f"{sign}{s * 1000:.0f} ms"
    if s < 60:
        return f"{sign}{s:.2g} s" if s < 10 else f"{sign}{s:.0f} s"
    if s < 3600:
        return f"{sign}{s / 60:.0f} min"
    if s < 48 * 3600:
        h, m = divmod(round(s / 60), 60)
        return f"{sign}{h} h {m:02d} min"
    d, h = divmod(round(s / 3600), 24)
    return f"{sign}{d} d {h} h"


def percent(share: float) -> str:
    """A share as a percentage with enough digits to not read as zero.

    >>> [percent(x) for x in (0.0, 0.00039, 0.0503, 0.978, 1.0)]
    ['0%', '0.04%', '5.0%', '97.8%', '100%']
    """
    if share == 0 or share == 1:
        return f"{share:.0%}"
    return f"{share:.2%}" if abs(share) < 0.01 else f"{share:.1%}"


def _cell(value: object, kind: str) -> tuple[str, bool]:
    """(HTML, numeric?) for one cell."""
    if isinstance(value, list | tuple | np.ndarray):
        value = ", ".join(map(str, list(value)))
    elif isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "", False
    if kind in ("status", "severity"):
        return badge(str(value)), False
    if kind == "time":
        # NaT for a missing time; a cell that is no time raises, as pandas does
        ts: pd.Timestamp | NaTType = pd.Timestamp(value)  # type: ignore[arg-type]  # any cell
        return (esc(f"{ts:%Y-%m-%d %H:%M}") if not pd.isna(ts) else ""), False
    if kind in ("s", "ms", "h"):
        try:
            v = float(value)  # type: ignore[arg-type]  # any cell: TypeError caught below
        except (TypeError, ValueError):
            return text(value), False
        factor = {"s": 1.0, "ms": 1e-3, "h": 3600.0}[kind]
        return esc(duration(v * factor)), True
    if kind == "pct":
        try:
            return esc(percent(float(value))), True  # type: ignore[arg-type]  # as for "s"
        except (TypeError, ValueError):
            return text(value), False
    if kind == "url":  # a domain has no scheme: defang it anyway
        return esc(defang(str(value))), False
    if kind == "label":
        return text(str(value).replace("_", " ")), False
    if kind == "file":
        return text(PurePath(str(value)).name), False
    if kind == "hash":
        return f"<span class='uid'>{esc(value)}</span>", False
    if kind == "int":
        try:
            return esc(f"{int(value):,}"), True  # type: ignore[call-overload]  # as for "s"
        except (TypeError, ValueError):
            return text(value), False
    if kind == "float":
        try:
            return esc(f"{float(value):,.2f}"), True  # type: ignore[arg-type]  # as for "s"
        except (TypeError, ValueError):
            return text(value), False
    if isinstance(value, bool):
        return ("yes" if value else "no"), False
    return text(value), False


def table(
    df: pd.DataFrame | None,
    spec: Spec,
    *,
    caption: str,
    max_rows: int = 25,
    full: str | None = None,
    empty: str | None = None,
) -> HTML:
    """An HTML table of the ``spec`` columns present in ``df``; cut after ``max_rows`` rows
    with a pointer to the full file ``full`` (relative to the run folder).

    >>> str(table(pd.DataFrame({"n": [1234]}), {"n": ("Records", "int")}, caption="C"))[:68]
    '<table class="audit"><caption>C</caption><thead><tr><th>Records</th>'
    """
    if df is None or df.empty:
        return HTML(f"<p class='note'>{esc(caption)}: {esc(empty or 'none')}.</p>")
    cols = [c for c in spec if c in df.columns]
    head = "".join(f"<th>{esc(spec[c][0])}</th>" for c in cols)
    rows = []
    for rec in df.head(max_rows)[cols].itertuples(index=False, name=None):
        cells = []
        for value, col in zip(rec, cols, strict=True):
            body, numeric = _cell(value, spec[col][1])
            cells.append(f"<td class='num'>{body}</td>" if numeric else f"<td>{body}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = ""
    if len(df) > max_rows:
        where = f" in <code>{esc(full)}</code>" if full else ""
        more = f"<p class='note'>First {max_rows} of {len(df):,} rows; all of them{where}.</p>"
    return HTML(
        f'<table class="audit"><caption>{esc(caption)}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{more}"
    )
