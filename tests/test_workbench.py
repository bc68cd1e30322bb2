"""audit.open (issue 38): the tables, the period, the repr and the drill-down, against known
answers read apart from the code under test: the simulator's ground truth (truth.json) and the
raw capture files read with plain json."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import audit
import audit.figures
import audit.workbench as wb
from audit.demo.simulate import simulate
from audit.errors import ParameterError
from audit.findings.runner import STATUSES
from audit.ingest.store import ingest
from audit.report.explore import demo_inputs
from tests.builders import write_jsonl, write_secrets
from tests.test_notebooks import _median_to_takedown_h
from tests.test_report_months import SECRET, TS, _signed

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    """A simulated week (20 incidents), a store of it, and its raw records read with json."""
    root = tmp_path_factory.mktemp("workbench")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = simulate(root / "demo", days=7, incidents=20)
        store = root / "store"
        ingest([sim.captures[0].parent], sim.secrets, store)
    raw = []
    for path in sorted((root / "demo" / "captures").glob("*.jsonl")):
        for n, text in enumerate(path.read_text().splitlines(), 1):
            try:
                rec = json.loads(text)
            except ValueError:
                rec = None
            raw.append({"file": path.name, "line": n, "record": rec})
    truth = json.loads((root / "demo" / "truth.json").read_text())
    return sim, store, raw, truth


@pytest.fixture(scope="module")
def opened(week):
    sim, store, _, _ = week
    from_logs = audit.open(logs=sim.captures, secrets=sim.secrets, progress=False)
    from_store = audit.open(store=store, secrets=sim.secrets, progress=False)
    return from_logs, from_store


def _envelope(rec):
    try:
        return json.loads(rec["body"])
    except (KeyError, TypeError, ValueError):
        return None


def _received(rec):
    """A record's receipt time as the capture format allows it: ISO 8601 or Unix seconds."""
    v = rec["received_at"]
    t = pd.Timestamp(v, unit="s") if isinstance(v, int | float) else pd.Timestamp(v)
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")


#: The simulator delivers each subscription to its own URL, which every record keeps (wh_siem's
#: receiver logs no subscription id: the id is inferred from the matching secret).
BY_URL = {
    "https://hooks.client.example/phishfort/wh_main": "wh_main",
    "https://hooks.client.example/phishfort/siem": "wh_siem",
}


def _subscription(rec):
    return BY_URL[rec["url"]]


def test_counts_by_verdict_are_the_planted_ones(week, opened):
    _, _, raw, truth = week
    a, _ = opened
    planted = Counter(x["expected_verdict"] for x in truth["attacks"])
    planted["unreadable"] = len(truth["unreadable_lines"])
    planted["valid"] = len(raw) - sum(planted.values())
    got = dict(zip(a.verdict_counts()["verdict"], a.verdict_counts()["count"], strict=True))
    assert got == dict(planted)
    assert len(a.deliveries) == len(raw)


def test_requests_per_subscription_are_those_received_at_its_url(week, opened):
    _, _, raw, _ = week
    a, _ = opened
    readable = Counter(
        _subscription(r["record"])
        for r in raw
        if r["record"] is not None and ("body" in r["record"] or "body_b64" in r["record"])
    )
    got = a.deliveries["subscription_id"].value_counts().to_dict()
    assert got == dict(readable)


def test_the_store_gives_what_the_logs_give(opened):
    a, b = opened
    assert a.period == b.period and a.as_of == b.as_of
    for name in ("deliveries", "attempts", "events", "incidents", "takedown_durations"):
        x, y = getattr(a, name), getattr(b, name)
        assert len(x) == len(y), name
    cols = ["source", "line", "verdict", "subscription_id", "event_id", "attempt_no"]
    pd.testing.assert_frame_equal(
        a.deliveries[cols].sort_values(["source", "line"]).reset_index(drop=True),
        b.deliveries[cols].sort_values(["source", "line"]).reset_index(drop=True),
    )
    pd.testing.assert_frame_equal(
        a.events.sort_values(["subscription_id", "event_id"]).reset_index(drop=True),
        b.events.sort_values(["subscription_id", "event_id"]).reset_index(drop=True),
    )
    assert sorted(a.incidents["incident_id"]) == sorted(b.incidents["incident_id"])


def test_the_store_read_without_secrets_gives_the_same_tables(week, opened):
    _, store, _, _ = week
    a, _ = opened
    c = audit.open(store=store, progress=False)
    assert c.verdict_counts().equals(a.verdict_counts())
    assert len(c.events) == len(a.events) and len(c.incidents) == len(a.incidents)


def test_the_default_period_is_all_the_data(week, opened):
    _, _, raw, truth = week
    a, _ = opened
    times = [_received(r["record"]) for r in raw if r["record"] is not None]
    assert a.period.start == min(times).normalize()
    assert a.period.end == max(times).normalize() + pd.Timedelta(days=1)
    assert a.as_of == max(
        t
        for r, t in zip([r for r in raw if r["record"] is not None], times, strict=True)
        if _envelope(r["record"]) is not None
    )
    assert len(a.incidents) == truth["counts"]["incidents"]


def test_a_period_narrows(week):
    sim, store, raw, _ = week
    start, end = pd.Timestamp("2026-10-03", tz="UTC"), pd.Timestamp("2026-10-05", tz="UTC")
    expected = sum(
        1
        for r in raw
        if r["record"] is not None
        and ("body" in r["record"] or "body_b64" in r["record"])
        and start <= _received(r["record"]) < end
    )
    for a in (
        audit.open(
            logs=sim.captures,
            secrets=sim.secrets,
            period=("2026-10-03", "2026-10-05"),
            progress=False,
        ),
        audit.open(store=store, period="2026-10-03..2026-10-04", progress=False),
    ):
        assert (a.period.start, a.period.end) == (start, end)
        timed = a.deliveries["received_at"].dropna()
        assert len(timed) == expected
        assert ((timed >= start) & (timed < end)).all()
        first = a.events["first_received_at"]
        assert ((first >= start) & (first < end)).all()
        assert a.as_of < end


def test_repr_says_what_was_loaded(opened):
    a, b = opened
    text = repr(a)
    assert len(text.splitlines()) <= 6
    assert f"{len(a.deliveries):,} deliveries" in text
    assert f"valid {int((a.deliveries['verdict'] == 'valid').sum()):,}" in text
    assert a.period.label in text and "6 capture log" in text
    html = b._repr_html_()
    assert html.startswith("<table>") and "deliveries" in html and "store" in html


def test_an_event_timeline_is_every_request_that_carried_it(week, opened):
    _, _, raw, _ = week
    a, b = opened
    event_id = a.events.sort_values("attempts").iloc[-1]["event_id"]  # a retried one
    carried = sorted(
        (
            _received(r["record"]),
            _subscription(r["record"]),
            _envelope(r["record"])["data"].get("status"),
            r["record"]["body"].encode(),
        )
        for r in raw
        if r["record"] is not None and (_envelope(r["record"]) or {}).get("id") == event_id
    )
    for x in (a, b):
        t = x.event(event_id)
        assert isinstance(t, wb.Timeline)
        assert list(t["received_at"]) == [c[0] for c in carried]
        assert list(t["subscription_id"]) == [c[1] for c in carried]
        assert list(t["status"]) == [c[2] for c in carried]
        assert list(t.evidence["body"]) == [c[3] for c in carried]
        assert t["attempt_no"].notna().all()
        assert t[t["subscription_id"] == carried[0][1]].evidence is t.evidence  # kept on a cut


def test_an_incident_timeline_has_its_requests_and_statuses(opened):
    a, _ = opened
    incident_id = a.incidents.sort_values("events").iloc[-1]["incident_id"]
    t = a.incident(incident_id)
    requests = t[t["kind"] == "request"]
    assert len(requests) == int((a.deliveries["incident_id"] == incident_id).sum())
    held = a.status_intervals[a.status_intervals["incident_id"] == incident_id]
    assert sorted(t.loc[t["kind"] == "status", "status"]) == sorted(held["status"])
    assert t["received_at"].is_monotonic_increasing
    assert len(t.evidence) == len(requests)


def test_a_subscription_timeline(opened):
    a, _ = opened
    t = a.subscription("wh_siem")
    assert len(t) == int((a.deliveries["subscription_id"] == "wh_siem").sum())
    assert set(t["subscription_id"]) == {"wh_siem"}


def test_an_unknown_id_is_one_line(opened):
    a, b = opened
    for x in (a, b):
        for call, what in (
            (x.event, "event"),
            (x.incident, "incident"),
            (x.subscription, "subscription"),
        ):
            with pytest.raises(ParameterError, match=rf"^no {what} 'nope\\n' in the deliveries"):
                call("nope\n")


def test_km_by_a_column(opened):
    a, _ = opened
    km = a.km(by="incident_class")
    assert set(km["group"]) == set(a.takedown_durations["incident_class"].dropna())
    assert set(a.km()["group"]) == {"all"}
    with pytest.raises(ParameterError, match="no such column"):
        a.km(by="nope")


def test_km_gives_hours_named_in_the_column_as_the_figures_draw_them(week, opened):
    sim, _, _, truth = week
    a, _ = opened
    km = a.km()
    assert "time_h" in km.columns and "time" not in km.columns
    # The median read off the curve, against the one computed by hand from the capture files.
    median_h = km.loc[km["survival"] <= 0.5, "time_h"].iloc[0]
    assert median_h == pytest.approx(_median_to_takedown_h(sim.captures[0].parent.parent, truth))
    line = audit.figures.km_curves(km).axes[0].get_lines()[0]  # x axis: hours
    assert max(line.get_xdata()) == pytest.approx(km["time_h"].max())
    assert set(a.km(by="incident_class").columns) == set(km.columns)


def test_a_small_group_warning_points_at_the_caller_s_line(opened):
    a, _ = opened
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a.km(by="incident_class")  # 20 incidents: classes of fewer than 10
    (small,) = [w for w in caught if "fewer than" in str(w.message)]
    assert small.filename == __file__  # not audit/workbench.py: a notebook shows its own line


#: The orders, as docs/tables.md (verdicts, in the order the checks run) and docs/controls.md
#: (severities) give them.
VERDICTS_IN_CHECK_ORDER = [
    "unreadable",
    "missing_signature",
    "malformed_signature",
    "malformed_timestamp",
    "stale_timestamp",
    "no_secret",
    "valid",
    "rotated_secret",
    "signature_mismatch",
]
SEVERITY_LOW_TO_HIGH = ["info", "low", "medium", "high", "critical"]


def test_severity_sorts_and_compares_by_rank_not_by_the_alphabet(opened):
    a, _ = opened
    f = a.findings
    assert f["severity"].cat.ordered and list(f["severity"].cat.categories) == SEVERITY_LOW_TO_HIGH
    got = [str(s) for s in f.sort_values("severity", ascending=False)["severity"]]
    assert got == sorted(got, key=SEVERITY_LOW_TO_HIGH.index, reverse=True)
    assert len(set(got)) >= 3  # info, medium, high, critical: the alphabet would mix them
    high_up = f[f["severity"] >= "high"]
    assert len(high_up) == sum(s in ("high", "critical") for s in got) > 0
    assert f["status"].cat.ordered and list(f["status"].cat.categories) == list(STATUSES)
    assert {"pass", "fail"} <= set(f["status"].astype(str))


def test_verdicts_are_ordered_in_check_order_everywhere_they_are_shown(opened):
    a, _ = opened
    d = a.deliveries
    assert d["verdict"].cat.ordered
    assert list(d["verdict"].cat.categories) == VERDICTS_IN_CHECK_ORDER
    seen = list(dict.fromkeys(str(v) for v in d.sort_values("verdict")["verdict"]))
    assert seen == [v for v in VERDICTS_IN_CHECK_ORDER if v in seen] and len(seen) >= 3
    counts = a.verdict_counts()  # the verdicts that occurred, none counted zero
    assert list(counts["verdict"].astype(str)) == seen and (counts["count"] > 0).all()
    assert counts["verdict"].dtype == d["verdict"].dtype == a.attempts["verdict"].dtype
    t = a.event(str(d.loc[d["verdict"] == "signature_mismatch", "event_id"].dropna().iloc[0]))
    assert t["verdict"].dtype == t.evidence["verdict"].dtype == d["verdict"].dtype
    incident = a.incident(str(a.incidents["incident_id"].iloc[0]))  # status rows: no verdict
    assert incident["verdict"].dtype == d["verdict"].dtype
    assert incident.loc[incident["kind"] == "status", "verdict"].isna().all()


def test_the_figures_draw_categorical_verdicts_as_they_drew_strings(opened):
    a, _ = opened
    as_text = a.deliveries.astype({"verdict": "str"})
    for draw in (audit.figures.verdicts, audit.figures.verdicts_over_time):
        got, text = draw(a.deliveries).axes[0], draw(as_text).axes[0]
        assert len(got.patches) == len(text.patches)
        assert [t.get_text() for t in got.get_yticklabels()] == [
            t.get_text() for t in text.get_yticklabels()
        ]
        assert [t.get_text() for t in got.texts] == [t.get_text() for t in text.texts]


def test_the_tables_are_read_only(opened):
    a, _ = opened
    with pytest.raises(AttributeError):
        a.deliveries = pd.DataFrame()  # type: ignore[misc]  # the point of the test


def test_changing_a_table_changes_nothing_the_workbench_holds(week):
    sim, *_ = week
    a = audit.open(logs=sim.captures, secrets=sim.secrets, progress=False)
    before = a.verdict_counts()
    frame = a.deliveries
    frame["verdict"] = "valid"
    a.incidents.drop(a.incidents.index, inplace=True)
    pd.testing.assert_frame_equal(a.verdict_counts(), before)
    assert len(a.incidents) == 20


def test_a_period_without_deliveries_is_empty_from_the_store_and_the_logs(week):
    sim, store, _, _ = week
    for a in (
        audit.open(store=store, secrets=sim.secrets, period="2026-11", progress=False),
        audit.open(logs=sim.captures, secrets=sim.secrets, period="2026-11", progress=False),
    ):
        assert len(a.deliveries) == 0 and len(a.events) == 0
        assert a.as_of == pd.Timestamp("2026-12-01", tz="UTC")  # its end: nothing after it


def test_an_id_that_is_not_one_string_is_one_line(opened):
    a, _ = opened
    for call in (a.event, a.incident, a.subscription):
        with pytest.raises(ParameterError, match="give one id as a string, not a list"):
            call(["a"])  # type: ignore[arg-type]  # the point of the test


def test_mistakes_are_one_line(week, tmp_path):
    sim, store, _, _ = week
    with pytest.raises(ParameterError, match=r"^give store .* or logs .*, not both$"):
        audit.open(store=store, logs=sim.captures, progress=False)
    with pytest.raises(ParameterError, match=r"^secrets is missing"):
        audit.open(logs=sim.captures, progress=False)
    with pytest.raises(ParameterError, match=r"^period"):
        audit.open(store=store, period="October", progress=False)
    with pytest.raises(ParameterError, match=r"^period: the end must be after the start"):
        audit.open(store=store, period=("2026-10-05", "2026-10-01"), progress=False)
    with pytest.raises(ParameterError, match="has no UTC offset"):
        audit.open(store=store, as_of="2026-10-05T00:00", progress=False)


def test_progress_is_drawn_when_asked_and_silent_otherwise(week, capsys, monkeypatch):
    _, store, _, _ = week
    monkeypatch.setattr(wb, "PROGRESS_DELAY_S", 0.0)  # every load counts as a long one
    audit.open(store=store, progress=True)
    assert "audit.open" in capsys.readouterr().err
    audit.open(store=store, progress=False)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("AUDIT_PROGRESS", "off")
    audit.open(store=store)  # progress=None: not interactive with AUDIT_PROGRESS=off
    assert capsys.readouterr().err == ""
    assert not wb._interactive()


def test_a_secret_quoted_in_a_request_is_cut_from_the_tables_and_the_evidence(week, tmp_path):
    sim, _, _, _ = week
    secret = json.loads(sim.secrets.read_text())["wh_main"][0]["secret"]
    first = sim.captures[0].read_text().splitlines()[0]
    rec = json.loads(first)
    rec["url"] = f"https://hooks.client.example/phishfort/wh_main?k={secret}"
    rec["body"] = rec["body"].replace('"data":{', f'"data":{{"note":"{secret}",', 1)
    log = tmp_path / "quoted.jsonl"
    log.write_text(json.dumps(rec) + "\n")
    a = audit.open(logs=[log], secrets=sim.secrets, progress=False)
    assert secret not in a.deliveries.to_csv()
    t = a.event(json.loads(rec["body"])["id"])
    assert secret not in t.to_csv() and secret.encode() not in b"".join(t.evidence["body"])
    assert "[redacted]" in a.deliveries.loc[0, "url"]


def test_neither_store_nor_logs_opens_the_demo_data():
    a = audit.open(progress=False)
    demo = Path(demo_inputs()["secrets_path"]).parent
    truth = json.loads((demo / "truth.json").read_text())
    assert len(a.incidents) == truth["counts"]["incidents"]
    logs = a.inputs[a.inputs["kind"] == "capture log"]
    assert all(s.startswith(str(demo)) for s in logs["source"])


def test_an_unreadable_line_is_in_the_period_of_its_file_s_records(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    write_jsonl(logs / "september.jsonl", _signed("2026-09-30", "1790726400", 2))
    write_jsonl(logs / "october.jsonl", [*_signed("2026-10-03", TS, 2), "{not json"])
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": SECRET}]})
    counts = {}
    for period in ("2026-09", "2026-10"):
        a = audit.open(logs=[logs], secrets=secrets, period=period, progress=False)
        counts[period] = int((a.deliveries["verdict"] == "unreadable").sum())
    assert counts == {"2026-09": 0, "2026-10": 1}
