"""The events table (the engine's rule, :func:`audit.analysis.deliveries.events_rule`) against
the plain pandas ``groupby`` it replaced, kept here as the oracle: the same frame, dtypes and
all, on generated deliveries (retries on and off schedule, unknown answers, missing envelope
fields, shuffled rows, several subscriptions, rows without a subscription) and on the
hand-worked cases of ``tests/test_deliveries.py``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.analysis.deliveries import (
    Tolerance,
    _fingerprint,
    events_table,
    expected_delay,
    infer_attempts,
)
from audit.analysis.rows import take_rows
from audit.spec import MAX_ATTEMPTS
from audit.tables import EVENTS
from audit.timeutil import as_utc
from tests.builders import deliveries_frame

T0 = pd.Timestamp("2026-10-01T00:00:00Z")


def groupby_events(attempts, *, as_of, tolerance=None):
    as_of = as_utc(as_of)
    tol = tolerance or Tolerance()
    # Only the columns used below, taken in two rounds: the envelope columns (whose first
    # values per event are kept) are freed before the others are grouped.
    body = "body" if "body" in attempts.columns else "fingerprint"
    envelope = ["event", "event_timestamp", "incident_id", "is_test", body]
    used = [
        *("subscription_id", "event_id", "received_at", "attempt_no", "success"),
        *("response_status", "on_schedule", "missing_before"),
    ]
    # Rows of one (subscription, event id) together, in time order: the order from integer
    # codes (sorted like the strings) first, then one copy of the used columns in that order.
    # Groups are then runs of rows, numbered once, instead of strings hashed per groupby.
    keep = attempts["attempt_no"].notna() & attempts["subscription_id"].notna()
    pos = np.flatnonzero(keep.to_numpy())
    if not len(pos):
        return EVENTS.empty()
    t = attempts["received_at"].array.asi8[pos]
    perm, start = key_runs(attempts, pos, ["subscription_id", "event_id"], t)
    group = np.cumsum(start) - 1
    # The first value of each envelope column per event (first() skips missing values).
    first = take_rows(attempts[envelope], pos[perm]).groupby(group, sort=False).first()
    a = take_rows(attempts[used], pos[perm])
    success = a["success"].fillna(False).astype(bool)
    a = a.assign(
        _ok=success,
        _unknown=a["success"].isna(),
        _accepted=a["response_status"].between(200, 299).fillna(False).astype(bool),
        _off=~a["on_schedule"].fillna(False).astype(bool),
        _ok_t=a["received_at"].where(success),
    )
    first_ok_t = a.groupby(group, sort=False)["_ok_t"].transform("min")
    a["_after"] = (a["received_at"] > first_ok_t).fillna(False).astype(bool)
    g = a.groupby(group, sort=False)
    starts = np.flatnonzero(start)
    ev = pd.DataFrame(
        {
            "subscription_id": a["subscription_id"].iloc[starts].reset_index(drop=True),
            "event_id": a["event_id"].iloc[starts].reset_index(drop=True),
            "event": first["event"],
            "event_timestamp": first["event_timestamp"],
            "incident_id": first["incident_id"],
            "is_test": first["is_test"].astype(bool),
            "attempts": g.size(),
            "first_received_at": g["received_at"].min(),
            "last_received_at": g["received_at"].max(),
            "delivered_at": g["_ok_t"].min(),
            "accepted_count": g["_accepted"].sum(),
            "retry_after_success": g["_after"].any(),
            "too_many_attempts": g["attempt_no"].max() > MAX_ATTEMPTS,
            "off_schedule": g["_off"].sum(),
            "missing_attempts": g["missing_before"].sum(),
            "last_attempt_no": g["attempt_no"].max(),
            "_any_ok": g["_ok"].any(),
            "_last_unknown": g["_unknown"].last(),
            "_body": first[body],
        }
    ).reset_index(drop=True)
    return event_outcomes(ev, body, as_of=as_of, tolerance=tol)


def key_runs(frame, positions, keys, time):
    """The rows at ``positions`` grouped by ``keys`` (in the strings' sorted order), each group
    in ``time`` order, equal times in frame order: (order, first row of each group)."""
    codes = [pd.factorize(frame[k], sort=True, use_na_sentinel=False)[0][positions] for k in keys]
    order = np.lexsort((time, *reversed(codes)))
    start = np.zeros(len(order), dtype=bool)
    start[:1] = True
    for c in codes:
        c = c[order]
        start[1:] |= c[1:] != c[:-1]
    return order, start


def event_outcomes(ev, body, *, as_of, tolerance):
    """The events table from its per-event values (the code that followed the grouping before
    the engine): fingerprint, emission latency and outcome, in the declared dtypes."""
    tol = tolerance
    if body == "body":
        ev["fingerprint"] = pd.Series([_fingerprint(b) for b in ev["_body"]], dtype="str")
    else:
        ev["fingerprint"] = ev["_body"].astype("str")
    ev["emission_latency_s"] = (
        (ev["first_received_at"] - ev["event_timestamp"]).dt.total_seconds().astype("Float64")
    )
    last_no = ev["last_attempt_no"].astype("int64")
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
    for c in ("accepted_count", "off_schedule", "attempts", "missing_attempts"):
        ev[c] = ev[c].astype("int64")
    ev["last_attempt_no"] = last_no
    ev["retry_after_success"] = ev["retry_after_success"].astype(bool)
    ev["too_many_attempts"] = ev["too_many_attempts"].astype(bool)
    return ev[EVENTS.names]


# Retry delays on the schedule (0, 30 s, 2 min, 10 min, 1 h), near it, and off it.
_DELAYS = (0, 30, 31, 120, 150, 600, 3600, 45, 7)


@st.composite
def deliveries(draw):
    rows = []
    for k in range(draw(st.integers(1, 12))):
        event_id = draw(st.sampled_from(["evt_a", "evt_b", "evt_c", None]))
        sub = draw(st.sampled_from(["wh_1", "wh_2", None]))
        t = T0 + pd.Timedelta(seconds=sum(draw(st.lists(st.sampled_from(_DELAYS), max_size=5))))
        status = draw(st.sampled_from([200, 204, 299, 300, 404, 500, 503, None]))
        ms = draw(st.sampled_from([40.0, 5000.0, 5001.0, None]))
        event = draw(st.sampled_from(["incident.created", "webhook.test", None]))
        incident = draw(st.sampled_from(["inc_1", "test_1", None]))
        body = json.dumps(
            {"id": event_id, "event": event, "data": {"incidentId": incident, "k": k % 2}}
        )
        rows.append(
            {
                "subscription_id": sub,
                "event_id": event_id,
                "event": event,
                "event_timestamp": draw(st.sampled_from([T0 - pd.Timedelta(seconds=20), None])),
                "incident_id": incident,
                "received_at": t,
                "response_status": status,
                "response_ms": ms,
                "verdict": draw(st.sampled_from(["valid", "valid", "valid", "invalid_signature"])),
                "body": draw(st.sampled_from([body.encode(), b"{not json", b"[]"])),
                "skew_s": 0.5,
                "source": "log.jsonl",
            }
        )
    frame = deliveries_frame(rows)
    order = draw(st.permutations(range(len(frame))))
    return frame.iloc[list(order)].reset_index(drop=True)


@settings(max_examples=200, deadline=None)
@given(deliveries(), st.sampled_from([T0, T0 + pd.Timedelta(minutes=5), T0 + pd.Timedelta(days=1)]))
def test_the_events_table_is_the_groupby_s(frame, as_of):
    attempts = infer_attempts(frame, as_of=as_of)
    want = groupby_events(attempts, as_of=as_of)
    pd.testing.assert_frame_equal(events_table(attempts, as_of=as_of), want)
    # As the evidence store gives them: a fingerprint column instead of the body.
    stored = attempts.drop(columns=["body"]).assign(
        fingerprint=pd.Series([_fingerprint(b) for b in attempts["body"]], dtype="str")
    )
    pd.testing.assert_frame_equal(
        events_table(stored, as_of=as_of), groupby_events(stored, as_of=as_of)
    )


_TEXT = ("subscription_id", "event_id", "event", "incident_id")


@st.composite
def hand_made(draw):
    """Attempts frames as a caller may build them by hand (found in review): text columns as
    categories or Arrow strings, flags and numbers as objects or floats (fractions too),
    other time units, untimed rows that carry an attempt number, repeated index labels."""
    as_of = T0 + pd.Timedelta(minutes=draw(st.sampled_from([0, 5, 60 * 24])))
    a = infer_attempts(draw(deliveries()), as_of=as_of)
    for c in _TEXT:
        kind = draw(st.sampled_from(["keep", "category", "string[pyarrow]", "arrow"]))
        if kind == "category":
            a[c] = a[c].astype("category")
        elif kind == "arrow":
            a[c] = a[c].astype(pd.ArrowDtype(pa.string()))
        elif kind != "keep":
            a[c] = a[c].astype(kind)
    for c, kinds in {
        "success": ["keep", "bool[pyarrow]", "object"],
        "is_test": ["keep", "object", "none"],
        "attempt_no": ["keep", "float", "fractions"],
        "missing_before": ["keep", "float", "fractions"],
    }.items():
        kind = draw(st.sampled_from(kinds))
        if kind == "object":
            a[c] = a[c].astype(object)
        elif kind == "none":  # unknown for every row
            a[c] = pd.Series([None] * len(a), dtype=object, index=a.index)
        elif kind == "float":
            a[c] = a[c].astype("Float64")
        elif kind == "fractions":
            a[c] = a[c].astype("Float64") + 0.5
    a["received_at"] = a["received_at"].astype(
        f"datetime64[{draw(st.sampled_from(['ns', 'us', 's']))}, UTC]"
    )
    untimed = draw(st.lists(st.booleans(), min_size=len(a), max_size=len(a)))
    a.loc[np.array(untimed, dtype=bool), "received_at"] = pd.NaT  # attempt numbers kept
    if draw(st.booleans()):
        a.index = draw(st.lists(st.integers(0, 3), min_size=len(a), max_size=len(a)))
    return a, as_of


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(hand_made())
def test_the_events_table_of_a_hand_made_frame_is_the_groupby_s(made):
    attempts, as_of = made
    # The groupby keeps the dtypes of the frame (categories, seconds); the engine's table has
    # the declared ones whatever the frame's (on purpose: docs/tables.md), the same values.
    want = groupby_events(attempts, as_of=as_of).astype(EVENTS.dtypes())
    pd.testing.assert_frame_equal(events_table(attempts, as_of=as_of), want)


def test_no_event_gives_the_empty_table():
    frame = deliveries_frame([])
    attempts = infer_attempts(frame, as_of=T0)
    pd.testing.assert_frame_equal(events_table(attempts, as_of=T0), EVENTS.empty())
