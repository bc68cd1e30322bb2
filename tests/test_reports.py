"""The report pipeline: periods, papermill run, artefacts, manifest, index, exit codes, safety."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from audit.cli import main
from audit.errors import ParameterError
from audit.ingest.signatures import sign
from audit.report import figures, parse_period
from audit.report.rundir import open_run
from tests.builders import write_jsonl, write_secrets


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("2026-10", "2026-10-01", "2026-11-01"),
        ("2026-12", "2026-12-01", "2027-01-01"),
        ("2026-W44", "2026-10-26", "2026-11-02"),
        ("2026-W01", "2025-12-29", "2026-01-05"),  # ISO week 1 of 2026 starts in 2025
        ("2026-10-01..2026-10-15", "2026-10-01", "2026-10-16"),
        ("2026-10-15..2026-10-15", "2026-10-15", "2026-10-16"),
    ],
)
def test_periods(text, start, end):
    p = parse_period(text)
    assert (p.start.date().isoformat(), p.end.date().isoformat()) == (start, end)
    assert str(p.start.tz) == "UTC"


@pytest.mark.parametrize(
    ("text", "today", "label"),
    [
        ("previous-month", date(2026, 11, 22), "2026-10"),
        ("previous-month", date(2026, 1, 1), "2025-12"),
        ("previous-week", date(2026, 11, 22), "2026-W46"),  # a Sunday: the week before this one
        ("previous-week", date(2026, 1, 5), "2026-W01"),
    ],
)
def test_relative_periods(text, today, label):
    assert parse_period(text, today=today).label == label


@pytest.mark.parametrize("bad", ["2026-13", "2026-W54", "2026-10-15..2026-10-01", "October", ""])
def test_bad_periods(bad):
    with pytest.raises(ParameterError):
        parse_period(bad)


SECRET = "whsec_report_test_never_printed"


def _incident_body(i: int, event: str, status: str, ts: str, **data) -> str:
    payload = {
        "id": f"evt_00000000-0000-4000-8000-{i:012d}",
        "event": event,
        "timestamp": ts,
        "data": {
            "incidentId": f"inc_{i // 10}",
            "status": status,
            "timestamp": "2026-10-05T10:00:00Z",
        }
        | data,
    }
    return json.dumps(payload, separators=(",", ":"))


@pytest.fixture
def hostile(tmp_path):
    """Deliveries whose incident data is attacker-controlled: script, javascript:, formula."""
    bodies = [
        _incident_body(
            10,
            "incident.created",
            "approval_required",
            "2026-10-05T10:00:00Z",
            url="https://evil.example/<script>alert(1)</script>",
            domain="evil.example",
            subject='=HYPERLINK("http://x.example","click")',
            incidentClass="phishing",
        ),
        _incident_body(
            20,
            "incident.created",
            "action_required",
            "2026-10-06T10:00:00Z",
            url="javascript:alert(document.cookie)",
            incidentClass="scam",
        ),
    ]
    recs = []
    for body, when, ts in zip(
        bodies,
        ["2026-10-05T10:00:30Z", "2026-10-06T10:00:30Z"],
        ["1791194430", "1791280830"],
        strict=True,
    ):
        recs.append(
            {
                "received_at": when,
                "headers": {
                    "X-PhishFort-Signature": sign(SECRET, ts, body.encode()),
                    "X-PhishFort-Timestamp": ts,
                    "X-PhishFort-Delivery-Id": f"dlv_{ts}",
                },
                "body": body,
                "subscription_id": "wh_1",
                "response_status": 204,
                "response_ms": 20,
            }
        )
    logs = write_jsonl(tmp_path / "log.jsonl", recs)
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": SECRET}]})
    return logs, secrets


def _run(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _report_args(logs, secrets, out, *extra):
    return [
        "report",
        str(logs),
        "--secrets",
        str(secrets),
        "--period",
        "2026-10",
        "--out",
        str(out),
        *extra,
    ]


@pytest.mark.slow
def test_report_writes_artefacts_and_reruns_side_by_side(hostile, tmp_path, capsys):
    logs, secrets = hostile
    out = tmp_path / "reports"
    code, printed, _ = _run(_report_args(logs, secrets, out), capsys)
    assert code == 1  # two incidents wait on the client past 24 h at as_of (TKD-03 fails)
    runs = sorted((out / "2026-10").iterdir())
    assert len(runs) == 1
    run = runs[0]
    for name in ("report.ipynb", "report.html", "findings.csv", "findings.json", "manifest.json"):
        assert (run / name).is_file(), name
    assert (run / "tables" / "incidents.csv").is_file()
    assert not (run / ".figures").exists()  # the figures drawn ahead are not left behind
    html = (run / "report.html").read_text()
    drawn = open_run(run)  # no .figures folder now: each figure is drawn here
    for name in figures.FIGURES:  # the kernel's and the pipeline's drawings are these
        picture = re.search(r"data:image/png;base64,[^\"]+", str(getattr(figures, name)(drawn)))
        assert picture is None or picture.group() in html, name
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["exit_status"] == 1 and manifest["period"]["label"] == "2026-10"
    by_source = {i["source"]: i for i in manifest["inputs"]}
    assert by_source[str(logs)]["sha256"] == hashlib.sha256(logs.read_bytes()).hexdigest()
    assert by_source[str(logs)]["records"] == 2
    # Whole numbers (not 2.0), and none for a file that is not a capture log.
    assert type(by_source[str(logs)]["records"]) is int
    assert type(by_source[str(logs)]["unreadable"]) is int
    assert by_source[str(secrets.resolve())]["records"] is None
    assert by_source[str(secrets.resolve())]["size"] == secrets.stat().st_size
    assert f"report:    {run / 'report.html'}" in printed
    code2, _, _ = _run(_report_args(logs, secrets, out), capsys)
    assert code2 == 1
    runs = sorted(p for p in (out / "2026-10").iterdir())
    assert len(runs) == 2
    index = (out / "index.html").read_text()
    for r in runs:
        assert f"2026-10/{r.name}/report.html" in index
    code3, printed3, _ = _run(_report_args(logs, secrets, out, "--skip-if-exists"), capsys)
    assert code3 == 0 and "exists" in printed3
    assert len(list((out / "2026-10").iterdir())) == 2


@pytest.mark.slow
def test_fail_on_threshold_changes_the_exit_code(hostile, tmp_path, capsys):
    logs, secrets = hostile
    code, _, _ = _run(_report_args(logs, secrets, tmp_path / "r", "--fail-on", "critical"), capsys)
    findings = json.loads(next((tmp_path / "r" / "2026-10").glob("*/findings.json")).read_text())
    critical_fails = [f for f in findings if f["status"] == "fail" and f["severity"] == "critical"]
    assert code == (1 if critical_fails else 0)


@pytest.mark.slow
def test_outputs_are_inert_and_hold_no_secret(hostile, tmp_path, capsys):
    logs, secrets = hostile
    out = tmp_path / "reports"
    _run(_report_args(logs, secrets, out), capsys)
    run = next((out / "2026-10").iterdir())
    page = (run / "report.html").read_text()
    assert "<script>alert" not in page
    assert "javascript:alert" not in page
    assert "hxxps://evil[.]example/&lt;script&gt;" in page
    assert "javascript[:]alert" in page
    assert "<script" not in page.lower() or "src=" not in page.lower().split("<script", 1)[1][:200]
    assert 'src="http' not in page and 'href="http' not in page  # opens offline
    rows = list(csv.DictReader((run / "tables" / "incidents.csv").open()))
    subjects = [r["subject"] for r in rows if r["subject"]]
    assert subjects and all(s.startswith("'=") for s in subjects)
    for path in run.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    assert SECRET not in (out / "index.html").read_text()


def test_bad_input_is_exit_3_with_one_line(tmp_path, capsys):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    code, _, err = _run(_report_args(tmp_path / "nope.jsonl", secrets, tmp_path / "r"), capsys)
    assert code == 3 and len(err.strip().splitlines()) == 1
    code, _, err = _run(
        ["report", str(secrets), "--secrets", str(secrets), "--period", "2026-13"], capsys
    )
    assert code == 3 and "month must be" in err


@pytest.mark.slow
def test_demo_report_plants_failing_findings(tmp_path, capsys):
    code, printed, _ = _run(["demo", "--out", str(tmp_path)], capsys)
    assert code == 0
    html_path = Path(printed.split("report:    ")[1].split()[0])
    assert html_path.is_file() and f"index:     {tmp_path / 'reports' / 'index.html'}" in printed
    findings = pd.read_json(html_path.parent / "findings.json")
    failing = set(findings.loc[findings["status"] == "fail", "check_id"])
    assert {"SIG-01", "SIG-02", "DLV-01", "DLV-03", "TKD-03"} <= failing
    page = html_path.read_text()
    for check in ("SIG-01", "SIG-02", "DLV-01", "DLV-03", "TKD-03"):
        assert check in page


@pytest.mark.slow
def test_params_file_reaches_the_notebook_and_unknown_keys_are_refused(hostile, tmp_path, capsys):
    logs, secrets = hostile
    params = tmp_path / "params.yaml"
    params.write_text("as_of: 2026-10-06T12:00:00Z\nthresholds:\n  max_client_wait_h: 10000\n")
    out = tmp_path / "r"
    code, _, _ = _run(_report_args(logs, secrets, out, "--params", str(params)), capsys)
    run = next((out / "2026-10").iterdir())
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["parameters"]["thresholds"] == {"max_client_wait_h": 10000}
    findings = {f["check_id"]: f for f in json.loads((run / "findings.json").read_text())}
    assert findings["TKD-03"]["status"] == "pass"  # 10,000 h allowed: nobody waited that long
    params.write_text("colour: blue\n")
    code, _, err = _run(
        _report_args(logs, secrets, tmp_path / "r2", "--params", str(params)), capsys
    )
    assert code == 3 and "unknown report parameter(s): colour" in err


@pytest.mark.parametrize("bad", ["0000-01", "9999-12", "9999-12-30..9999-12-31", "2262-W52"])
def test_periods_outside_the_supported_years_are_parameter_errors(bad):
    with pytest.raises(ParameterError):
        parse_period(bad)


@pytest.mark.slow
def test_skip_if_exists_ignores_runs_without_a_report(hostile, tmp_path):
    from audit.report import run_report

    logs, secrets = hostile
    out = tmp_path / "r"
    broken = Path(__file__).parent / "data" / "broken_report.ipynb"
    common = dict(secrets_path=secrets, period=parse_period("2026-10"), out_dir=out)
    first = run_report([logs], notebook=broken, **common)
    assert first.exit_code == 1 and first.rendering_failed  # findings stand, no report
    again = run_report([logs], skip_if_exists=True, **common)
    assert not again.skipped and again.exit_code == 1 and again.html.is_file()
    assert run_report([logs], skip_if_exists=True, **common).skipped


@pytest.mark.slow
def test_manifest_lists_snapshot_files_given_by_glob(hostile, tmp_path, capsys):
    logs, secrets = hostile
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    body = {"fetched_at": "2026-10-20T00:00:00Z", "base_url": "https://api.example", "response": []}
    (snaps / "webhooks-1.json").write_text(json.dumps(body))
    out = tmp_path / "r"
    args = _report_args(logs, secrets, out, "--subscriptions", str(snaps / "webhooks-*.json"))
    _run(args, capsys)
    manifest = json.loads(next((out / "2026-10").glob("*/manifest.json")).read_text())
    kinds = {i["source"]: i for i in manifest["inputs"]}
    snap = kinds[str(snaps / "webhooks-1.json")]
    assert snap["sha256"] == hashlib.sha256((snaps / "webhooks-1.json").read_bytes()).hexdigest()
    assert kinds[str(secrets.resolve())]["sha256"] == ""  # the secrets file is not hashed
