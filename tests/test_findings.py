"""Compliance controls: a pass and a fail case for every control, the runner, mutes, the demo.

Small frames are built by hand: verified delivery rows (the verdict is given, as
``verify_frame`` would set it) go through :func:`audit.analysis.analyze.run_analyses`, and listing
snapshots are written as files and read by :func:`audit.analysis.subscriptions.load_snapshots`.
Times
count from T0 = 2026-10-01 00:00 UTC; the period is the 10 days from T0 and ``as_of`` is its
end. Expected figures are worked out by hand in the comments (quantiles: linear interpolation,
h = (n - 1) q); the finding uid's known answer comes from ``sha256sum``; the demo's expected
failures come from the simulator's ``truth.json``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import orjson
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.analysis.analyze import Analysis, analyze, run_analyses
from audit.analysis.subscriptions import load_snapshots
from audit.demo import simulate
from audit.errors import InputError, ParameterError
from audit.findings import (
    CONTROLS,
    FINDING_COLUMNS,
    SEVERITIES,
    load_catalogue,
    read_mutes,
    run_controls,
    summarise,
)
from audit.findings import runner as checks
from audit.findings.catalogue import parameter_ranges
from audit.findings.controls import FAMILIES, control_id
from audit.findings.controls.sig import sig_03
from audit.spec import INCIDENT_EVENTS
from tests.builders import deliveries_frame

pytestmark = pytest.mark.filterwarnings("ignore::audit.analysis.survival.SmallSampleWarning")

T0 = pd.Timestamp("2026-10-01T00:00:00Z")
END = T0 + pd.Timedelta(days=10)
AS_OF = END
H = 3600.0
DAY = 86400.0
CREATED, CHANGED = "incident.created", "incident.status_changed"


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------


def at(seconds: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=seconds)


def row(
    t: float,
    *,
    event_id: str = "evt_1",
    event: str = CREATED,
    status: int | None = 204,
    ms: float | None = 40.0,
    verdict: str = "valid",
    sub: str = "wh_1",
    incident: str = "inc_1",
    emitted: float | None = None,
    skew: float | None = 0.5,
    delivery_id: str | None = None,
    data: dict | None = None,
) -> dict:
    """One verified delivery received at T0 + ``t`` s of an event stamped at T0 + ``emitted``
    s (default 20 s before receipt); ``data`` holds the fields of the body's ``data`` besides
    ``incidentId``. ``status`` is the receiver's answer."""
    stamp = at(t - 20 if emitted is None else emitted)
    body = {
        "id": event_id,
        "event": event,
        "timestamp": stamp.isoformat(),
        "data": {"incidentId": incident, **(data or {})},
    }
    return {
        "source": "/captures/receiver.jsonl",
        "line": 0,
        "received_at": at(t),
        "subscription_id": sub,
        "response_status": status,
        "response_ms": ms,
        "delivery_id": delivery_id or f"dlv_{event_id}_{t:g}",
        "body": orjson.dumps(body),
        "event_id": event_id,
        "event": event,
        "event_timestamp": stamp,
        "incident_id": incident,
        "verdict": verdict,
        "skew_s": skew,
        "matched_secret": f"{sub}#1" if verdict == "valid" else None,
    }


def frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a verified deliveries frame, with the declared dtypes (``audit.tables``)."""
    return deliveries_frame([{k: v for k, v in r.items() if k != "line"} for r in rows])


def analysis(
    rows: Sequence[dict] = (), *, as_of: pd.Timestamp = AS_OF, snapshots: pd.DataFrame | None = None
) -> Analysis:
    return run_analyses(frame(list(rows)), as_of=as_of, subscriptions=snapshots)


def snapshots(tmp_path: Path, *listings: tuple[float, list[dict]]) -> pd.DataFrame:
    """Snapshot files, each ``(fetched at T0 + s, [subscription objects])``, loaded."""
    folder = tmp_path / "snapshots"
    folder.mkdir(parents=True, exist_ok=True)
    for i, (t, subs) in enumerate(listings):
        response = {"data": subs, "message": "Success"}
        doc = {"fetched_at": at(t).isoformat(), "base_url": "https://api.example"}
        doc["response"] = response
        (folder / f"s{i}.json").write_text(json.dumps(doc))
    return load_snapshots(folder)


def sub(
    sid: str = "wh_1",
    *,
    url: str = "https://hooks.example/wh",
    events: list[str] | tuple[str, ...] = INCIDENT_EVENTS,
    active: bool = True,
    client: str = "cl_1",
    last: str | None = "success",
    created: str = "2026-09-01T00:00:00Z",
    **more: object,
) -> dict:
    item = {"id": sid, "clientId": client, "url": url, "events": list(events), "active": active}
    item |= {"createdAt": created, "lastDeliveryStatus": last, **more}
    return item


def run(a: Analysis, *, only: str | list[str] | None = None, **kw: object) -> pd.DataFrame:
    ids = [only] if isinstance(only, str) else only
    return run_controls(a, period_start=T0, period_end=END, only=ids, **kw)


def one(findings: pd.DataFrame, check_id: str, resource: str | None = None) -> dict:
    rows = findings[findings["check_id"] == check_id]
    if resource is not None:
        rows = rows[rows["resource"] == resource]
    assert len(rows) == 1, rows
    out = rows.iloc[0].to_dict()
    out["evidence"] = json.loads(out["evidence"])
    return out


def status(a: Analysis, check_id: str, **kw: object) -> str:
    return one(run(a, only=check_id, **kw), check_id)["status"]


# --------------------------------------------------------------------------------------------
# Catalogue
# --------------------------------------------------------------------------------------------

#: The catalogue of issue 4, section 1 (id -> severity), and the parameter defaults it names.
ISSUE_TABLE = {
    "SIG-01": "critical",
    "SIG-02": "high",
    "SIG-03": "medium",
    "SIG-04": "medium",
    "SIG-05": "high",
    "DLV-01": "high",
    "DLV-02": "high",
    "DLV-03": "critical",
    "DLV-04": "medium",
    "DLV-05": "medium",
    "DLV-06": "info",
    "SUB-01": "medium",
    "SUB-02": "high",
    "SUB-03": "high",
    "SUB-04": "medium",
    "SUB-05": "high",
    "TKD-01": "high",
    "TKD-02": "medium",
    "TKD-03": "high",
    "TKD-04": "medium",
}
ISSUE_DEFAULTS = {
    "max_skew_p99_s": 60,
    "max_secret_age_days": 90,
    "max_slow_ack_rate": 0.001,
    "min_first_attempt_success": 0.99,
    "max_emission_latency_s": 300,
    "ttt_median_h": 24,
    "ttt_p90_h": 72,
    "max_client_wait_h": 24,
    "max_silence_days": 7,
}


#: Ranges of the issue's parameters, as docs/controls.md states them ("60, 0–300").
ISSUE_RANGES = {
    "max_skew_p99_s": (0, 300),
    "max_secret_age_days": (0, 3650),
    "max_slow_ack_rate": (0, 1),
    "min_first_attempt_success": (0, 1),
    "max_emission_latency_s": (0, float("inf")),
    "ttt_median_h": (0, float("inf")),
    "ttt_p90_h": (0, float("inf")),
    "max_client_wait_h": (0, float("inf")),
    "max_silence_days": (0, float("inf")),
}


def test_catalogue_keeps_the_issue_controls_with_their_severities_and_parameters():
    # A subset, not equality: a new control is added by its catalogue entry alone.
    cat = load_catalogue()
    assert {cid: cat[cid].severity for cid in ISSUE_TABLE if cid in cat} == ISSUE_TABLE
    params = {k: v for c in cat.values() for k, v in c.parameters.items()}
    assert {k: params.get(k) for k in ISSUE_DEFAULTS} == ISSUE_DEFAULTS
    ranges = parameter_ranges(cat)
    assert {k: ranges.get(k) for k in ISSUE_RANGES} == ISSUE_RANGES
    assert set(ranges) == set(params)
    for c in cat.values():
        assert c.title and c.rationale and c.remediation


def test_every_catalogue_id_has_a_function_and_every_function_an_entry():
    cat = load_catalogue()
    assert sorted(set(cat) - set(CONTROLS)) == [], "catalogue ids without a function"
    assert sorted(set(CONTROLS) - set(cat)) == [], "control functions without a catalogue entry"


def test_controls_are_found_by_name_in_their_family_module():
    assert FAMILIES == ("cap", "dlv", "sig", "sub", "tkd")
    assert CONTROLS["SIG-03"] is sig_03
    assert control_id("tkd_04") == "TKD-04"
    assert control_id("delivery_examples") is None and control_id("sig_") is None
    # helpers of base (quantiles, counts...) and imported names are not controls
    assert all(f.__module__.rsplit(".", 1)[1] == cid[:3].lower() for cid, f in CONTROLS.items())


def test_a_catalogue_id_without_a_function_is_an_error_row(monkeypatch):
    monkeypatch.delitem(CONTROLS, "SIG-03")
    err = one(run(analysis([row(0)]), only="SIG-03"), "SIG-03")
    assert err["status"] == "error" and "no implementation" in err["reason"]


def test_docs_list_every_control_and_parameter_as_the_catalogue_states_them():
    text = (Path(__file__).parents[1] / "docs" / "controls.md").read_text()
    for cid, c in load_catalogue().items():
        assert f"| {cid} | {c.severity} | {c.title} |" in text, cid
        for name, default in c.parameters.items():
            low, high = c.ranges[name]
            shown = f"{low:g}–{high:g}" if high != float("inf") else f"≥ {low:g}"
            assert f"`{name}` ({default:g}, {shown})" in text, name


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{}", "must be a JSON list"),
        ("[1]", "entry 1: must be an object"),
        ("[{", "not valid JSON (line 1"),
        ('[{"id": "X-01"}]', "missing field(s)"),
    ],
)
def test_malformed_catalogue_is_one_line_input_error(tmp_path, content, message):
    p = tmp_path / "c.json"
    p.write_text(content)
    with pytest.raises(InputError) as e:
        load_catalogue(p)
    assert message in str(e.value) and "\n" not in str(e.value)


def _entry(cid: str, severity: str = "high", **params: object) -> dict:
    return {
        "id": cid,
        "title": "t",
        "severity": severity,
        "rationale": "r",
        "remediation": "m",
        "parameters": {k: v if isinstance(v, dict) else {"default": v} for k, v in params.items()},
    }


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([_entry("A-01"), _entry("A-01")], "duplicate id 'A-01'"),
        ([_entry("A-01", "severe")], "severity 'severe' is not one of"),
        ([_entry("A-01", x=1), _entry("A-02", x=2)], "parameter 'x' is also used by A-01"),
        ([_entry("A-01", x=True)], "parameter 'x' must have a number as default"),
        ([_entry("A-01", x={"min": 0})], "parameter 'x' must be an object with 'default'"),
        ([_entry("A-01", x={"default": 1, "step": 1})], "must be an object with 'default'"),
        ([_entry("A-01", x={"default": 5, "max": 1})], "needs numbers min <= default <= max"),
        ([_entry("A-01", x={"default": 1, "min": "0"})], "needs numbers min <= default <= max"),
    ],
)
def test_catalogue_validation(tmp_path, entries, message):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(entries))
    with pytest.raises(InputError, match=message):
        load_catalogue(p)


# --------------------------------------------------------------------------------------------
# SIG
# --------------------------------------------------------------------------------------------


def test_sig_01_pass_when_every_non_valid_request_got_401():
    a = analysis([row(0), row(10, event_id="evt_x", verdict="signature_mismatch", status=401)])
    f = one(run(a, only="SIG-01"), "SIG-01")
    assert f["status"] == "pass"
    assert f["evidence"]["not_valid"] == 1 and f["evidence"]["answered_401"] == 1


def test_sig_01_fail_lists_the_accepted_request():
    rows = [
        row(0),
        row(10, event_id="evt_x", verdict="stale_timestamp", status=401),
        row(20, event_id="evt_y", verdict="signature_mismatch", status=204, delivery_id="dlv_bad"),
        row(30, event_id="evt_z", verdict="missing_signature", status=500),
    ]
    f = one(run(analysis(rows), only="SIG-01"), "SIG-01")
    assert f["status"] == "fail" and f["severity"] == "critical"
    ev = f["evidence"]
    assert (ev["not_valid"], ev["answered_401"], ev["accepted_2xx"], ev["other_status"]) == (
        3,
        1,
        1,
        1,
    )
    assert ev["examples"] == ["dlv_bad", "dlv_evt_z_30"]  # the accepted one first
    assert ev["example_records"] == ["receiver.jsonl:3", "receiver.jsonl:4"]
    assert f["reason"].startswith("2 of 3 requests with a non-valid verdict")


def test_sig_01_skips_without_response_status():
    rows = [row(0, status=None), row(10, event_id="e2", verdict="signature_mismatch", status=None)]
    f = one(run(analysis(rows), only="SIG-01"), "SIG-01")
    assert f["status"] == "skip" and "response_status" in f["reason"]


def test_sig_02_pass_and_fail():
    assert status(analysis([row(0), row(10, event_id="e2", status=200)]), "SIG-02") == "pass"
    rows = [row(0), row(10, event_id="e2", status=401), row(20, event_id="e3", status=403)]
    f = one(run(analysis(rows), only="SIG-02"), "SIG-02")
    assert f["status"] == "fail"
    assert f["evidence"]["refused"] == 2
    assert f["evidence"]["refused_by_status"] == {"401": 1, "403": 1}
    assert f["evidence"]["refused_by_matched_secret"] == {"wh_1#1": 2}


def test_sig_02_skips_when_no_answer_was_captured():
    assert status(analysis([row(0, status=None)]), "SIG-02") == "skip"


def test_sig_03_pass():
    # |skew| = 1, 2: p99 = 1 + 0.99 * (2 - 1) = 1.99 s, under 60 s.
    a = analysis([row(0, skew=1.0), row(10, event_id="e2", skew=-2.0)])
    f = one(run(a, only="SIG-03"), "SIG-03")
    assert f["status"] == "pass" and f["evidence"]["abs_skew_s"]["p99"] == pytest.approx(1.99)


def test_sig_03_fail():
    # |skew| = 0, 100: p99 = 0.99 * 100 = 99 s, not under 60 s.
    a = analysis([row(0, skew=0.0), row(10, event_id="e2", skew=-100.0)])
    f = one(run(a, only="SIG-03"), "SIG-03")
    assert f["status"] == "fail" and f["evidence"]["abs_skew_s"]["p99"] == pytest.approx(99.0)
    assert f["evidence"]["examples"] == ["dlv_e2_10"]


def test_sig_03_boundary_is_strict():
    # p99 of (60, 60) is 60: "under 60" fails.
    a = analysis([row(0, skew=60.0), row(10, event_id="e2", skew=60.0)])
    assert status(a, "SIG-03") == "fail"


VERDICTS = ("valid", "signature_mismatch", "stale_timestamp", "missing_signature", "unreadable")


@functools.cache
def _base() -> Analysis:
    """An analysis whose deliveries the property tests replace (SIG-01 and DLV-01 read only
    the deliveries)."""
    return analysis([row(0)])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from(VERDICTS), st.sampled_from([None, 200, 204, 400, 401, 500])),
        min_size=1,
        max_size=8,
    )
)
def test_sig_01_property(requests):
    """Judged on the rows directly: readable non-valid requests with an answer must all be 401."""
    rows = [row(i, event_id=f"e{i}", verdict=v, status=st_) for i, (v, st_) in enumerate(requests)]
    a = dataclasses.replace(_base(), deliveries=frame(rows))
    got = one(run(a, only="SIG-01"), "SIG-01")["status"]
    judged = [st_ for v, st_ in requests if v not in ("valid", "unreadable")]
    answered = [x for x in judged if x is not None]
    if all(st_ is None for _, st_ in requests) or (judged and not answered):
        assert got == "skip"
    else:
        assert got == ("pass" if all(x == 401 for x in answered) else "fail")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0, 9000) | st.none(), min_size=1, max_size=10),
    st.floats(0, 1),
)
def test_dlv_01_property(times_ms, limit):
    rows = [row(i, event_id=f"e{i}", ms=ms) for i, ms in enumerate(times_ms)]
    a = dataclasses.replace(_base(), deliveries=frame(rows))
    got = one(run(a, only="DLV-01", params={"max_slow_ack_rate": limit}), "DLV-01")["status"]
    known = [ms for ms in times_ms if ms is not None]
    if not known:
        assert got == "skip"
    else:
        slow = sum(ms > 5000 for ms in known)
        assert got == ("pass" if slow / len(known) <= limit else "fail")


def _ns(ts: pd.Timestamp) -> int:
    return ts.value


def test_sig_04_pass_and_fail_per_subscription():
    ages = {
        "wh_new": _ns(AS_OF - pd.Timedelta(days=10)),
        "wh_old": _ns(AS_OF - pd.Timedelta(days=100)),
    }
    f = run(analysis(), only="SIG-04", secrets_age=ages)
    assert one(f, "SIG-04", "wh_new")["status"] == "pass"
    old = one(f, "SIG-04", "wh_old")
    assert old["status"] == "fail" and old["evidence"]["age_days"] == pytest.approx(100.0)


def test_sig_04_exactly_at_the_limit_fails():
    ages = {"wh_1": _ns(AS_OF - pd.Timedelta(days=90))}
    assert status(analysis(), "SIG-04", secrets_age=ages) == "fail"


def test_sig_04_without_valid_from_uses_the_creation_time(tmp_path):
    snaps = snapshots(tmp_path, (0, [sub("wh_1", created="2026-09-20T00:00:00Z")]))
    f = one(run(analysis(snapshots=snaps), only="SIG-04", secrets_age={"wh_1": None}), "SIG-04")
    # created 2026-09-20, as_of 2026-10-11: at most 21 days old.
    assert f["status"] == "pass" and f["evidence"]["max_age_days"] == pytest.approx(21.0)
    f = one(run(analysis(), only="SIG-04", secrets_age={"wh_1": None}), "SIG-04")
    assert f["status"] == "fail" and "cannot be shown" in f["reason"]


def test_sig_04_skips_without_secret_ages():
    f = one(run(analysis(), only="SIG-04"), "SIG-04")
    assert f["status"] == "skip" and f["resource"] == "all subscriptions"


def test_sig_05_pass_and_fail_and_the_secret_never_appears(tmp_path):
    clean = snapshots(tmp_path / "a", (0, [sub()]))
    assert status(analysis(snapshots=clean), "SIG-05") == "pass"
    leaked = snapshots(tmp_path / "b", (0, [sub()]), (60, [sub(secret="whsec_leaked_value_123")]))
    findings = run(analysis(snapshots=leaked))
    f = one(findings, "SIG-05")
    assert f["status"] == "fail" and f["evidence"]["examples"] == ["wh_1"]
    assert "whsec_leaked_value_123" not in findings.to_csv()


# --------------------------------------------------------------------------------------------
# DLV
# --------------------------------------------------------------------------------------------


def test_dlv_01_pass_and_fail():
    # One of two answers took 6 s: rate 0.5.
    rows = [row(0), row(100, event_id="e2", ms=6000.0)]
    a = analysis(rows)
    assert status(a, "DLV-01", params={"max_slow_ack_rate": 0.5}) == "pass"
    f = one(run(a, only="DLV-01"), "DLV-01")
    assert f["status"] == "fail" and f["evidence"]["rate"] == 0.5
    assert f["evidence"]["examples"] == ["dlv_e2_100"]


def test_dlv_01_exactly_5_s_is_in_time():
    assert status(analysis([row(0, ms=5000.0)]), "DLV-01") == "pass"


def test_dlv_01_skips_without_response_times():
    assert status(analysis([row(0, ms=None)]), "DLV-01") == "skip"


def test_dlv_02_pass_and_fail():
    # First attempts: e1 204, e2 503 (retried with 204 after 30 s): 1 of 2 succeeded.
    rows = [row(0), row(100, event_id="e2", status=503), row(130, event_id="e2")]
    rows.append(row(200, event_id="t1", event="webhook.test", incident="test_1", status=500))
    a = analysis(rows)
    f = one(run(a, only="DLV-02"), "DLV-02")
    assert f["status"] == "fail" and f["evidence"]["first_attempts"] == 2
    assert f["evidence"]["rate"] == 0.5 and f["evidence"]["failed_by_answer"] == {"503": 1}
    assert status(a, "DLV-02", params={"min_first_attempt_success": 0.5}) == "pass"
    assert status(analysis([row(0)]), "DLV-02") == "pass"


def test_dlv_03_pass_and_fail():
    assert status(analysis([row(0), row(100, event_id="e2")]), "DLV-03") == "pass"
    # e2: five failures on schedule (0, 30, 150, 750, 4350 s) -> exhausted;
    # e3: one failure and no retry by as_of -> lost.
    rows = [row(0)]
    rows += [row(100 + s, event_id="e2", status=503) for s in (0, 30, 150, 750, 4350)]
    rows += [row(9000, event_id="e3", status=503)]
    f = one(run(analysis(rows), only="DLV-03"), "DLV-03")
    assert f["status"] == "fail"
    assert f["evidence"]["by_outcome"] == {"delivered": 1, "exhausted": 1, "lost": 1}
    assert f["evidence"]["examples"] == ["e2", "e3"]


def test_dlv_04_pass_and_fail():
    good = [row(0, status=503), row(30, status=204)]
    assert status(analysis(good), "DLV-04") == "pass"
    # e2 retried after a timely 204; e3 retried 500 s after attempt 1 (no scheduled delay).
    bad = [row(0, event_id="e2"), row(30, event_id="e2")]
    bad += [row(1000, event_id="e3", status=503), row(1500, event_id="e3")]
    f = one(run(analysis(bad), only="DLV-04"), "DLV-04")
    assert f["status"] == "fail"
    assert f["evidence"]["retry_after_timely_2xx"] == 1
    assert f["evidence"]["off_schedule_events"] == 1
    assert f["evidence"]["examples"] == ["e2", "e3"]


def test_dlv_05_pass_and_fail():
    assert status(analysis([row(100, emitted=80)]), "DLV-05") == "pass"
    # latencies 20 s and 400 s: p95 = 20 + 0.95 * 380 = 381 s.
    rows = [row(100, emitted=80), row(1000, event_id="e2", emitted=600)]
    f = one(run(analysis(rows), only="DLV-05"), "DLV-05")
    assert f["status"] == "fail"
    assert f["evidence"]["emission_latency_s"]["p95"] == pytest.approx(381.0)
    assert f["evidence"]["examples"] == ["e2"]


def test_dlv_06_is_always_info():
    once = one(run(analysis([row(0)]), only="DLV-06"), "DLV-06")
    assert once["status"] == "info" and once["evidence"]["accepted_more_than_once"] == 0
    # A slow 204 (6 s) is a timeout for the service: it retries 30 s later, accepted again.
    twice = one(run(analysis([row(0, ms=6000.0), row(30)]), only="DLV-06"), "DLV-06")
    assert twice["status"] == "info" and twice["evidence"]["accepted_more_than_once"] == 1
    assert twice["evidence"]["examples"] == ["evt_1"]


def test_dlv_07_fails_on_validly_signed_bodies_without_an_envelope(tmp_path):
    """Bodies signed with the subscription's secret that are not JSON, not an object, or
    lack a string id and event: valid, yet in no events table; DLV-07 lists them by file:line."""
    from audit.analysis.analyze import analyze
    from audit.ingest.signatures import sign
    from tests.builders import capture, write_jsonl, write_secrets

    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "k1"}]})
    bodies = ['{"id":"evt_ok","event":"incident.created","data":{}}', "not json", "[1,2]"]
    bodies.append('{"id":null,"event":5}')
    records = []
    for i, body in enumerate(bodies):
        ts = str(int(T0.timestamp()) + 60 * i)
        signature = sign("k1", ts, body.encode())
        records.append(capture(body, signature=signature, timestamp=ts, received_at=int(ts) + 1))
    log = write_jsonl(tmp_path / "r.jsonl", records)
    a = analyze([log], secrets, as_of=AS_OF)
    assert (a.deliveries["verdict"] == "valid").all()
    f = one(run(a, only="DLV-07"), "DLV-07")
    assert f["status"] == "fail"
    assert f["evidence"]["without_envelope"] == 3 and f["evidence"]["deliveries"] == 4
    assert f["evidence"]["example_records"] == ["r.jsonl:2", "r.jsonl:3", "r.jsonl:4"]
    assert (
        one(run(analysis([row(0), row(60, event_id="evt_2")]), only="DLV-07"), "DLV-07")["status"]
        == "pass"
    )
    assert status(analysis([]), "DLV-07") == "skip"


# --------------------------------------------------------------------------------------------
# SUB
# --------------------------------------------------------------------------------------------


def test_sub_01_pass_at_five_and_fail_at_six(tmp_path):
    five = snapshots(tmp_path / "a", (0, [sub(f"wh_{i}") for i in range(5)]))
    f = one(run(analysis(snapshots=five), only="SUB-01"), "SUB-01", "cl_1")
    assert f["status"] == "pass" and f["evidence"]["max_subscriptions"] == 5
    six = snapshots(tmp_path / "b", (0, [sub(f"wh_{i}") for i in range(6)]))
    f = one(run(analysis(snapshots=six), only="SUB-01"), "SUB-01", "cl_1")
    assert f["status"] == "fail" and f["evidence"]["max_subscriptions"] == 6


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://hooks.example/wh", "pass"),
        ("HTTPS://hooks.example/wh", "pass"),
        ("http://hooks.example/wh", "fail"),
        ("https:///no-host", "fail"),
        ("ftp://hooks.example/wh", "fail"),
    ],
)
def test_sub_02(tmp_path, url, expected):
    snaps = snapshots(tmp_path, (0, [sub(url=url)]))
    f = one(run(analysis(snapshots=snaps), only="SUB-02"), "SUB-02", "wh_1")
    assert f["status"] == expected


def test_sub_03_pass_and_fail(tmp_path):
    full = snapshots(
        tmp_path / "a", (0, [sub(events=[CREATED]), sub("wh_2", events=INCIDENT_EVENTS[1:])])
    )
    assert one(run(analysis(snapshots=full), only="SUB-03"), "SUB-03")["status"] == "pass"
    # The second subscription holds the other events but is inactive.
    part = snapshots(
        tmp_path / "b",
        (0, [sub(events=[CREATED]), sub("wh_2", events=INCIDENT_EVENTS[1:], active=False)]),
    )
    f = one(run(analysis(snapshots=part), only="SUB-03"), "SUB-03", "cl_1")
    assert f["status"] == "fail" and f["evidence"]["missing"] == list(INCIDENT_EVENTS[1:])


def test_sub_04_pass_and_fail(tmp_path):
    snaps = snapshots(tmp_path, (0, [sub("wh_1"), sub("wh_2", active=False)]))
    f = run(analysis(snapshots=snaps), only="SUB-04")
    assert one(f, "SUB-04", "wh_1")["status"] == "pass"
    assert one(f, "SUB-04", "wh_2")["status"] == "fail"


def test_sub_05_judges_the_latest_snapshot_only(tmp_path):
    snaps = snapshots(
        tmp_path,
        (0, [sub("wh_1", last="failed"), sub("wh_2")]),
        (DAY, [sub("wh_1", last="success"), sub("wh_2", last="failed")]),
    )
    f = run(analysis(snapshots=snaps), only="SUB-05")
    assert one(f, "SUB-05", "wh_1")["status"] == "pass"
    assert one(f, "SUB-05", "wh_2")["status"] == "fail"


def test_sub_controls_use_the_newest_snapshot_before_the_period_within_7_days_of_its_end(
    tmp_path,
):
    """None fetched in the period: the newest before it is judged when fetched at most 7 days
    before the period's end (4 days before a 3-day period's end), else nothing is (11 days
    before a 10-day period's end): a listing of another time is no evidence."""
    snaps = snapshots(
        tmp_path,
        (-5 * DAY, [sub(url="http://old.example/")]),
        (-DAY, [sub()]),
        (20 * DAY, [sub(url="http://after.example/")]),
    )
    a = analysis(snapshots=snaps)
    short = run_controls(a, period_start=T0, period_end=T0 + pd.Timedelta(days=3), only=["SUB-02"])
    assert one(short, "SUB-02", "wh_1")["status"] == "pass"
    f = one(run(a, only="SUB-02"), "SUB-02")
    assert f["status"] == "skip" and f["resource"] == "all subscriptions"
    assert f["reason"] == (
        "No listing snapshot covers the period: the newest, fetched 2026-09-30 00:00 UTC, is "
        "11 d 0 h older than the period's end (a snapshot counts when fetched in the period, "
        "or before it at most 7 days before its end)."
    )


def test_sub_controls_skip_without_snapshots():
    f = run(analysis(), only=["SUB-01", "SUB-02", "SUB-03", "SUB-04", "SUB-05", "SIG-05"])
    assert set(f["status"]) == {"skip"}
    assert all("snapshot" in r for r in f["reason"])


# --------------------------------------------------------------------------------------------
# TKD
# --------------------------------------------------------------------------------------------


def incident(
    iid: str, created_h: float, *, taken_down_h: float | None = None, status: str = "case_building"
) -> list[dict]:
    """An incident created ``created_h`` hours after T0 in ``status``, and, when
    ``taken_down_h`` is given, its status change to takedown_success that many hours later."""
    created = created_h * H
    data = {"status": status, "timestamp": at(created).isoformat()}
    rows = [row(created + 30, event_id=f"{iid}_c", incident=iid, emitted=created, data=data)]
    if taken_down_h is not None:
        t = created + taken_down_h * H
        data = {"status": "takedown_success"}
        rows.append(
            row(t + 30, event_id=f"{iid}_t", event=CHANGED, incident=iid, emitted=t, data=data)
        )
    return rows


def test_tkd_01_median_pass_and_fail():
    # Taken down after 1, 2 and 3 h: S = 2/3, 1/3, 0 -> median 2 h.
    rows = [
        r for i, h in enumerate((1, 2, 3)) for r in incident(f"i{i}", 24 * (i + 1), taken_down_h=h)
    ]
    a = analysis(rows)
    f = one(run(a, only="TKD-01"), "TKD-01")
    assert f["status"] == "pass" and f["evidence"]["median_h"] == pytest.approx(2.0)
    f = one(run(a, only="TKD-01", params={"ttt_median_h": 1.5}), "TKD-01")
    assert f["status"] == "fail" and f["evidence"]["examples"] == ["i2", "i1"]


def test_tkd_01_only_counts_incidents_created_in_the_period():
    # Created before the period and taken down after 100 h: not judged.
    rows = incident("old", -200, taken_down_h=100) + incident("new", 10, taken_down_h=1)
    f = one(run(analysis(rows), only="TKD-01"), "TKD-01")
    assert f["status"] == "pass" and f["evidence"]["incidents"] == 1


def test_tkd_01_not_reached_fails_when_follow_up_passes_the_threshold():
    # Two open incidents created 30 h before as_of: censored at 30 h, S stays 1 > 0.5 up to
    # 30 h >= 24 h, so the median is above 24 h.
    rows = incident("a", 240 - 30) + incident("b", 240 - 30.5)
    f = one(run(analysis(rows), only="TKD-01"), "TKD-01")
    assert f["status"] == "fail" and f["evidence"]["reached"] is False


def test_tkd_01_not_reached_skips_when_follow_up_is_short():
    rows = incident("a", 240 - 10) + incident("b", 240 - 12)
    f = one(run(analysis(rows), only="TKD-01"), "TKD-01")
    assert f["status"] == "skip" and "cannot be judged" in f["reason"]


def test_tkd_02_p90_pass_and_fail():
    # Taken down after 1..10 h: S(k h) = (10 - k) / 10, first <= 0.1 at 9 h.
    rows = [r for k in range(1, 11) for r in incident(f"i{k:02d}", 12 * k, taken_down_h=k)]
    a = analysis(rows)
    f = one(run(a, only="TKD-02"), "TKD-02")
    assert f["status"] == "pass" and f["evidence"]["p90_h"] == pytest.approx(9.0)
    assert status(a, "TKD-02", params={"ttt_p90_h": 8}) == "fail"


def test_tkd_01_02_skip_without_incidents():
    f = run(analysis([row(0, incident="test_1", event="webhook.test")]), only=["TKD-01", "TKD-02"])
    assert set(f["status"]) == {"skip"}


def test_tkd_03_pass_and_fail():
    # In approval_required since 30 h (fail) / 10 h (pass) before as_of.
    rows = incident("w", 240 - 30, status="approval_required")
    f = one(run(analysis(rows), only="TKD-03"), "TKD-03")
    assert f["status"] == "fail" and f["evidence"]["wait_h"] == {"w": pytest.approx(30.0)}
    rows = incident("w", 240 - 10, status="action_required")
    f = one(run(analysis(rows), only="TKD-03"), "TKD-03")
    assert f["status"] == "pass" and f["evidence"]["waiting_on_client"] == 1


def test_tkd_03_counts_an_open_incident_created_before_the_period():
    rows = incident("w", -48, status="approval_required")
    f = one(run(analysis(rows), only="TKD-03"), "TKD-03")
    assert f["status"] == "fail" and f["evidence"]["examples"] == ["w"]


def test_tkd_04_pass_and_fail():
    # Open, last event 8 days (fail) / 2 days (pass) before as_of; a closed one never counts,
    # so with no open incident there is nothing to judge (no evidence, no pass).
    assert status(analysis(incident("s", 240 - 8 * 24)), "TKD-04") == "fail"
    assert status(analysis(incident("s", 240 - 2 * 24)), "TKD-04") == "pass"
    assert status(analysis(incident("c", 0, status="closed")), "TKD-04") == "skip"


# --------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------


def test_findings_frame_shape_order_and_json_evidence(tmp_path):
    snaps = snapshots(tmp_path, (0, [sub("wh_b"), sub("wh_a", url="http://x.example/")]))
    f = run(analysis([row(0)], snapshots=snaps), secrets_age={"wh_a": None})
    assert tuple(f.columns) == FINDING_COLUMNS
    assert set(f["check_id"]) == set(load_catalogue())
    rank = f["severity"].map(SEVERITIES.index)
    keys = list(zip(rank, f["check_id"], f["resource"], strict=True))
    assert keys == sorted(keys)
    for text in f["evidence"]:
        assert text == json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False)
    assert (f["period_start"] == T0).all() and (f["period_end"] == END).all()
    assert f["finding_uid"].is_unique


def test_finding_uid_is_stable_and_known():
    a = analysis([row(0)])
    first, second = run(a), run(a)
    pd.testing.assert_frame_equal(first, second)
    # printf 'SIG-01|all requests|2026-10-01T00:00:00+00:00|2026-10-11T00:00:00+00:00' | sha256sum
    assert one(first, "SIG-01")["finding_uid"] == "60030c33b70993e1"
    assert checks.finding_uid("SIG-01", "x", T0, END) != checks.finding_uid(
        "SIG-01", "x", T0, AS_OF + pd.Timedelta(days=1)
    )


def test_a_raising_control_becomes_an_error_row_and_the_others_run(monkeypatch):
    def boom(scope):
        raise RuntimeError("kaput")

    monkeypatch.setitem(CONTROLS, "SIG-03", boom)
    f = run(analysis([row(0)]))
    err = one(f, "SIG-03")
    assert err["status"] == "error" and "RuntimeError: kaput" in err["reason"]
    assert err["evidence"]["exception"] == "RuntimeError"
    assert set(f["check_id"]) == set(load_catalogue())
    assert one(f, "SIG-02")["status"] == "pass"


def test_a_frame_missing_a_column_errors_only_the_controls_that_read_it():
    a = analysis([row(0)])
    broken = dataclasses.replace(a, deliveries=a.deliveries.drop(columns="skew_s"))
    f = run(broken, only=["SIG-02", "SIG-03"])
    assert one(f, "SIG-03")["status"] == "error" and "KeyError" in one(f, "SIG-03")["reason"]
    assert one(f, "SIG-02")["status"] == "pass"


def test_unknown_parameter_is_a_one_line_error_naming_the_known_ones():
    with pytest.raises(ParameterError) as e:
        run(analysis(), params={"ttt_median": 12})
    msg = str(e.value)
    assert "'ttt_median'" in msg and "ttt_median_h" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "params",
    [
        {"ttt_median_h": "12"},
        {"ttt_median_h": True},
        {"ttt_median_h": float("nan")},
        {"ttt_median_h": -1},
        {"max_slow_ack_rate": 1.5},
        {"max_skew_p99_s": 301},
    ],
)
def test_bad_parameter_values(params):
    with pytest.raises(ParameterError):
        run(analysis(), params=params)


def test_parameters_override_defaults():
    a = analysis([row(0, skew=10.0)])
    assert status(a, "SIG-03") == "pass"
    assert status(a, "SIG-03", params={"max_skew_p99_s": 5}) == "fail"


def test_only_and_unknown_control_id():
    f = run(analysis([row(0)]), only=["DLV-01", "SIG-01"])
    assert list(f["check_id"]) == ["SIG-01", "DLV-01"]
    with pytest.raises(ParameterError, match="unknown control id"):
        run(analysis(), only=["SIG-99"])


@pytest.mark.parametrize(
    ("start", "end"),
    [(T0.tz_localize(None), END), (END, T0), (T0, T0)],
)
def test_bad_period(start, end):
    with pytest.raises(ParameterError):
        run_controls(analysis(), period_start=start, period_end=end)


def test_deliveries_outside_the_period_are_not_judged():
    # Accepted forgery received just before the period and exactly at its (exclusive) end.
    rows = [row(0)]
    rows += [row(-1, event_id="x1", verdict="signature_mismatch", status=204)]
    rows += [row(10 * DAY, event_id="x2", verdict="signature_mismatch", status=204)]
    f = one(run(analysis(rows, as_of=END + pd.Timedelta(days=1)), only="SIG-01"), "SIG-01")
    assert f["status"] == "pass" and f["evidence"]["requests"] == 1


# --------------------------------------------------------------------------------------------
# Mutes
# --------------------------------------------------------------------------------------------


def write_mutes(tmp_path: Path, mutes: list) -> Path:
    p = tmp_path / "mutes.json"
    p.write_text(json.dumps(mutes))
    return p


@pytest.fixture
def legacy(tmp_path):
    snaps = snapshots(tmp_path, (0, [sub("wh_ok"), sub("wh_legacy", url="http://l.example/")]))
    return analysis([row(0)], snapshots=snaps)


def test_active_mute(tmp_path, legacy):
    m = {
        "check_id": "SUB-02",
        "resource": "wh_legacy",
        "reason": "decommissioning",
        "expires": "2026-12-31",
    }
    f = run(legacy, mutes=read_mutes(write_mutes(tmp_path, [m])))
    muted = one(f, "SUB-02", "wh_legacy")
    assert muted["status"] == "muted"
    assert muted["evidence"]["muted"] == {
        "original_status": "fail",
        "reason": "decommissioning",
        "expires": "2026-12-31T00:00:00+00:00",
    }
    assert one(f, "SUB-02", "wh_ok")["status"] == "pass"


def test_expired_mute_is_ignored_and_noted(tmp_path, legacy):
    # as_of is 2026-10-11: a mute expiring then has expired.
    m = {
        "check_id": "SUB-02",
        "resource": "wh_legacy",
        "reason": "old",
        "expires": "2026-10-11T00:00:00Z",
    }
    f = one(run(legacy, mutes=read_mutes(write_mutes(tmp_path, [m]))), "SUB-02", "wh_legacy")
    assert f["status"] == "fail"
    assert f["evidence"]["mute_expired"] == {
        "reason": "old",
        "expires": "2026-10-11T00:00:00+00:00",
    }


def test_wildcard_mute(tmp_path, legacy):
    m = {"check_id": "SUB-02", "resource": "*", "reason": "all", "expires": "2027-01-01"}
    f = run(legacy, mutes=read_mutes(write_mutes(tmp_path, [m])))
    rows = f[f["check_id"] == "SUB-02"]
    assert list(rows["status"]) == ["muted", "muted"]
    originals = sorted(json.loads(e)["muted"]["original_status"] for e in rows["evidence"])
    assert originals == ["fail", "pass"]
    assert one(f, "SUB-04", "wh_legacy")["status"] == "pass"  # another control: untouched


def test_error_rows_are_never_muted(tmp_path, monkeypatch):
    def boom(scope):
        raise RuntimeError("kaput")

    monkeypatch.setitem(CONTROLS, "SIG-01", boom)
    m = {"check_id": "SIG-01", "resource": "*", "reason": "r", "expires": "2027-01-01"}
    f = run(analysis([row(0)]), mutes=read_mutes(write_mutes(tmp_path, [m])))
    assert one(f, "SIG-01")["status"] == "error"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not valid JSON"),
        ('{"check_id": "SIG-01"}', "must be a JSON list"),
        ("[1]", "mute 1: must be an object"),
        (
            '[{"check_id": "SIG-01", "resource": "*", "reason": "r"}]',
            "missing field(s) ['expires']",
        ),
        (
            '[{"check_id": "SIG-99", "resource": "*", "reason": "r", "expires": "2027-01-01"}]',
            "unknown check_id 'SIG-99'",
        ),
        (
            '[{"check_id": "SIG-01", "resource": "*", "reason": "r", "expires": "soon"}]',
            "'expires' is not an ISO 8601",
        ),
        (
            '[{"check_id": "SIG-01", "resource": "", "reason": "r", "expires": "2027-01-01"}]',
            "'resource' must be a non-empty string",
        ),
    ],
)
def test_malformed_mutes_file(tmp_path, content, message):
    p = tmp_path / "mutes.json"
    p.write_text(content)
    with pytest.raises(InputError) as e:
        read_mutes(p)
    assert message in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)


def test_missing_mutes_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_mutes(tmp_path / "nope.json")


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


def test_summarise_counts_by_severity_and_status():
    f = pd.DataFrame(
        {
            "severity": ["critical", "high", "high", "medium", "info"],
            "status": ["fail", "fail", "pass", "muted", "info"],
        }
    )
    s = summarise(f).set_index("severity")
    assert list(s.index) == [*SEVERITIES, "total"]
    assert list(s.columns) == [*checks.STATUSES, "total"]
    assert s.loc["high", "fail"] == 1 and s.loc["high", "pass"] == 1 and s.loc["high", "total"] == 2
    assert s.loc["low", "total"] == 0
    assert s.loc["total", "fail"] == 2 and s.loc["total", "total"] == 5


# --------------------------------------------------------------------------------------------
# The demo data
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "data"
    sim = simulate(root, seed=7)
    truth = json.loads(sim.truth.read_text())
    a = analyze(sim.captures, sim.secrets, snapshots=sim.snapshots, as_of=truth["period"]["end"])
    from audit.ingest.secrets import read_secrets

    ages = read_secrets(sim.secrets).latest_valid_from()
    start, end = pd.Timestamp(truth["period"]["start"]), pd.Timestamp(truth["period"]["end"])
    findings = run_controls(a, period_start=start, period_end=end, secrets_age=ages)
    return findings, truth


def test_demo_planted_faults_fail(demo):
    findings, truth = demo
    for cid in ("SIG-01", "SIG-02", "DLV-01", "DLV-03", "TKD-03"):
        assert one(findings, cid)["status"] == "fail", cid
    assert "error" not in set(findings["status"])
    assert one(findings, "SIG-01")["evidence"]["examples"] == truth["wrongly_accepted"]
    refused = one(findings, "SIG-02")["evidence"]["refused"]
    assert refused == len(truth["stale_secret"]["answered_401_delivery_ids"])
    assert one(findings, "DLV-01")["evidence"]["slow"] == len(truth["slow_acks"])
    by_outcome = one(findings, "DLV-03")["evidence"]["by_outcome"]
    planted = truth["receiver_outage"]["exhausted"] + truth["stale_secret"]["exhausted"]
    assert by_outcome.get("exhausted", 0) + by_outcome.get("lost", 0) == len(planted)
    stuck = {w["incident_id"] for w in truth["waiting_on_client"] if w["over_24h"]}
    assert set(one(findings, "TKD-03")["evidence"]["examples"]) == stuck
    assert one(findings, "SUB-02", "wh_legacy")["status"] == "fail"  # http://


def _unreadable(source: str) -> dict:
    """An unreadable line: no receipt time, no verdict but ``unreadable``."""
    r = row(0, verdict="unreadable", status=None, ms=None, skew=None)
    return r | {"source": source, "received_at": None, "subscription_id": None, "body": None}


def test_sig_01_names_unreadable_lines_when_no_request_has_a_receipt_time():
    """A period whose only captures are unreadable lines: SIG-01 says so, with their count,
    instead of "no request was received" (found in a review: verdict_counts listed them)."""
    a = analysis([_unreadable("/captures/a.jsonl"), _unreadable("/captures/a.jsonl")])
    with warnings.catch_warnings():  # pandas 4 would raise on filling a float column with True
        warnings.simplefilter("error", pd.errors.Pandas4Warning)
        f = one(run(a, only="SIG-01"), "SIG-01")
    assert f["status"] == "skip"
    assert "2 unreadable line(s)" in f["reason"]
    assert f["evidence"]["unreadable_excluded"] == 2


def test_sig_01_counts_no_unreadable_line_of_a_file_read_in_another_period():
    """Untimed lines count where their file's readable records are: a file read in August
    places its unreadable line there, not in this period."""
    before = row(-40 * 86400) | {"source": "/captures/old.jsonl"}
    a = analysis([before, _unreadable("/captures/old.jsonl")])
    f = one(run(a, only="SIG-01"), "SIG-01")
    assert f["status"] == "skip" and f["reason"] == "No request was received in the period."


def test_sig_01_counts_the_unreadable_lines_placed_in_the_period():
    """A request received in the period and an unreadable line of its file: two requests read,
    one unreadable, as the report's verdict table counts them (SIG-01 said 1 and 0)."""
    timed = row(0, verdict="signature_mismatch", status=401) | {"source": "/captures/a.jsonl"}
    a = analysis([timed, _unreadable("/captures/a.jsonl")])
    f = one(run(a, only="SIG-01"), "SIG-01")
    assert f["status"] == "pass"
    assert (f["evidence"]["requests"], f["evidence"]["unreadable_excluded"]) == (2, 1)


@pytest.mark.parametrize("dtype", ["str", "object", "category"])
def test_counts_of_a_column_by_hand(dtype):
    """Sorted by the value as text; missing values as "(none)"; categories that do not occur
    are not listed."""
    from audit.findings.controls.base import counts

    values = ["lost", "ok", None, "ok", "exhausted", "ok", None]
    s = pd.Series(values, dtype=dtype)
    if dtype == "category":
        s = s.cat.add_categories(["never"])
    assert counts(s) == {"(none)": 2, "exhausted": 1, "lost": 1, "ok": 3}


def test_counts_of_numbers_and_mixed_values_print_as_before():
    from audit.findings.controls.base import counts

    assert counts(pd.Series([200, 204, 200, None], dtype="Int64")) == {
        "(none)": 1,
        "200": 2,
        "204": 1,
    }
    assert counts(pd.Series([1, "1", 2.5, True], dtype=object)) == {"1": 2, "2.5": 1, "True": 1}


def test_counts_keep_negative_zero_apart_as_its_text_does():
    from audit.findings.controls.base import counts

    assert counts(pd.Series([-0.0, 0.0, -0.0, float("nan")])) == {"(none)": 1, "-0.0": 2, "0.0": 1}


# --------------------------------------------------------------------------------------------
# Capped lists carry their true total; every finding links its rule and its docs entry
# --------------------------------------------------------------------------------------------


def _totals_hold(evidence: dict) -> None:
    """Every ``<name>_total`` stands beside its list, which is no longer than it."""
    for key, total in evidence.items():
        if key.endswith("_total"):
            shown = evidence[key.removesuffix("_total")]
            assert len(shown) == min(total, 20), key


def test_a_capped_list_of_events_and_incidents_carries_its_true_total():
    # 25 events, each failed once and never retried (lost); e23 and e24 belong to the incidents
    # of e00 and e01, so 23 distinct incidents. Counted by hand from the rows built here.
    rows = [
        row(
            1000 * n,
            event_id=f"e{n:02}",
            event=CHANGED if n >= 23 else CREATED,
            incident=f"i{n % 23:02}",
            status=503,
        )
        for n in range(25)
    ]
    f = one(run(analysis(rows), only="DLV-03"), "DLV-03")
    ev = f["evidence"]
    assert f["status"] == "fail" and ev["by_outcome"] == {"lost": 25}
    assert ev["examples"] == [f"e{n:02}" for n in range(20)]  # oldest first, cut at 20
    assert ev["examples_total"] == 25
    assert ev["incidents"] == [f"i{n:02}" for n in range(20)]
    assert ev["incidents_total"] == 23
    _totals_hold(ev)


def test_a_capped_list_of_deliveries_carries_its_true_total():
    # 30 forged requests accepted with 204: 30 rows behind the 20 examples. Beside 31 genuine
    # deliveries: forgeries that outnumbered them would point at the secrets file instead
    # (verification coverage: SIG-01 would skip).
    rows = [row(10 * n, event_id=f"x{n}", verdict="signature_mismatch") for n in range(30)]
    rows += [row(10 * n + 5, event_id=f"v{n}") for n in range(31)]
    ev = one(run(analysis(rows), only="SIG-01"), "SIG-01")["evidence"]
    assert (ev["accepted_2xx"], len(ev["examples"]), ev["examples_total"]) == (30, 20, 30)
    assert ev["example_records_total"] == 30 and len(ev["example_records"]) == 20
    _totals_hold(ev)


def test_an_uncut_list_says_its_total_too():
    ev = one(run(analysis([row(0), row(9000, event_id="e3", status=503)]), only="DLV-03"), "DLV-03")
    assert ev["evidence"]["examples"] == ["e3"] and ev["evidence"]["examples_total"] == 1


def test_tkd_03_wait_mapping_carries_its_total():
    rows = [r for n in range(22) for r in incident(f"w{n:02}", 100 + n, status="approval_required")]
    ev = one(run(analysis(rows), only="TKD-03"), "TKD-03")["evidence"]
    # created 100..121 h after T0, as_of at 240 h: waits of 140..119 h, all over 24 h.
    assert (len(ev["wait_h"]), ev["wait_h_total"], ev["examples_total"]) == (20, 22, 22)
    assert ev["wait_h"]["w00"] == pytest.approx(140.0, abs=0.01)


def test_reasons_give_long_waits_in_days_and_hours_not_scientific_notation():
    # created 10 h after T0, as_of at 240 h: waited 230 h = 9 d 14 h (by hand)
    rows = incident("w1", 10, status="approval_required")
    reason = one(run(analysis(rows), only="TKD-03"), "TKD-03")["reason"]
    assert reason.endswith("(longest 9 d 14 h).") and "e+" not in reason


def test_every_list_of_the_demo_findings_keeps_its_totals(demo):
    findings, truth = demo
    for text in findings["evidence"]:
        _totals_hold(json.loads(text))
    dlv_03 = one(findings, "DLV-03")["evidence"]
    planted = truth["receiver_outage"]["exhausted"] + truth["stale_secret"]["exhausted"]
    # one event per subscription and event id; the list names distinct event ids
    assert dlv_03["examples_total"] == len({e["event_id"] for e in planted})
    assert len(dlv_03["examples"]) == min(20, dlv_03["examples_total"])


#: The section numbers of the service's webhook spec (incident-service-webhooks.md, headings).
SPEC_SECTIONS = {
    *"123456789",
    *("2.1", "2.2", "2.3", "3.1", "3.2", "5.1", "5.2"),
    *(f"4.{n}" for n in range(1, 8)),
}


def test_every_control_links_a_section_of_the_spec_and_its_docs_entry():
    doc = (Path(__file__).parents[1] / "docs" / "controls.md").read_text(encoding="utf-8")
    for cid, control in load_catalogue().items():
        assert control.spec_ref.startswith("spec "), cid
        sections = [s.split()[0] for s in control.spec_ref.removeprefix("spec ").split(", ")]
        assert set(sections) <= SPEC_SECTIONS, cid
        assert control.docs_ref == f"docs/controls.md#{cid.lower()}"
        assert f"\n### {cid}\n" in doc  # GitHub's anchor of a heading "### SIG-01" is sig-01


def test_findings_carry_the_links_of_their_control():
    f = run(analysis([row(0)]))
    cat = load_catalogue()
    assert list(f["spec_ref"]) == [cat[c].spec_ref for c in f["check_id"]]
    assert one(f, "SIG-01")["docs_ref"] == "docs/controls.md#sig-01"
    assert one(f, "SIG-01")["spec_ref"] == "spec 5.2 rules 4-5"


def test_the_catalogue_refuses_an_empty_link(tmp_path):
    entry = {k: "x" for k in ("id", "title", "rationale", "remediation", "spec_ref")}
    entry |= {"severity": "low", "parameters": {}, "docs_ref": ""}
    path = tmp_path / "c.json"
    path.write_text(json.dumps([entry]))
    with pytest.raises(InputError, match="'docs_ref' must be a non-empty string"):
        load_catalogue(path)
