"""Pure pieces of the report: period cuts, formatting, badges, trend matching, the KM axis."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from audit.report import check_params, parse_period, views
from audit.report.format import duration, percent, table
from audit.report.markup import badge
from audit.report.plotting import axis_limit_h, takedown_panels
from audit.report.rundir import RunData
from audit.report.tables import deliveries_in_period
from audit.report.trend import compare

OCT = parse_period("2026-10")
T = pd.Timestamp


@pytest.mark.parametrize("dtype", ["object", "str", "category"])
def test_untimed_unreadable_lines_count_where_their_file_is(dtype):
    sources = ["oct.jsonl", "oct.jsonl", "nov.jsonl", "nov.jsonl", "junk.jsonl"]
    d = pd.DataFrame(
        {
            "source": pd.Series([*sources, "sep.jsonl"], dtype=dtype),
            "line": [1, 2, 1, 2, 1, 1],
            "received_at": pd.to_datetime(
                ["2026-10-30T00:00:00Z", None, "2026-11-02T00:00:00Z", None, None,
                 "2026-09-30T00:00:00Z"],
                utc=True,
            ),
        }
    )  # fmt: skip
    kept = deliveries_in_period(d, OCT)
    # oct.jsonl's unreadable line belongs to October; nov.jsonl's does not; a file with no
    # readable record cannot be placed anywhere else, so it is shown.
    assert list(zip(kept["source"], kept["line"], strict=True)) == [
        ("oct.jsonl", 1),
        ("oct.jsonl", 2),
        ("junk.jsonl", 1),
    ]
    nov = deliveries_in_period(d, parse_period("2026-11"))
    assert list(nov["source"]) == ["nov.jsonl", "nov.jsonl", "junk.jsonl"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.3614 * 3600, "22 min"), (0.042, "42 ms"), (5.0, "5 s"), (90 * 60, "1 h 30 min"),
     (50 * 3600, "2 d 2 h"), (float("nan"), "")],
)  # fmt: skip
def test_durations_read_as_hours_and_minutes(seconds, text):
    assert duration(seconds) == text


def test_small_shares_do_not_read_as_zero():
    assert percent(2 / 5181) == "0.04%" and percent(0.978) == "97.8%" and percent(1.0) == "100%"


def test_tables_escape_defang_label_and_cut_with_a_pointer():
    df = pd.DataFrame(
        {
            "url": ["https://evil.example/<script>"] * 30,
            "awaiting_client_s": [3600.0 * 26] * 30,
            "verdict": ["signature_mismatch"] * 30,
        }
    )
    html = str(
        table(
            df,
            {"url": ("URL", "url"), "awaiting_client_s": ("Waiting for", "s"),
             "verdict": ("Verdict", "label")},
            caption="Waiting",
            max_rows=25,
            full="waiting_on_client",
        )
    )  # fmt: skip
    assert "<th>URL</th><th>Waiting for</th><th>Verdict</th>" in html
    assert "hxxps://evil[.]example/&lt;script&gt;" in html and "<script" not in html
    assert "26 h 00 min" in html and "signature mismatch" in html
    assert html.count("<tr>") == 26  # header + 25 rows
    assert "Showing the first 25 of 30 rows." in html
    # the whole table is linked, as CSV and Parquet, beside the report
    assert '<a href="tables/waiting_on_client.csv">' in html
    assert '<a href="tables/waiting_on_client.parquet">' in html


def test_badges_read_without_colour():
    assert badge("fail", count=2) == '<span class="badge fail">✗ FAIL 2</span>'
    assert "SKIP" in badge("skip") and "PASS" in badge("pass")


def test_trend_matches_by_control_and_resource_across_periods():
    before = pd.DataFrame(
        {"finding_uid": ["a1", "a2", "a3"], "check_id": ["SIG-01", "DLV-03", "SUB-02"],
         "resource": ["all requests", "all events", "wh_1"], "status": ["fail"] * 3,
         "severity": ["critical", "critical", "high"]}
    )  # fmt: skip
    now = pd.DataFrame(
        {"finding_uid": ["b1", "b2", "b3", "b4"],
         "check_id": ["SIG-01", "DLV-03", "SUB-02", "TKD-03"],
         "resource": ["all requests", "all events", "wh_2", "all incidents"],
         "status": ["fail", "skip", "fail", "fail"],
         "severity": ["critical", "critical", "high", "high"]}
    )  # fmt: skip
    t = compare(now, before, {"run_id": "r0", "period": "2026-09"})
    assert [(r["check_id"], r["finding_uid"], r["previous_uid"]) for r in t["persisting"]] == [
        ("SIG-01", "b1", "a1")
    ]
    assert sorted(r["check_id"] + "/" + r["resource"] for r in t["new"]) == [
        "SUB-02/wh_2",
        "TKD-03/all incidents",
    ]
    # resolved needs a pass now; skipped or no longer seen is not judged
    assert t["resolved"] == []
    assert {(r["check_id"], r["status_now"]) for r in t["not_judged"]} == {
        ("DLV-03", "skip"),
        ("SUB-02", "absent"),
    }


def test_km_axis_stops_near_the_99th_percentile():
    # 99 incidents within 10 h and one after 200 h: the axis ends at 12 h, not 200 h.
    d = pd.DataFrame({"duration_s": [3600.0 * (1 + i % 10) for i in range(99)] + [200 * 3600.0]})
    assert axis_limit_h(d) == 12.0
    km = pd.DataFrame(
        {"group": ["a", "a", "b"], "time": [3600.0, 7200.0, 3600.0], "at_risk": [2, 1, 1],
         "survival": [0.5, 0.0, 0.0], "ci_lower": [0.1, 0.0, 0.0], "ci_upper": [0.9, 0.0, 0.0]}
    )  # fmt: skip
    fig, alt = takedown_panels(km, d)
    assert fig.axes[0].get_xlim() == (0.0, 12.0)
    assert "a median 1.0 h" in alt and "0 to 12 h" in alt


@pytest.mark.parametrize(
    "params",
    [{"thresholds": {"ttt_median_h": True}}, {"thresholds": {"no_such": 1}},
     {"clock_start": "later"}, {"header_prefix": ""}, {"as_of": "2026-09-01T00:00:00Z"},
     {"as_of": "2026-10-20"}],
)  # fmt: skip
def test_check_params_refuses(params):
    from audit.errors import ParameterError

    with pytest.raises(ParameterError):
        check_params(params, OCT)


def test_check_params_accepts_and_defaults():
    p = check_params(
        {"as_of": "2026-10-20T12:00:00+02:00", "thresholds": {"ttt_median_h": 12}}, OCT
    )
    assert p.as_of == T("2026-10-20T10:00:00Z") and p.thresholds == {"ttt_median_h": 12}
    assert check_params(None, OCT).as_of == OCT.end


def test_every_catalogue_severity_has_a_symbol_and_a_colour():
    # Severities are stated once, in the catalogue; the badges must cover each of them.
    from audit.findings import SEVERITIES
    from audit.report.markup import CSS, badge

    for severity in SEVERITIES:
        html = badge(severity)
        assert (
            html.startswith(f'<span class="badge {severity}">') and f" {severity.upper()}" in html
        )
        assert not html.endswith(f'">{severity.upper()}</span>'), f"{severity} has no symbol"
        assert f".badge.{severity}" in CSS, f"{severity} has no colour"


# --- the document: templates, verdict, banners, evidence (issue 36 points 2-4) -------------

RLO, ESC = chr(0x202E), chr(0x1B)
HOSTILE = f"<script>alert(1)</script> {RLO}evil.example{ESC}[31m javascript:alert(2) https://x.evil.example/a"
#: The report's own text (catalogue, parameters, paths, versions): escaped, never defanged.
OWN = f"<i>own</i> report.ipynb, secrets file: size only, end of data: line 1 {RLO}x"
OWN_SHOWN = (
    "&lt;i&gt;own&lt;/i&gt; report.ipynb, secrets file: size only, end of data: line 1 \\u202ex"
)


def _hostile_run():
    import json as _json

    from audit.report.rundir import RunData

    manifest = {
        "title": OWN,
        "run_id": "20261101T000000Z-abc123",
        "client_id": OWN,
        "period": {
            "label": "2026-10",
            "start": "2026-10-01T00:00:00+00:00",
            "end": "2026-11-01T00:00:00+00:00",
        },
        "as_of": "2026-11-01T00:00:00+00:00",
        "started": "2026-11-02T08:00:00+00:00",
        "inputs": [
            {
                "kind": "capture log",
                "source": OWN,
                "size": 10,
                "records": 0,
                "unreadable": 0,
                "sha256": "ab" * 32,
            }
        ],
        "coverage": {"deliveries": 0, "valid": 0, "first_received": None, "last_received": None},
        "skipped_inputs": [{"path": OWN, "reason": "no capture record"}],
        "snapshots": {"newest_taken_at": "2026-06-30T12:00:00+00:00"},
        "parameters": {"client_id": OWN, "thresholds": {OWN: 1}},
        "notes": [HOSTILE],
        "versions": {"audit": OWN},
        "notebook": {"path": OWN, "sha256": OWN},
    }
    evidence = {
        "examples": [HOSTILE] * 20,
        "examples_total": 1373,
        "wait_h": {HOSTILE: 3610.4},
        "rows": [{"url": HOSTILE, "delay_s": 17_040.0}],
        HOSTILE: None,
    }
    findings = pd.DataFrame(
        [
            {
                "check_id": "TKD-03",
                "title": OWN,
                "status": "fail",
                "severity": "critical",
                "resource": HOSTILE,
                "reason": HOSTILE,
                "remediation": OWN,
                "evidence": _json.dumps(evidence),
                "finding_uid": "uid-critical-1",
                "spec_url": "javascript:alert(3)",
                "docs_url": "https://docs.invalid/controls#tkd-03",
            },
            {
                "check_id": "SIG-01",
                "title": "t",
                "status": "pass",
                "severity": "high",
                "resource": "r",
                "reason": "r",
                "remediation": "r",
                "evidence": "{}",
                "finding_uid": "uid-pass-1",
            },
        ]
    )
    trend = {
        "previous": {"run_id": OWN, "period": OWN},
        "new": [
            {"check_id": HOSTILE, "severity": "high", "resource": HOSTILE, "finding_uid": HOSTILE}
        ],
        "persisting": [],
        "resolved": [],
    }
    hostile_frame = pd.DataFrame(
        {
            c: [HOSTILE] * 30
            for c in (
                "received_at",
                "subscription_id",
                "delivery_id",
                "verdict",
                "source",
                "detail",
                "url",
                "domain",
                "incident_id",
                "event_id",
                "group",
                "metric",
                "outcome",
                "by",
                "status",
                "incident_class",
                "events",
                "active",
                "last_delivery_status",
                "fetched_at",
            )
        }
    )
    names = (
        "verdict_counts",
        "not_valid_requests",
        "event_outcomes",
        "undelivered_events",
        "success_by_subscription",
        "success_by_event",
        "latency",
        "off_schedule_attempts",
        "retried_after_success",
        "takedown_summary",
        "waiting_on_client",
    )
    tables = {n: hostile_frame for n in names}
    subs = hostile_frame.copy()
    subs["fetched_at"] = pd.Timestamp("2026-06-30T12:00:00Z")
    tables["subscriptions_latest"] = subs
    return RunData(manifest, findings, trend, None, tables)


def _every_section(run) -> str:
    from audit.report import views

    parts = [
        views.header(run),
        views.summary(run),
        views.failing(run),
        views.trend(run),
        views.signatures(run),
        views.deliveries(run),
        views.retries(run),
        views.takedown(run),
        views.waiting(run),
        views.subscriptions(run),
        views.appendix(run),
    ] + [views.family(run, f) for f in ("SIG", "DLV", "SUB", "TKD")]
    return "".join(str(p) for p in parts)


def test_hostile_data_is_escaped_and_defanged_in_every_template():
    html = _every_section(_hostile_run())
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # the report's own text is escaped, its invisible characters shown, and never defanged
    assert "<i>own" not in html and OWN_SHOWN in html
    assert "report[.]ipynb" not in html and "file[:]" not in html and "data[:]" not in html
    assert RLO not in html and ESC not in html
    assert "\\u202e" in html and "\\u001b" in html
    assert "javascript:" not in html and "javascript[:]alert(2)" in html
    assert "evil.example" not in html and "evil[.]example" in html
    # a catalogue link that is not http(s) is dropped; an https one is kept
    assert "alert(3)" not in html and 'href="https://docs.invalid/controls#tkd-03"' in html
    # every href is one of ours: an anchor, a table beside the report, or the catalogue
    hrefs = set(re.findall(r'href="([^"]*)"', html))
    assert all(h.startswith(("#", "tables/", "https://docs.invalid/")) for h in hrefs), hrefs


def test_the_top_says_fail_and_warns_of_an_empty_period_an_old_snapshot_and_skipped_inputs():
    from audit.report import views

    top = str(views.header(_hostile_run()))
    assert '<span class="word">FAIL</span>' in top
    assert "1 of 2 findings failing: 1 critical." in top
    assert "No delivery received in this period" in top
    # 2026-06-30 12:00, none in the period: no listing covers it (audit.findings.listing)
    assert "No listing snapshot covers the period" in top and "2026-06-30 12:00 UTC" in top
    assert "1 input skipped" in top and "no capture record" in top
    # the table of contents links every section, whose anchors the notebook's headings carry
    for anchor, _ in views.SECTIONS:
        assert f'href="#{anchor}"' in top
    # each printed page names the run
    assert 'content: "Run 20261101T000000Z-abc123 · period 2026-10"' in top


def test_a_month_without_failures_passes_and_its_zero_counts_are_grey():
    from audit.report import views
    from audit.report.rundir import RunData

    run = _hostile_run()
    quiet = RunData(
        {
            **run.manifest,
            "coverage": {"deliveries": 12_345, "valid": 12_340},
            "snapshots": {"newest_taken_at": "2026-10-30T00:00:00Z"},
            "skipped_inputs": [],
        },
        run.findings[run.findings["status"] == "pass"],
    )
    top, summ = str(views.header(quiet)), str(views.summary(quiet))
    assert '<span class="word">PASS</span>' in top and "No finding failed" in top
    assert 'class="banner' not in top and "12,345 (12,340 with a valid signature)" in top
    assert 'class="badge fail zero"' in summ and 'class="badge pass"' in summ
    assert 'class="badge critical zero"' in summ


def test_critical_and_high_have_distinct_symbols():
    from audit.findings import SEVERITIES
    from audit.report.markup import SYMBOLS

    symbols = [SYMBOLS[s] for s in SEVERITIES]
    assert len(set(symbols)) == len(symbols)


def test_evidence_reads_as_small_tables_with_true_totals_and_human_units():
    from audit.report import views

    html = str(views.failing(_hostile_run()))
    assert "showing 10 of 1,373" in html  # the control's total, not the cap
    # one unit per column, named in its header: 3610.4 under "(h)", 17,040 under "(s)"
    assert '<caption class="list-label">wait (h)</caption>' in html and ">3,610<" in html
    assert "<th>delay (s)</th>" in html and ">17,040<" in html
    assert "e+0" not in html and "None" not in html and "nan" not in html.lower()
    assert "not recorded" in html
    capped = views.evidence({"incidents": {"items": ["a", "b"], "total": 2636}})
    assert capped.lists == [views.EvidenceList("incidents", ["a", "b"], 2636)]
    stats = views.evidence({"ack_ms": {"n": 5170, "p50": 42.0, "max": 8975.0}})
    assert stats.tables[0].label == "ack (ms)"
    assert stats.tables[0].headers == ["values", "median", "maximum"]
    assert [c.value for c in stats.tables[0].rows[0]] == ["5,170", "42", "8,975"]


def test_the_notebook_headings_carry_the_contents_anchors():
    import json as _json

    from audit.report import views
    from audit.report.render import default_notebook

    nb = _json.loads(default_notebook().read_text(encoding="utf-8"))
    cells = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for anchor, name in views.SECTIONS:
        assert f'<h2 id="{anchor}">{name}</h2>' in cells


def test_the_stylesheet_prints_with_the_page_count_and_keeps_headings_with_their_content():
    from audit.report.markup import CSS

    assert "@media print" in CSS and "@page" in CSS
    assert 'counter(page) " of " counter(pages)' in CSS
    printed = CSS[CSS.index("@media print") :]
    # JupyterLab's avoid-page on each output moved a page-tall output whole (a blank page 1,
    # page 3 two-thirds empty): outputs flow, and headings stay with what follows them
    assert ".jp-OutputArea-child, .jp-Cell, .jp-Cell-outputWrapper { break-inside: auto" in printed
    assert "h1, h2, h3, caption, .list-label { break-after: avoid" in printed
    assert ".jp-MarkdownCell { break-after: avoid" in printed
    assert ".finding h3 { break-after: avoid" in printed


def test_a_card_names_its_rule_and_a_capped_mapping_gives_its_total():
    import json as _json

    from audit.report import views
    from audit.report.rundir import RunData

    run = _hostile_run()
    f = run.findings.copy()
    f.loc[0, "spec_ref"] = "spec 5.2 rules 4-5"
    f.loc[0, "docs_ref"] = "docs/controls.md#tkd-03"
    f.loc[0, "evidence"] = _json.dumps(
        {"wait_h": {"inc_a": 30.0, "inc_b": 27.2}, "wait_h_total": 4}
    )
    html = str(views.failing(RunData(run.manifest, f)))
    assert "specification: <code>spec 5.2 rules 4-5</code>" in html
    assert "entry: <code>docs/controls.md#tkd-03</code>" in html
    assert "showing 2 of 4" in html and ">30<" in html and ">27.2<" in html


def test_the_trend_says_which_damaged_runs_it_left_out() -> None:
    run = RunData(
        manifest={},
        findings=pd.DataFrame(),
        trend={"previous": None, "skipped": ["run 20261101T000000Z-aa skipped: damaged (<x>)"]},
    )
    page = str(views.trend(run))
    assert "Earlier runs left out of the trend" in page
    assert "damaged (&lt;x&gt;)" in page
    assert "left out" not in str(views.trend(RunData(manifest={}, findings=pd.DataFrame())))
