"""The trend against the previous period (``audit.report.trend``): which run is "previous",
and a damaged history skipped with a note (the next older good run is used)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from audit.report.index import build_index, check_findings
from audit.report.params import parse_period
from audit.report.trend import previous_run, trend_for
from tests.test_report_index import MANIFEST_DAMAGE, _in_time, damage, write_run

NOVEMBER = parse_period("2026-11")
NOW = pd.DataFrame(
    {
        "finding_uid": ["n1", "n2"],
        "check_id": ["SIG-01", "DLV-02"],
        "resource": ["wh_a", "wh_a"],
        "status": ["fail", "fail"],
        "severity": ["high", "medium"],
    }
)


def october_run(root: Path, run_id: str, started: str, failing: list[str]) -> Path:
    folder = write_run(
        root,
        "2026-10",
        run_id,
        started=started,
        files=(),
        period={
            "label": "2026-10",
            "start": "2026-10-01T00:00:00+00:00",
            "end": "2026-11-01T00:00:00+00:00",
        },
    )
    records = [
        {
            "finding_uid": f"{run_id}-{c}",
            "check_id": c,
            "resource": "wh_a",
            "status": "fail",
            "severity": "high",
            "title": "t",
            "reason": "r",
        }
        for c in failing
    ]
    (folder / "findings.json").write_text(json.dumps(records))
    return folder


def test_the_newest_completed_run_of_the_period_before_is_previous(tmp_path):
    october_run(tmp_path, "r-old", "2026-11-01T06:00:00+00:00", ["TKD-03"])
    october_run(tmp_path, "r-new", "2026-11-02T06:00:00+00:00", ["SIG-01"])
    t = trend_for(tmp_path, NOVEMBER, NOW)
    assert t["previous"]["run_id"] == "r-new" and t["previous"]["period"] == "2026-10"
    assert [r["check_id"] for r in t["new"]] == ["DLV-02"]
    assert [r["check_id"] for r in t["persisting"]] == ["SIG-01"]
    assert t["persisting"][0]["previous_uid"] == "r-new-SIG-01"
    assert t["resolved"] == [] and t["skipped"] == []


def test_a_week_is_not_the_previous_period_of_a_month(tmp_path):
    # W44 of 2026 ends on 2 November, W43 on 26 October: neither ends where November starts,
    # but a range that does is still another kind of period.
    write_run(tmp_path, "2026-10-15..2026-10-31", "r-range", started="2026-11-01T06:00:00+00:00")
    (tmp_path / "2026-10-15..2026-10-31" / "r-range" / "findings.json").write_text("[]")
    found, notes = previous_run(tmp_path, NOVEMBER)
    assert found is None and notes == []
    t = trend_for(tmp_path, parse_period("2026-11-01..2026-11-15"), NOW)
    assert t["previous"]["run_id"] == "r-range"


FINDINGS_DAMAGE = {
    "link to /dev/zero": "a link, not a file",
    "fifo": "not a regular file",
    "deep": "nested deeper than 64 levels",
    "not utf-8": "not UTF-8 text",
    "huge": "larger than 16 MiB",
    "dict": "not a list of findings",
    "list of numbers": "item 1 is not an object",
}


@pytest.mark.parametrize("how", list(FINDINGS_DAMAGE))
def test_damaged_findings_are_skipped_with_a_note_and_the_older_run_is_used(tmp_path, how):
    october_run(tmp_path, "r-old", "2026-11-01T06:00:00+00:00", ["SIG-01"])
    bad = october_run(tmp_path, "r-new", "2026-11-02T06:00:00+00:00", ["DLV-02"])
    damage(bad, "findings.json", how)
    t = _in_time(trend_for, tmp_path, NOVEMBER, NOW)
    assert t["previous"]["run_id"] == "r-old"
    assert [r["check_id"] for r in t["persisting"]] == ["SIG-01"]
    (note,) = t["skipped"]
    assert note.startswith("run r-new of 2026-10 skipped: damaged (findings.json: ")
    assert FINDINGS_DAMAGE[how] in note
    page = _in_time(build_index, tmp_path).read_text()  # the index marks it damaged too
    assert f'damaged</span> <span class="cause">findings.json: {FINDINGS_DAMAGE[how]}' in page


@pytest.mark.parametrize("how", list(MANIFEST_DAMAGE))
def test_a_damaged_manifest_is_skipped_with_a_note(tmp_path, how):
    october_run(tmp_path, "r-old", "2026-11-01T06:00:00+00:00", ["SIG-01"])
    bad = october_run(tmp_path, "r-new", "2026-11-02T06:00:00+00:00", ["DLV-02"])
    damage(bad, "manifest.json", how)
    t = _in_time(trend_for, tmp_path, NOVEMBER, NOW)
    assert t["previous"]["run_id"] == "r-old"
    (note,) = t["skipped"]
    assert "r-new of 2026-10 skipped: damaged (manifest.json: " in note
    assert MANIFEST_DAMAGE[how] in note
    page = _in_time(build_index, tmp_path).read_text()
    assert f'damaged</span> <span class="cause">manifest.json: {MANIFEST_DAMAGE[how]}' in page


def test_with_only_damaged_runs_there_is_no_previous_run_and_a_note_for_each(tmp_path):
    for n, how in enumerate(("fifo", "deep")):
        bad = october_run(tmp_path, f"r{n}", f"2026-11-0{n + 1}T06:00:00+00:00", ["SIG-01"])
        damage(bad, "findings.json", how)
    t = _in_time(trend_for, tmp_path, NOVEMBER, NOW)
    assert t["previous"] is None and t["new"] == t["persisting"] == t["resolved"] == []
    assert len(t["skipped"]) == 2


@pytest.mark.parametrize(
    ("records", "why"),
    [
        ({"a": 1}, "not a list of findings"),
        ([1, 2], "item 1 is not an object"),
        ([{"finding_uid": "u", "check_id": 7, "status": "fail", "resource": "x"}], "text check_id"),
        ([{"finding_uid": "u", "check_id": "A", "resource": "x"}], "text status"),
    ],
)
def test_findings_of_the_wrong_shape_are_refused(records, why):
    with pytest.raises(ValueError, match=why):
        check_findings(records)
