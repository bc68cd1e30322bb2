"""Time parsing, stated once: ISO 8601 or Unix seconds to UTC, and the one ``as_of`` rule.

Decision (documented in docs/tables.md): an ``as_of`` *argument* must carry a zone (``Z`` or an
offset); a zone-less value is refused rather than guessed, because a report's verdicts depend on
it. Capture *records* without an offset are read as UTC and flagged (``had_offset`` False).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from audit.errors import ParameterError
from audit.redaction import shown

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FIRST_YEAR",
    "LAST_YEAR",
    "NS_MAX",
    "NS_MIN",
    "as_utc",
    "check_years",
    "duration",
    "ns_in_range",
    "ns_to_iso",
    "parse_iso_ns",
    "parse_time_ns",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: The times a table can hold: nanoseconds since the epoch in a signed 64-bit integer (the
#: smallest is pandas' NaT), from 1677-09-21 to 2262-04-11.
NS_MIN, NS_MAX = -(2**63) + 1, 2**63 - 1
#: The whole years inside that range: what a time argument (``--as-of``, ``as_of``, a period)
#: may name.
FIRST_YEAR, LAST_YEAR = 1678, 2261


def ns_in_range(ns: int) -> bool:
    """Whether UTC nanoseconds fit a table's times (:data:`NS_MIN` to :data:`NS_MAX`).

    >>> ns_in_range(0), ns_in_range(parse_iso_ns("9999-01-01T00:00:00Z")[0])
    (True, False)
    """
    return NS_MIN <= ns <= NS_MAX


def check_years(value: str, name: str = "as_of") -> None:
    """ParameterError naming :data:`FIRST_YEAR` to :data:`LAST_YEAR` when the text ``value``
    starts with a year outside them (checked before parsing: pandas would overflow)."""
    m = re.match(r"\s*([0-9]{4})-", value)
    if m is not None and not FIRST_YEAR <= int(m[1]) <= LAST_YEAR:
        raise ParameterError(f"{name} {shown(value)}: years {FIRST_YEAR} to {LAST_YEAR} only")


def parse_iso_ns(value: object) -> tuple[int, bool]:
    """Parse an ISO 8601 string to UTC nanoseconds since the epoch.

    Returns ``(ns, had_offset)``. A value without an offset is read as UTC (``had_offset`` False).
    Raises ValueError for anything else.
    """
    if not isinstance(value, str):
        raise ValueError("not a string")
    dt = datetime.fromisoformat(value.strip())
    had_offset = dt.tzinfo is not None
    if not had_offset:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - _EPOCH
    ns = (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000
    return ns, had_offset


def parse_time_ns(value: object) -> tuple[int, bool]:
    """Parse ISO 8601 or Unix seconds (int or float, not bool) to UTC nanoseconds.

    Returns ``(ns, had_offset)``; numbers count as having an offset (they are UTC by definition).
    """
    if isinstance(value, bool):
        raise ValueError("a boolean is not a time")
    if isinstance(value, int):
        return value * 1_000_000_000, True
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        return round(value * 1e9), True
    return parse_iso_ns(value)


def ns_to_iso(ns: int) -> str:
    """Format UTC nanoseconds as ISO 8601 with a ``Z`` suffix (microsecond precision)."""
    dt = _EPOCH + timedelta(microseconds=ns // 1_000)
    return dt.isoformat(timespec="microseconds").replace("+00:00", "Z")


def as_utc(value: object, *, name: str = "as_of") -> pd.Timestamp:
    """The one rule for a time argument: a zone-aware timestamp, converted to UTC (ns unit).

    Accepts a :class:`pandas.Timestamp`, :class:`datetime.datetime` or ISO 8601 string with a
    zone. A zone-less value, NaT, a time outside the years :data:`FIRST_YEAR` to
    :data:`LAST_YEAR` or anything unparsable raises :class:`ParameterError` naming ``name``.

    >>> as_utc("2026-11-01T02:00:00+02:00")
    Timestamp('2026-11-01 00:00:00+0000', tz='UTC')
    >>> as_utc("2026-11-01")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    audit.errors.ParameterError: as_of '2026-11-01' has no UTC offset; it must be timezone-aware ...
    """
    import pandas as pd  # start-up: the verify path parses times without pandas

    if isinstance(value, str):
        check_years(value, name)
    try:
        ts = pd.Timestamp(value)  # type: ignore[arg-type]  # any value is tried; TypeError says no
    except (TypeError, ValueError, OverflowError):
        raise ParameterError(f"{name} {value!r} is not a timestamp (ISO 8601, zoned)") from None
    if pd.isna(ts):
        raise ParameterError(f"{name} must be a timestamp, got {value!r}")
    if ts.tzinfo is None:
        raise ParameterError(
            f"{name} {value!r} has no UTC offset; it must be timezone-aware (add Z or +00:00)"
        )
    try:
        return ts.tz_convert("UTC").as_unit("ns")
    except (ValueError, OverflowError):  # a datetime in year 9999, or an offset past the end
        raise ParameterError(
            f"{name} {shown(value)}: years {FIRST_YEAR} to {LAST_YEAR} only"
        ) from None


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
