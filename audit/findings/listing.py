"""Which subscription listing snapshots describe a period: one rule, for the controls and the
report's banner alike.

A listing **covers** the period ``[start, end)`` when a snapshot was fetched in the period, or,
when none was, when the newest snapshot fetched before it was fetched at most
:data:`LISTING_MAX_AGE` (7 days) before the period's end. The snapshots judged are then those
fetched in the period, else that newest one. Otherwise the listing describes another time:
the controls that read it (SIG-05, SUB-01 to SUB-05) are ``skip`` with :func:`uncovered_reason`,
and the report says so at the top.
"""

from __future__ import annotations

import pandas as pd

from audit.timeutil import duration

__all__ = ["LISTING_MAX_AGE", "covering", "covers", "uncovered_reason"]

#: A snapshot fetched before the period covers it only when fetched at most this long before
#: the period's end.
LISTING_MAX_AGE = pd.Timedelta(days=7)


def covering(fetched: pd.Series, start: pd.Timestamp, end: pd.Timestamp) -> pd.Series:
    """The mask of the snapshot rows that cover ``[start, end)`` (see the module's rule):
    those fetched in the period, else those of the newest snapshot fetched before it when
    that one is at most :data:`LISTING_MAX_AGE` older than ``end``; else none.

    >>> t = pd.to_datetime(pd.Series(["2026-09-01", "2026-10-20"]), utc=True)
    >>> oct_ = pd.Timestamp("2026-10-01", tz="UTC"), pd.Timestamp("2026-11-01", tz="UTC")
    >>> covering(t, *oct_).tolist(), covering(t[:1], *oct_).tolist()
    ([False, True], [False])
    >>> day = pd.Timestamp("2026-09-03", tz="UTC"), pd.Timestamp("2026-09-04", tz="UTC")
    >>> covering(t, *day).tolist()  # fetched two days before a one-day period's end
    [True, False]
    """
    inside = ((fetched >= start) & (fetched < end)).fillna(False).astype(bool)
    if inside.any():
        return inside
    before = fetched[(fetched < start).fillna(False).astype(bool)]
    if before.empty or before.max() < end - LISTING_MAX_AGE:
        return pd.Series(False, index=fetched.index, dtype=bool)
    newest: pd.Series = (fetched == before.max()).fillna(False).astype(bool)
    return newest


def covers(fetched: pd.Series, start: pd.Timestamp, end: pd.Timestamp) -> bool:
    """Whether any snapshot covers ``[start, end)`` (:func:`covering`)."""
    return bool(covering(fetched, start, end).any())


def uncovered_reason(fetched: pd.Series, start: pd.Timestamp, end: pd.Timestamp) -> str:
    """Why no listing covers ``[start, end)``: none was given (before the period's end), or
    the newest was fetched too long before the period's end.

    >>> t = pd.to_datetime(pd.Series(["2026-08-31T00:00:00Z"]), utc=True)
    >>> oct_ = pd.Timestamp("2026-10-01", tz="UTC"), pd.Timestamp("2026-11-01", tz="UTC")
    >>> print(uncovered_reason(t, *oct_))  # doctest: +NORMALIZE_WHITESPACE
    No listing snapshot covers the period: the newest, fetched 2026-08-31 00:00 UTC, is 62 d
    0 h older than the period's end (a snapshot counts when fetched in the period, or before
    it at most 7 days before its end).
    >>> print(uncovered_reason(t[:0], *oct_))
    No listing snapshot fetched before the period's end was given.
    """
    before = fetched[(fetched < end).fillna(False).astype(bool)]
    if before.empty:
        return "No listing snapshot fetched before the period's end was given."
    newest = pd.Timestamp(before.max())
    newest = newest.tz_localize("UTC") if newest.tzinfo is None else newest.tz_convert("UTC")
    return (
        f"No listing snapshot covers the period: the newest, fetched {newest:%Y-%m-%d %H:%M} "
        f"UTC, is {duration((end - newest).total_seconds())} older than the period's end (a "
        "snapshot counts when fetched in the period, or before it at most "
        f"{LISTING_MAX_AGE.days} days before its end)."
    )
