"""Derived frames that the figures and the report's tables show: pure, frames in, frames out.

The figures (:mod:`audit.plotting`) only draw what these return, so that tests check numbers
rather than pixels: the daily delivery failure rate, the retries against the schedule, and
Kaplan–Meier curves as steps from time 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from audit.analysis.deliveries import _columns, _typed, count_where
from audit.analysis.engine import run
from audit.analysis.survival import MISSING_GROUP
from audit.errors import ParameterError, SchemaError

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = [
    "PERIOD_UNITS",
    "RETRY_KINDS",
    "TIME_UNITS",
    "daily_failure_rate",
    "daily_failure_rule",
    "failure_counts",
    "failure_rate",
    "km_steps",
    "period_start",
    "plain_label",
    "require_columns",
    "retry_delays",
    "retry_rule",
    "utc_times",
]

TIME_UNITS: dict[str, float] = {"s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
"""Seconds per unit accepted by ``unit=`` arguments."""

#: Kinds of retry in :func:`retry_delays`, in drawing order.
RETRY_KINDS = ("on_schedule", "after_missing", "off_schedule")


def require_columns(df: object, columns: Iterable[str], name: str, hint: str) -> pd.DataFrame:
    """``df`` if it is a DataFrame with ``columns`` (an empty one may lack them), else a
    one-line :class:`SchemaError` naming what is missing and ``hint`` (where to get it)."""
    if not isinstance(df, pd.DataFrame):
        raise SchemaError(f"{name} must be a DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing and len(df):
        raise SchemaError(f"{name} lacks column(s) {', '.join(missing)}; use {hint}")
    return df


def utc_times(times: pd.Series) -> pd.Series:
    """Timezone-aware times converted to UTC; naive times are a :class:`SchemaError`."""
    if not isinstance(times.dtype, pd.DatetimeTZDtype):
        raise SchemaError(f"{times.name} must be timezone-aware UTC times, got {times.dtype}")
    utc: pd.Series = times.dt.tz_convert("UTC")
    return utc


def plain_label(value: object) -> str:
    """A group or id as a string; a missing value becomes ``"(missing)"``."""
    return MISSING_GROUP if value is None or value is pd.NA or value != value else str(value)


def plain_labels(values: pd.Series) -> pd.Series:
    """:func:`plain_label` of every value; a string column is labelled once per distinct value
    (a million rows of a few subscriptions: 0.8 s one by one)."""
    if not isinstance(values.dtype, pd.StringDtype):
        return values.map(plain_label)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    labels = np.array([*(str(u) for u in uniques), MISSING_GROUP], dtype=object)
    dtype = values.iloc[:0].map(plain_label).dtype  # as map gives it
    return pd.Series(labels[codes], index=values.index, dtype=dtype, name=values.name)


def _unit_scale(unit: str) -> float:
    if unit not in TIME_UNITS:
        raise ParameterError(f"unit must be one of {', '.join(TIME_UNITS)}, got {unit!r}")
    return TIME_UNITS[unit]


# --------------------------------------------------------------------------------------------
# Takedown curves
# --------------------------------------------------------------------------------------------


def km_steps(km: pd.DataFrame, *, unit: str = "h") -> pd.DataFrame:
    """Kaplan–Meier rows ready to draw as step curves: a time-0 row per group, times in ``unit``.

    Parameters
    ----------
    km : pandas.DataFrame
        From :func:`audit.analysis.survival_by.kaplan_meier_by` (``group``, ``time`` in seconds,
        ``at_risk``, ``censored``, ``survival``, ``ci_lower``, ``ci_upper``); without a
        ``group`` column every row belongs to group ``"all"`` (e.g. from ``kaplan_meier``).
    unit : {"s", "min", "h", "d"}, default "h"
        Unit of the returned ``time``.

    Returns
    -------
    pandas.DataFrame
        Columns ``group, n, time, survival, ci_lower, ci_upper, censored``; per group, in order
        of first appearance, a row ``(0, 1, 1, 1, 0)`` and then the KM rows sorted by time.
        ``n`` is the group's size (``at_risk`` of its first row).

    Examples
    --------
    >>> km = pd.DataFrame({"group": ["a", "a"], "time": [3600.0, 7200.0], "at_risk": [2, 1],
    ...                    "events": [1, 0], "censored": [0, 1], "survival": [0.5, 0.5],
    ...                    "ci_lower": [0.1, 0.1], "ci_upper": [0.9, 0.9]})
    >>> km_steps(km)[["group", "time", "survival"]].to_string(index=False)
    'group  time  survival\\n    a   0.0       1.0\\n    a   1.0       0.5\\n    a   2.0       0.5'
    """
    cols = ["time", "at_risk", "censored", "survival", "ci_lower", "ci_upper"]
    require_columns(km, cols, "km", "audit.analysis.survival_by.kaplan_meier_by()")
    scale = _unit_scale(unit)
    out_cols = ["group", "n", "time", "survival", "ci_lower", "ci_upper", "censored"]
    if km.empty:
        dtypes = {"group": "str", "n": "int64", "censored": "int64"}
        return pd.DataFrame({c: pd.Series(dtype=dtypes.get(c, "float64")) for c in out_cols})
    groups = (
        km["group"].map(plain_label) if "group" in km.columns else pd.Series("all", index=km.index)
    )
    frames = []
    for name in dict.fromkeys(groups):
        g = km[groups == name].sort_values("time", kind="stable")
        n = int(g["at_risk"].iloc[0])
        frames.append(
            pd.DataFrame(
                {
                    "group": name,
                    "n": n,
                    "time": np.concatenate(([0.0], g["time"].to_numpy(float) / scale)),
                    "survival": np.concatenate(([1.0], g["survival"].to_numpy(float))),
                    "ci_lower": np.concatenate(([1.0], g["ci_lower"].to_numpy(float))),
                    "ci_upper": np.concatenate(([1.0], g["ci_upper"].to_numpy(float))),
                    "censored": np.concatenate(([0], g["censored"].to_numpy("int64"))),
                }
            )
        )
    out = pd.concat(frames, ignore_index=True)[out_cols]
    return out.astype({"group": "str", "n": "int64", "censored": "int64"})


# --------------------------------------------------------------------------------------------
# Delivery failures and retries
# --------------------------------------------------------------------------------------------

_ATTEMPT_COLS = ("attempt_no", "success", "received_at", "subscription_id")
#: The periods of :func:`period_start`, by the name a question takes.
PERIOD_UNITS: dict[str, str] = {"day": "D", "week": "W", "month": "M"}


def period_start(time: ir.TimestampValue, period: str) -> ir.TimestampValue:
    """The first instant of the UTC ``period`` (``day``, ``week``: ISO, from Monday, or
    ``month``) that holds ``time``, as an expression."""
    return time.truncate(PERIOD_UNITS[period])


def failure_counts(attempt: ir.BooleanValue, success: ir.BooleanValue) -> dict[str, ir.Scalar]:
    """The failure rule as aggregates over the rows where ``attempt`` holds: ``attempts``,
    ``answered`` (``success`` known: an answer captured) and ``failed`` (``success`` false:
    not 2xx, or after the 5 s timeout; :func:`audit.analysis.deliveries.succeeded`). Read by
    :func:`daily_failure_rate` and :func:`audit.analysis.questions.counts_by_period`."""
    return {
        "attempts": count_where(attempt),
        "answered": count_where(attempt & success.notnull()),
        "failed": count_where(attempt & ~success),
    }


def failure_rate(failed: ir.IntegerValue, answered: ir.IntegerValue) -> ir.FloatingValue:
    """``failed / answered``; NULL (NaN) when nothing was answered."""
    import ibis  # start-up: only an analysis needs it

    return ibis.ifelse(
        answered > 0, failed.cast("float64") / answered, ibis.literal(None, "float64")
    )


def daily_failure_rule(attempts: ir.Table, *, fill_days: bool) -> ir.Table:
    """The rows of :func:`daily_failure_rate`: ``attempts`` (``attempt_no, success,
    received_at, subscription_id``) to a row per UTC day and subscription (``day,
    subscription_id, attempts, answered, failed, failure_rate``), sorted by both; with
    ``fill_days``, every day from the first to the last for every subscription seen."""
    import ibis  # start-up: only an analysis needs it

    a = attempts.filter(attempts.attempt_no.notnull() & attempts.received_at.notnull())
    a = a.mutate(
        day=period_start(a.received_at, "day"),
        subscription_id=a.subscription_id.fill_null(MISSING_GROUP),
    )
    counts = a.group_by(["day", "subscription_id"]).aggregate(
        **failure_counts(a.attempt_no.notnull(), a.success)
    )
    if fill_days:
        span = a.aggregate(lo=a.day.min(), hi=a.day.max())
        one = ibis.interval(days=1)
        days = span.select(day=ibis.range(span.lo, span.hi + one, one).unnest())
        grid = days.cross_join(counts.select("subscription_id").distinct())
        got = grid.left_join(
            counts,
            [grid.day == counts.day, grid.subscription_id == counts.subscription_id],
        )
        counts = got.select(
            day=grid.day,
            subscription_id=grid.subscription_id,
            **{c: counts[c].fill_null(0) for c in ("attempts", "answered", "failed")},
        )
    return counts.mutate(failure_rate=failure_rate(counts.failed, counts.answered)).order_by(
        ["day", "subscription_id"]
    )


def daily_failure_rate(attempts: pd.DataFrame, *, fill_days: bool = True) -> pd.DataFrame:
    """Share of valid delivery attempts that did not succeed, per UTC day and subscription.

    An attempt is a row with an ``attempt_no`` (a ``valid`` delivery, see
    :func:`audit.analysis.deliveries.infer_attempts`); it failed when ``success`` is false (not
    2xx, or
    answered after the 5 s timeout). Attempts whose answer was not captured (``success`` NA)
    are counted in ``attempts`` but left out of the rate. ``webhook.test`` deliveries count:
    they are deliveries too.

    Parameters
    ----------
    attempts : pandas.DataFrame
        From :func:`audit.analysis.deliveries.infer_attempts`.
    fill_days : bool, default True
        Add a row, with zero counts and a NaN rate, for every day between the first and the
        last and every subscription seen, so that a line plot shows gaps instead of bridging.

    Returns
    -------
    pandas.DataFrame
        Columns ``day`` (midnight UTC), ``subscription_id`` (``"(missing)"`` when unknown),
        ``attempts``, ``answered``, ``failed`` (int64) and ``failure_rate`` (float:
        ``failed / answered``, NaN when nothing was answered), sorted by day then subscription.

    Examples
    --------
    >>> from audit.analysis.deliveries import infer_attempts
    >>> t = pd.Timestamp("2026-10-01 12:00", tz="UTC")
    >>> verified = pd.DataFrame({  # one event, answered 500, 500, then 200
    ...     "verdict": "valid", "subscription_id": "wh_1", "event_id": "evt_1",
    ...     "event": "incident.created", "incident_id": "inc_1",
    ...     "received_at": [t, t + pd.Timedelta("31s"), t + pd.Timedelta("150s")],
    ...     "response_status": [500, 500, 200], "response_ms": [120, 95, 80]})
    >>> rates = daily_failure_rate(infer_attempts(verified, as_of=t + pd.Timedelta("1D")))
    >>> print(rates[["day", "attempts", "failed", "failure_rate"]].to_string(index=False))
                          day  attempts  failed  failure_rate
    2026-10-01 00:00:00+00:00         3       2      0.666667
    """
    require_columns(
        attempts, _ATTEMPT_COLS, "attempts", "audit.analysis.deliveries.infer_attempts()"
    )
    out_cols = ["day", "subscription_id", "attempts", "answered", "failed", "failure_rate"]
    unit = "ns"
    if len(attempts):
        unit = utc_times(attempts["received_at"]).dt.unit  # naive times: one line
    table = _typed(_columns(attempts, list(_ATTEMPT_COLS)))
    got = run(daily_failure_rule, {"attempts": table}, fill_days=fill_days).to_pandas()
    out: pd.DataFrame = got.astype(
        {
            "day": f"datetime64[{unit}, UTC]",
            "subscription_id": "str",
            **dict.fromkeys(("attempts", "answered", "failed"), "int64"),
            "failure_rate": "float64",
        }
    )[out_cols]
    return out


def retry_rule(attempts: ir.Table) -> ir.Table:
    """The rows of :func:`retry_delays`: the retries of ``attempts`` (``subscription_id,
    event_id, attempt_no, delay_s, expected_delay_s, on_schedule, missing_before, _row``),
    numbered 2 or later with a delay, in input order, with their ``kind``."""
    import ibis  # start-up: only an analysis needs it

    a = attempts
    r = a.filter((a.attempt_no >= 2).fill_null(False) & a.delay_s.notnull())
    missing = r.missing_before.fill_null(0)
    kind = ibis.cases(
        (~r.on_schedule.fill_null(False), "off_schedule"),
        (missing > 0, "after_missing"),
        else_="on_schedule",
    )
    return r.order_by("_row").select(
        subscription_id=r.subscription_id.fill_null(MISSING_GROUP),
        event_id=r.event_id,
        attempt_no=r.attempt_no.cast("int64"),
        delay_s=r.delay_s.cast("float64"),
        expected_delay_s=r.expected_delay_s.cast("float64"),
        missing_before=missing.cast("int64"),
        kind=kind,
    )


def retry_delays(attempts: pd.DataFrame) -> pd.DataFrame:
    """Retries (attempt 2 or later) with their observed and scheduled delays, and a kind.

    Parameters
    ----------
    attempts : pandas.DataFrame
        From :func:`audit.analysis.deliveries.infer_attempts`.

    Returns
    -------
    pandas.DataFrame
        Columns ``subscription_id, event_id, attempt_no, delay_s, expected_delay_s,
        missing_before, kind``, one row per observed retry. ``kind`` is ``off_schedule`` (the
        delay matched no scheduled attempt), ``after_missing`` (on schedule, but attempts in
        between never reached the receiver, so the expected delay is a sum) or
        ``on_schedule``.

    Examples
    --------
    >>> from audit.analysis.deliveries import infer_attempts
    >>> t = pd.Timestamp("2026-10-01 12:00", tz="UTC")
    >>> verified = pd.DataFrame({  # one event, answered 500, 500, then 200
    ...     "verdict": "valid", "subscription_id": "wh_1", "event_id": "evt_1",
    ...     "event": "incident.created", "incident_id": "inc_1",
    ...     "received_at": [t, t + pd.Timedelta("31s"), t + pd.Timedelta("150s")],
    ...     "response_status": [500, 500, 200], "response_ms": [120, 95, 80]})
    >>> delays = retry_delays(infer_attempts(verified, as_of=t + pd.Timedelta("1D")))
    >>> print(delays[["attempt_no", "delay_s", "expected_delay_s", "kind"]].to_string(index=False))
     attempt_no  delay_s  expected_delay_s        kind
              2     31.0              30.0 on_schedule
              3    119.0             120.0 on_schedule
    """
    cols = ["attempt_no", "delay_s", "expected_delay_s", "on_schedule", "missing_before"]
    require_columns(attempts, cols, "attempts", "audit.analysis.deliveries.infer_attempts()")
    columns = ["subscription_id", "event_id", *cols]
    table = _typed(_columns(attempts, columns, ordered=True))
    got = run(retry_rule, {"attempts": table})
    out: pd.DataFrame = got.to_pandas().astype(
        {
            "subscription_id": "str",
            "event_id": "str",
            "attempt_no": "int64",
            "delay_s": "float64",
            "expected_delay_s": "float64",
            "missing_before": "int64",
            "kind": "str",
        }
    )
    return out
