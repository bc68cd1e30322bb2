"""Delivery attempts and outcomes, inferred from what the receiver saw (spec section 6).

Only rows whose verdict is ``valid`` are the vendor's deliveries; the others belong to the
signature audit. Receivers see an attempt only if it reached them, so attempt numbers are
inferred from timing against the published schedule (0, 30 s, 2 min, 10 min, 1 h between
consecutive attempts) rather than from order alone.

All functions are pure: frames in, frames out, time enters as ``as_of``.
"""

from __future__ import annotations

import hashlib

import numpy as np
import orjson
import pandas as pd

from audit.analysis.rows import key_runs
from audit.analysis.schedule import Tolerance, expected_delay, number_attempts
from audit.errors import ParameterError
from audit.ingest.workers import threads
from audit.spec import DELIVERY_TIMEOUT_MS, MAX_ATTEMPTS, TEST_EVENT, TEST_INCIDENT_PREFIX
from audit.tables import ATTEMPTS, EVENTS
from audit.timeutil import as_utc

__all__ = [
    "ATTEMPT_COLUMNS",
    "OUTCOMES",
    "Tolerance",
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
    n = len(out)
    attempt = np.full(n, -1, dtype=np.int64)
    delay = np.full(n, np.nan)
    expected = np.full(n, np.nan)
    on_sched = np.zeros(n, dtype=bool)
    missing = np.zeros(n, dtype=np.int64)
    rows, first = event_runs(out) if runs is None else runs
    if len(rows):
        t = out["received_at"].to_numpy(dtype="datetime64[ns]").view("int64")[rows] / 1e9
        got = number_attempts(t, first, tol)
        no = got.attempt_no
        attempt[rows], delay[rows] = no, got.delay_s
        expected[rows], on_sched[rows] = got.expected_delay_s, got.on_schedule
        prev = np.concatenate(([0], no[:-1]))
        missing[rows] = np.where(first, 0, no - prev - 1)
    valid = attempt > 0
    out["attempt_no"] = pd.array(np.where(valid, attempt, 0), dtype="Int64")
    out.loc[~valid, "attempt_no"] = pd.NA
    out["delay_s"] = pd.array(delay, dtype="Float64")
    out["expected_delay_s"] = pd.array(expected, dtype="Float64")
    out["on_schedule"] = pd.array(on_sched, dtype="boolean")
    out["missing_before"] = pd.array(missing, dtype="Int64")
    out["success"] = _success(out["response_status"], out["response_ms"])
    out["is_test"] = is_test(out["event"], out["incident_id"])
    for col in ("delay_s", "expected_delay_s", "on_schedule", "missing_before", "success"):
        out.loc[~valid, col] = pd.NA
    return out


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
