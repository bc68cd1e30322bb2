"""Time parsing shared by the loaders: ISO 8601 or Unix seconds to UTC nanoseconds."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

__all__ = ["ns_to_iso", "parse_iso_ns", "parse_time_ns"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
