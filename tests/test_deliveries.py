"""Attempt inference against the published schedule, and event outcomes.

Expected values are worked out by hand from the spec's schedule: attempts at 0, 30 s, 2 min,
10 min, 1 h after the previous one, i.e. 0, 30, 150, 750, 4350 s after the first; tolerance
max(10 s, 10 % of the expected delay).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.analysis.deliveries import (
    Tolerance,
    events_table,
    infer_attempts,
    latency_summary,
    success_rates,
)
from tests.builders import deliveries_frame

T0 = pd.Timestamp("2026-10-01T00:00:00Z")
FAR = T0 + pd.Timedelta(days=1)


def frame(rows: list[tuple], *, event_id: str = "evt_a", verdict: str = "valid") -> pd.DataFrame:
    """rows: (seconds after T0, response_status, response_ms[, verdict])."""
    recs = []
    for r in rows:  # by column name: tests.builders.deliveries_frame declares the dtypes
        body = json.dumps(
            {"id": event_id, "event": "incident.created", "data": {"incidentId": "i"}}
        )
        recs.append(
            {
                "subscription_id": "wh_1",
                "event_id": event_id,
                "event": "incident.created",
                "event_timestamp": T0 - pd.Timedelta(seconds=20),
                "incident_id": "i",
                "received_at": T0 + pd.Timedelta(seconds=r[0]),
                "response_status": r[1],
                "response_ms": r[2],
                "verdict": r[3] if len(r) > 3 else verdict,
                "body": body.encode(),
                "skew_s": 0.5,
                "source": "log.jsonl",
            }
        )
    return deliveries_frame(recs)


def run(rows, as_of=FAR, **kw):
    a = infer_attempts(frame(rows, **kw), as_of=as_of)
    return a, events_table(a, as_of=as_of)


def col(df, name):
    return [None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in df[name]]


def test_first_attempt_success():
    a, e = run([(0, 204, 40)])
    assert col(a, "attempt_no") == [1] and col(a, "success") == [True]
    assert e.loc[0, "outcome"] == "delivered" and e.loc[0, "attempts"] == 1
    assert e.loc[0, "emission_latency_s"] == 20.0
    assert e.loc[0, "delivered_at"] == T0


def test_success_on_attempt_three():
    a, e = run([(0, 503, 10), (31, 503, 10), (152, 204, 10)])
    assert col(a, "attempt_no") == [1, 2, 3]
    assert col(a, "on_schedule") == [True, True, True]
    assert col(a, "expected_delay_s") == [0.0, 30.0, 120.0]
    assert e.loc[0, "outcome"] == "delivered"
    assert e.loc[0, "delivered_at"] == T0 + pd.Timedelta(seconds=152)


def test_five_failures_on_schedule_are_exhausted():
    a, e = run([(0, 503, 10), (30, 500, 10), (150, 503, 10), (750, 502, 10), (4350, 503, 10)])
    assert col(a, "attempt_no") == [1, 2, 3, 4, 5]
    assert e.loc[0, "outcome"] == "exhausted" and e.loc[0, "off_schedule"] == 0


def test_a_skipped_attempt_is_counted_missing():
    a, e = run([(0, 503, 10), (150, 204, 10)])  # attempt 2 never reached the receiver
    assert col(a, "attempt_no") == [1, 3]
    assert col(a, "missing_before") == [0, 1]
    assert col(a, "expected_delay_s") == [0.0, 150.0]
    assert e.loc[0, "missing_attempts"] == 1


def test_retry_five_seconds_after_failure_is_off_schedule():
    a, e = run([(0, 503, 10), (5, 204, 10)])
    assert col(a, "attempt_no") == [1, 2]
    assert col(a, "on_schedule") == [True, False]
    assert col(a, "expected_delay_s") == [0.0, 30.0]
    assert e.loc[0, "off_schedule"] == 1


@pytest.mark.parametrize(("delay", "on"), [(40, True), (20, True), (41, False), (19, False)])
def test_tolerance_boundary_at_thirty_seconds(delay, on):
    a, _ = run([(0, 503, 10), (delay, 204, 10)])
    assert col(a, "on_schedule")[1] is on


def test_sixth_attempt_is_too_many():
    times = [0, 30, 150, 750, 4350, 7950]
    a, e = run([(t, 503, 10) for t in times])
    assert col(a, "attempt_no") == [1, 2, 3, 4, 5, 6]
    assert col(a, "on_schedule")[5] is False
    assert bool(e.loc[0, "too_many_attempts"]) is True


def test_retry_after_a_timely_2xx_is_a_vendor_fault():
    _, e = run([(0, 204, 100), (30, 204, 50)])
    assert bool(e.loc[0, "retry_after_success"]) is True
    assert e.loc[0, "accepted_count"] == 2


def test_retry_after_a_slow_2xx_is_legitimate():
    a, e = run([(0, 204, 7000), (30, 204, 50)])
    assert col(a, "success") == [False, True]
    assert bool(e.loc[0, "retry_after_success"]) is False
    assert e.loc[0, "accepted_count"] == 2  # the receiver stored it twice: must be idempotent
    assert e.loc[0, "delivered_at"] == T0 + pd.Timedelta(seconds=30)


def test_exactly_five_seconds_is_in_time():
    a, _ = run([(0, 204, 5000)])
    assert col(a, "success") == [True]


@pytest.mark.parametrize(
    ("rows", "as_of_s", "outcome"),
    [
        ([(0, 503, 10)], 39, "pending"),  # next expected at 30 s, +10 s tolerance
        ([(0, 503, 10)], 40, "pending"),
        ([(0, 503, 10)], 41, "lost"),
        ([(0, 503, 10), (30, 503, 10), (150, 503, 10), (750, 503, 10)], 750 + 3960, "pending"),
        ([(0, 503, 10), (30, 503, 10), (150, 503, 10), (750, 503, 10)], 750 + 3961, "lost"),
    ],
)
def test_pending_versus_lost_depends_on_as_of(rows, as_of_s, outcome):
    _, e = run(rows, as_of=T0 + pd.Timedelta(seconds=as_of_s))
    assert e.loc[0, "outcome"] == outcome


def test_unknown_answer_is_not_guessed():
    _, e = run([(0, None, None)])
    assert e.loc[0, "outcome"] == "unknown"


def test_only_valid_deliveries_count():
    rows = [(0, 503, 10), (10, 204, 10, "signature_mismatch"), (30, 204, 10)]
    a, e = run(rows)
    assert col(a, "attempt_no") == [1, None, 2]
    assert e.loc[0, "attempts"] == 2 and e.loc[0, "off_schedule"] == 0


def test_one_event_sent_to_two_subscriptions_is_two_events():
    """Same event id, two subscriptions: each has its own attempts, numbered from 1 (wh_2's
    copy 30 s after wh_1's is not wh_1's second attempt)."""
    rows = frame([(0, 503, 10), (30, 204, 10), (31, 204, 10)])
    rows.loc[1, "subscription_id"] = "wh_2"
    a = infer_attempts(rows, as_of=FAR)
    e = events_table(a, as_of=FAR)
    assert col(a, "attempt_no") == [1, 1, 2]
    assert col(e, "subscription_id") == ["wh_1", "wh_2"]
    assert col(e, "attempts") == [2, 1] and col(e, "outcome") == ["delivered", "delivered"]


def test_naive_as_of_is_rejected():
    from audit.errors import ParameterError

    with pytest.raises(ParameterError):
        infer_attempts(frame([(0, 204, 1)]), as_of=pd.Timestamp("2026-10-02"))


def test_fingerprint_ignores_key_order_and_whitespace():
    df = pd.concat([frame([(0, 204, 1)], event_id="a"), frame([(0, 204, 1)], event_id="b")])
    df = df.reset_index(drop=True)
    df.loc[1, "body"] = b'{"data": {"incidentId": "i"}, "event": "incident.created", "id": "b"}'
    e = events_table(infer_attempts(df, as_of=FAR), as_of=FAR)
    assert e["fingerprint"].nunique() == 1


def test_rates_and_latency_summaries():
    a1 = frame([(0, 503, 10), (30, 204, 30)], event_id="e1")
    a2 = frame([(0, 204, 50)], event_id="e2")
    a = infer_attempts(pd.concat([a1, a2], ignore_index=True), as_of=FAR)
    e = events_table(a, as_of=FAR)
    rates = success_rates(a, e).iloc[0]
    assert (rates["first_attempts"], rates["first_attempt_success"]) == (2, 0.5)
    assert (rates["events"], rates["event_success"]) == (2, 1.0)
    lat = latency_summary(a, e).set_index("metric")
    assert lat.loc["ack_latency_ms", "max"] == 50.0
    assert lat.loc["ack_latency_ms", "p50"] == 30.0  # median of 10, 30, 50


def test_rates_by_subscription_event_and_day():
    # e1 on wh_1 day 0: first attempt 503, retry 204 (delivered); e2 on wh_2 day 1: 204 once.
    a1 = frame([(0, 503, 10), (30, 204, 30)], event_id="e1")
    a2 = frame([(86_400, 204, 50)], event_id="e2").assign(
        subscription_id="wh_2", event="incident.updated"
    )
    a = infer_attempts(pd.concat([a1, a2], ignore_index=True), as_of=FAR)
    e = events_table(a, as_of=FAR)
    want = {"first_attempts": [1, 1], "first_attempt_success": [0.0, 1.0],
            "events": [1, 1], "event_success": [1.0, 1.0]}  # fmt: skip
    day = T0.strftime("%Y-%m-%d"), (T0 + pd.Timedelta(days=1)).strftime("%Y-%m-%d")
    for by, groups in [("subscription", ["wh_1", "wh_2"]), ("day", list(day)),
                       ("event", ["incident.created", "incident.updated"])]:  # fmt: skip
        rates = success_rates(a, e, by=by)
        assert rates.to_dict("list") == {"group": groups, **want}, by


def test_test_traffic_is_one_column_and_every_rate_leaves_it_out():
    real = frame([(0, 204, 10)], event_id="e1")
    test_incident = frame([(0, 503, 10)], event_id="e2").assign(incident_id="test_9")
    ping = frame([(0, 503, 10)], event_id="e3").assign(event="webhook.test", incident_id=None)
    a = infer_attempts(pd.concat([real, test_incident, ping], ignore_index=True), as_of=FAR)
    assert col(a, "is_test") == [False, True, True]
    e = events_table(a, as_of=FAR)
    assert col(e, "is_test") == [False, True, True]
    rates = success_rates(a, e).iloc[0]
    # Only e1 counts: a failed first attempt to a test incident is not the service's failure.
    assert (rates["first_attempts"], rates["first_attempt_success"]) == (1, 1.0)
    assert (rates["events"], rates["event_success"]) == (1, 1.0)


def test_demo_outage_events_are_exhausted(tmp_path):
    from audit.demo import simulate
    from audit.ingest.verification import audit_signatures

    sim = simulate(tmp_path / "d", seed=7, days=10, incidents=40)
    truth = json.loads(sim.truth.read_text())
    audit = audit_signatures(sim.captures, sim.secrets)
    as_of = pd.Timestamp(truth["period"]["end"])
    e = events_table(infer_attempts(audit.deliveries, as_of=as_of), as_of=as_of)
    outcome = e.set_index(["subscription_id", "event_id"])["outcome"]
    planted = truth["receiver_outage"]["exhausted"]
    assert planted
    for p in planted:
        assert outcome[(p["subscription_id"], p["event_id"])] == "exhausted"
    for p in truth["network_outage"]["lost"]:
        if p["attempt"] == 5:
            assert outcome[(p["subscription_id"], p["event_id"])] == "lost"


def test_no_status_captured_means_success_unknown_even_when_slow():
    a, e = run([(0, None, 6000)])
    assert col(a, "success") == [None]
    assert e.loc[0, "outcome"] == "unknown"


def test_an_uncaptured_early_answer_does_not_hide_exhaustion():
    rows = [(0, None, None), (30, 503, 10), (150, 503, 10), (750, 503, 10), (4350, 503, 10)]
    _, e = run(rows)
    assert e.loc[0, "outcome"] == "exhausted"
    _, e = run([(0, 503, 10), (30, None, None)], as_of=FAR)
    assert e.loc[0, "outcome"] == "unknown"


def test_events_do_not_depend_on_the_row_order_or_the_index_labels():
    """Two events interleaved, rows shuffled, the index labels repeated and out of order: the
    events table is the one of the same rows in order with a plain index (worked by hand: evt_a
    delivered on attempt 2, evt_b exhausted after five failures on schedule)."""
    a_rows = frame([(0, 500, 40), (30, 204, 40)], event_id="evt_a")
    b_rows = frame(
        [(0, 500, 40), (30, 500, 40), (150, 500, 40), (750, 500, 40), (4350, 500, 40)],
        event_id="evt_b",
    )
    rows = pd.concat([a_rows, b_rows], ignore_index=True)
    plain = events_table(infer_attempts(rows, as_of=FAR), as_of=FAR)
    shuffled = rows.iloc[[5, 0, 3, 6, 1, 2, 4]]
    shuffled.index = [3, 3, 1, 0, 9, 9, 2]
    got = events_table(infer_attempts(shuffled, as_of=FAR), as_of=FAR)
    assert col(got, "event_id") == ["evt_a", "evt_b"]
    assert col(got, "outcome") == ["delivered", "exhausted"]
    assert col(got, "attempts") == [2, 5] and col(got, "last_attempt_no") == [2, 5]
    pd.testing.assert_frame_equal(got, plain)


def _numbered_one_by_one(deliveries: pd.DataFrame, floor: float, share: float) -> list[tuple]:
    """The rule of infer_attempts as a plain loop (its first version), for comparison:
    (attempt_no, delay_s, expected_delay_s, on_schedule, missing_before) per input row."""
    out = [(None, None, None, None, None)] * len(deliveries)
    keyed = sorted(
        (r.subscription_id, r.event_id, r.received_at.value / 1e9, i)
        for i, r in enumerate(deliveries.itertuples())
        if r.verdict == "valid"
    )
    prev_key, prev_no, prev_t = None, 0, 0.0
    for sub, eid, t, i in keyed:
        if (sub, eid) != prev_key:
            out[i] = (1, None, 0.0, True, 0)
            prev_key, prev_no, prev_t = (sub, eid), 1, t
            continue
        d, no, exp, ok = t - prev_t, prev_no + 1, None, False
        for k in range(prev_no + 1, 6):
            e = float(sum((30, 120, 600, 3600)[prev_no - 1 : k - 1]))
            if abs(d - e) <= max(floor, share * e):
                no, exp, ok = k, e, True
                break
        if not ok and prev_no < 5:
            exp = float((30, 120, 600, 3600)[prev_no - 1])
        out[i] = (no, d, exp, ok, no - prev_no - 1)
        prev_no, prev_t = no, t
    return out


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(
        st.lists(  # per event: gaps near the schedule's delays, their tolerance edges and not
            st.sampled_from([0, 5, 20, 30, 40, 41, 140, 150, 160, 165, 675, 750, 825, 4350, 4785]),
            min_size=0,
            max_size=8,
        ),
        min_size=1,
        max_size=12,
    ),
    seed=st.integers(0, 2**16),
    tolerance=st.sampled_from([(10.0, 0.1), (200.0, 0.5), (0.0, 0.0), (30.0, 1.0)]),
)
def test_the_engine_numbers_attempts_as_a_plain_loop_numbers_them(events, seed, tolerance):
    """Every event's attempts (equal times included, rows shuffled, some not valid, events of
    up to 9 attempts: past the schedule's last), numbered by the engine's expression
    (:func:`audit.analysis.deliveries.attempts_rule`) as the plain loop numbers them; wide
    tolerances make several attempt numbers match (the smallest wins)."""
    recs = []
    for n, gaps in enumerate(events):
        t = 0
        for i, gap in enumerate([0, *gaps]):
            t += gap
            recs.append((t, 500, 10.0, "valid" if (n + i) % 7 else "signature_mismatch"))
    frames = [frame([r], event_id=f"evt_{n}") for n, r in enumerate(recs)]
    rows = pd.concat(frames, ignore_index=True)
    rows["event_id"] = [f"evt_{n}" for n, gaps in enumerate(events) for _ in range(len(gaps) + 1)]
    rows = rows.sample(frac=1, random_state=seed).reset_index(drop=True)
    got = infer_attempts(rows, as_of=FAR, tolerance=Tolerance(*tolerance))
    names = ["attempt_no", "delay_s", "expected_delay_s", "on_schedule", "missing_before"]
    assert list(zip(*(col(got, c) for c in names), strict=True)) == _numbered_one_by_one(
        rows, *tolerance
    )


def test_attempts_closer_than_a_float_second_can_tell_are_numbered_in_time_order():
    """Two receipts 50 ns apart, listed latest first: as seconds in a float (about 240 ns
    apart near 2026) they are equal, so numbering by float seconds kept the listed order.
    The earlier receipt is attempt 1 (the events table orders them by nanosecond too)."""
    late = pd.Timestamp("2026-10-01T00:00:00.000000050Z")
    d = frame([(0, 500, 40.0), (0, 200, 40.0)])
    d["received_at"] = pd.Series([late, T0], dtype=d["received_at"].dtype)
    assert late.value / 1e9 == T0.value / 1e9  # the tie a float makes of them
    a = infer_attempts(d, as_of=FAR)
    assert col(a, "attempt_no") == [2, 1]
    ev = events_table(a, as_of=FAR)
    assert col(ev, "first_received_at") == [T0] and col(ev, "delivered_at") == [T0]


def test_attempts_with_no_numbered_row_give_an_empty_events_table_whatever_the_time_column():
    """Found in review: with no row numbered, the times are never read (an untyped column)."""
    a = infer_attempts(frame([(0, 500, 40.0)], verdict="invalid_signature"), as_of=FAR)
    a["received_at"] = pd.Series([None], dtype=object)
    assert events_table(a, as_of=FAR).empty


def test_a_group_seen_on_one_side_only_counts_zero_events_as_an_integer():
    """wh_1's only event is pending 39 s after its failed first attempt (not judged yet): one
    first attempt, no event, so no event success rate (NaN); wh_2's event was delivered at once.
    Counts are integers whatever the groups (worked by hand)."""
    pending = frame([(0, 503, 10)], event_id="e1")
    delivered = frame([(0, 204, 10)], event_id="e2").assign(subscription_id="wh_2")
    as_of = T0 + pd.Timedelta(seconds=39)
    a = infer_attempts(pd.concat([pending, delivered], ignore_index=True), as_of=as_of)
    e = events_table(a, as_of=as_of)
    assert col(e, "outcome") == ["pending", "delivered"]
    rates = success_rates(a, e, by="subscription")
    assert rates["group"].tolist() == ["wh_1", "wh_2"]
    assert rates["first_attempts"].tolist() == [1, 1] and rates["events"].tolist() == [0, 1]
    assert rates["first_attempt_success"].tolist() == [0.0, 1.0]
    assert pd.isna(rates["event_success"][0]) and rates["event_success"][1] == 1.0
    assert rates["events"].dtype == "int64" and rates["first_attempts"].dtype == "int64"


def test_the_events_rule_composes_on_the_attempts_rule_in_one_run():
    """The events table of deliveries as one expression (the attempts rule's rows joined to
    their deliveries, then the events rule) is the table of the two pandas-facing steps: two
    interleaved events, shuffled (evt_a delivered on attempt 2, evt_b exhausted)."""
    from audit.analysis.deliveries import (
        _ATTEMPT_INPUTS,
        _fingerprint,
        _typed,
        delivery_events_rule,
    )
    from audit.analysis.engine import arrow_input, frame_of, settings
    from audit.analysis.engine import run as run_rule
    from audit.tables import EVENTS

    a_rows = frame([(0, 500, 40), (30, 204, 40)], event_id="evt_a")
    b_rows = frame(
        [(0, 500, 40), (30, 500, 40), (150, 500, 40), (750, 500, 40), (4350, 500, 40)],
        event_id="evt_b",
    )
    rows = pd.concat([a_rows, b_rows], ignore_index=True).iloc[[5, 0, 3, 6, 1, 2, 4]]
    rows = rows.reset_index(drop=True)
    rows["fingerprint"] = pd.Series([_fingerprint(b) for b in rows["body"]], dtype="str")
    want = events_table(infer_attempts(rows, as_of=FAR), as_of=FAR)
    columns = [*_ATTEMPT_INPUTS, "event_timestamp", "fingerprint"]
    table = _typed(arrow_input(rows, columns))
    got = run_rule(
        delivery_events_rule,
        {"deliveries": table, "settings": settings(as_of=FAR)},
        floor_s=10.0,
        share=0.1,
    )
    events = frame_of(got, EVENTS)
    assert col(events, "outcome") == ["delivered", "exhausted"]
    pd.testing.assert_frame_equal(events, want)
