"""Controls and report tables that count with masks and copy only the rows they show still
judge odd column types as the row-by-row filters did (missing values where no answer is known,
nullable numbers, values missing outside the period)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from audit.findings.controls.dlv import dlv_02
from audit.findings.controls.sig import sig_03
from audit.report.params import parse_period
from audit.report.tables import report_tables

PARAMS = {"max_slow_ack_rate": 0.05, "min_first_attempt_success": 0.9, "max_skew_p99_s": 30.0}


def _deliveries(**columns) -> pd.DataFrame:
    base = {
        "source": ["/x/a.jsonl", "/x/a.jsonl"],
        "line": [1, 2],
        "delivery_id": ["d1", "d2"],
        "received_at": pd.to_datetime(["2026-10-01T00:00:00Z", "2026-10-01T00:01:00Z"]),
        "verdict": ["valid", "valid"],
        "response_status": pd.array([200, 200], dtype="Int64"),
        "response_ms": pd.array([10.0, 12.0], dtype="Float64"),
        "skew_s": pd.array([1.0, 2.0], dtype="Float64"),
        "success": pd.array([True, True], dtype="boolean"),
        "attempt_no": pd.array([1, 1], dtype="Int64"),
        "is_test": [False, False],
    }
    return pd.DataFrame(base | columns)


def _scope(d: pd.DataFrame) -> SimpleNamespace:
    return SimpleNamespace(deliveries=d, valid=d[d["verdict"] == "valid"], params=PARAMS)


def test_first_attempt_success_as_nullable_numbers_is_judged_where_known():
    # One first attempt answered (1 = success), one with no answer: 1 of 1 succeeded.
    d = _deliveries(success=pd.array([1, None], dtype="Int64"))
    out = dlv_02(_scope(d))
    assert out.status == "pass" and out.reason.startswith("1 of 1 first attempts succeeded")
    d = _deliveries(success=pd.array([0.0, None], dtype="Float64"))
    out = dlv_02(_scope(d))
    assert out.status == "fail" and out.reason.startswith("0 of 1 first attempts succeeded")
    assert out.evidence["examples"] == ["d1"]


def test_a_missing_clock_skew_in_a_column_of_objects_is_left_out():
    d = _deliveries(skew_s=pd.array([40.0, pd.NA], dtype=object))
    out = sig_03(_scope(d))
    assert out.status == "fail"
    assert "over 1 valid deliveries is 40 s" in out.reason
    assert out.evidence["at_or_over_threshold"] == 1 and out.evidence["examples"] == ["d1"]


def test_report_tables_judge_test_events_within_the_period_only():
    """An event outside the period with no ``is_test`` value does not stop the report."""
    from audit.analysis.analyze import Analysis

    period = parse_period("2026-10")
    events = pd.DataFrame(
        {
            "subscription_id": ["wh", "wh", "wh"],
            "event_id": ["e1", "e2", "e0"],
            "event": ["incident.created"] * 3,
            "first_received_at": pd.to_datetime(
                ["2026-10-02T00:00:00Z", "2026-10-03T00:00:00Z", "2026-09-02T00:00:00Z"]
            ),
            "outcome": ["lost", "delivered", "lost"],
            "is_test": pd.array([False, False, None], dtype="boolean"),
            "retry_after_success": [False, False, False],
            "emission_latency_s": [1.0, 2.0, 3.0],
        }
    )
    empty = pd.DataFrame()
    a = Analysis(
        as_of=period.end,
        clock_start="created",
        deliveries=_deliveries().assign(
            event_id=["e1", "e2"],
            event="incident.created",
            incident_id="inc_1",
            subscription_id="wh",
            hmac_ok=True,
            matched_secret="wh#1",
            detail=None,
            delay_s=0.0,
            expected_delay_s=0.0,
            on_schedule=True,
            missing_before=0,
        ),
        events=events,
        incidents=pd.DataFrame({"status": [], "awaiting_client_s": []}),
        status_intervals=empty,
        takedown_durations=empty,
        takedown_excluded=empty,
        takedown_km=empty,
        takedown_summary=empty,
        subscriptions=pd.DataFrame({"fetched_at": []}),
        inputs=empty,
    )
    tables = report_tables(a, period)
    assert tables["undelivered_events"]["event_id"].tolist() == ["e1"]
    outcomes = tables["event_outcomes"].set_index("outcome")["events"].to_dict()
    assert outcomes == {"delivered": 1, "lost": 1}


_IDS = st.lists(st.one_of(st.none(), st.sampled_from(["inc_1", "inc_2", "", "inc_3", "é"])))


@given(values=_IDS, among=_IDS, dtype=st.sampled_from(["str", "string", "string[python]"]))
def test_membership_in_arrow_equals_isin(values, among, dtype):
    from audit.findings.controls.base import member_of

    v = pd.Series(values, dtype=dtype, index=np.arange(len(values)) * 3 + 1, name="incident_id")
    a = pd.Series(among, dtype=dtype)
    pd.testing.assert_series_equal(member_of(v, a), v.isin(a))
    pd.testing.assert_series_equal(member_of(v, a.astype(object)), v.isin(a.astype(object)))
