"""Pure pieces of the report: period cuts, formatting, badges, trend matching, the KM axis."""

from __future__ import annotations

import pandas as pd
import pytest

from audit.report import check_params, parse_period
from audit.report.format import duration, percent, table
from audit.report.markup import badge
from audit.report.plotting import axis_limit_h, takedown_panels
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
            full="tables/incidents.csv",
        )
    )  # fmt: skip
    assert "<th>URL</th><th>Waiting for</th><th>Verdict</th>" in html
    assert "hxxps://evil[.]example/&lt;script&gt;" in html and "<script" not in html
    assert "26 h 00 min" in html and "signature mismatch" in html
    assert html.count("<tr>") == 26  # header + 25 rows
    assert "First 25 of 30 rows" in html and "tables/incidents.csv" in html


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
    assert {(r["check_id"], r["status_now"]) for r in t["resolved"]} == {
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
