"""Readable values and tables: human units, rounded numbers, cells for the templates.

:func:`table` takes a frame and a column spec ``{column: (label, kind)}``; kinds are ``text``,
``url`` (defanged), ``label`` (an enum value, ``_`` shown as a space, a known code as words),
``code`` (a known code as words, anything else as it is: a column of codes and ids),
``own`` (the toolkit's own text: escaped, never defanged), ``id`` (kept on one line),
``file`` (its name; the full path is in the appendix), ``hash``, ``int``, ``float``, ``pct``
(a share 0-1),
``s``/``ms``/``h`` (durations, in hours and minutes), ``time`` (UTC) and
``status``/``severity`` (badges). It renders ``templates/html/table.j2`` (autoescaped).
:func:`human` formats one evidence value by its key's unit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import NamedTuple

import numpy as np
import pandas as pd

from audit.report.templating import render
from audit.safe import defang
from audit.timeutil import duration
from audit.words import words

__all__ = [
    "HTML",
    "MISSING",
    "Cell",
    "cell",
    "duration",
    "human",
    "number",
    "percent",
    "table",
    "when",
]

Spec = Mapping[str, tuple[str, str]]


class HTML:
    """Rich-display wrapper (what ``IPython.display.HTML`` does), importable anywhere."""

    def __init__(self, body: str) -> None:
        self.body = body

    def _repr_html_(self) -> str:
        return self.body

    def __html__(self) -> str:  # markupsafe: already HTML, not escaped again by a template
        return self.body

    def __str__(self) -> str:
        return self.body

    def __add__(self, other: object) -> HTML:
        return HTML(self.body + str(other))


def percent(share: float) -> str:
    """A share as a percentage with enough digits to not read as zero.

    >>> [percent(x) for x in (0.0, 0.00039, 0.0503, 0.978, 1.0)]
    ['0%', '0.04%', '5.0%', '97.8%', '100%']
    """
    if math.isnan(share):
        return MISSING
    if share == 0 or share == 1:
        return f"{share:.0%}"
    return f"{share:.2%}" if abs(share) < 0.01 else f"{share:.1%}"


#: What a missing value reads as (never ``None``, ``NaN`` or ``NaT``).
MISSING = "not recorded"
#: Ids up to this length are kept on one line (paper and phone); a longer value wraps.
ID_MAX = 48


class Cell(NamedTuple):
    """One formatted value for a template: ``kind`` says how the template shows it.

    ``text`` (attacker-controlled: escaped, URLs and hosts defanged), ``plain`` (our own
    formatting: escaped), ``uid`` (monospace, on one line), ``id`` (an id from the data:
    defanged, on one line), ``word`` (a code as words: defanged, never broken inside a word),
    ``badge`` (a status or severity) or ``missing`` (greyed).
    """

    value: str
    kind: str = "text"
    numeric: bool = False


def number(value: float) -> str:
    """A number for people: thousands separators, no scientific notation, 3 significant
    digits below 1000.

    >>> [number(x) for x in (4815, 3610.4, 12.3456, 0.005029, 1e-9, 2.5e12)]
    ['4,815', '3,610', '12.3', '0.00503', '0.000000001', '2,500,000,000,000']
    """
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        return MISSING
    if v == int(v) or abs(v) >= 1000:
        return f"{v:,.0f}"
    return str(np.format_float_positional(v, precision=3, fractional=False, trim="-"))


def when(value: object) -> str:
    """An instant as ``YYYY-MM-DD HH:MM UTC``; :data:`MISSING` when absent, the text as it is
    when it is no time.

    >>> when("2026-10-16T15:00:00+02:00"), when(None), when("soon")
    ('2026-10-16 13:00 UTC', 'not recorded', 'soon')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    try:
        ts = pd.Timestamp(value)  # type: ignore[arg-type]  # any value: errors caught below
    except (ValueError, TypeError):
        return str(value)
    if pd.isna(ts):
        return MISSING
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    return f"{ts:%Y-%m-%d %H:%M} UTC"


_ISO = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d")
#: Key endings that give an evidence value its unit, and the factor to seconds.
_UNITS = (("_ms", 1e-3), ("_s", 1.0), ("_h", 3600.0), ("_days", 86400.0))


def unit_of(key: str) -> float | None:
    """Seconds per unit named by a key's ending (``_ms``, ``_s``, ``_h``, ``_days``), or None.

    >>> unit_of("max_wait_h"), unit_of("ack_ms"), unit_of("events")
    (3600.0, 0.001, None)
    """
    for ending, factor in _UNITS:
        if key.endswith(ending):
            return factor
    return None


def human(key: str, value: object, *, share: bool = False) -> str:
    """One evidence value for people, by its key: a number in the unit the key names
    (``*_h``, ``*_s``, ``*_ms``, ``*_days``: the value's label names that unit, one unit per
    column), a percentage for ``*rate`` or ``*share`` (or ``share``), a UTC time for an ISO
    8601 text, thousands separators, ``yes``/``no``, a known code as words, and
    :data:`MISSING` for a missing value.

    >>> [human(k, v) for k, v in (("max_wait_h", 3610.4), ("rate", 0.005029),
    ...  ("events", 4851), ("valid_from", None), ("small_sample", True),
    ...  ("fetched_at", "2026-10-16T15:00:00+00:00"), ("ack_p50_ms", 42.0),
    ...  ("threshold_days", 90), ("verdict", "missing_signature"))]
    ['3,610', '0.50%', '4,851', 'not recorded', 'yes', '2026-10-16 15:00 UTC', '42', '90', 'missing signature']
    """  # noqa: E501
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if share or key.endswith(("rate", "share")):
            return percent(float(value))
        return number(value)
    s = str(value)
    return when(s) if _ISO.match(s) else words(s)


def cell(value: object, kind: str) -> Cell:
    """One table cell of ``kind`` (see the module's docstring)."""
    if isinstance(value, list | tuple | np.ndarray):
        value = ", ".join(map(str, list(value)))
    elif isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return Cell(MISSING, "missing")
    if kind in ("status", "severity"):
        return Cell(str(value), "badge")
    if kind == "time":
        t = when(value)
        if t == MISSING:
            return Cell(MISSING, "missing")
        if t == str(value) or not t.endswith(" UTC"):  # no time: the cell's text, defanged
            return Cell(t)
        return Cell(t.removesuffix(" UTC"), "plain")
    numeric = _number_cell(value, kind)
    if numeric is not None:
        return numeric
    if kind == "url":  # a domain has no scheme: defang it anyway
        return Cell(str(defang(str(value))), "plain")
    if kind == "label":
        return Cell(words(value).replace("_", " "), "word")
    if kind == "code":
        return Cell(words(value), "word")
    if kind == "own":
        return Cell(str(value), "plain")
    if kind == "file":
        return Cell(PurePath(str(value)).name)
    if kind == "hash":
        return Cell(str(value), "uid")
    if kind == "id" and len(str(value)) <= ID_MAX:
        return Cell(str(value), "id")
    if isinstance(value, bool):
        return Cell("yes" if value else "no", "plain")
    return Cell(str(value))


def _number_cell(value: object, kind: str) -> Cell | None:
    """A numeric kind's cell, the value as text when it is no number, None for other kinds."""
    if kind not in ("s", "ms", "h", "pct", "int", "float"):
        return None
    try:
        v = float(value)  # type: ignore[arg-type]  # any cell: TypeError caught below
    except (TypeError, ValueError):
        return Cell(str(value))
    if math.isnan(v):
        return Cell(MISSING, "missing")
    if kind in ("s", "ms", "h"):
        shown = duration(v * {"s": 1.0, "ms": 1e-3, "h": 3600.0}[kind])
    elif kind == "pct":
        shown = percent(v)
    elif kind == "int":
        shown = f"{int(v):,}"
    else:
        shown = number(v)
    return Cell(shown, "plain", True)


def _kind(column: str, kind: str) -> str:
    """A text column of ids (``*_id``) keeps each id on one line."""
    return "id" if kind == "text" and column.endswith("_id") else kind


def table(
    df: pd.DataFrame | None,
    spec: Spec,
    *,
    caption: str,
    max_rows: int = 25,
    full: str | None = None,
    empty: str | None = None,
    missing: str = MISSING,
) -> HTML:
    """An HTML table of the ``spec`` columns present in ``df``, cut after ``max_rows`` rows;
    a cut table says "Showing the first N of TOTAL rows" and, with ``full`` (a table's name),
    links ``tables/<full>.csv`` and ``tables/<full>.parquet`` (the whole table, beside the
    report). A missing value reads ``missing``. Tables of 7 columns or more are ``wide``
    (they wrap, and print smaller). Ids (a ``text`` column named ``*_id``) and numbers never
    wrap.

    >>> html = str(table(pd.DataFrame({"n": [1234]}), {"n": ("Records", "int")}, caption="C"))
    >>> "<th>Records</th>" in html, "<td class=\\"num\\">1,234</td>" in html
    (True, True)
    """
    if df is None or df.empty:
        return HTML(render("table.j2", caption=caption, empty=empty or "none", rows=[]))
    cols = [c for c in spec if c in df.columns]
    kinds = [_kind(col, spec[col][1]) for col in cols]
    rows = []
    for rec in df.head(max_rows)[cols].itertuples(index=False, name=None):
        row = [cell(value, kind) for value, kind in zip(rec, kinds, strict=True)]
        rows.append([c._replace(value=missing) if c.kind == "missing" else c for c in row])
    return HTML(
        render(
            "table.j2",
            caption=caption,
            headers=[spec[c][0] for c in cols],
            rows=rows,
            total=len(df),
            full=full,
            wide=len(cols) >= 7,
            empty=empty or "none",
        )
    )
