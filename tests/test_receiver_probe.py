"""The conformance probe against the reference receiver and deliberately broken ones (sockets)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from audit.analysis.analyze import analyze
from audit.cli import main
from audit.errors import InputError, UnreachableError
from audit.findings import FINDING_COLUMNS, run_controls
from audit.ingest.load import load_captures
from audit.ingest.secrets import read_secrets
from audit.ingest.signatures import verify
from audit.receiver import CHECKS, CheckResult, ProbeResult, receiver_app, run_probe
from audit.receiver.probe_plan import UNICODE_NOTE, ProbeContext, prepare
from audit.receiver.probe_report import findings_frame, junit_xml, probe_catalogue, probe_html
from tests.receiver_servers import serve_asgi

OLD = "whsec_previous_secret_value_1"
CURRENT = "whsec_current_secret_value_22"
SUB = "wh_main"
#: Seconds after which a test's server gives up: a guard against hangs, never a bound on speed.
HANG_S = 120
ALL_IDS = [c.id for c in CHECKS]


@pytest.fixture
def secrets_file(tmp_path: Path) -> Path:
    p = tmp_path / "secrets.json"
    p.write_text(
        json.dumps(
            {
                SUB: [
                    {"secret": OLD, "valid_from": "2026-01-01T00:00:00Z"},
                    {"secret": CURRENT, "valid_from": "2026-06-01T00:00:00Z"},
                ],
                "wh_other": [{"secret": "whsec_other"}],
            }
        )
    )
    p.chmod(0o600)
    return p


# -- receivers: the reference one, and broken ones as raw ASGI apps


def receiver(decide):
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        status = await decide(body, headers)
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    return app


def _check(body, h, *, tolerance=300, secrets=(CURRENT,)):
    v = verify(
        body,
        h.get("x-phishfort-signature"),
        h.get("x-phishfort-timestamp"),
        list(secrets),
        now=time.time(),
        tolerance_s=tolerance,
    )
    return 204 if v.ok else 401


async def accepts_stale(body, h):
    return _check(body, h, tolerance=10**9)


async def accepts_missing_signature(body, h):
    return 204 if "x-phishfort-signature" not in h else _check(body, h)


async def reserialises_json(body, h):
    # What a JSON body parser followed by JSON.stringify does before verifying.
    again = json.dumps(json.loads(body), separators=(",", ":"), ensure_ascii=False)
    return _check(again.encode("utf-8"), h)


async def answers_after_6_s(body, h):
    await asyncio.sleep(6)
    return _check(body, h)


async def fails_on_non_ascii(body, h):
    try:
        body.decode("ascii")
    except UnicodeDecodeError:
        return 500  # what an unhandled exception in the handler becomes
    return _check(body, h)


async def accepts_previous_secret(body, h):
    return _check(body, h, secrets=(CURRENT, OLD))


async def accepts_everything(body, h):
    return 200


def _failed(result: ProbeResult) -> set[str]:
    return {c.id for c in result.checks if c.passed is False}


@pytest.mark.filterwarnings("ignore:fewer than 10 observations")
def test_reference_receiver_passes_every_check_and_its_captures_verify(tmp_path, secrets_file):
    folder = tmp_path / "captures"
    with serve_asgi(receiver_app(secrets_file, folder, subscription_id=SUB)) as url:
        result = run_probe(f"{url}/hooks/phishfort", secrets_file, SUB)
    assert [c.id for c in result.checks] == ALL_IDS
    assert [c.id for c in result.checks if c.passed is not True] == []
    assert result.exit_code == 0
    # One request per check (no retries), each captured with the verdict it was answered by.
    d = load_captures([folder], secrets=read_secrets(secrets_file)).deliveries
    assert len(d) == len(CHECKS) - 1
    by_delivery = {c.delivery_id: c.id for c in result.checks}
    verdicts = dict(zip(d["delivery_id"].map(by_delivery), d["verdict"], strict=True))
    assert verdicts == {
        "valid_accepted": "valid",
        "uppercase_hex_accepted": "valid",
        "unicode_body_accepted": "valid",
        "boundary_accepted": "valid",
        "redelivery_accepted": "valid",
        "missing_signature_rejected": "missing_signature",
        "bad_prefix_rejected": "malformed_signature",
        "short_hex_rejected": "malformed_signature",
        "non_integer_timestamp_rejected": "malformed_timestamp",
        "stale_past_rejected": "stale_timestamp",
        "stale_future_rejected": "stale_timestamp",
        "wrong_secret_rejected": "signature_mismatch",
        "old_secret_rejected": "rotated_secret",
        "tampered_body_rejected": "signature_mismatch",
        "reserialised_body_rejected": "signature_mismatch",
    }
    assert ((d["verdict"] == "valid") == (d["response_status"] == 204)).all()
    assert set(d.loc[d["verdict"] != "valid", "response_status"]) == {401}
    assert set(d["subscription_id"]) == {SUB}
    assert all(e == "webhook.test" for e in d["event"])
    assert all(i.startswith("test_") for i in d["incident_id"])
    # The redelivery repeats the valid request's event; every other request is its own event.
    valid_event = d.loc[d["delivery_id"] == result.checks[0].delivery_id, "event_id"].item()
    assert (d["event_id"] == valid_event).sum() == 2 and d["event_id"].nunique() == len(d) - 1
    agents = {dict(h)["user-agent"] for h in _headers(folder)}
    assert len(agents) == 1 and agents.pop().startswith("audit-probe/0.1.0 (webhook receiver")
    # The analyses and the report's controls read the folder too: the receiver's answers
    # satisfy SIG-01 (every non-valid request got 401) and SIG-02 (no valid one was refused).
    a = analyze([folder], secrets_file)
    day = a.as_of.floor("D")
    findings = run_controls(
        a, period_start=day, period_end=day + pd.Timedelta(days=1), only=["SIG-01", "SIG-02"]
    )
    assert list(findings["status"]) == ["pass", "pass"]


def _headers(folder: Path) -> list[list]:
    return [json.loads(x)["headers"] for f in folder.glob("*.jsonl") for x in f.open()]


@pytest.mark.parametrize(
    ("decide", "caught_by"),
    [
        (accepts_stale, {"stale_past_rejected", "stale_future_rejected"}),
        (accepts_missing_signature, {"missing_signature_rejected"}),
        (reserialises_json, {"reserialised_body_rejected"}),
        (fails_on_non_ascii, {"unicode_body_accepted"}),
        (accepts_previous_secret, {"old_secret_rejected"}),
        (accepts_everything, {c.id for c in CHECKS if c.expected == "401"}),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_broken_receiver_is_caught_by_the_right_check(decide, caught_by, secrets_file):
    with serve_asgi(receiver(decide)) as url:
        result = run_probe(url, secrets_file, SUB)
    assert _failed(result) == caught_by
    assert result.exit_code == 1


@pytest.mark.slow
def test_receiver_answering_after_6_s_fails_the_timeout(secrets_file):
    requests = []

    async def counted(body, h):
        requests.append(body)
        return await answers_after_6_s(body, h)

    with serve_asgi(receiver(counted)) as url:
        result = run_probe(url, secrets_file, SUB, only=["valid_accepted", "within_timeout"])
    assert _failed(result) == {"valid_accepted", "within_timeout"}
    valid = result.checks[0]
    # Cut by the timeout, not answered (the answer would carry a status): no bound on how long
    # a busy machine took to see it.
    assert valid.status is None and valid.detail == "no answer within 5 s"
    assert valid.ms >= 5000
    assert len(requests) <= 1  # one request, no retry


def test_old_secret_check_is_skipped_without_a_previous_secret(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({SUB: [{"secret": CURRENT}]}))
    with serve_asgi(receiver_app(p, tmp_path / "c")) as url:
        result = run_probe(url, p, SUB, only=["old_secret_rejected", "valid_accepted"])
    assert [(c.id, c.passed) for c in result.checks] == [
        ("valid_accepted", True),
        ("old_secret_rejected", None),
    ]
    assert result.exit_code == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_receiver_raises(secrets_file):
    with pytest.raises(UnreachableError, match=r"cannot reach the receiver.*refused"):
        run_probe(f"http://127.0.0.1:{_free_port()}/", secrets_file, SUB)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://hooks.example/", "plain HTTP"),
        ("https://user:pw@hooks.example/", "credentials"),
        ("ftp://hooks.example/", "https://"),
        ("", "no receiver URL"),
    ],
)
def test_bad_urls_are_refused_before_sending(url, message, secrets_file):
    with pytest.raises(InputError, match=message):
        run_probe(url, secrets_file, SUB)


# -- the requests themselves, against known answers


def test_prepared_requests_break_exactly_one_rule():
    now = 1_790_000_000
    ctx = ProbeContext(secret=CURRENT.encode(), previous=OLD.encode())
    prepared = {c.id: prepare(c, ctx, now) for c in CHECKS}
    expected = {
        "valid_accepted": "valid",
        "uppercase_hex_accepted": "valid",
        "unicode_body_accepted": "valid",
        "boundary_accepted": "valid",
        "redelivery_accepted": "valid",
        "missing_signature_rejected": "missing_signature",
        "bad_prefix_rejected": "malformed_signature",
        "short_hex_rejected": "malformed_signature",
        "non_integer_timestamp_rejected": "malformed_timestamp",
        "stale_past_rejected": "stale_timestamp",
        "stale_future_rejected": "stale_timestamp",
        "wrong_secret_rejected": "signature_mismatch",
        "old_secret_rejected": "signature_mismatch",
        "tampered_body_rejected": "signature_mismatch",
        "reserialised_body_rejected": "signature_mismatch",
    }
    for cid, verdict in expected.items():
        p = prepared[cid]
        h = dict(p.headers)
        v = verify(
            p.body,
            h.get("X-PhishFort-Signature"),
            h.get("X-PhishFort-Timestamp"),
            [CURRENT],
            now=now,
        )
        assert v.verdict == verdict, cid
        env = json.loads(p.body)
        assert env["event"] == "webhook.test" == h["X-PhishFort-Event"]
        assert env["data"]["incidentId"].startswith("test_") and env["id"].startswith("evt_")
    assert prepared["within_timeout"].skip is not None
    # The stale ones are correctly signed: only the window rejects them.
    for cid in ("stale_past_rejected", "stale_future_rejected"):
        h = dict(prepared[cid].headers)
        assert abs(int(h["X-PhishFort-Timestamp"]) - now) == 301
        assert (
            verify(
                prepared[cid].body,
                h["X-PhishFort-Signature"],
                h["X-PhishFort-Timestamp"],
                CURRENT,
                now=int(h["X-PhishFort-Timestamp"]),
            ).verdict
            == "valid"
        )
    h = dict(prepared["boundary_accepted"].headers)
    assert now - int(h["X-PhishFort-Timestamp"]) == 299
    # 1.7e9 style, numerically the current time.
    ts = dict(prepared["non_integer_timestamp_rejected"].headers)["X-PhishFort-Timestamp"]
    assert "e9" in ts and float(ts) == now
    # The previous secret is what signs the old-secret request.
    h = dict(prepared["old_secret_rejected"].headers)
    assert (
        verify(
            prepared["old_secret_rejected"].body,
            h["X-PhishFort-Signature"],
            h["X-PhishFort-Timestamp"],
            [OLD],
            now=now,
        ).verdict
        == "valid"
    )
    # Tampered: one byte differs from a body that verifies; reserialised: same JSON.
    tampered = prepared["tampered_body_rejected"].body
    assert b"incidentId" in tampered and json.loads(tampered)
    reser = prepared["reserialised_body_rejected"].body
    assert b"\n" in reser and json.loads(reser)["data"]["incidentId"].startswith("test_")
    assert UNICODE_NOTE.encode() in prepared["unicode_body_accepted"].body
    assert "🎣" in UNICODE_NOTE and not UNICODE_NOTE.isascii()
    # Redelivery: the valid request's bytes again, a new delivery id.
    assert prepared["redelivery_accepted"].body == prepared["valid_accepted"].body
    ids = [p.delivery_id for p in prepared.values() if p.delivery_id]
    assert len(set(ids)) == len(ids) == len(CHECKS) - 1


def test_valid_signature_matches_openssl():
    ctx = ProbeContext(secret=CURRENT.encode(), previous=None)
    p = prepare(CHECKS[0], ctx, 1_790_000_000)
    h = dict(p.headers)
    message = h["X-PhishFort-Timestamp"].encode() + b"." + p.body
    out = subprocess.run(
        ["openssl", "dgst", "-sha256", "-hmac", CURRENT],
        input=message,
        capture_output=True,
        check=True,
    ).stdout.decode()
    assert h["X-PhishFort-Signature"] == "sha256=" + out.split("= ")[-1].strip()


# -- outputs


def _result(**changes) -> ProbeResult:
    checks = [
        CheckResult("valid_accepted", True, "2xx", 204, 12.5, "answered 204", "evt_1", "d1"),
        CheckResult("missing_signature_rejected", False, "401", 200, 3.0, "accepted (200)"),
        CheckResult("old_secret_rejected", None, "401", None, None, "no previous secret"),
        CheckResult("within_timeout", True, "each answer within 5 s", None, 12.5, "all fine"),
    ]
    base = {
        "target": "http://127.0.0.1:1/hook",
        "subscription_id": SUB,
        "started_at": datetime(2026, 11, 1, 12, 0, tzinfo=UTC),
        "finished_at": datetime(2026, 11, 1, 12, 0, 1, tzinfo=UTC),
        "timeout_s": 5.0,
        "checks": checks,
    }
    return ProbeResult(**(base | changes))


def test_findings_have_the_report_shape_and_the_prb_catalogue():
    f = findings_frame(_result())
    assert tuple(f.columns) == FINDING_COLUMNS
    assert list(f["check_id"]) == ["PRB-01", "PRB-06", "PRB-13", "PRB-16"]
    assert list(f["status"]) == ["pass", "fail", "skip", "pass"]
    assert list(f["severity"]) == ["high", "critical", "high", "high"]
    assert f["finding_uid"].str.fullmatch("[0-9a-f]{16}").all() and f["finding_uid"].is_unique
    assert json.loads(f["evidence"].iloc[0])["delivery_id"] == "d1"
    assert len(probe_catalogue()) == len(CHECKS)


def test_junit_xml_counts_failures_and_skips():
    root = ET.fromstring(junit_xml(_result()))
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["missing_signature_rejected"].find("failure") is not None
    assert cases["old_secret_rejected"].find("skipped") is not None
    assert cases["valid_accepted"].find("failure") is None
    assert cases["valid_accepted"].get("time") == "0.013"


def test_html_and_xml_escape_hostile_text():
    hostile = "<script>alert('x')</script>\x07&"
    r = _result(
        target="http://127.0.0.1/<img src=x onerror=alert(1)>",
        checks=[CheckResult("valid_accepted", False, "2xx", 500, 1.0, hostile)],
    )
    page = probe_html(r)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;" in page and "&lt;img src=x" in page
    root = ET.fromstring(junit_xml(r))  # parses: the control character was replaced
    assert "<script>" in root.find("testsuite/testcase/failure").get("message")


def _checks_in_order(page: str) -> list[str]:
    table = page.split("<h2>Every check</h2>", 1)[1]
    return re.findall(r"<td[^>]*><code>([a-z_]+)</code></td>", table)


def test_the_probe_page_puts_failures_first_most_severe_first_with_a_summary():
    checks = [
        CheckResult("valid_accepted", True, "2xx", 204, 12.5, "answered 204", "evt_1", "d1"),
        CheckResult("uppercase_hex_accepted", False, "2xx", 401, 4.0, "answered 401", "e2", "d2"),
        CheckResult("missing_signature_rejected", False, "401", 200, 3.0, "accepted (200)"),
        CheckResult("old_secret_rejected", None, "401", None, None, "no previous secret"),
    ]
    page = probe_html(_result(checks=checks))
    # PRB-06 is critical, PRB-02 low: failures first, the critical one first; then the skip
    assert _checks_in_order(page) == [
        "missing_signature_rejected",
        "uppercase_hex_accepted",
        "old_secret_rejected",
        "valid_accepted",
    ]
    assert page.index("<h2>Failed checks</h2>") < page.index("<h2>Every check</h2>")
    cards = page.split("<h2>Failed checks</h2>", 1)[1].split("<h2>Every check</h2>", 1)[0]
    assert cards.index("PRB-06") < cards.index("PRB-02") and "PRB-01" not in cards
    assert '<section class="verdict fail">' in page and "2 of 4 checks failed" in page
    summary = page.split("Failing by severity", 1)[1].split("</p>", 1)[0]
    summary = re.sub(r'<span class="sym"[^>]*>[^<]*</span> ?', "", summary)  # the symbols
    assert re.findall(r'<span class="badge ([a-z ]+)">([A-Z]+ [0-9]+)</span>', summary) == [
        ("critical", "CRITICAL 1"),
        ("high zero", "HIGH 0"),  # grey
        ("medium zero", "MEDIUM 0"),
        ("low", "LOW 1"),
    ]


def test_the_probe_page_says_what_was_sent_and_what_came_back_in_human_units():
    r = _result(
        started_at=datetime(2026, 11, 1, 12, 0, 3, 123456, tzinfo=UTC),
        finished_at=datetime(2026, 11, 1, 12, 0, 4, 654321, tzinfo=UTC),
    )
    page = probe_html(r)
    assert "2026-11-01 12:00:03 UTC to 2026-11-01 12:00:04 UTC (1.5 s)" in page
    assert "123456" not in page and "+00:00" not in page
    card = page.split("<h2>Failed checks</h2>", 1)[1].split("<h2>Every check</h2>", 1)[0]
    assert "<code>POST http://127.0.0.1:1/hook</code>: no signature header" in card
    assert "HTTP 200 in 3 ms" in card and "accepted (200)" in card
    assert "Reject any request without the signature header" in card  # the remediation
    assert "HTTP 204 in 12 ms" in page and 'delivery <span class="uid">d1</span>' in page
    assert "nothing sent (skipped)" in page and "slowest answer 12 ms" in page


def test_the_probe_page_uses_the_reports_stylesheet_and_loads_nothing():
    from audit.report.markup import CSS

    page = probe_html(_result())
    assert CSS in page
    assert "<script" not in page and "src=" not in page and "<link" not in page
    assert "default-src 'none'" in page


def test_cli_probe_writes_outputs_without_secrets(tmp_path, secrets_file, capsys):
    out = tmp_path / "probe-out"
    with serve_asgi(receiver_app(secrets_file, tmp_path / "c", subscription_id=SUB)) as url:
        code = main(
            ["probe", url, "--secrets", str(secrets_file), "--subscription", SUB, "--out", str(out)]
        )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "passed 16, failed 0, skipped 0" in printed.out
    names = sorted(p.name for p in out.iterdir())
    assert names == ["findings.csv", "findings.json", "junit.xml", "probe.html", "probe.json"]
    doc = json.loads((out / "probe.json").read_text())
    assert doc["target"] == url and len(doc["checks"]) == 16
    assert set(doc["checks"][0]) >= {"id", "passed", "expected", "status", "ms", "detail"}
    assert [c["passed"] for c in doc["checks"]] == [True] * 16
    findings = json.loads((out / "findings.json").read_text())
    assert [x["check_id"] for x in findings] == [f"PRB-{i:02d}" for i in range(1, 17)]
    for text in [printed.out, printed.err, *(p.read_text() for p in out.iterdir())]:
        assert CURRENT not in text
        assert OLD not in text
        assert not re.search("[0-9a-fA-F]{63}", text)  # nor a signature


def test_cli_probe_exit_codes(tmp_path, secrets_file, capsys):
    args = ["--secrets", str(secrets_file), "--subscription", SUB]
    with serve_asgi(receiver(accepts_missing_signature)) as url:
        assert main(["probe", url, *args, "--only", "missing_signature_rejected"]) == 1
    assert "FAIL" in capsys.readouterr().out
    assert main(["probe", f"http://127.0.0.1:{_free_port()}/", *args]) == 3
    assert "cannot reach the receiver" in capsys.readouterr().err
    assert main(["probe", "http://hooks.example/", *args]) == 3
    assert main(["probe", "http://127.0.0.1:1/", *args, "--only", "nope"]) == 3
    assert "unknown check(s) nope" in capsys.readouterr().err
    # within_timeout alone would judge nothing (and exit 0 on a skip): a usage error
    assert main(["probe", "http://127.0.0.1:1/", *args, "--only", "within_timeout"]) == 3
    assert "within_timeout judges the answers of the other checks" in capsys.readouterr().err
    assert main(["probe", "http://127.0.0.1:1/", *args, "--only", " within_timeout ,"]) == 3
    assert main(["probe", "http://127.0.0.1:1/", *args[:2], "--subscription", "wh_x"]) == 3
    assert "no secret for subscription 'wh_x'" in capsys.readouterr().err


def test_cli_dry_run_sends_nothing(tmp_path, secrets_file, capsys):
    folder = tmp_path / "c"
    with serve_asgi(receiver_app(secrets_file, folder, subscription_id=SUB)) as url:
        code = main(
            [
                "probe",
                url,
                "--secrets",
                str(secrets_file),
                "--subscription",
                "wh_other",
                "--dry-run",
            ]
        )
    out = capsys.readouterr().out
    assert code == 0 and not folder.exists()
    assert "nothing is sent" in out and len(out.splitlines()) == 1 + len(CHECKS)
    assert "skipped: the subscription has no previous secret" in out


@pytest.mark.slow
def test_cli_receive_serves_the_reference_receiver(tmp_path, secrets_file):
    folder = tmp_path / "captures"
    cmd = [
        sys.executable,
        "-m",
        "audit.cli",
        "receive",
        "--port",
        "0",
        "--secrets",
        str(secrets_file),
        "--subscription",
        SUB,
        "--out",
        str(folder),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("receiving on http://127.0.0.1:"), proc.stderr.read()
        url = first.split()[2]
        result = run_probe(url, secrets_file, SUB, only=["valid_accepted", "wrong_secret_rejected"])
        assert [c.passed for c in result.checks] == [True, True]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    assert proc.returncode == 0
    d = load_captures([folder], secrets=read_secrets(secrets_file)).deliveries
    assert list(d["verdict"]) == ["valid", "signature_mismatch"]
    assert list(d["response_status"]) == [204, 401]


def test_cli_receive_refuses_an_ambiguous_secrets_file(tmp_path, secrets_file, capsys):
    code = main(["receive", "--port", "0", "--secrets", str(secrets_file), "--out", str(tmp_path)])
    assert code == 3
    assert "holds 2 subscriptions (wh_main, wh_other)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "module", ["capture_log", "probe_plan", "probe", "probe_report", "reference", "asgi"]
)
def test_doctests(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"audit.receiver.{module}")
    assert doctest.testmod(mod, optionflags=doctest.ELLIPSIS).failed == 0


async def crashes_on_stale(body, h):
    if _check(body, h) == 401 and "x-phishfort-signature" in h:
        ts = h.get("x-phishfort-timestamp", "")
        if ts.isdigit() and abs(int(ts) - time.time()) > 300:
            raise RuntimeError("handler crashed")  # uvicorn answers 500
    return _check(body, h)


def test_a_500_or_a_dropped_connection_fails_only_that_check(secrets_file):
    import httpx

    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers.get("x-phishfort-signature", "").startswith("sha256="):
            raise httpx.RemoteProtocolError("server closed the connection", request=request)
        return httpx.Response(204 if "x-phishfort-signature" in request.headers else 401)

    result = run_probe(
        "https://hooks.example/",
        secrets_file,
        SUB,
        only=["valid_accepted", "missing_signature_rejected", "within_timeout"],
        transport=httpx.MockTransport(handler),
        clock=lambda: 1790000000.0,
    )
    valid, missing, timely = result.checks
    assert (valid.passed, valid.status) == (False, None)
    assert valid.detail.startswith("no usable answer (RemoteProtocolError")
    assert (missing.passed, missing.status) == (True, 401)
    assert not timely.passed and "valid_accepted" in timely.detail
    with serve_asgi(receiver(crashes_on_stale)) as url:
        result = run_probe(url, secrets_file, SUB, only=["stale_past_rejected", "valid_accepted"])
    assert [(c.id, c.status, c.passed) for c in result.checks] == [
        ("valid_accepted", 204, True),
        ("stale_past_rejected", 500, False),
    ]


def test_a_receiver_clock_that_is_off_is_named_in_the_failed_window_checks(secrets_file):
    import email.utils

    import httpx

    now = 1790000000.0
    ahead = 10  # the receiver's clock runs 10 s ahead: 299 s becomes 309 s there

    def handler(request: httpx.Request) -> httpx.Response:
        v = verify(
            request.content,
            request.headers.get("x-phishfort-signature"),
            request.headers.get("x-phishfort-timestamp"),
            CURRENT,
            now=now + ahead,
        )
        date = email.utils.formatdate(now + ahead, usegmt=True)
        return httpx.Response(204 if v.ok else 401, headers={"Date": date})

    result = run_probe(
        "https://hooks.example/",
        secrets_file,
        SUB,
        only=["valid_accepted", "boundary_accepted", "stale_future_rejected"],
        transport=httpx.MockTransport(handler),
        clock=lambda: now,
    )
    valid, boundary, future = result.checks
    assert valid.passed and valid.detail == "answered 204"  # passed: no note
    assert not boundary.passed
    assert boundary.detail.endswith("the receiver's Date header is +10 s off the probe's clock")
    # 301 s in the future is 291 s on the receiver's clock: accepted, and the note says why.
    assert (future.passed, future.status) == (False, 204)
    assert future.detail.endswith("+10 s off the probe's clock")


def test_a_receiver_trickling_header_lines_is_cut_at_the_delivery_timeout(secrets_file):
    """One header line every 0.2 s never trips a read timeout; the check's whole exchange is
    still capped by the delivery timeout and counted as a timeout failure."""
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 204 No Content\r\n")
            # HANG_S at most, so that a failing test fails (another detail) and does not hang
            for _ in range(HANG_S * 5):
                if stop.wait(0.2):
                    break
                conn.sendall(b"X-A: b\r\n")
        except OSError:
            pass
        finally:
            conn.close()

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            handler = threading.Thread(target=handle, args=(conn,), daemon=True)
            handlers.append((handler, conn))
            handler.start()

    handlers: list[tuple[threading.Thread, socket.socket]] = []
    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        result = run_probe(
            f"http://127.0.0.1:{listener.getsockname()[1]}/hook",
            secrets_file,
            SUB,
            only=["valid_accepted", "missing_signature_rejected", "within_timeout"],
            timeout_s=1.0,
        )
    finally:
        stop.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (close alone does not)
        listener.close()
        acceptor.join(5)  # no thread left behind for later tests (a fork checks for threads)
        for handler, conn in handlers:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv
            handler.join(5)
    valid, missing, timely = result.checks
    # The headers never end: only the cap ends the exchange (no bound on how long it took).
    assert (valid.passed, valid.status, valid.detail) == (False, None, "no answer within 1 s")
    assert valid.ms >= 1000
    assert (missing.passed, missing.detail) == (False, "no answer within 1 s")
    assert timely.passed is False
