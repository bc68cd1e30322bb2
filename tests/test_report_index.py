"""The index of run folders (``audit.report.index``): grouping by period, states, links, and
a history of damaged run folders read safely (links, FIFOs, devices, huge or deeply nested
files, wrong shapes)."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pandas as pd
import pytest

from audit.cli import main
from audit.report.index import (
    FINDINGS_LIMIT,
    MANIFEST_LIMIT,
    build_index,
    read_history_json,
    scan_runs,
)
from audit.report.params import parse_period
from audit.report.trend import trend_for
from tests.test_reports import hostile  # noqa: F401  (fixture)


def write_run(
    root: Path,
    label: str,
    run_id: str,
    *,
    started: str | None = None,
    status: dict | None = None,
    severity: dict | None = None,
    files: tuple[str, ...] = ("report.html", "findings.csv"),
    **extra: object,
) -> Path:
    """A run folder with a manifest as the pipeline writes it (only the keys the index reads)."""
    folder = root / label / run_id
    folder.mkdir(parents=True)
    manifest = {
        "run_id": run_id,
        "period": {"label": label},
        "started": started or "",
        "exit_status": 0,
        "findings": {"status": status or {}, "severity": severity or {}},
        "rendering": {"status": "ok"},
        **extra,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for name in files:
        (folder / name).write_text("x")
    return folder


def badges_in(html: str) -> list[str]:
    """The badges in ``html`` as ``"class: WORD N"`` (symbols left out), in order."""
    html = re.sub(r'<span class="sym"[^>]*>[^<]*</span>', "", html)
    found = re.findall(r'<span class="badge ([^"]+)">([^<]*)</span>', html)
    return [f"{kind}: {word.strip()}" for kind, word in found]


def rows(page: str) -> list[str]:
    return re.findall(r"<tr class=.*?</tr>", page, re.S)


# --- the page --------------------------------------------------------------------------------


def test_runs_are_grouped_by_period_newest_first_and_kinds_are_not_mixed(tmp_path):
    write_run(tmp_path, "2026-09", "r-sep", started="2026-10-01T06:00:00+00:00")
    write_run(tmp_path, "2026-10", "r-oct-1", started="2026-11-01T06:00:00+00:00")
    write_run(tmp_path, "2026-10", "r-oct-2", started="2026-11-02T06:00:00+00:00")
    write_run(tmp_path, "2026-W44", "r-w44", started="2026-11-03T06:00:00+00:00")
    write_run(tmp_path, "2026-10-01..2026-10-15", "r-range", started="2026-11-04T06:00:00+00:00")
    page = build_index(tmp_path).read_text()
    months, weeks, ranges = (
        page.index(f"<h2>{t}</h2>") for t in ("Months", "Weeks", "Date ranges")
    )
    assert months < weeks < ranges
    # newest period first, and in it the newest run first
    assert months < page.index("r-oct-2") < page.index("r-oct-1") < page.index("r-sep") < weeks
    assert weeks < page.index("r-w44") < ranges < page.index("r-range")
    assert page.count("<caption>") == 4  # one table per period
    assert "1 Oct 2026 to 31 Oct 2026" in page and "26 Oct 2026 to 1 Nov 2026" in page


def test_the_latest_run_of_each_period_is_marked(tmp_path):
    write_run(tmp_path, "2026-10", "r-old", started="2026-11-01T06:00:00+00:00")
    write_run(tmp_path, "2026-10", "r-new", started="2026-11-02T06:00:00+00:00")
    write_run(tmp_path, "2026-09", "r-sep", started="2026-10-01T06:00:00+00:00")
    page = build_index(tmp_path).read_text()
    marked = [r for r in rows(page) if "tag latest" in r]
    assert len(marked) == 2
    assert "r-new" in marked[0] and "r-sep" in marked[1]
    assert not any("r-old" in r for r in marked)


def test_a_newer_failed_run_leaves_the_last_completed_one_marked_too(tmp_path):
    write_run(tmp_path, "2026-10", "r-good", started="2026-11-01T06:00:00+00:00")
    write_run(
        tmp_path,
        "2026-10",
        "r-bad",
        started="2026-11-02T06:00:00+00:00",
        files=(),
        exit_status=3,
        failure={"stage": "load", "cause": "deliveries.csv holds no capture record"},
    )
    page = build_index(tmp_path).read_text()
    bad, good = rows(page)
    assert "r-bad" in bad and ">latest<" in bad and "tag failed" in bad
    assert 'failed</span> <span class="cause">while load: deliveries.csv holds no' in bad
    assert "r-good" in good and "latest completed" in good and "tag completed" in good
    assert "no report (failed)" in bad


def test_failing_counts_by_severity_with_zero_counts_greyed_and_no_exit_column(tmp_path):
    write_run(
        tmp_path,
        "2026-10",
        "r1",
        status={"fail": 3, "pass": 20, "skip": 2},
        severity={"critical": 1, "high": 2},
    )
    page = build_index(tmp_path).read_text()
    assert "Exit" not in page and "exit" not in page.lower().replace("exit_status", "")
    (row,) = rows(page)
    assert "3 failing" in row and "of 25 findings: 20 pass, 2 skip" in row
    assert badges_in(row) == [
        "critical: CRITICAL 1",
        "high: HIGH 2",
        "medium zero: MEDIUM 0",  # grey
        "low zero: LOW 0",
    ]


def test_the_trend_against_the_previous_period_is_shown(tmp_path):
    trend = {
        "previous_period": "2026-09",
        "previous_run": "r0",
        "new": 1,
        "resolved": 4,
        "persisting": 2,
    }
    write_run(tmp_path, "2026-10", "r1", trend=trend)
    write_run(tmp_path, "2026-11", "r2")
    page = build_index(tmp_path).read_text()
    with_trend, without = rows(page)[1], rows(page)[0]
    assert badges_in(with_trend)[-4:] == [
        "new: NEW 1",
        "resolved: RESOLVED 4",
        "not_judged zero: NOT JUDGED 0",  # a run written before "not judged" counted none
        "persisting: PERSISTING 2",
    ]
    assert "vs 2026-09" in with_trend
    assert "no previous run" in without


def test_links_only_to_regular_files_that_exist(tmp_path):
    folder = write_run(tmp_path, "2026-10", "r1", files=("report.html",))
    os.symlink("/etc/passwd", folder / "findings.csv")  # a link is not linked to
    page = build_index(tmp_path).read_text()
    hrefs = re.findall(r'href="([^"]+)"', page)
    assert hrefs == ["2026-10/r1/report.html", "2026-10/r1/manifest.json"]


def test_hostile_folder_names_are_escaped_and_cannot_make_a_script_link(tmp_path):
    write_run(
        tmp_path, "javascript:alert(1)", "<img src=x onerror=alert(1)>", files=("report.html",)
    )
    page = build_index(tmp_path).read_text()
    assert "<img" not in page and "&lt;img src=x" in page
    assert 'href="javascript:' not in page
    assert 'href="javascript%3Aalert%281%29/%3Cimg' in page


def test_a_rendering_failure_is_said_where_the_report_link_would_be(tmp_path):
    write_run(
        tmp_path,
        "2026-10",
        "r1",
        files=("findings.csv",),
        rendering={"status": "failed", "message": "rendering failed: ZeroDivisionError"},
        failure={"stage": "rendering", "cause": "ZeroDivisionError"},
        exit_status=1,
    )
    page = build_index(tmp_path).read_text()
    assert "rendering failed: ZeroDivisionError" in page and "report.html" not in page
    assert "tag completed" in page  # the findings stand: completed, without a report
    assert scan_runs(tmp_path)[0].state == "completed"


@pytest.mark.parametrize(
    ("extra", "cause"),
    [
        (
            {"failure": {"stage": "writing the run folder", "cause": "No space left on device"}},
            "while writing the run folder: No space left on device",
        ),
        (
            {"failure": {"stage": "unknown", "cause": "interrupted (no cause recorded)"}},
            "interrupted (no cause recorded)",
        ),
        ({"message": "interrupted before it finished"}, "interrupted before it finished"),
        ({}, "exit status 3"),
    ],
)
def test_a_failed_run_is_labelled_with_its_cause(tmp_path, extra, cause):
    write_run(tmp_path, "2026-10", "r1.failed", files=(), exit_status=3, **extra)
    (entry,) = scan_runs(tmp_path)
    assert entry.state == "failed" and entry.problem == cause
    assert f'<span class="cause">{cause}</span>' in build_index(tmp_path).read_text()


def test_runs_are_listed_newest_first(tmp_path):
    # Moved from tests/test_reports.py.
    for label, started in [
        ("2026-09", "2026-10-01T06:00:00+00:00"),
        ("2026-10", "2026-11-01T06:00:00+00:00"),
    ]:
        write_run(tmp_path, label, f"run-{label}", started=started)
    page = build_index(tmp_path).read_text()
    assert page.index("run-2026-10") < page.index("run-2026-09")
    assert [e.folder.name for e in scan_runs(tmp_path)] == ["run-2026-10", "run-2026-09"]


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe\x00garbage", "not UTF-8 text"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"run_id": 7}', "no run_id"),
    ],
)
def test_an_unreadable_manifest_is_listed_damaged_and_breaks_nothing(tmp_path, blob, why):
    # Moved from tests/test_report_pipeline.py ("unreadable manifest" is now "damaged (why)").
    good = write_run(
        tmp_path,
        "2026-09",
        "20261001T060000Z-aaaaaa",
        started="2026-10-01T06:00:00+00:00",
        status={"pass": 3},
    )
    bad = tmp_path / "2026-10" / "20261101T060000Z-bbbbbb"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_bytes(blob)
    page = build_index(tmp_path).read_text()
    (row,) = [r for r in rows(page) if bad.name in r]
    assert "damaged" in row and why in row
    assert f'href="2026-09/{good.name}/report.html"' in page
    assert "of 3 findings: 3 pass" in page


# --- a damaged history (issue 36 point 10) ----------------------------------------------------


def _in_time(fn, *args):
    """``fn(*args)``, failing the test if it has not returned within 60 s (it must not hang on
    a FIFO; a healthy call takes well under a second)."""
    box: dict[str, object] = {}

    def call():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # handed to the test's thread
            box["error"] = e

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), f"{fn.__name__} hung"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]  # an exception from the thread
    return box["value"]


def damage(folder: Path, name: str, how: str) -> None:
    """Make ``folder/name`` damaged in one of the ways the issue lists."""
    path = folder / name
    path.unlink(missing_ok=True)
    if how == "link to /dev/zero":
        os.symlink("/dev/zero", path)
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif how == "deep object":
        path.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    elif how == "not utf-8":
        path.write_bytes(b'{"run_id": "\xff\xfe"}')
    elif how == "huge":
        limit = MANIFEST_LIMIT if name == "manifest.json" else FINDINGS_LIMIT
        with open(path, "wb") as f:  # sparse: no disk used
            f.truncate(limit + 1)
    elif how == "dict":
        path.write_text(json.dumps({"check_id": "SIG-01", "status": "fail"}))
    elif how == "list of numbers":
        path.write_text(json.dumps([1, 2, 3]))
    else:  # pragma: no cover
        raise AssertionError(how)


MANIFEST_DAMAGE = {
    "link to /dev/zero": "a link, not a file",
    "fifo": "not a regular file",
    "deep": "nested deeper than 64 levels",
    "deep object": "nested deeper than 64 levels",
    "not utf-8": "not UTF-8 text",
    "huge": "larger than 1 MiB",
    "list of numbers": "not a JSON object",
}


@pytest.mark.parametrize("how", list(MANIFEST_DAMAGE))
def test_a_damaged_manifest_is_marked_damaged_with_its_reason(tmp_path, how):
    good = write_run(tmp_path, "2026-09", "r-good", started="2026-10-01T06:00:00+00:00")
    bad = write_run(tmp_path, "2026-10", "r-bad", started="2026-11-01T06:00:00+00:00")
    damage(bad, "manifest.json", how)
    page = _in_time(build_index, tmp_path).read_text()
    (row,) = [r for r in rows(page) if "r-bad" in r]
    assert f"manifest.json: {MANIFEST_DAMAGE[how]}" in row and "tag damaged" in row
    assert f"{good.name}/report.html" in page  # the rest of the history is intact
    entries = {e.folder.name: e for e in scan_runs(tmp_path)}
    assert entries["r-bad"].state == "damaged" and entries["r-good"].state == "completed"
    # the next period's trend skips it, with a note, and uses the good one
    (good / "findings.json").write_text("[]")
    trend = _in_time(trend_for, tmp_path, parse_period("2026-11"), pd.DataFrame())
    assert trend["previous"] is None  # the good run is of 2026-09: not the previous period
    assert trend["skipped"] == [
        f"run r-bad of 2026-10 skipped: damaged ({entries['r-bad'].problem})"
    ]


def test_a_folder_named_with_no_such_date_is_listed_without_a_time(tmp_path):
    bad = tmp_path / "2026-10" / "20261399T999999Z-abcdef"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_text("{")
    (row,) = rows(build_index(tmp_path).read_text())
    assert "not recorded" in row and "tag damaged" in row


def test_a_run_folder_that_is_a_link_is_damaged_and_not_followed(tmp_path):
    elsewhere = write_run(tmp_path / "elsewhere", "2026-10", "r-real")
    (tmp_path / "2026-10").mkdir()
    os.symlink(elsewhere, tmp_path / "2026-10" / "r-link")
    page = build_index(tmp_path).read_text()
    assert 'damaged</span> <span class="cause">the run folder is a link (not followed)' in page
    assert "r-real" not in page


def test_a_huge_file_is_refused_without_being_read(tmp_path):
    path = tmp_path / "findings.json"
    with open(path, "wb") as f:
        f.truncate(FINDINGS_LIMIT + 1)
    with pytest.raises(ValueError, match="larger than 16 MiB"):
        read_history_json(path, FINDINGS_LIMIT)
    path.write_text(json.dumps(["x" * 100]))  # under the limit's size, over a small one
    with pytest.raises(ValueError, match="larger than 50 bytes"):
        read_history_json(path, 50)


def test_a_device_is_refused_without_being_read(tmp_path):
    with pytest.raises(ValueError, match="not a regular file"):
        read_history_json(Path("/dev/zero"), MANIFEST_LIMIT)


def test_nesting_is_bounded_at_64_levels(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("[" * 64 + "]" * 64)
    assert read_history_json(p, MANIFEST_LIMIT) is not None
    p.write_text("[" * 65 + "]" * 65)
    with pytest.raises(ValueError, match="nested deeper than 64 levels"):
        read_history_json(p, MANIFEST_LIMIT)


@pytest.mark.slow
def test_a_report_completes_over_a_damaged_history(hostile, tmp_path, capsys):  # noqa: F811
    """A whole ``audit report`` whose previous period holds damaged runs newer than its one
    good run: it completes with its usual exit code (1: TKD-03 fails on this data), the index
    marks each damaged run, and the trend uses the good run and says which runs it skipped."""
    logs, secrets = hostile
    out = tmp_path / "out"
    kinds = {
        "link to /dev/zero": "manifest.json",
        "fifo": "manifest.json",
        "deep": "findings.json",
        "dict": "findings.json",
        "huge": "manifest.json",
        "not utf-8": "manifest.json",
        "list of numbers": "findings.json",
    }
    for n, (how, name) in enumerate(kinds.items()):
        folder = write_run(
            out,
            "2026-09",
            f"2026100{n + 1}T060000Z-dddddd",
            files=(),
            started=f"2026-10-0{n + 1}T06:00:00+00:00",
            period={
                "label": "2026-09",
                "start": "2026-09-01T00:00:00+00:00",
                "end": "2026-10-01T00:00:00+00:00",
            },
        )
        (folder / "findings.json").write_text("[]")
        damage(folder, name, how)
    september = {
        "label": "2026-09",
        "start": "2026-09-01T00:00:00+00:00",
        "end": "2026-10-01T00:00:00+00:00",
    }
    good = write_run(
        out,
        "2026-09",
        "20261001T050000Z-aaaaaa",
        started="2026-10-01T05:00:00+00:00",
        period=september,
        files=(),
    )
    (good / "findings.json").write_text("[]")  # older than every damaged run: the one used
    args = [
        "report",
        str(logs),
        "--secrets",
        str(secrets),
        "--period",
        "2026-10",
        "--out",
        str(out),
        "--quiet",
    ]
    code = _in_time(main, args)
    err = capsys.readouterr().err
    assert code == 1, err
    (run,) = (out / "2026-10").iterdir()
    trend = json.loads((run / "trend.json").read_text())
    assert trend["previous"]["run_id"] == good.name and len(trend["skipped"]) == len(kinds)
    assert all("skipped: damaged (" in note for note in trend["skipped"])
    page = (out / "index.html").read_text()
    damaged = [r for r in rows(page) if "tag damaged" in r]
    assert len(damaged) == len(kinds)
    assert f'href="2026-10/{run.name}/report.html"' in page
