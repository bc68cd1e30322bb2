"""Delivery attempts and outcomes, inferred from what the receiver saw (spec section 6).

Only rows whose verdict is ``valid`` are the vendor's deliveries; the others belong to the
signature audit. Receivers see an attempt only if it reached them, so attempt numbers are
inferred from timing against the published schedule (0, 30 s, 2 min, 10 min, 1 h between
consecutive attempts) rather than from order alone.

All functions are pure: frames in, frames out, time enters as ``as_of``.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa

from audit.analysis.engine import arrow_input, run
from audit.analysis.rows import key_runs
from audit.analysis.schedule import Tolerance, expected_delay, next_attempt
from audit.errors import ParameterError
from audit.ingest.workers import threads
from audit.spec import DELIVERY_TIMEOUT_MS, MAX_ATTEMPTS, TEST_EVENT, TEST_INCIDENT_PREFIX
from audit.tables import ATTEMPTS, EVENTS
from audit.timeutil import as_utc

if TYPE_CHECKING:
    import ibis.expr.types as ir

__all__ = [
    "ATTEMPT_COLUMNS",
    "OUTCOMES",
    "Tolerance",
    "attempts_rule",
    "event_outcomes",
    "event_runs",
    "events_table",
    "expected_delay",
    "infer_attempts",
    "is_test",
    "latency_summary",
    "success_rates",
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


def event_runs(deliveries: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The valid deliveries with an event id and a receipt time, grouped by (subscription, event
    id) in the strings' order, each group in time order (equal times keep their order):
    (their positions in the frame, whether each is its group's first row).

    :func:`infer_attempts` numbers these rows; :func:`events_table` reads the same groups (less
    those without a subscription id). Both take them as ``runs`` (of the frame
    :func:`infer_attempts` is given), so that 1M event ids are sorted once, not twice.
    """
    d = deliveries
    use = (d["verdict"] == "valid") & d["event_id"].notna() & d["received_at"].notna()
    idx = np.flatnonzero(use.to_numpy())
    t = d["received_at"].to_numpy(dtype="datetime64[ns]").view("int64")[idx]
    order, first = key_runs(d, idx, ["subscription_id", "event_id"], t, sort_keys=True)
    return idx[order], first


def infer_attempts(
    deliveries: pd.DataFrame,
    *,
    as_of: pd.Timestamp,
    tolerance: Tolerance | None = None,
    runs: tuple[np.ndarray, np.ndarray] | None = None,
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
    with an event id, NA elsewhere. ``runs``: :func:`event_runs` of ``deliveries``, when the
    caller has them already.

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
_NULLABLE = {
    pa.int64(): pd.Int64Dtype(),
    pa.float64(): pd.Float64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


def _typed(table: pa.Table) -> pa.Table:
    """``table`` with each input column of a hand-made frame (all missing: no type) in the type
    :func:`attempts_rule` reads."""
    for name, typ in _ATTEMPT_INPUTS.items():
        i = table.schema.get_field_index(name)
        have = table.schema.field(i).type
        if pa.types.is_timestamp(have) and pa.types.is_timestamp(typ):
            typ = pa.timestamp(have.unit, "UTC")  # nanoseconds kept: rows are ordered by them
        if not have.equals(typ):
            table = table.set_column(i, name, table.column(i).cast(typ, safe=False))
    return table


def attempts_rule(deliveries: ir.Table, *, floor_s: float, share: float) -> ir.Table:
    """The attempt rule of :func:`infer_attempts` as one relational expression: every row of
    ``deliveries`` (by ``_row``) with ``is_test``, ``success`` and the attempt columns.

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
    numbered = (d.verdict == "valid") & d.event_id.notnull() & d.received_at.notnull()
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
    slow = (d.response_ms > DELIVERY_TIMEOUT_MS).fill_null(False)
    ok = (d.response_status >= 200) & (d.response_status <= 299) & ~slow
    test = (d.event == TEST_EVENT).fill_null(False) | d.incident_id.startswith(
        TEST_INCIDENT_PREFIX
    ).fill_null(False)
    yes = d._numbered

    def only(value: ir.Value, typ: str) -> ir.Value:
        return ibis.ifelse(yes, value, ibis.literal(None, typ))

    return d.select(
        "_row",
        is_test=test,
        attempt_no=only(d._no, "int64"),
        delay_s=only(d._d, "float64"),
        expected_delay_s=only(ibis.ifelse(first, 0.0, step.expected_delay_s), "float64"),
        on_schedule=only(first | step.found, "boolean"),
        missing_before=only(ibis.ifelse(first, 0, d._no - d._prev - 1), "int64"),
        success=only(ibis.ifelse(d.response_status.isnull(), None, ok), "boolean"),
    )


def _numbered_runs(attempts: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The rows with an attempt number and a subscription id, grouped by (subscription, event
    id) in the strings' order, each group in time order: (frame positions, first of group)."""
    keep = attempts["attempt_no"].notna() & attempts["subscription_id"].notna()
    pos = np.flatnonzero(keep.to_numpy())
    if not len(pos):  # whatever the time column holds (then never read)
        return pos, np.zeros(0, dtype=bool)
    t = attempts["received_at"].array.asi8[pos]
    perm, start = key_runs(attempts, pos, ["subscription_id", "event_id"], t, sort_keys=True)
    return pos[perm], start


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
    runs: tuple[np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """One row per (subscription, event id) of the valid deliveries, with its outcome.

    ``outcome`` is ``delivered`` (an attempt succeeded), ``exhausted`` (no success, attempt 5
    seen), ``pending`` (no success, last attempt below 5, and ``as_of`` is not after the next
    scheduled attempt plus tolerance), ``lost`` (the next scheduled attempt never arrived) or
    ``unknown`` (no success seen and the last attempt's answer was not captured; an earlier
    attempt without a captured answer was followed by a retry, so it did not succeed in time).

    Parameters
    ----------
    attempts
        The frame from :func:`infer_attempts`.
    as_of
        The time the data is judged at.
    runs
        :func:`event_runs` of the frame :func:`infer_attempts` was given (the rows it
        numbered), when the caller has them: they are not computed again.
    """
    as_of = as_utc(as_of)
    tol = tolerance or Tolerance()
    body = "body" if "body" in attempts.columns else "fingerprint"
    if runs is not None:  # the numbered rows, less the groups without a subscription id
        has_sub = attempts["subscription_id"].notna().to_numpy(dtype=bool)[runs[0]]
        rows, start = runs[0][has_sub], runs[1][has_sub]
    else:
        rows, start = _numbered_runs(attempts)
    if not len(rows):
        return EVENTS.empty()
    # Rows of one (subscription, event id) together, in time order: the order from integer
    # codes (sorted like the strings), each group a run of rows. Each column is then reduced
    # over the runs with numpy (``reduceat``), and only one value per event is taken of the
    # text columns: no sorted copy of the rows, no pandas groupby (git history of ``docs/scale.md``,
    # "Eighteenth pass"; ``tests/test_events_oracle.py`` holds the groupby as the oracle).
    starts = np.flatnonzero(start)
    n = len(rows)
    last = np.r_[starts[1:], n] - 1
    index = np.arange(n)

    def first_valid(name: str) -> tuple[np.ndarray, np.ndarray | None]:
        """Where the column's first non-missing value of each event is (pandas' ``first``),
        and which events have none (None: all have one)."""
        valid = attempts[name].notna().to_numpy(dtype=bool)[rows]
        first: np.ndarray = np.minimum.reduceat(np.where(valid, index, n), starts)
        missing = first >= n
        return np.where(missing, starts, first), (missing if missing.any() else None)

    def flag(series: pd.Series) -> np.ndarray:
        flags: np.ndarray = series.fillna(False).to_numpy(dtype=bool)[rows]
        return flags

    def per_event(ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        reduced: np.ndarray = ufunc.reduceat(values, starts)
        return reduced

    def numbers(name: str) -> np.ndarray:
        """The column as numbers (missing: 0), fractions kept as the groupby's sums kept them."""
        column = attempts[name]
        kind = np.float64 if pd.api.types.is_float_dtype(column.dtype) else np.int64
        values: np.ndarray = column.fillna(0).to_numpy(dtype=kind)[rows]
        return values

    success = attempts["success"]
    ok = flag(success)
    # Untimed rows (only a hand-made frame has them) sort first, and count for no time.
    timed = attempts["received_at"].notna().to_numpy(dtype=bool)[rows]
    first_ok = per_event(np.minimum, np.where(ok & timed, index, n))
    none_ok = first_ok >= n
    # One value per event taken of these columns, at these rows (None: at every event, else
    # missing where marked), two columns at a time (Arrow's take releases the GIL).
    taken = {
        "subscription_id": (starts, None),
        "event_id": (starts, None),
        **{c: first_valid(c) for c in ("event", "event_timestamp", "incident_id", "is_test")},
        "first_received_at": first_valid("received_at"),
        "last_received_at": (last, None),
        "delivered_at": (np.where(none_ok, starts, first_ok), none_ok if none_ok.any() else None),
        "_body": first_valid(body),
    }

    def take(name: str) -> pd.Series:
        where, missing = taken[name]
        column = "received_at" if name.endswith("_at") else body if name == "_body" else name
        got = attempts[column].take(rows[where]).reset_index(drop=True)
        if missing is None:
            return got
        return got.where(~missing, None) if got.dtype == object else got.where(~missing)

    with threads(2) as pool:  # AUDIT_JOBS=1: in this thread
        values = dict(zip(taken, pool.map(take, taken), strict=True))
    # An attempt received after the event's first timely 2xx (none: nothing is after it).
    delivered_ns = values["delivered_at"].array.asi8.copy()
    delivered_ns[none_ok] = np.iinfo(np.int64).max
    t = attempts["received_at"].array.asi8[rows]
    after = t > np.repeat(delivered_ns, np.diff(np.r_[starts, n]))
    most = per_event(np.maximum, numbers("attempt_no"))
    ev = pd.DataFrame(
        {
            **{c: values[c] for c in ("subscription_id", "event_id", "event", "event_timestamp")},
            "incident_id": values["incident_id"],
            "is_test": values["is_test"].astype(bool),
            "attempts": last - starts + 1,
            **{c: values[c] for c in ("first_received_at", "last_received_at", "delivered_at")},
            "accepted_count": per_event(
                np.add, flag(attempts["response_status"].between(200, 299)).astype(np.int64)
            ),
            "retry_after_success": per_event(np.logical_or, after),
            "too_many_attempts": most > MAX_ATTEMPTS,
            "off_schedule": per_event(np.add, (~flag(attempts["on_schedule"])).astype(np.int64)),
            "missing_attempts": per_event(np.add, numbers("missing_before")),
            "last_attempt_no": most,
            "_any_ok": per_event(np.logical_or, ok),
            "_last_unknown": success.isna().to_numpy(dtype=bool)[rows][last],
            "_body": values["_body"],
        }
    )
    return event_outcomes(ev, body, as_of=as_of, tolerance=tol)


def event_outcomes(
    ev: pd.DataFrame, body: str, *, as_of: pd.Timestamp, tolerance: Tolerance
) -> pd.DataFrame:
    """The events table from its per-event values (:func:`events_table`, after grouping):
    fingerprint, emission latency and outcome, in the declared columns and dtypes. ``ev``
    holds ``_body`` (from the column ``body``: a raw body or the stored fingerprint) and the
    helper flags ``_any_ok`` and ``_last_unknown``."""
    tol = tolerance
    if body == "body":
        ev["fingerprint"] = pd.Series([_fingerprint(b) for b in ev["_body"]], dtype="str")
    else:  # extracted once at ingest (the evidence store)
        ev["fingerprint"] = ev["_body"].astype("str")
    ev["emission_latency_s"] = (
        (ev["first_received_at"] - ev["event_timestamp"]).dt.total_seconds().astype("Float64")
    )
    last_no = ev["last_attempt_no"].astype("int64")
    # A few distinct attempt numbers: the schedule is looked up once per number, not per event.
    wait = {
        k: (
            expected_delay(k, k + 1) + tol(expected_delay(k, k + 1)) if k < MAX_ATTEMPTS else np.nan
        )
        for k in last_no.unique().tolist()
    }
    deadline = ev["last_received_at"] + pd.to_timedelta(last_no.map(wait), unit="s")
    outcome = np.select(
        [ev["_any_ok"], ev["_last_unknown"], last_no >= MAX_ATTEMPTS, as_of <= deadline],
        ["delivered", "unknown", "exhausted", "pending"],
        default="lost",
    )
    ev["outcome"] = pd.Series(outcome, dtype="str")
    for c in ("accepted_count", "off_schedule", "attempts"):
        ev[c] = ev[c].astype("int64")
    ev["missing_attempts"] = ev["missing_attempts"].astype("int64")
    ev["last_attempt_no"] = last_no
    ev["retry_after_success"] = ev["retry_after_success"].astype(bool)
    ev["too_many_attempts"] = ev["too_many_attempts"].astype(bool)
    return ev[EVENTS.names]


def _rate(ok: pd.Series) -> float:
    return float(ok.mean()) if len(ok) else float("nan")


#: The column :func:`success_rates` groups by, by its ``by`` (any other: that column).
_BY_COLUMN: dict[str, str | None] = {
    "day": None,
    "subscription": "subscription_id",
    "event": "event",
}


def success_rates(
    attempts: pd.DataFrame, events: pd.DataFrame, *, by: str | None = None
) -> pd.DataFrame:
    """First-attempt and event success rates, overall or by ``subscription``, ``event`` or ``day``.

    First attempts are attempts numbered 1 with a known answer; an event succeeds when its
    outcome is ``delivered`` (pending and unknown events are left out). Test events excluded.
    """
    column = None if by is None else _BY_COLUMN.get(by, by)
    # Only the columns read are cut (at 1M rows, cutting every column took most of the time).
    events = events[[c for c in ("is_test", "outcome", "first_received_at", column) if c in events]]
    attempts = attempts[
        [c for c in ("attempt_no", "success", "is_test", "received_at", column) if c in attempts]
    ]
    real = events[~events["is_test"]]
    firsts = attempts[(attempts["attempt_no"] == 1) & attempts["success"].notna()]
    firsts = firsts[~firsts["is_test"].astype(bool)]
    judged = real[real["outcome"].isin(["delivered", "exhausted", "lost"])]

    def key(df: pd.DataFrame, time_col: str) -> pd.Series:
        if by is None:
            return pd.Series("all", index=df.index)
        if by == "day":
            day: pd.Series = df[time_col].dt.strftime("%Y-%m-%d")
            return day
        if by in ("subscription", "subscription_id"):
            return df["subscription_id"]
        if by == "event":
            return df["event"]
        raise ParameterError(f"by must be None, 'subscription', 'event' or 'day', not {by!r}")

    fa = firsts.groupby(key(firsts, "received_at"))["success"].agg(["size", "mean"])
    fe = judged.groupby(key(judged, "first_received_at"))["outcome"].agg(
        size="size", mean=lambda s: (s == "delivered").mean()
    )
    out = pd.DataFrame(
        {
            "first_attempts": fa["size"],
            "first_attempt_success": fa["mean"].astype(float),
            "events": fe["size"],
            "event_success": fe["mean"].astype(float),
        }
    )
    out.index.name = "group"
    return out.reset_index().fillna({"first_attempts": 0, "events": 0})


def latency_summary(attempts: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """p50/p95/p99/max of ack latency (ms), emission latency (s) and clock skew (s)."""
    valid = attempts.loc[attempts["verdict"] == "valid", ["response_ms", "skew_s"]]  # 2 columns
    series = {
        "ack_latency_ms": valid["response_ms"].dropna().astype(float),
        "emission_latency_s": events.loc[~events["is_test"], "emission_latency_s"]
        .dropna()
        .astype(float),
        "clock_skew_s": valid["skew_s"].dropna().astype(float),
        "abs_clock_skew_s": valid["skew_s"].dropna().astype(float).abs(),
    }
    rows = []
    for name, s in series.items():
        q = s.quantile([0.5, 0.95, 0.99]) if len(s) else pd.Series([np.nan] * 3)
        rows.append(
            {
                "metric": name,
                "n": len(s),
                "p50": float(q.iloc[0]),
                "p95": float(q.iloc[1]),
                "p99": float(q.iloc[2]),
                "max": float(s.max()) if len(s) else np.nan,
                "min": float(s.min()) if len(s) else np.nan,
            }
        )
    return pd.DataFrame(rows)
