"""Time to takedown: durations with right censoring, Kaplan–Meier curves, quantiles with CIs.

The clock starts at an incident's creation (``start="created"``) or at its burn start
(``start="burn"``) and stops at ``takedown_at``. An incident not taken down by ``as_of`` is
right-censored at ``min(closed_at, as_of)``: a median over taken-down incidents alone would be
biased low. Rows whose duration cannot be computed, or would be negative, are excluded *and
counted* (see :func:`takedown_durations`).

The estimator itself (Kaplan–Meier, quantiles, by group) is :mod:`audit.analysis.survival`.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import pandas as pd

from audit.analysis.survival import check_alpha, kaplan_meier, km_quantile
from audit.analysis.survival_by import duration_groups, warn_small_groups
from audit.errors import ParameterError, SchemaError
from audit.timeutil import as_utc

__all__ = [
    "DURATION_COLUMNS",
    "EXCLUSION_REASONS",
    "INCIDENT_COLUMNS",
    "ClockStart",
    "TakedownDurations",
    "check_clock_start",
    "takedown_durations",
    "takedown_summary",
]

#: Which timestamp starts the takedown clock: ``created_at`` or ``burn_started_at``.
ClockStart = Literal["created", "burn"]

INCIDENT_COLUMNS: tuple[str, ...] = (  # required input of takedown_durations()
    "incident_id",
    "incident_class",
    "source",
    "created_at",
    "burn_started_at",
    "takedown_at",
    "closed_at",
)
DURATION_COLUMNS: tuple[str, ...] = (  # its output, in order
    "incident_id",
    "incident_class",
    "source",
    "start_at",
    "end_at",
    "duration_s",
    "observed",
)
EXCLUSION_REASONS: tuple[str, ...] = (
    "duplicate_incident_id",
    "no_start",
    "start_after_as_of",
    "negative_duration",
)
"""Why :func:`takedown_durations` excludes a row; the first reason that applies is recorded.

- ``duplicate_incident_id``: the id occurs more than once in the input (every copy is excluded:
  which one is right cannot be told).
- ``no_start``: the start timestamp (``created_at`` or ``burn_started_at``) is missing.
- ``start_after_as_of``: the clock starts after ``as_of``.
- ``negative_duration``: the end (takedown, or the censoring time) precedes the start.
"""


# --------------------------------------------------------------------------------------------
# Durations from the incidents table
# --------------------------------------------------------------------------------------------


class TakedownDurations(NamedTuple):
    """What :func:`takedown_durations` returns; unpacks as ``durations, counts, excluded``.

    Attributes
    ----------
    durations : pandas.DataFrame
        Usable rows: ``incident_id, incident_class, source, start_at, end_at, duration_s,
        observed``.
    exclusions : dict[str, int]
        Count of excluded rows per reason; every reason of :data:`EXCLUSION_REASONS` is a key.
    excluded : pandas.DataFrame
        The excluded input rows (input columns) with a ``reason`` column.
    """

    durations: pd.DataFrame
    exclusions: dict[str, int]
    excluded: pd.DataFrame


def _utc_column(df: pd.DataFrame, name: str) -> pd.Series:
    col = df[name]
    if isinstance(col.dtype, pd.DatetimeTZDtype):
        utc: pd.Series = col.dt.tz_convert("UTC")
        return utc
    if col.isna().all():
        return pd.Series(pd.NaT, index=df.index, dtype="datetime64[ns, UTC]")
    raise SchemaError(
        f"column {name!r} must be a timezone-aware datetime (UTC), got dtype {col.dtype}"
    )


def check_clock_start(start: str) -> ClockStart:
    """``start`` as a :data:`ClockStart`; a ParameterError if it is neither.

    >>> check_clock_start("burn")
    'burn'
    """
    if start == "created":
        return "created"
    if start == "burn":
        return "burn"
    raise ParameterError(f"start must be 'created' or 'burn', got {start!r}")


def takedown_durations(
    incidents: pd.DataFrame,
    *,
    as_of: pd.Timestamp,
    start: ClockStart = "created",
) -> TakedownDurations:
    """Durations to takedown, right-censored, from the incidents table.

    The clock runs from ``created_at`` (``start="created"``) or ``burn_started_at``
    (``start="burn"``) to ``takedown_at``. An incident without a takedown at or before
    ``as_of`` is censored at ``min(closed_at, as_of)`` (``as_of`` when ``closed_at`` is
    missing). Rows that cannot give a duration are excluded and counted, never dropped
    silently: ``len(durations) + len(excluded) == len(incidents)``.

    Parameters
    ----------
    incidents : pandas.DataFrame
        Columns ``incident_id, incident_class, source, created_at, burn_started_at,
        takedown_at, closed_at``; timestamps tz-aware (UTC), NaT when missing.
    as_of : pandas.Timestamp
        The analysis time, timezone-aware. Nothing after it is known.
    start : {"created", "burn"}, default "created"
        Which timestamp starts the clock.

    Returns
    -------
    TakedownDurations
        ``(durations, exclusions, excluded)``; see :class:`TakedownDurations`.
        ``duration_s`` is in seconds (float); ``observed`` is True for a takedown.
        Both frames keep the input order and have a fresh RangeIndex.

    Raises
    ------
    ParameterError
        ``as_of`` is naive or not a timestamp, or ``start`` is unknown.
    SchemaError
        A column is missing or a timestamp column is not tz-aware.

    Examples
    --------
    >>> utc = lambda s: pd.Timestamp(s, tz="UTC")
    >>> inc = pd.DataFrame({
    ...     "incident_id": ["a", "b"], "incident_class": ["phishing"] * 2, "source": ["api"] * 2,
    ...     "created_at": [utc("2024-01-01 00:00"), utc("2024-01-01 00:00")],
    ...     "burn_started_at": [pd.NaT, pd.NaT],
    ...     "takedown_at": [utc("2024-01-01 06:00"), pd.NaT],
    ...     "closed_at": [pd.NaT, pd.NaT]})
    >>> d, counts, excluded = takedown_durations(inc, as_of=utc("2024-01-02"))
    >>> print(d[["incident_id", "duration_s", "observed"]].to_string(index=False))
    incident_id  duration_s  observed
              a     21600.0      True
              b     86400.0     False
    """
    start = check_clock_start(start)  # also for a caller without a type checker
    as_of_utc = as_utc(as_of)
    if not isinstance(incidents, pd.DataFrame):
        raise SchemaError(f"incidents must be a DataFrame, got {type(incidents).__name__}")
    missing = [c for c in INCIDENT_COLUMNS if c not in incidents.columns]
    if missing:
        raise SchemaError(f"incidents lacks column(s): {', '.join(missing)}")

    inc = incidents.reset_index(drop=True)
    start_at = _utc_column(inc, "created_at" if start == "created" else "burn_started_at")
    takedown = _utc_column(inc, "takedown_at")
    closed = _utc_column(inc, "closed_at")

    observed = (takedown.notna() & (takedown <= as_of_utc)).to_numpy()
    censor_at = closed.where(closed.notna() & (closed < as_of_utc), as_of_utc)
    end_at = takedown.where(observed, censor_at)

    reason = pd.Series(pd.NA, index=inc.index, dtype="string")
    checks = (
        ("duplicate_incident_id", inc["incident_id"].duplicated(keep=False)),
        ("no_start", start_at.isna()),
        ("start_after_as_of", start_at > as_of_utc),
        ("negative_duration", end_at < start_at),
    )
    for name, mask in checks:
        reason = reason.mask(reason.isna() & mask.fillna(False).astype(bool), name)
    keep = reason.isna().to_numpy()

    durations = pd.DataFrame(
        {
            "incident_id": inc["incident_id"],
            "incident_class": inc["incident_class"],
            "source": inc["source"],
            "start_at": start_at,
            "end_at": end_at,
            "duration_s": (end_at - start_at).dt.total_seconds().astype("float64"),
            "observed": observed,
        }
    )[keep].reset_index(drop=True)
    excluded = inc[~keep].assign(reason=reason[~keep]).reset_index(drop=True)
    counts = reason[~keep].value_counts()
    exclusions = {name: int(counts.get(name, 0)) for name in EXCLUSION_REASONS}
    return TakedownDurations(durations, exclusions, excluded)


# --------------------------------------------------------------------------------------------
# Per group
# --------------------------------------------------------------------------------------------


def takedown_summary(
    durations: pd.DataFrame, by: str | None = None, *, alpha: float = 0.05
) -> pd.DataFrame:
    """Per group: n, events, censored, median and p90 time to takedown in hours, with CIs.

    Parameters
    ----------
    durations : pandas.DataFrame
        Has ``duration_s`` (seconds) and ``observed``.
    by : str or None, default None
        Column to group by; None gives one row, group "all".
    alpha : float, default 0.05
        ``1 - alpha`` is the confidence level of the quantiles' limits.

    Returns
    -------
    pandas.DataFrame
        Columns ``group, n, events, censored, median_h, median_ci_lower_h,
        median_ci_upper_h, median_reached, p90_h, p90_ci_lower_h, p90_ci_upper_h,
        p90_reached``. A time that is not reached (the curve, or the band for a limit, stays
        above ``1 - q`` because of censoring) is NaN; ``*_reached`` says whether the estimate
        itself was reached, so NaN never has to be guessed at.

    Warns
    -----
    SmallSampleWarning
        When a group has fewer than :data:`SMALL_SAMPLE_N` observations.

    Examples
    --------
    >>> d = pd.DataFrame({"duration_s": [3600.0 * h for h in range(1, 13)],
    ...                   "observed": [True] * 12})
    >>> s = takedown_summary(d)
    >>> print(s[["group", "n", "median_h", "median_reached", "p90_h"]].to_string(index=False))
    group  n  median_h  median_reached  p90_h
      all 12       6.0            True   11.0
    """
    alpha = check_alpha(alpha)
    groups = duration_groups(durations, by)
    warn_small_groups(groups)

    def hours(v: float | None) -> float:
        return math.nan if v is None else v / 3600.0

    rows = []
    for name, g in groups:
        km = kaplan_meier(g["duration_s"], g["observed"], alpha=alpha)
        row: dict[str, object] = {
            "group": name,
            "n": len(g),
            "events": int(km["events"].sum()),
            "censored": int(km["censored"].sum()),
        }
        for label, q in (("median", 0.5), ("p90", 0.9)):
            res = km_quantile(km, q)
            row[f"{label}_h"] = hours(res.time)
            row[f"{label}_ci_lower_h"] = hours(res.ci_lower)
            row[f"{label}_ci_upper_h"] = hours(res.ci_upper)
            row[f"{label}_reached"] = res.reached
        rows.append(row)
    columns = [
        "group",
        "n",
        "events",
        "censored",
        *(
            f"{label}_{part}"
            for label in ("median", "p90")
            for part in ("h", "ci_lower_h", "ci_upper_h", "reached")
        ),
    ]
    out = pd.DataFrame(rows, columns=columns)
    dtypes = {c: "float64" for c in columns if c.endswith("_h")}
    dtypes.update({"n": "int64", "events": "int64", "censored": "int64"})
    dtypes.update({c: "bool" for c in columns if c.endswith("_reached")})
    dtypes["group"] = "str"
    return out.astype(dtypes)
