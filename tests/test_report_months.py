"""Quiet and hostile months give complete reports; controls that cannot be judged are skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.cli import main
from audit.ingest.signatures import sign
from tests.builders import capture, write_jsonl, write_secrets
from tests.test_reports import hostile  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

SECRET = "whsec_quiet_month_never_printed"
# A secret rotated during the month: SIG-04 (secret age) passes, so the exit code depends only
# on what the month's records show.
FRESH = [{"secret": SECRET, "valid_from": "2026-10-02T00:00:00Z"}]
BODY = json.dumps(
    {
        "id": "evt_00000000-0000-4000-8000-000000000001",
        "event": "incident.created",
        "timestamp": "2026-10-03T00:00:00Z",
        "data": {"incidentId": "inc_1", "status": "new", "timestamp": "2026-10-03T00:00:00Z"},
    },
    separators=(",", ":"),
)
TS = "1790985600"  # 2026-10-03T00:00:00Z (date -d @1790985600 -u)


def _forged(n: int) -> list[dict]:
    return [
        capture(
            BODY,
            signature=sign("whsec_someone_else", TS, BODY.encode()),
            timestamp=TS,
            received_at="2026-10-03T00:00:05Z",
            response_status=401,
            response_ms=3,
        )
        for _ in range(n)
    ]


def _report(tmp_path: Path, records: list, *extra: str, capsys) -> tuple[int, dict, Path]:
    logs = write_jsonl(tmp_path / "log.jsonl", records)
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": FRESH})
    out = tmp_path / "r"
    args = ["report", str(logs), "--secrets", str(secrets), "--period", "2026-10"]
    code = main([*args, "--out", str(out), "--quiet", *extra])
    capsys.readouterr()
    run = next((out / "2026-10").iterdir())
    findings = {
        (f["check_id"], f["resource"]): f for f in json.loads((run / "findings.json").read_text())
    }
    return code, findings, run


def _statuses(findings: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for (check, _), f in findings.items():
        out.setdefault(check, set()).add(f["status"])
    return out


# Known by hand from docs/controls.md: with nothing valid received, every delivery, takedown and
# subscription control has nothing to judge; SIG-04 judges the secrets file (fresh: pass) and
# DLV-06 is info by definition.
NOTHING_JUDGED = {
    "CAP-01", "DLV-01", "DLV-02", "DLV-03", "DLV-04", "DLV-05", "SIG-02", "SIG-03", "SIG-05",
    "SUB-01", "SUB-02", "SUB-03", "SUB-04", "SUB-05", "TKD-01", "TKD-02", "TKD-03", "TKD-04",
}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "records", "sig01"),
    [
        ("zero records", [], "skip"),
        ("all forged, answered 401", _forged(3), "pass"),
    ],
)
def test_quiet_and_hostile_months_report_with_skips(tmp_path, capsys, case, records, sig01):
    code, findings, run = _report(tmp_path, records, capsys=capsys)
    page = (run / "report.html").read_text()
    assert "Webhook delivery compliance report" in page and "Appendix" in page, case
    st = _statuses(findings)
    assert st["SIG-01"] == {sig01}
    assert st["SIG-04"] == {"pass"} and st["DLV-06"] == {"info"}
    for check in NOTHING_JUDGED:
        assert st[check] == {"skip"}, (case, check)
        for (c, _), f in findings.items():
            if c == check:
                assert f["reason"], (case, check)  # a skip says why
    # nothing failed; a period with no request at all exits 1 (no evidence, no pass)
    quiet = int(case == "zero records")
    assert code == quiet
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["rendering"]["status"] == "ok" and manifest["exit_status"] == quiet


def test_a_log_with_no_readable_record_is_refused_and_nothing_is_written(tmp_path, capsys):
    """Every line unreadable: no capture log at all (a damaged file, a wrong path); the report
    is refused in one line naming it, exit 3, instead of a green report on nothing."""
    logs = write_jsonl(tmp_path / "log.jsonl", ["not json", '{"received_at": 1', "\x00\x01"])
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": FRESH})
    out = tmp_path / "r"
    args = ["report", str(logs), "--secrets", str(secrets), "--period", "2026-10"]
    code = main([*args, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 3
    assert err.startswith(f"audit: error: {logs}: holds no capture record (3 line(s), none ")
    assert err.count("\n") == 1
    assert not out.exists()


def test_forged_requests_accepted_fail_sig01_and_exit_1(tmp_path, capsys):
    records = _forged(2)
    records[0]["response_status"] = 204  # the receiver accepted a forgery
    code, findings, run = _report(tmp_path, records, capsys=capsys)
    assert _statuses(findings)["SIG-01"] == {"fail"}
    assert code == 1 and (run / "report.html").is_file()


def test_one_subscription_in_the_listing_without_deliveries(tmp_path, capsys):
    snap = tmp_path / "webhooks-1.json"
    listing = [
        {
            "id": "wh_1",
            "clientId": "cl_1",
            "url": "https://hooks.example/x",
            "events": ["incident.created"],
            "active": True,
            "createdAt": "2026-09-01T00:00:00Z",
            "lastDeliveryStatus": "success",
        }
    ]
    snap.write_text(
        json.dumps({"fetched_at": "2026-10-10T00:00:00Z", "base_url": "x", "response": listing})
    )
    code, findings, run = _report(tmp_path, [], "--subscriptions", str(snap), capsys=capsys)
    st = _statuses(findings)
    assert st["SUB-02"] == {"pass"} and st["SUB-04"] == {"pass"} and st["SUB-05"] == {"pass"}
    # It listens to incident.created only: the four other incident events reach nobody.
    assert st["SUB-03"] == {"fail"} and st["SUB-01"] == {"pass"}
    assert code == 1
    assert "wh_1" in (run / "report.html").read_text()


def test_a_listing_taken_after_as_of_is_not_shown_nor_judged(tmp_path, capsys):
    """October's report must not show a November listing (the issue's SUB-05 contradiction)."""
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    for when, status in (("2026-10-10T00:00:00Z", "failed"), ("2026-11-05T00:00:00Z", "success")):
        item = {"id": "wh_1", "url": "https://h.example/", "active": True,
                "lastDeliveryStatus": status, "createdAt": "2026-09-01T00:00:00Z"}  # fmt: skip
        (snaps / f"webhooks-{when[:10]}.json").write_text(
            json.dumps({"fetched_at": when, "base_url": "x", "response": [item]})
        )
    code, findings, run = _report(tmp_path, [], "--subscriptions", str(snaps), capsys=capsys)
    assert code == 1  # SUB-05 fails
    assert findings[("SUB-05", "wh_1")]["status"] == "fail"
    page = (run / "report.html").read_text()
    assert "listed at 2026-10-10 00:00 UTC" in page and "2026-11-05 00:00" not in page
    assert ">success<" not in page
    kinds = {
        i["source"]: i["kind"] for i in json.loads((run / "manifest.json").read_text())["inputs"]
    }
    assert kinds[str(snaps / "webhooks-2026-11-05.json")].startswith("snapshot fetched after as_of")


def test_valid_deliveries_without_snapshots_skip_the_subscription_controls(
    hostile,  # noqa: F811
    tmp_path,
    capsys,
):
    logs, secrets = hostile
    out = tmp_path / "r"
    args = ["report", str(logs), "--secrets", str(secrets), "--period", "2026-10"]
    code = main([*args, "--out", str(out), "--quiet"])
    capsys.readouterr()
    run = next((out / "2026-10").iterdir())
    findings = json.loads((run / "findings.json").read_text())
    subs = [f for f in findings if f["check_id"].startswith("SUB-") or f["check_id"] == "SIG-05"]
    assert len(subs) == 6
    assert all(f["status"] == "skip" and "snapshot" in f["reason"] for f in subs)
    assert code == 1  # TKD-03: two incidents wait on the client (judged: deliveries exist)
    page = (run / "report.html").read_text()
    assert "No listing snapshot fetched before as_of was given" in page


def test_the_progress_line_counts_the_records_read_from_before_the_period(tmp_path, capsys):
    """Records before the period are read for the incidents' history; the operator sees how
    many (memory grows with them)."""
    september = [{**r, "received_at": "2026-09-20T00:00:05Z"} for r in _forged(2)]
    logs = write_jsonl(tmp_path / "log.jsonl", [*september, *_forged(1)])
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": FRESH})
    args = ["report", str(logs), "--secrets", str(secrets), "--period", "2026-10"]
    main([*args, "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert (
        "audit: loaded 3 records from 1 files (0 valid, 0 unreadable; 2 received before the "
        "period, for the incidents' history)\n"
    ) in err
    main([*args, "--out", str(tmp_path / "r2"), "--period", "2026-09"])  # the last one counts
    err = capsys.readouterr().err
    assert "audit: loaded 2 records from 1 files (0 valid, 0 unreadable)\n" in err


def _signed(day: str, ts: str, n: int) -> list[dict]:
    body = BODY.replace("2026-10-03T00:00:00Z", f"{day}T00:00:00Z")
    return [
        capture(
            body,
            signature=sign(SECRET, ts, body.encode()),
            timestamp=ts,
            received_at=f"{day}T00:00:05Z",
            response_status=204,
            response_ms=3,
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize(("period", "unreadable"), [("2026-09", 0), ("2026-10", 1)])
def test_an_unreadable_line_counts_in_the_period_of_its_file_s_records(
    tmp_path, capsys, period, unreadable
):
    """A September report made after October's log exists: the October log's unreadable
    line belongs to October (its readable records' month), not to September too."""
    logs = tmp_path / "logs"
    logs.mkdir()
    write_jsonl(logs / "september.jsonl", _signed("2026-09-30", "1790726400", 2))
    write_jsonl(logs / "october.jsonl", [*_signed("2026-10-03", TS, 2), "{not json"])
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": SECRET}]})
    out = tmp_path / "r"
    args = ["report", str(logs), "--secrets", str(secrets), "--period", period, "--out", str(out)]
    main([*args, "--quiet"])  # as of the period's end: September's load stops before October
    capsys.readouterr()
    (run,) = (out / period).iterdir()
    counts = json.loads((run / "manifest.json").read_text())["coverage"]
    assert counts["deliveries"] == 2 + unreadable, counts
