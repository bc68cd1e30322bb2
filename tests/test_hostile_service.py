"""Secrets, keys and the API client under hostile servers and concurrent writers (issue 9)."""

from __future__ import annotations

import gzip
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from audit.analysis.subscriptions import load_snapshots
from audit.cli import main
from audit.cli.client import write_snapshot
from audit.errors import InputError, LoadError, RetryableError, ServiceError
from audit.ingest.secrets import read_secrets
from audit.redaction import REDACTED, redact_secrets
from audit.service.client import ServiceClient
from audit.service.fake import FakeService
from audit.service.retry import RetryPolicy, parse_retry_after

KEY = "key-in-the-reason-phrase-0123456789"
#: Seconds after which a call is taken for hung: a guard against hangs, never a bound on speed.
HANG_S = 120
SECRET = "whsec_known-secret-value-abcdef"
ROOT = Path(__file__).resolve().parents[1]


# -- a server that misbehaves on purpose ------------------------------------------------------


class _Hostile(BaseHTTPRequestHandler):
    """Answers every request with the class's (status, reason, headers, body)."""

    answer: tuple[int, str, dict, bytes] = (200, "OK", {}, b"{}")

    def _reply(self) -> None:
        status, reason, headers, body = self.answer
        self.send_response(status, reason)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = do_PATCH = _reply

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hostile_server(monkeypatch):
    handler = type("H", (_Hostile,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AUDIT_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("AUDIT_API_KEY", KEY)
    yield handler
    server.shutdown()
    server.server_close()


def _run(capsys, caplog, *args: str) -> tuple[int, str]:
    """Exit code and everything the command said: stdout, stderr and every log record."""
    with caplog.at_level(logging.DEBUG):
        code = main(list(args))
    out, err = capsys.readouterr()
    _run.stdout = out
    return code, out + err + caplog.text


def test_the_key_in_a_reason_phrase_never_reaches_any_output(hostile_server, capsys, caplog):
    hostile_server.answer = (401, f"bad key {KEY}", {}, f'{{"message": "no {KEY}"}}'.encode())
    code, text = _run(capsys, caplog, "webhooks", "list", "--max-attempts", "1")
    assert code == 3
    assert KEY not in text
    assert "401 bad key [redacted]" in text


def test_a_known_secret_in_an_error_body_is_scrubbed(hostile_server, tmp_path, capsys, caplog):
    secrets = tmp_path / "s.json"
    secrets.write_text(json.dumps({"wh_1": [{"secret": SECRET}]}))
    os.chmod(secrets, 0o600)
    body = json.dumps({"error": f"{SECRET} \x1b[2J{KEY}"}).encode()
    hostile_server.answer = (503, f"down {SECRET}", {"retry-after": "9" * 400}, body)
    code, text = _run(
        capsys, caplog, "webhooks", "rotate-secret", "wh_1", "--secrets", str(secrets)
    )
    assert code == 3
    assert SECRET not in text and KEY not in text
    assert "\x1b" not in text and "\\x1b[2J" in text  # escaped, not obeyed
    assert "Retry-After" in text and "internal error" not in text


def test_retry_after_never_raises():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("9" * 400, now) == float("inf")
    assert parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now) > 1e9
    assert parse_retry_after("Mon, 99 Foo 0 00:00:00 GMT", now) is None
    assert parse_retry_after("\x00" * 10, now) is None


def test_listing_keys_containing_secret_are_redacted_at_any_depth(hostile_server, capsys, caplog):
    item = {
        "id": "wh_1",
        "url": "https://h.example/\x1b[31mred\x9b31m",
        "signingSecret": "s1-abcdefgh",
        "nested": {"secrets": ["s2-abcdefgh"], "deeper": [{"SECRET_V2": {"v": "s3-abcdefgh"}}]},
        "description": "\x1b[31mred\x9b31m",
        KEY: "the API key used as a key",
    }
    hostile_server.answer = (200, "OK", {}, json.dumps({"data": [item]}).encode())
    code, text = _run(capsys, caplog, "webhooks", "list", "--json")
    assert code == 0
    printed = json.loads(_run.stdout)
    for leaked in ("s1-abcdefgh", "s2-abcdefgh", "s3-abcdefgh"):
        assert leaked not in text
    assert printed[0]["signingSecret"] == REDACTED and printed[0]["nested"]["secrets"] == REDACTED
    assert "\x1b" not in text and "\x9b" not in text
    assert printed[0]["description"] == "\x1b[31mred\x9b31m"  # escaped as JSON, same value
    assert printed[0][REDACTED] == "the API key used as a key" and KEY not in text
    code, text = _run(capsys, caplog, "webhooks", "list")
    assert code == 0 and "\x1b" not in text and "\\x1b[31mred\\x9b31m" in text


def test_snapshots_redact_secret_named_keys_and_tolerate_depth(tmp_path):
    body = {"data": [{"id": "wh_1", "events": "not-a-list", "webhookSecrets": {"a": "x1"}}]}
    path, n, redacted = write_snapshot(
        tmp_path, body, base_url="https://x", fetched_at=datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert (n, redacted) == (1, 1)
    assert "x1" not in path.read_text()
    with pytest.warns(UserWarning, match=f"{path}: .*'events' is not a list of strings"):
        df = load_snapshots([path])
    assert df["events"][0] == ()
    nested = tmp_path / "deep" / "webhooks-x.json"
    nested.parent.mkdir()
    nested.write_text(
        '{"fetched_at": "2026-01-01T00:00:00Z", "base_url": "x", "response": '
        + "[" * 100_000
        + "]" * 100_000
        + "}"
    )
    with pytest.raises(LoadError, match=f"{nested}: not a snapshot: JSON nested too deeply"):
        load_snapshots([nested])
    deep: object = "leaf"
    for _ in range(100_000):
        deep = {"secretish": 1, "k": [deep]}
    copy, _ = redact_secrets({"data": [{"id": "x", "deep": deep}]})
    assert copy["data"][0]["id"] == "x"


def test_a_deeply_nested_listing_is_a_clean_error(hostile_server, capsys, caplog):
    hostile_server.answer = (200, "OK", {}, b'{"data": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    code, text = _run(capsys, caplog, "webhooks", "list")
    assert code == 3
    assert "nested too deeply" in text and "internal error" not in text


def test_snapshot_names_are_unique_under_concurrency(tmp_path):
    when = datetime(2026, 1, 1, tzinfo=UTC)
    start = threading.Barrier(8)

    def one(i: int) -> Path:
        start.wait()
        return write_snapshot(
            tmp_path, {"data": [{"id": f"wh_{i}"}]}, base_url="x", fetched_at=when
        )[0]

    with ThreadPoolExecutor(8) as pool:
        paths = list(pool.map(one, range(8)))
    assert len(set(paths)) == 8
    ids = sorted(json.loads(p.read_text())["response"]["data"][0]["id"] for p in paths)
    assert ids == sorted(f"wh_{i}" for i in range(8))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)


# -- ids and limits --------------------------------------------------------------------------


def _recording_client(**kw) -> tuple[ServiceClient, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"data": {"secret": "whsec_new-one-123456"}})

    client = ServiceClient(
        base_url="https://api.example",
        api_key=KEY,
        transport=httpx.MockTransport(handler),
        sleep=lambda s: None,
        **kw,
    )
    return client, seen


@pytest.mark.parametrize("bad", [".", ".."])
def test_dot_segments_are_refused_before_sending(bad):
    client, seen = _recording_client()
    for call in (client.delete_webhook, client.rotate_secret, client.test_webhook):
        with pytest.raises(InputError, match="dot-segment"):
            call(bad)
    assert seen == []


def test_every_id_is_exactly_one_encoded_path_segment():
    client, seen = _recording_client()
    client.rotate_secret("a/../b?c#d%2F e")
    assert seen[0].url.raw_path == b"/v1/webhooks/a%2F..%2Fb%3Fc%23d%252F%20e/rotate-secret"


def test_a_response_over_the_limit_after_decompression_is_abandoned():
    bomb = gzip.compress(b"[" + b" " * (20 * 2**20) + b"]")
    assert len(bomb) < 100_000

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-encoding": "gzip"}, content=bomb)

    client = ServiceClient(
        base_url="https://api.example", api_key=KEY, transport=httpx.MockTransport(handler)
    )
    with pytest.raises(ServiceError, match="larger than 10000000 bytes \\(after decompression"):
        client.list_webhooks()
    small = ServiceClient(
        base_url="https://api.example",
        api_key=KEY,
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"data": []})),
        max_response_bytes=5,
    )
    with pytest.raises(ServiceError, match="larger than 5 bytes"):
        small.list_webhooks()


@pytest.fixture
def trickling_server():
    """A server that sends headers, then one byte of body every 50 ms, for ever: only a
    deadline ends a call to it, however slow the machine (no test times it). After HANG_S it
    stops, so that a broken deadline fails its test (another error) instead of hanging it."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
            conn.sendall(b"content-length: 100000\r\n\r\n")
            hung = time.monotonic() + HANG_S
            while not stop.is_set() and time.monotonic() < hung:
                try:
                    conn.sendall(b" ")
                except OSError:
                    break
                time.sleep(0.05)
            conn.close()

    threading.Thread(target=trickle, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    listener.close()


@pytest.mark.slow
def test_a_trickling_server_cannot_hold_a_call_past_the_deadline(trickling_server):
    client = ServiceClient(
        base_url=trickling_server,
        api_key=KEY,
        timeout=5.0,
        deadline_s=1.0,
        retry=RetryPolicy(max_attempts=1),
    )
    with pytest.raises(ServiceError, match="deadline"):
        client.list_webhooks()


@pytest.mark.slow
def test_a_trickling_server_cannot_hold_a_command_past_the_deadline(
    trickling_server, monkeypatch, capsys
):
    monkeypatch.setenv("AUDIT_BASE_URL", trickling_server)
    monkeypatch.setenv("AUDIT_API_KEY", KEY)
    monkeypatch.setenv("AUDIT_DEADLINE_S", "1")
    assert main(["webhooks", "list"]) == 3
    assert "deadline" in capsys.readouterr().err


def test_an_absurd_retry_after_stops_with_a_clear_error():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"retry-after": "1" + "0" * 300})

    client = ServiceClient(
        base_url="https://api.example", api_key=KEY, transport=httpx.MockTransport(handler)
    )
    with pytest.raises(RetryableError, match="an absurdly long time \\(Retry-After\\)"):
        client.list_webhooks()


# -- the secrets file under concurrent writers -----------------------------------------------


@pytest.fixture
def fake_process():
    env = {**os.environ, "AUDIT_API_KEY": KEY}
    proc = subprocess.Popen(
        [sys.executable, "-m", "audit.service.fake", "--port", "0", "--expose-secrets-in-listing"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        line = proc.stdout.readline()
        url = line.split("listening on ", 1)[1].split()[0]
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_twelve_concurrent_rotations_keep_twelve_secrets(fake_process, tmp_path):
    env = {**os.environ, "AUDIT_API_KEY": KEY, "AUDIT_BASE_URL": fake_process}
    secrets = tmp_path / "secrets.json"
    cli = [sys.executable, "-m", "audit.cli", "webhooks"]
    create = [*cli, "create", "--url", "https://h.example/a", "--event", "incident.created"]
    done = subprocess.run([*create, "--secrets", str(secrets)], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    rotate = [*cli, "rotate-secret", "wh_1", "--secrets", str(secrets)]
    procs = [
        subprocess.Popen(rotate, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(12)
    ]
    results = [(p.wait(120), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert [code for code, _ in results] == [0] * 12, results
    store = read_secrets(secrets)
    values = [s.key for s in store.by_subscription["wh_1"]]
    assert len(values) == 13 and len(set(values)) == 13  # the first one plus 12 rotations
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    with ServiceClient(base_url=fake_process, api_key=KEY) as client:
        current = client.list_webhooks()[0]["secret"]
    assert current.encode() in values


def test_a_symlinked_secrets_file_is_updated_at_its_target(tmp_path, monkeypatch, capsys):
    fake = FakeService(api_keys={KEY: "client_1"})
    real = tmp_path / "vault" / "secrets.json"
    real.parent.mkdir()
    link = tmp_path / "secrets.json"
    link.symlink_to(real)
    with fake.serve() as served:
        monkeypatch.setenv("AUDIT_BASE_URL", served.base_url)
        monkeypatch.setenv("AUDIT_API_KEY", KEY)
        create = ["webhooks", "create", "--url", "https://h.example/a", "--event"]
        assert main([*create, "incident.created", "--secrets", str(link)]) == 0
        assert main(["webhooks", "rotate-secret", "wh_1", "--secrets", str(link)]) == 0
        current = fake.current_secret("wh_1")
    capsys.readouterr()
    assert link.is_symlink() and link.resolve() == real
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert [s.key for s in read_secrets(real).by_subscription["wh_1"]][-1] == current.encode()


def test_params_and_mutes_holding_a_known_secret_are_refused(tmp_path, capsys):
    from audit.findings import read_mutes

    secrets = tmp_path / "s.json"
    secrets.write_text(json.dumps({"wh_1": [{"secret": SECRET}]}))
    os.chmod(secrets, 0o600)
    params = tmp_path / "params.yaml"
    params.write_text(f"client_id: c1\nthresholds:\n  x: 1\nnote: {SECRET}\n")
    log = tmp_path / "x.jsonl"
    log.write_text("\n")
    code = main(["report", str(log), "--secrets", str(secrets), "--period", "2026-10",
                 "--params", str(params), "--out", str(tmp_path / "r")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3 and f"{params}: line 4 holds the value of a known secret" in err
    assert SECRET not in err
    read_secrets(secrets)
    mutes = tmp_path / "mutes.json"
    mutes.write_text(json.dumps([{"check_id": "SIG-01", "resource": SECRET, "reason": "x"}]))
    with pytest.raises(InputError, match="holds the value of a known secret") as e:
        read_mutes(mutes)
    assert SECRET not in str(e.value)
    code = main(["report", str(log), "--secrets", str(secrets), "--period", "2026-10",
                 "--mutes", str(mutes), "--out", str(tmp_path / "r")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3 and f"{mutes}: line 1 holds the value of a known secret" in err
    assert SECRET not in err and not (tmp_path / "r").exists()  # refused before any kernel


def test_snapshots_without_hard_links_still_get_unique_names(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    paths = [write_snapshot(tmp_path, {"data": []}, base_url="x", fetched_at=when)[0] for _ in "ab"]
    assert [p.name for p in paths] == [
        "webhooks-20260101T000000Z.json",
        "webhooks-20260101T000000Z-2.json",
    ]
    assert all(json.loads(p.read_text())["response"] == {"data": []} for p in paths)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)


def test_many_known_values_are_cut_as_few_are():
    # With more values than _Cutter.DIRECT, each is found by its start (a listing of 1,000
    # subscriptions with 2,000 secrets known took 31 s): the same cuts, the longest first.
    from audit.redaction import _Cutter

    many = [f"whsec_{i:06d}_padding" for i in range(2000)]
    inner = "whsec_000042"  # the start of many[42]: cut only where many[42] is not
    also = [*many, inner, "k3y"]  # a value shorter than the window too
    assert len(also) > _Cutter.DIRECT
    doc = {"data": [{"description": f"a {many[42]} b {inner} c k3y d {many[1999]}x"}]}
    out, _ = redact_secrets(doc, also=also)
    assert out["data"][0]["description"] == f"a {REDACTED} b {REDACTED} c {REDACTED} d {REDACTED}x"
    few, _ = redact_secrets(doc, also=[many[42], inner, "k3y", many[1999]])
    assert few == out


def test_an_environment_proxy_never_gets_a_plain_http_request(monkeypatch):
    # httpx trusted HTTP_PROXY: a plain-HTTP request to the loopback fake, API key included,
    # went in clear to the proxy (here a closed port: the listing failed to connect).
    fake = FakeService(api_keys={KEY: "client_1"})
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with fake.serve() as served, ServiceClient(base_url=served.base_url, api_key=KEY) as client:
        assert client.list_webhooks() == []
