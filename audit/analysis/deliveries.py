"""Delivery attempts and outcomes, inferred from what the receiver saw (spec section 6).

Only rows whose verdict is ``valid`` are the vendor's deliveries; the others belong to the
signature audit. Receivers see an attempt only if it reached them, so attempt numbers are
inferred from timing against the published schedule (0, 30 s, 2 min, 10 min, 1 h between
consecutive attempts) rather than from order alone.

All functions are pure: frames in, frames out, time enters as ``as_of``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa

from audit.analysis.engine import arrow_input, frame_of, run, settings
from audit.analysis.schedule import Tolerance, expected_delay, next_attempt
from audit.errors import ParameterError
from audit.spec import DELIVERY_TIMEOUT_MS, MAX_ATTEMPTS, TEST_EVENT, TEST_INCIDENT_PREFIX
from audit.tables import ATTEMPTS, EVENTS
from audit.timeutil import as_utc

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = [
    "ATTEMPT_COLUMNS",
    "LATENCY_QUANTILES",
    "OUTCOMES",
    "Tolerance",
    "attempts_rule",
    "count_where",
    "delivery_events_rule",
    "events_rule",
    "events_table",
    "expected_delay",
    "infer_attempts",
    "is_attempt",
    "is_test",
    "latency_rule",
    "latency_summary",
    "quantiles",
    "succeeded",
    "success_rates",
    "success_rule",
]

#: The columns :func:`infer_attempts` adds (declared in :data:`audit.tables.ATTEMPTS`).
ATTEMPT_COLUMNS = tuple(ATTEMPTS.names)
OUTCOMES = ("delivered", "exhausted", "pending", "lost", "unknown")


def is_test(event: pd.Series, incident_id: pd.Series) -> np.ndarray:
    """The one rule for test traffic: a ``webhook.test`` event or a test incident (its id starts
    with ``test_``). Computed once per delivery, as the ``is_test`` column of
    :func:`infer_attempts`; the events table and the controls read that column.

    >>> is_test(pd.Series(["webhook.test", "incident.created", None]),
    ...         pd.Series([None, "test_1", "inc_1"])).tolist()
    [True, True, False]
    """
    test_event = (event == TEST_EVENT).fillna(False).to_numpy(dtype=bool)
    prefix = incident_id.str.startswith(TEST_INCIDENT_PREFIX).fillna(False)
    return test_event | prefix.to_numpy(dtype=bool)


def _success(status: pd.Series, ms: pd.Series) -> pd.Series:
    """2xx within 5 s (``response_ms`` <= 5000 or unknown); NA when no status was captured."""
    ok = (status.between(200, 299) & ~(ms > DELIVERY_TIMEOUT_MS).fillna(False)).astype("boolean")
    return ok.mask(status.isna())


def infer_attempts(
    deliveries: pd.DataFrame,
    *,
    as_of: pd.Timestamp,
    tolerance: Tolerance | None = None,
) -> pd.DataFrame:
    """Add attempt columns to the valid deliveries, grouped by (subscription, event id).

    The first observed attempt is 1. Each later one takes the smallest attempt number after the
    previous one whose scheduled delay from the previous attempt matches the observed delay
    within the tolerance; the numbers skipped are counted in ``missing_before`` (attempts that
    never reached the receiver). When none matches, it is the next number and ``on_schedule``
    is false.

    Returns every input row, with ``is_test`` (bool, :func:`is_test`) for every row; the columns
    ``attempt_no`` (Int64), ``delay_s``, ``expected_delay_s`` (Float64), ``on_schedule``
    (boolean), ``missing_before`` (Int64) and ``success`` (boolean) are filled for valid rows
    with an event id, NA elsewhere.

    Examples
    --------
    >>> t = pd.Timestamp("2026-10-01 12:00", tz="UTC")
    >>> verified = pd.DataFrame({  # one event, answered 500, 500, then 200
    ...     "verdict": "valid", "subscription_id": "wh_1", "event_id": "evt_1",
    ...     "event": "incident.created", "incident_id": "inc_1",
    ...     "received_at": [t, t + pd.Timedelta("31s"), t + pd.Timedelta("150s")],
    ...     "response_status": [500, 500, 200], "response_ms": [120, 95, 80]})
    >>> attempts = infer_attempts(verified, as_of=pd.Timestamp("2026-11-01", tz="UTC"))
    >>> attempts[["attempt_no", "delay_s", "expected_delay_s", "on_schedule", "success"]]
       attempt_no  delay_s  expected_delay_s  on_schedule  success
    0           1     <NA>               0.0         True    False
    1           2     31.0              30.0         True    False
    2           3    119.0             120.0         True     True
    """
    as_utc(as_of)
    tol = tolerance or Tolerance()
    out = deliveries.copy(deep=False)  # copy-on-write (pandas 3): columns are shared until set
    got = run(
        attempts_rule,
        {"deliveries": _typed(arrow_input(out, list(_ATTEMPT_INPUTS)))},
        floor_s=tol.floor_s,
        share=tol.share,
    ).sort_by("_row")
    for name in ATTEMPT_COLUMNS[1:]:  # then is_test: the columns in the order they always had
        out[name] = got.column(name).to_pandas(types_mapper=_NULLABLE.get).array
    out["is_test"] = got.column("is_test").to_numpy(zero_copy_only=False).astype(bool)
    return out


#: The columns :func:`attempts_rule` reads, with their types.
_ATTEMPT_INPUTS: dict[str, pa.DataType] = {
    "verdict": pa.string(),
    "subscription_id": pa.string(),
    "event_id": pa.string(),
    "received_at": pa.timestamp("us", "UTC"),
    "response_status": pa.int64(),
    "response_ms": pa.float64(),
    "event": pa.string(),
    "incident_id": pa.string(),
}
#: The columns :func:`events_rule` reads of the attempts frame (and ``fingerprint``).
_EVENT_COLUMNS = (
    *("subscription_id", "event_id", "event", "event_timestamp", "incident_id", "is_test"),
    *("received_at", "attempt_no", "success", "response_status", "on_schedule"),
    "missing_before",
)
#: The types the rules read the columns of a frame in (:func:`_typed`).
_TYPES: dict[str, pa.DataType] = {
    **_ATTEMPT_INPUTS,
    **dict.fromkeys(("is_test", "success", "on_schedule"), pa.bool_()),
    **dict.fromkeys(("attempt_no", "missing_before"), pa.int64()),
    **dict.fromkeys(("fingerprint", "outcome"), pa.string()),
    **dict.fromkeys(("event_timestamp", "first_received_at"), pa.timestamp("us", "UTC")),
    **dict.fromkeys(("skew_s", "emission_latency_s", "delay_s", "expected_delay_s"), pa.float64()),
}
_NULLABLE = {
    pa.int64(): pd.Int64Dtype(),
    pa.float64(): pd.Float64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


def _typed(table: pa.Table) -> pa.Table:
    """``table`` with each input column of a hand-made frame (all missing: no type; categories,
    objects) in the type a rule reads (:data:`_TYPES`); a time keeps
    its unit, and a number column of fractions stays fractional (``pa.float64()`` there)."""
    for name, typ in _TYPES.items():
        i = table.schema.get_field_index(name)
        if i < 0:
            continue
        have = table.schema.field(i).type
        if pa.types.is_timestamp(have) and pa.types.is_timestamp(typ):
            typ = pa.timestamp(have.unit, "UTC")  # nanoseconds kept: rows are ordered by them
        elif pa.types.is_floating(have) and pa.types.is_integer(typ):
            typ = pa.float64()  # a hand-made frame's fractions: the rule reads them as they are
        if not have.equals(typ):
            table = table.set_column(i, name, table.column(i).cast(typ, safe=False))
    return table


def attempts_rule(deliveries: ir.Table, *, floor_s: float, share: float) -> ir.Table:
    """The attempt rule of :func:`infer_attempts` as one relational expression: every row of
    ``deliveries`` (its columns, the attempt columns it had replaced) with ``is_test``,
    ``success`` and the attempt columns.

    An event's rows are numbered in time order (ties: ``_row``). Each number depends only on
    the number before it, and past the schedule's last attempt every row is the next number: so
    the numbers of an event's first :data:`~audit.spec.MAX_ATTEMPTS` rows are computed from
    their times (taken to every row of the event by a window), one step
    (:func:`~audit.analysis.schedule.next_attempt`) after another, and a later row's number
    counts on from the last of them. No recursion: DuckDB and Spark run it alike.
    """
    import ibis  # start-up: only an analysis needs it

    d = deliveries
    tol = Tolerance(floor_s, share)
    numbered = is_attempt(d.verdict, d.event_id) & d.received_at.notnull()
    epoch = ibis.timestamp("1970-01-01 00:00:00+00:00")
    d = d.mutate(
        _numbered=numbered,
        _t=d.received_at.delta(epoch, unit="microsecond").cast("float64") / 1e6,
    )
    key = [d._numbered, d.subscription_id, d.event_id]
    ordered = ibis.window(group_by=key, order_by=[d.received_at, d._row])
    d = d.mutate(_p=ibis.row_number().over(ordered) + 1, _d=d._t - d._t.lag().over(ordered))
    whole = ibis.window(group_by=[d._numbered, d.subscription_id, d.event_id])
    firsts = {
        f"_t{k}": ibis.ifelse(d._p == k, d._t, None).max().over(whole)
        for k in range(1, MAX_ATTEMPTS + 1)
    }
    d = d.mutate(**firsts)
    chain = {"_n1": ibis.literal(1, "int64")}
    for k in range(2, MAX_ATTEMPTS + 1):  # the numbers of the event's first rows
        d = d.mutate(**chain)
        chain = {f"_n{k}": next_attempt(d[f"_n{k - 1}"], d[f"_t{k}"] - d[f"_t{k - 1}"], tol)[0]}
    d = d.mutate(**chain)
    p, last = d._p, d[f"_n{MAX_ATTEMPTS}"]
    number = ibis.cases(
        *[(p == k, d[f"_n{k}"]) for k in range(1, MAX_ATTEMPTS + 1)],
        else_=last + (p - MAX_ATTEMPTS),
    )
    before = ibis.cases(
        *[(p == k + 1, d[f"_n{k}"]) for k in range(1, MAX_ATTEMPTS)],
        else_=last + (p - 1 - MAX_ATTEMPTS),
    )
    d = d.mutate(_no=number.cast("int64"), _prev=ibis.ifelse(p == 1, 0, before).cast("int64"))
    step = next_attempt(d._prev, d._d, tol)
    first = p == 1
    test = (d.event == TEST_EVENT).fill_null(False) | d.incident_id.startswith(
        TEST_INCIDENT_PREFIX
    ).fill_null(False)
    yes = d._numbered

    def only(value: ir.Value, typ: str) -> ir.Value:
        return ibis.ifelse(yes, value, ibis.literal(None, typ))

    kept = [c for c in deliveries.columns if c not in ATTEMPT_COLUMNS]
    return d.select(
        *kept,
        is_test=test,
        attempt_no=only(d._no, "int64"),
        delay_s=only(d._d, "float64"),
        expected_delay_s=only(ibis.ifelse(first, 0.0, step.expected_delay_s), "float64"),
        on_schedule=only(first | step.found, "boolean"),
        missing_before=only(ibis.ifelse(first, 0, d._no - d._prev - 1), "int64"),
        success=only(succeeded(d.response_status, d.response_ms), "boolean"),
    )


def _fingerprint(body: bytes) -> str | None:
    """sha256 of the canonical (sorted keys, compact) JSON of the envelope's event and data."""
    try:
        env = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(env, dict):
        return None
    canon = orjson.dumps(
        {"data": env.get("data"), "event": env.get("event")}, option=orjson.OPT_SORT_KEYS
    )
    return hashlib.sha256(canon).hexdigest()


def events_table(
    attempts: pd.DataFrame,
    *,
    as_of: pd.Timestamp,
    tolerance: Tolerance | None = None,
) -> pd.DataFrame:
    """One row per (subscription, event id) of the valid deliveries, with its outcome.

    ``outcome`` is ``delivered`` (an attempt succeeded), ``exhausted`` (no success, attempt 5
    seen), ``pending`` (no success, last attempt below 5, and ``as_of`` is not after the next
    scheduled attempt plus tolerance), ``lost`` (the next scheduled attempt never arrived) or
    ``unknown`` (no success seen and the last attempt's answer was not captured; an earlier
    attempt without a captured answer was followed by a retry, so it did not succeed in time).
    Rows come sorted by subscription then event id, every column in the dtype
    :data:`audit.tables.EVENTS` declares (whatever the dtypes of a hand-made frame); the rule
    is :func:`events_rule`.

    Parameters
    ----------
    attempts
        The frame from :func:`infer_attempts`, with the envelope's ``fingerprint`` (as the
        evidence store gives it) or the raw ``body`` it is taken from.
    as_of
        The time the data is judged at.

    Examples
    --------
    >>> t = pd.Timestamp("2026-10-01 12:00", tz="UTC")
    >>> verified = pd.DataFrame({  # one event, answered 500, then 200 thirty seconds later
    ...     "verdict": "valid", "subscription_id": "wh_1", "event_id": "evt_1",
    ...     "event": "incident.created", "incident_id": "inc_1", "fingerprint": "f",
    ...     "event_timestamp": t - pd.Timedelta("2s"),
    ...     "received_at": [t, t + pd.Timedelta("30s")],
    ...     "response_status": [500, 200], "response_ms": [120, 80]})
    >>> as_of = pd.Timestamp("2026-11-01", tz="UTC")
    >>> ev = events_table(infer_attempts(verified, as_of=as_of), as_of=as_of)
    >>> ev[["event_id", "attempts", "outcome", "emission_latency_s", "last_attempt_no"]]
      event_id  attempts    outcome  emission_latency_s  last_attempt_no
    0    evt_1         2  delivered                 2.0                2
    """
    as_of = as_utc(as_of)
    tol = tolerance or Tolerance()
    table = _typed(arrow_input(attempts, list(_EVENT_COLUMNS)))
    if "body" in attempts.columns:  # raw bodies: the fingerprint extracted here, not a rule
        prints = [None if b is None else _fingerprint(b) for b in _bodies(attempts["body"])]
        table = table.append_column("fingerprint", pa.array(prints, pa.string()))
        has_body = attempts["body"].notna().to_numpy(dtype=bool)
        table = table.append_column("_has_body", pa.array(has_body, pa.bool_()))
    else:  # extracted once at ingest (the evidence store)
        table = table.append_column(
            "fingerprint", pa.array(attempts["fingerprint"], pa.string(), from_pandas=True)
        )
    got = run(
        events_rule,
        {"attempts": table, "settings": settings(as_of=as_of)},
        floor_s=tol.floor_s,
        share=tol.share,
    )
    return frame_of(got, EVENTS)


def delivery_events_rule(
    deliveries: ir.Table, settings: ir.Table, *, floor_s: float, share: float
) -> ir.Table:
    """The events table straight from the deliveries, in one expression: :func:`events_rule`
    over :func:`attempts_rule`'s rows (``deliveries``: the columns both read, with
    ``fingerprint`` and ``_row``; ``settings``: ``as_of``)."""
    attempts = attempts_rule(deliveries, floor_s=floor_s, share=share)
    return events_rule(attempts, settings, floor_s=floor_s, share=share)


def _bodies(column: pd.Series) -> list[bytes | None]:
    """The raw bodies as bytes (a missing one: None)."""
    return [None if b is None or b is pd.NA or b != b else b for b in column.tolist()]


def events_rule(
    attempts: ir.Table, settings: ir.Table, *, floor_s: float, share: float
) -> ir.Table:
    """The events table of :func:`events_table` as one relational expression.

    ``attempts``: the rows of :func:`attempts_rule` beside the deliveries' columns
    (``subscription_id, event_id, event, event_timestamp, incident_id, received_at,
    response_status``), with ``is_test, attempt_no, success, on_schedule, missing_before``,
    ``fingerprint`` (the envelope's, per row) and ``_row`` (the input order). An optional
    ``_has_body``: whether the row carried what ``fingerprint`` is taken from (a body that
    does not parse has none); without it, a row with a fingerprint. ``settings``: one row,
    ``as_of``. ``floor_s``, ``share``: the :class:`Tolerance`.

    Each (subscription, event id) of the rows with an attempt number and a subscription id is
    one event; its rows are ordered by time (untimed rows first: only a hand-made frame has
    them), ties by ``_row``. Its envelope values are those of the first row that has one (the
    fingerprint: that of the first row with a body); the rows come sorted by subscription then
    event id (strings by their bytes).
    """
    import ibis  # start-up: only an analysis needs it

    a = attempts
    a = a.filter(a.attempt_no.notnull() & a.subscription_id.notnull())
    key = [a.subscription_id, a.event_id]
    order = ibis.window(group_by=key, order_by=[ibis.asc(a.received_at, nulls_first=True), a._row])
    ok = a.success.fill_null(False)
    has_body = a._has_body if "_has_body" in a.columns else a.fingerprint.notnull()
    a = a.mutate(_p=ibis.row_number().over(order), _ok=ok, _has_body=has_body)

    def first(column: ir.Column) -> ir.Value:
        """The column's value at the event's first row that has one."""
        return column.argmin(a._p, where=column.notnull())

    def whole(value: ir.NumericValue) -> ir.IntegerValue:
        """A hand-made frame's fractions cut as pandas cuts them (a cast would round), each
        column by its own type: ``missing_before`` may hold fractions where ``attempt_no``
        does not (found by tests/test_events_oracle.py: 1.5 read as 2)."""
        return (value.floor() if value.type().is_floating() else value).cast("int64")

    body_first = a._p.min(where=a._has_body)
    printed_first = a._p.min(where=a.fingerprint.notnull())
    ev = a.group_by(key).aggregate(
        event=first(a.event),
        event_timestamp=first(a.event_timestamp),
        incident_id=first(a.incident_id),
        is_test=first(a.is_test).fill_null(False),
        fingerprint=ibis.ifelse(
            body_first == printed_first, first(a.fingerprint), ibis.literal(None, "string")
        ),
        attempts=a.count(),
        first_received_at=a.received_at.min(),
        last_received_at=a.received_at.max(),
        delivered_at=a.received_at.min(where=a._ok),
        accepted_count=count_where((a.response_status >= 200) & (a.response_status <= 299)),
        _most=a.attempt_no.max(),
        off_schedule=count_where(~a.on_schedule.fill_null(False)),
        _missing=a.missing_before.cast("float64").sum(),  # DuckDB sums BIGINT as HUGEINT
        _any_ok=a._ok.any(),
        _last_unknown=a.success.isnull().argmax(a._p),
    )
    ev = ev.cross_join(settings)
    last_no = whole(ev._most)
    tol = Tolerance(floor_s, share)
    wait_us = last_no.cases(
        *[
            (k, round((expected_delay(k, k + 1) + tol(expected_delay(k, k + 1))) * 1e6))
            for k in range(1, MAX_ATTEMPTS)
        ],
        else_=ibis.literal(None, "int64"),
    )
    waited = ev.as_of.delta(ev.last_received_at, unit="microsecond")
    outcome = ibis.cases(
        (ev._any_ok, "delivered"),
        (ev._last_unknown, "unknown"),
        (last_no >= MAX_ATTEMPTS, "exhausted"),
        (waited <= wait_us, "pending"),
        else_="lost",
    )
    emission = ev.first_received_at.delta(ev.event_timestamp, unit="microsecond")
    return ev.select(
        "subscription_id",
        "event_id",
        "event",
        "event_timestamp",
        "incident_id",
        "is_test",
        "fingerprint",
        "attempts",
        "first_received_at",
        "last_received_at",
        emission_latency_s=emission.cast("float64") / 1e6,
        outcome=outcome,
        delivered_at=ev.delivered_at,
        accepted_count=ev.accepted_count.fill_null(0),
        retry_after_success=(ev.last_received_at > ev.delivered_at).fill_null(False),
        too_many_attempts=ev._most > MAX_ATTEMPTS,
        off_schedule=ev.off_schedule.fill_null(0),
        missing_attempts=whole(ev._missing.fill_null(0)),
        last_attempt_no=last_no,
    ).order_by(["subscription_id", "event_id"])


def count_where(flag: ir.BooleanValue) -> ir.IntegerScalar:
    """An aggregate: how many rows ``flag`` holds for (NULL: not), as int64 on every engine (a
    ``sum`` of integers is DuckDB's HUGEINT, a decimal in Arrow)."""
    import ibis  # start-up: only an analysis needs it

    return ibis.ifelse(flag.fill_null(False), 1, None).count()


def succeeded(status: ir.NumericValue, ms: ir.NumericValue) -> ir.BooleanValue:
    """The success rule as an expression: answered 2xx within the delivery timeout (5 s;
    ``response_ms`` unknown counts as in time); NULL when no status was captured. The one
    definition the attempts (:func:`attempts_rule`), the failure rates
    (:func:`audit.analysis.metrics.failure_counts`) and the store's questions read."""
    import ibis  # start-up: only an analysis needs it

    slow = (ms > DELIVERY_TIMEOUT_MS).fill_null(False)
    ok = (status >= 200) & (status <= 299) & ~slow
    return ibis.ifelse(status.isnull(), ibis.literal(None, "boolean"), ok)


def is_attempt(verdict: ir.StringValue, event_id: ir.StringValue) -> ir.BooleanValue:
    """Whether a delivery is an attempt of an event (a ``valid`` delivery with an event id),
    as an expression; :func:`attempts_rule` numbers those that have a receipt time."""
    return (verdict == "valid") & event_id.notnull()


#: The quantiles :func:`latency_summary` gives, by column name.
LATENCY_QUANTILES: dict[str, float] = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def quantiles(value: ir.NumericValue, names: Mapping[str, float]) -> dict[str, ir.Scalar]:
    """Aggregates: each quantile of ``names`` of ``value`` (linear interpolation between the
    two nearest values, as :meth:`pandas.Series.quantile`; NULL when there is none), for
    :func:`latency_summary` and :func:`audit.analysis.questions.latency_by_period`."""
    return {name: value.quantile(q) for name, q in names.items()}


def latency_rule(deliveries: ir.Table, events: ir.Table) -> ir.Table:
    """The rows of :func:`latency_summary`: ``deliveries`` (``verdict, response_ms,
    skew_s``) and ``events`` (``is_test, emission_latency_s``) to a row per metric (``metric,
    n, p50, p95, p99, max, min``), missing values left out."""
    import ibis  # start-up: only an analysis needs it

    valid = deliveries.filter(deliveries.verdict == "valid")
    real = events.filter(~events.is_test.fill_null(False))
    series = (
        ("ack_latency_ms", valid, valid.response_ms),
        ("emission_latency_s", real, real.emission_latency_s),
        ("clock_skew_s", valid, valid.skew_s),
        ("abs_clock_skew_s", valid, valid.skew_s.abs()),
    )
    parts = []
    for k, (name, table, value) in enumerate(series):
        x = table.select(x=value.cast("float64")).filter(ibis._.x.notnull())
        parts.append(
            x.aggregate(
                _k=ibis.literal(k, "int64"),
                metric=ibis.literal(name, "string"),
                n=x.count(),
                **quantiles(x.x, LATENCY_QUANTILES),
                max=x.x.max(),
                min=x.x.min(),
            )
        )
    return ibis.union(*parts).order_by("_k").drop("_k")


def latency_summary(attempts: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """p50/p95/p99/max of ack latency (ms), emission latency (s) and clock skew (s)
    (:func:`latency_rule`)."""
    got = run(
        latency_rule,
        {
            "deliveries": _typed(_columns(attempts, ["verdict", "response_ms", "skew_s"])),
            "events": _typed(_columns(events, ["is_test", "emission_latency_s"])),
        },
    )
    out: pd.DataFrame = got.to_pandas()
    out = out.astype(
        {"n": "int64", **dict.fromkeys(["p50", "p95", "p99", "max", "min"], "float64")}
    )
    return out


def _columns(frame: pd.DataFrame, columns: list[str], *, ordered: bool = False) -> pa.Table:
    """``columns`` of ``frame`` as an Arrow input (a column it lacks: all missing, when the
    frame is empty); with ``ordered``, ``_row`` too (:func:`~audit.analysis.engine.arrow_input`:
    only a rule that keeps the frame's order needs it)."""
    have = [c for c in columns if c in frame.columns]
    if ordered:
        table = arrow_input(frame, have)
    else:
        table = pa.Table.from_pandas(frame[have], preserve_index=False)
    for c in columns:
        if c not in have:
            table = table.append_column(c, pa.nulls(len(frame)))
    return table


#: The column :func:`success_rates` groups by, by its ``by``.
_BY_COLUMN: dict[str | None, str | None] = {
    None: None,
    "day": None,
    "subscription": "subscription_id",
    "subscription_id": "subscription_id",
    "event": "event",
}


def success_rule(attempts: ir.Table, events: ir.Table, *, by: str | None) -> ir.Table:
    """The rows of :func:`success_rates`: ``attempts`` (``attempt_no, success, is_test,
    received_at``) and ``events`` (``is_test, outcome, first_received_at``), each with the
    column of ``by``, to a row per group (``group, first_attempts, first_attempt_success,
    events, event_success``), sorted by group; a group without a key is left out."""
    import ibis  # start-up: only an analysis needs it

    def key(t: ir.Table, time: str) -> ir.StringValue:
        if by is None:
            return ibis.literal("all", "string")
        if by == "day":
            return t[time].strftime("%Y-%m-%d")
        return t[_BY_COLUMN[by] or by]

    a, e = attempts, events
    firsts = a.filter((a.attempt_no == 1) & a.success.notnull() & ~a.is_test.fill_null(False))
    judged = e.filter(
        ~e.is_test.fill_null(False) & e.outcome.isin(["delivered", "exhausted", "lost"])
    )
    zero = ibis.literal(0, "int64")
    rows = firsts.select(
        group=key(firsts, "received_at"),
        _fa=ibis.literal(1, "int64"),
        _fa_ok=ibis.ifelse(firsts.success, 1, 0).cast("int64"),
        _ev=zero,
        _ev_ok=zero,
    ).union(
        judged.select(
            group=key(judged, "first_received_at"),
            _fa=zero,
            _fa_ok=zero,
            _ev=ibis.literal(1, "int64"),
            _ev_ok=(judged.outcome == "delivered").cast("int64"),
        )
    )
    g = (
        rows.filter(rows.group.notnull())
        .group_by("group")
        .aggregate(
            first_attempts=count_where(rows._fa == 1),
            _fa_ok=count_where(rows._fa_ok == 1),
            events=count_where(rows._ev == 1),
            _ev_ok=count_where(rows._ev_ok == 1),
        )
    )

    def rate(ok: ir.IntegerValue, n: ir.IntegerValue) -> ir.FloatingValue:
        return ibis.ifelse(n > 0, ok.cast("float64") / n, ibis.literal(None, "float64"))

    return g.select(
        "group",
        "first_attempts",
        first_attempt_success=rate(g._fa_ok, g.first_attempts),
        events=g.events,
        event_success=rate(g._ev_ok, g.events),
    ).order_by("group")


def success_rates(
    attempts: pd.DataFrame, events: pd.DataFrame, *, by: str | None = None
) -> pd.DataFrame:
    """First-attempt and event success rates, overall or by ``subscription``, ``event`` or ``day``.

    First attempts are attempts numbered 1 with a known answer; an event succeeds when its
    outcome is ``delivered`` (pending and unknown events are left out). Test events excluded.
    Counts are int64 (a group seen on one side only: 0 on the other, its rate NaN); the rule
    is :func:`success_rule`.
    """
    if by not in _BY_COLUMN:
        raise ParameterError(f"by must be None, 'subscription', 'event' or 'day', not {by!r}")
    column = _BY_COLUMN[by]
    extra = [column] if column else []
    got = run(
        success_rule,
        {
            "attempts": _typed(
                _columns(attempts, ["attempt_no", "success", "is_test", "received_at", *extra])
            ),
            "events": _typed(_columns(events, ["is_test", "outcome", "first_received_at", *extra])),
        },
        by=by,
    )
    rates: pd.DataFrame = got.to_pandas().astype(
        {"first_attempts": "int64", "events": "int64", "first_attempt_success": "float64"}
    )
    return rates.astype({"event_success": "float64"})
