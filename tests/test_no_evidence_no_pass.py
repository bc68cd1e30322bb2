"""No evidence, no pass (issue 42, point 3): an empty month, a listing of another month and a
failure now skipped are never green, from raw captures and from the evidence store alike."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from audit.cli import main
from audit.ingest.signatures import sign
from audit.report import views
from audit.report.rundir import open_run
from tests.builders import capture, write_jsonl, write_secrets

pytestmark = pytest.mark.slow

SECRET = "whsec_no_evidence_never_printed"
# Rotated in September: SIG-04 (the secrets file's age) passes in September and October, so
# the exit code depends on what the captures show.
FRESH = [{"secret": SECRET, "valid_from": "2026-09-15T00:00:00Z"}]


def _body(day: str, n: int = 1) -> str:
    return json.dumps(
        {
            "id": f"evt_00000000-0000-4000-8000-{n:012d}",
            "event": "incident.created",
            "timestamp": f"{day}T00:00:00Z",
            "data": {"incidentId": f"inc_{n}", "status": "closed", "timestamp": f"{day}T00:00:00Z"},
        },
        separators=(",", ":"),
    )


def _unix(day: str) -> str:
    import datetime as dt

    return str(int(dt.datetime.fromisoformat(f"{day}T00:00:00+00:00").timestamp()))


def _signed(day: str, n: int, *, secret: str = SECRET, status: int = 204) -> list[dict]:
    """``n`` deliveries of one event each, received on ``day`` (answered ``status``)."""
    out = []
    for i in range(n):
        body = _body(day, i + 1)
        out.append(
            capture(
                body,
                signature=sign(secret, _unix(day), body.encode()),
                timestamp=_unix(day),
                received_at=f"{day}T00:00:05Z",
                response_status=status,
                response_ms=3,
            )
        )
    return out


def _tiny_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("run_dir = None", metadata={"tags": ["parameters"]})],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, path)
    return path


def _report(tmp_path: Path, logs: Path, period: str, *extra: str, store: bool, capsys):
    """``audit report`` (a tiny notebook: the findings, the manifest and the header are what
    is checked); returns the exit code, stderr and the run folder."""
    secrets = tmp_path / "secrets.json"
    if not secrets.exists():
        write_secrets(secrets, {"wh_1": FRESH})
    nb = tmp_path / "tiny.ipynb"
    if not nb.exists():
        _tiny_notebook(nb)
    args = ["report", str(logs), "--secrets", str(secrets), "--period", period]
    args += ["--out", str(tmp_path / "r"), "--notebook", str(nb), "--quiet", *extra]
    if store:
        args += ["--store", str(tmp_path / "store")]
    code = main(args)
    err = capsys.readouterr().err
    run = max((tmp_path / "r" / period).glob("2*"), key=lambda p: p.name)
    return code, err, run


def _findings(run: Path) -> list[dict]:
    return json.loads((run / "findings.json").read_text())


@pytest.mark.parametrize("store", [False, True], ids=["raw", "store"])
def test_an_empty_month_exits_1_unless_quiet_periods_are_allowed(tmp_path, capsys, store):
    """September's deliveries only: October received nothing. Nothing is judged (no control
    of the captures passes), the run exits 1 by default with one line saying why, and 0 when
    quiet periods are accepted (--allow-quiet, or allow_quiet in --params)."""
    logs = write_jsonl(tmp_path / "log.jsonl", _signed("2026-09-20", 3))
    code, err, run = _report(tmp_path, logs, "2026-10", store=store, capsys=capsys)
    assert code == 1
    assert "audit: no delivery received in 2026-10: exit 1 (--allow-quiet" in err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["exit_status"] == 1 and manifest["coverage"]["deliveries"] == 0
    passed = {f["check_id"] for f in _findings(run) if f["status"] == "pass"}
    assert passed <= {"SIG-04"}, passed  # the secrets file's age: judged on the file itself
    assert not any(f["status"] == "fail" for f in _findings(run))  # exit 1 for the quiet month

    code, err, _ = _report(tmp_path, logs, "2026-10", "--allow-quiet", store=store, capsys=capsys)
    assert code == 0 and "no delivery received in 2026-10 (quiet period allowed)" in err

    params = tmp_path / "params.yaml"
    params.write_text("allow_quiet: true\n")
    code, _, run = _report(
        tmp_path, logs, "2026-10", "--params", str(params), store=store, capsys=capsys
    )
    assert code == 0
    assert json.loads((run / "manifest.json").read_text())["parameters"]["allow_quiet"] is True


def test_allow_quiet_must_be_true_or_false(tmp_path, capsys):
    logs = write_jsonl(tmp_path / "log.jsonl", _signed("2026-10-03", 1))
    params = tmp_path / "params.yaml"
    params.write_text("allow_quiet: yes please\n")
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": FRESH})
    args = ["report", str(logs), "--secrets", str(secrets), "--period", "2026-10"]
    code = main([*args, "--out", str(tmp_path / "r"), "--params", str(params), "--quiet"])
    err = capsys.readouterr().err
    assert code == 3 and err == "audit: error: allow_quiet must be true or false, not str\n"


@pytest.mark.parametrize("store", [False, True], ids=["raw", "store"])
def test_a_failure_now_skipped_is_not_judged_never_resolved(tmp_path, capsys, store):
    """September: forged requests accepted (SIG-01, critical, fails). October: no delivery, so
    SIG-01 is skipped; the trend and the index call it "not judged", never "resolved"."""
    forged = _signed("2026-09-20", 2, secret="whsec_someone_else")
    logs = write_jsonl(tmp_path / "log.jsonl", forged)
    code, _, september = _report(tmp_path, logs, "2026-09", store=store, capsys=capsys)
    failing = {
        (f["check_id"], f["resource"]) for f in _findings(september) if f["status"] == "fail"
    }
    assert ("SIG-01", "all requests") in failing and code == 1
    code, _, october = _report(tmp_path, logs, "2026-10", store=store, capsys=capsys)
    assert code == 1
    trend = json.loads((october / "trend.json").read_text())
    assert trend["resolved"] == []
    unjudged = {(r["check_id"], r["resource"]): r["status_now"] for r in trend["not_judged"]}
    assert set(unjudged) == failing
    assert unjudged[("SIG-01", "all requests")] == "skip"
    counts = json.loads((october / "manifest.json").read_text())["trend"]
    assert counts["resolved"] == 0 and counts["not_judged"] == len(failing)
    index = (tmp_path / "r" / "index.html").read_text()
    assert re.search(rf"NOT JUDGED {len(failing)}</span>", index)
    assert not re.search(r"RESOLVED [1-9]", index)
    page = str(views.trend(open_run(october)))
    assert "Resolved: passing now" in page and "Not judged now" in page


def _listing(path: Path, fetched: str, status: str = "success") -> Path:
    item = {
        "id": "wh_1",
        "clientId": "cl_1",
        "url": "https://hooks.example/x",
        "events": ["incident.created", "incident.status_changed", "incident.history_created",
                   "incident.takedown_updated", "incident.action_required"],
        "active": True,
        "createdAt": "2026-08-01T00:00:00Z",
        "lastDeliveryStatus": status,
    }  # fmt: skip
    path.write_text(json.dumps({"fetched_at": fetched, "base_url": "x", "response": [item]}))
    return path


LISTING_CONTROLS = {"SIG-05", "SUB-01", "SUB-02", "SUB-03", "SUB-04", "SUB-05"}


@pytest.mark.parametrize("store", [False, True], ids=["raw", "store"])
def test_a_listing_61_days_before_the_period_s_end_is_no_evidence(tmp_path, capsys, store):
    """October's deliveries, a listing fetched 2026-09-01 (61 days before the period's end):
    the listing controls skip, saying why, and the top of the report says no listing covers
    the period (the same rule: audit.findings.listing)."""
    logs = write_jsonl(tmp_path / "log.jsonl", _signed("2026-10-03", 2))
    snap = _listing(tmp_path / "webhooks.json", "2026-09-01T00:00:00Z")
    _, _, run = _report(
        tmp_path, logs, "2026-10", "--subscriptions", str(snap), store=store, capsys=capsys
    )
    listing = [f for f in _findings(run) if f["check_id"] in LISTING_CONTROLS]
    assert {f["check_id"] for f in listing} == LISTING_CONTROLS
    for f in listing:
        assert f["status"] == "skip", f
        assert "covers the period" in f["reason"], f
    for f in listing:  # each says which listing and why it does not count (SIG-05 too)
        assert f["reason"].startswith(
            "No listing snapshot covers the period: the newest, fetched 2026-09-01 00:00 "
            "UTC, is 61 d 0 h older than the period's end"
        ), f
    header = str(views.header(open_run(run)))
    assert "No listing snapshot covers the period" in header
    assert "Listing snapshot taken well before" not in header
    assert json.loads((run / "manifest.json").read_text())["snapshots"]["covers_period"] is False


def test_a_listing_in_the_period_or_just_before_a_short_one_is_judged(tmp_path, capsys):
    """The rule's other side: fetched in the period, or before a three-day period within 7
    days of its end, the listing is judged (SUB-05 passes on a listing that says success)."""
    logs = write_jsonl(tmp_path / "log.jsonl", _signed("2026-10-11", 2))
    for period, fetched in (
        ("2026-10", "2026-10-16T00:00:00Z"),
        ("2026-10-10..2026-10-12", "2026-10-08T00:00:00Z"),
    ):
        snap = _listing(tmp_path / f"webhooks-{fetched[:10]}.json", fetched)
        _, _, run = _report(
            tmp_path, logs, period, "--subscriptions", str(snap), store=False, capsys=capsys
        )
        status = {f["check_id"]: f["status"] for f in _findings(run)}
        assert status["SUB-05"] == "pass" and status["SIG-05"] == "pass", period
        header = str(views.header(open_run(run)))
        assert "No listing snapshot covers the period" not in header, period
        snap.unlink()
