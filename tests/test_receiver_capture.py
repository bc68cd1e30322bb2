"""Capture middleware (ASGI under Starlette, WSGI under Flask) on real sockets, and the writer."""

from __future__ import annotations

import asyncio
import base64
import csv
import hashlib
import io
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from flask import Flask, request
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from audit.cli import main
from audit.ingest.load import load_captures
from audit.ingest.secrets import read_secrets
from audit.ingest.signatures import sign
from audit.receiver import (
    CaptureMiddleware,
    CaptureRecord,
    CaptureWriter,
    WSGICaptureMiddleware,
    capture_log,
)
from tests.receiver_servers import serve_asgi, serve_wsgi

SECRET = "whsec_capture_test_secret"
SUB = "wh_t"

#: Bodies that a re-encoding would change: emoji and scripts, CRLF and trailing blanks, a line
#: separator, an empty body, and bytes that are not UTF-8 at all.
BODIES = [
    '{"id":"evt_1","data":{"incidentId":"test_1","note":"Grüße 🎣 検証"}}'.encode(),
    b'{ "id" : "evt_2",\r\n  "data" : {"incidentId":"test_2"} }  \n',
    '{"id":"evt_3","data":{"incidentId":"test_3","x":"a\u2028b"}}'.encode(),
    b"",
    b"\xff\xfe\x00not utf-8 \xc3\x28 at all\x80",
]


@pytest.fixture
def secrets_file(tmp_path: Path) -> Path:
    p = tmp_path / "secrets.json"
    p.write_text(json.dumps({SUB: [{"secret": SECRET}]}))
    return p


def _signed(body: bytes, ts: int | None = None) -> dict[str, str]:
    ts = int(time.time()) if ts is None else ts
    return {
        "X-PhishFort-Signature": sign(SECRET, ts, body),
        "X-PhishFort-Timestamp": str(ts),
        "X-PhishFort-Event": "webhook.test",
        "X-PhishFort-Delivery-Id": f"dlv_{hashlib.sha256(body).hexdigest()[:12]}",
        "Content-Type": "application/json",
    }


def starlette_app(folder: Path, writer: CaptureWriter | None = None) -> Starlette:
    async def hook(req: Request) -> Response:
        body = await req.body()
        if body == b"boom":
            raise RuntimeError("the application failed")
        return Response(status_code=204, headers={"x-sha": hashlib.sha256(body).hexdigest()})

    async def other(req: Request) -> Response:
        return Response(status_code=200)

    kwargs = {"writer": writer} if writer is not None else {"folder": folder}
    return Starlette(
        routes=[
            Route("/hook", hook, methods=["POST", "GET"]),
            Route("/other", other, methods=["POST"]),
        ],
        middleware=[Middleware(CaptureMiddleware, paths=["/hook"], subscription_id=SUB, **kwargs)],
    )


def flask_app(folder: Path, writer: CaptureWriter | None = None) -> Flask:
    app = Flask(__name__)

    @app.route("/hook", methods=["POST", "GET"])
    def hook():
        body = request.get_data()
        if body == b"boom":
            raise RuntimeError("the application failed")
        return "", 204, {"x-sha": hashlib.sha256(body).hexdigest()}

    @app.post("/other")
    def other():
        return "", 200

    kwargs = {"writer": writer} if writer is not None else {"folder": folder}
    app.wsgi_app = WSGICaptureMiddleware(
        app.wsgi_app, paths=["/hook"], subscription_id=SUB, **kwargs
    )
    return app


FRAMEWORKS = {
    "starlette": (starlette_app, serve_asgi),
    "flask": (flask_app, serve_wsgi),
}


@pytest.fixture(params=sorted(FRAMEWORKS))
def served(request, tmp_path):
    """(base URL, capture folder) of the test app of each framework, on a real socket."""
    make, serve = FRAMEWORKS[request.param]
    folder = tmp_path / "captures"
    with serve(make(folder)) as url:
        yield url, folder


def _lines(folder: Path) -> list[bytes]:
    files = sorted(folder.glob("*.jsonl"))
    return [line for f in files for line in f.read_bytes().split(b"\n") if line]


def test_bodies_are_byte_exact_and_verify_valid(served, secrets_file, tmp_path):
    url, folder = served
    with httpx.Client() as client:
        for body in BODIES:
            r = client.post(f"{url}/hook", content=body, headers=_signed(body))
            assert r.status_code == 204
            assert r.headers["x-sha"] == hashlib.sha256(body).hexdigest()  # app got the bytes
    caps = load_captures([folder], secrets=read_secrets(secrets_file))
    d = caps.deliveries
    assert list(d["body"]) == BODIES
    assert list(d["verdict"]) == ["valid"] * len(BODIES)
    assert list(d["response_status"]) == [204] * len(BODIES)
    assert (d["response_ms"] > 0).all() and (d["response_ms"] < 5000).all()
    assert set(d["subscription_id"]) == {SUB}
    assert all(u.endswith("/hook") for u in d["url"])
    # The non-UTF-8 body is stored as body_b64, the others as text.
    records = [json.loads(line) for line in _lines(folder)]
    assert ["body_b64" in r for r in records] == [False, False, False, False, True]
    # ... and the CLI agrees: every stored request verifies as valid.
    out = tmp_path / "verdicts.csv"
    assert main(["verify", str(folder), "--secrets", str(secrets_file), "--out", str(out)]) == 0
    with out.open() as f:
        assert [row["verdict"] for row in csv.DictReader(f)] == ["valid"] * len(BODIES)


def test_rejections_and_other_routes(served, secrets_file):
    url, folder = served
    with httpx.Client() as client:
        assert client.post(f"{url}/other", content=b"x").status_code == 200  # not captured
        assert client.get(f"{url}/hook").status_code == 204  # GET: not captured
        stale = int(time.time()) - 301
        assert client.post(f"{url}/hook", content=b"{}", headers=_signed(b"{}", stale)).is_success
    d = load_captures([folder], secrets=read_secrets(secrets_file)).deliveries
    assert list(d["verdict"]) == ["stale_timestamp"]  # only the POST to /hook was captured


@pytest.mark.slow
def test_concurrent_requests_produce_whole_lines(served):
    url, folder = served
    bodies = [
        json.dumps({"id": f"evt_{i}", "pad": chr(0x41 + i % 26) * (i * 4099 % 100_000)}).encode()
        for i in range(40)
    ]

    def post(body: bytes) -> int:
        with httpx.Client() as client:
            return client.post(f"{url}/hook", content=body).status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(post, bodies)) == {204}
    lines = _lines(folder)
    assert len(lines) == len(bodies)
    stored = sorted(json.loads(line)["body"].encode() for line in lines)
    assert stored == sorted(bodies)


def test_app_exception_is_captured_as_500(served):
    url, folder = served
    with httpx.Client() as client:
        assert client.post(f"{url}/hook", content=b"boom").status_code == 500
    (record,) = [json.loads(line) for line in _lines(folder)]
    assert record["body"] == "boom" and record["response_status"] == 500


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_capture_failure_answers_503_not_the_apps_2xx(framework, tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("in the way")
    make, serve = FRAMEWORKS[framework]
    with serve(make(not_a_folder)) as url, httpx.Client() as client:
        r = client.post(f"{url}/hook", content=b"{}")
    assert r.status_code == 503  # the service retries; no 2xx for an event not stored
    assert "x-sha" not in r.headers


# -- durability: the line is on disk (fsynced) before the answer is handed to the server


def _fsync_spy(monkeypatch) -> list[str]:
    events: list[str] = []
    real = os.fsync

    def spy(fd):
        events.append("fsync")
        return real(fd)

    monkeypatch.setattr(capture_log.os, "fsync", spy)
    return events


def test_asgi_line_is_fsynced_before_the_answer_leaves(tmp_path, monkeypatch):
    events = _fsync_spy(monkeypatch)
    folder = tmp_path / "c"

    async def app(scope, receive, send):
        message = await receive()
        assert message["body"] == b"payload"
        events.append("app answers")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def send(message):
        if message["type"] == "http.response.start":
            lines = _lines(folder)
            events.append(f"server sends {message['status']} with {len(lines)} line(s) stored")

    messages = [{"type": "http.request", "body": b"pay", "more_body": True}]
    messages.append({"type": "http.request", "body": b"load", "more_body": False})

    async def receive():
        return messages.pop(0)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"host", b"h")]}
    asyncio.run(CaptureMiddleware(app, folder)(scope, receive, send))
    assert events[:2] == ["app answers", "fsync"]
    assert "server sends 204 with 1 line(s) stored" in events
    assert events.index("fsync") < events.index("server sends 204 with 1 line(s) stored")


def test_wsgi_line_is_fsynced_before_the_answer_leaves(tmp_path, monkeypatch):
    import io

    events = _fsync_spy(monkeypatch)
    folder = tmp_path / "c"

    def app(environ, start_response):
        assert environ["wsgi.input"].read() == b"payload"
        events.append("app answers")
        start_response("204 No Content", [])
        return [b""]

    def start_response(status, headers, exc_info=None):
        events.append(f"server sends {status[:3]} with {len(_lines(folder))} line(s) stored")

    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/",
        "CONTENT_LENGTH": "7",
        "wsgi.input": io.BytesIO(b"payload"),
        "wsgi.url_scheme": "http",
        "HTTP_HOST": "h",
        "SERVER_NAME": "h",
        "SERVER_PORT": "80",
    }
    WSGICaptureMiddleware(app, folder)(environ, start_response)
    assert events == ["app answers", "fsync", "fsync", "server sends 204 with 1 line(s) stored"]


CRASH_SCRIPT = r"""
import asyncio, io, os, sys, time
from audit.receiver import CaptureMiddleware, WSGICaptureMiddleware
from audit.ingest.signatures import sign

folder, kind = sys.argv[1], sys.argv[2]
body = '{"id":"evt_crash","data":{"incidentId":"test_crash","n":"Grüße 🎣"}}'.encode()
ts = str(int(time.time()))
sig = sign("whsec_capture_test_secret", ts, body)

def die(*args, **kwargs):
    os._exit(9)  # the process dies right after the capture returned, before any byte is sent

if kind == "wsgi":
    def app(environ, start_response):
        environ["wsgi.input"].read()
        start_response("204 No Content", [])
        return [b""]
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", "CONTENT_LENGTH": str(len(body)),
               "wsgi.input": io.BytesIO(body), "wsgi.url_scheme": "http", "SERVER_NAME": "h",
               "SERVER_PORT": "80", "HTTP_X_PHISHFORT_SIGNATURE": sig,
               "HTTP_X_PHISHFORT_TIMESTAMP": ts}
    WSGICaptureMiddleware(app, folder, subscription_id="wh_t")(environ, die)
else:
    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 204, "headers": []})
    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}
    async def send(message):
        die()
    scope = {"type": "http", "method": "POST", "path": "/",
             "headers": [(b"x-phishfort-signature", sig.encode()),
                         (b"x-phishfort-timestamp", ts.encode())]}
    asyncio.run(CaptureMiddleware(app, folder, subscription_id="wh_t")(scope, receive, send))
sys.exit(0)  # not reached
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["asgi", "wsgi"])
def test_crash_after_the_write_loses_nothing(kind, tmp_path, secrets_file):
    folder = tmp_path / "c"
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(folder), kind], capture_output=True, timeout=60
    )
    assert proc.returncode == 9, proc.stderr.decode()[-500:]
    d = load_captures([folder], secrets=read_secrets(secrets_file)).deliveries
    assert list(d["verdict"]) == ["valid"]
    assert list(d["response_status"]) == [204]
    assert "Grüße 🎣".encode() in d["body"].iloc[0]


# -- the writer


def test_failed_write_is_cut_back_so_the_next_line_is_whole(tmp_path, monkeypatch):
    writer = CaptureWriter(tmp_path, fsync=False)
    first = CaptureRecord(1767225600.0, [("A", "1")], b"first", 204, 1.0)
    path = writer.append(first)
    size = path.stat().st_size
    real_write = os.write

    def half_then_full(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(capture_log.os, "write", half_then_full)
    with pytest.raises(OSError):
        writer.append(CaptureRecord(1767225601.0, [], b"second" * 100, 204, 1.0))
    assert path.stat().st_size == size
    monkeypatch.setattr(capture_log.os, "write", real_write)
    writer.append(CaptureRecord(1767225602.0, [], b"third", 204, 1.0))
    assert [json.loads(line)["body"] for line in _lines(tmp_path)] == ["first", "third"]


def test_a_torn_tail_left_by_a_killed_writer_is_not_joined_to_the_next_line(tmp_path):
    # A writer killed mid-line (SIGKILL, power loss) leaves half a line that no cut-back
    # removed; the next line used to be written straight onto it, and both were unreadable.
    writer = CaptureWriter(tmp_path, fsync=False)
    path = writer.append(CaptureRecord(1767225600.0, [], b"first", 204, 1.0))
    torn = capture_log.capture_line(CaptureRecord(1767225601.0, [], b"second" * 100, 204, 1.0))[
        :150
    ]
    with path.open("ab") as f:
        f.write(torn)
    writer.append(CaptureRecord(1767225602.0, [], b"third", 204, 1.0))
    lines = path.read_bytes().split(b"\n")
    assert lines[1] == torn and lines[-1] == b""
    assert [json.loads(lines[0])["body"], json.loads(lines[2])["body"]] == ["first", "third"]
    d = load_captures([tmp_path]).deliveries
    assert list(d["verdict"] == "unreadable") == [False, True, False]
    assert list(d["line"]) == [1, 2, 3]


def test_line_format_headers_repeats_and_daily_files(tmp_path):
    writer = CaptureWriter(tmp_path, fsync=False)
    before_midnight = 1767225599.999  # 2025-12-31T23:59:59.999Z
    rec = CaptureRecord(
        before_midnight, [("X-A", "1"), ("x-a", "2")], b"\x00\xff", 401, 2.5, None, "https://h/p"
    )
    assert writer.append(rec).name == "2025-12-31.jsonl"
    after = CaptureRecord(before_midnight + 0.002, [], b"{}", 204, 1.0, "wh_1")
    assert writer.append(after).name == "2026-01-01.jsonl"
    first = json.loads((tmp_path / "2025-12-31.jsonl").read_text())
    assert first == {
        "received_at": "2025-12-31T23:59:59.999000+00:00",
        "url": "https://h/p",
        "headers": [["X-A", "1"], ["x-a", "2"]],
        "body_b64": "AP8=",  # base64 of 00 ff, by hand
        "response_status": 401,
        "response_ms": 2.5,
    }


def _append_many(folder: str, worker: int) -> None:
    writer = CaptureWriter(folder, fsync=False)
    for i in range(40):
        body = json.dumps({"w": worker, "i": i, "pad": "x" * 150_000}).encode()
        writer.append(CaptureRecord(1767225600.0, [], body, 204, 1.0))


def test_processes_sharing_a_file_write_whole_lines(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = _lines(tmp_path)
    seen = sorted((b["w"], b["i"]) for b in (json.loads(json.loads(x)["body"]) for x in lines))
    assert seen == [(w, i) for w in range(3) for i in range(40)]


def test_asgi_app_that_returns_without_answering_is_captured_as_500(tmp_path):
    async def app(scope, receive, send):
        await receive()

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        raise AssertionError("nothing may be sent")

    scope = {"type": "http", "method": "POST", "path": "/", "headers": []}
    asyncio.run(CaptureMiddleware(app, tmp_path)(scope, receive, send))
    (record,) = [json.loads(line) for line in _lines(tmp_path)]
    assert record["response_status"] == 500 and record["body"] == "{}"


def test_chunked_bodies_are_captured_whole(served):
    url, folder = served
    parts = [b'{"id":"evt_c",', '"n":"Grüße"'.encode(), b"}"]
    with httpx.Client() as client:
        r = client.post(f"{url}/hook", content=iter(parts))  # Transfer-Encoding: chunked
    assert r.status_code == 204
    assert r.headers["x-sha"] == hashlib.sha256(b"".join(parts)).hexdigest()
    (record,) = [json.loads(line) for line in _lines(folder)]
    assert record["body"].encode() == b"".join(parts)
    assert ["transfer-encoding", "chunked"] in [[n.lower(), v] for n, v in record["headers"]]


def test_idle_connections_do_not_turn_deliveries_away():
    """uvicorn counts idle connections towards ``limit_concurrency``: with a limit of 16, 16 idle
    sockets made every delivery a 503. The reference server's default limit is 100 (and idle
    connections are closed after the header timeout, tests/test_receiver_flood.py); 20 idle
    sockets leave a delivery answered."""
    import inspect
    import socket
    import threading

    from audit.receiver.reference import bind, make_server

    assert inspect.signature(make_server).parameters["max_connections"].default == 100

    async def app(scope, receive, send):
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    def post() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            return c.recv(200).split(b"\r\n")[0]

    sock = bind("127.0.0.1", 0)
    server = make_server(app, sock, log_level="error")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = sock.getsockname()[1]
    held = []
    try:
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        time.sleep(0.3)
        assert post() == b"HTTP/1.1 204 No Content"
    finally:
        for s in held:
            s.close()
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_a_capture_line_holds_few_copies_of_a_big_escaped_body():
    import tracemalloc

    from audit.receiver.capture_log import CaptureRecord, capture_line

    body = b"\x01" * 2_000_000  # JSON-escaped six times over: 12 MB of line
    record = CaptureRecord(0.5, [], body, 401, 0.0)
    tracemalloc.start()
    try:
        line = capture_line(record)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert line.endswith(b'"response_status":401,"response_ms":0.0}\n')
    # orjson writes the line once, newline included (it reserves the escaped worst case,
    # 6x the text, but touches only what it writes); json.dumps' str, its encoding and the
    # newline's copy held 2-3x the line
    assert peak < 1.7 * len(line)


@pytest.mark.parametrize("kind", ["asgi", "wsgi"])
def test_a_body_over_the_limit_is_answered_413_and_captured_without_it(kind, tmp_path):
    """Every request is captured: one over the size limit (never the service's: it sends
    at most 10 MB) keeps its headers, the bytes read and the 413, and reads back as an
    unreadable record that names its size."""
    import io

    folder, calls, answered = tmp_path / "c", [], []
    if kind == "asgi":

        async def app(scope, receive, send):
            calls.append(scope)

        chunks = [b"x" * 60, b"y" * 60]
        messages = [{"type": "http.request", "body": c, "more_body": True} for c in chunks]

        async def receive():
            return messages.pop(0)

        async def send(message):
            if message["type"] == "http.response.start":
                answered.append(message["status"])

        scope = {"type": "http", "method": "POST", "path": "/h", "headers": [(b"x-a", b"1")]}
        middleware = CaptureMiddleware(app, folder, max_body_bytes=100)
        asyncio.run(middleware(scope, receive, send))
        size = 120
    else:

        def app(environ, start_response):
            calls.append(environ)

        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/h",
            "CONTENT_LENGTH": "150",
            "wsgi.input": io.BytesIO(b"z" * 150),
            "wsgi.url_scheme": "http",
            "HTTP_X_A": "1",
            "SERVER_NAME": "h",
            "SERVER_PORT": "80",
        }
        WSGICaptureMiddleware(app, folder, max_body_bytes=100)(
            environ, lambda status, headers, exc_info=None: answered.append(int(status[:3]))
        )
        size = 150
    assert calls == [] and answered == [413]
    (line,) = _lines(folder)
    rec = json.loads(line)
    assert rec["body_omitted_bytes"] == size and rec["response_status"] == 413
    assert "body" not in rec and "body_b64" not in rec
    assert ["x-a", "1"] in [[n.lower(), v] for n, v in rec["headers"]]
    d = load_captures([folder]).deliveries
    assert list(d["verdict"]) == ["unreadable"]
    assert list(d["detail"]) == [f"body of {size:,} bytes not captured (over the receiver's limit)"]


def test_a_flood_of_requests_encodes_at_most_two_captures_at_once(tmp_path):
    """Each capture is encoded and written in a worker thread (anyio's pool: 40): a flood of
    10 MB requests held a line of up to 6x each per thread. Now two at a time."""
    from audit.receiver.asgi import CAPTURES_AT_ONCE

    active, most = [0], [0]
    lock = threading.Lock()

    class SlowWriter:
        def append(self, record):
            with lock:
                active[0] += 1
                most[0] = max(most[0], active[0])
            time.sleep(0.1)
            with lock:
                active[0] -= 1

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = CaptureMiddleware(app, writer=SlowWriter())
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"host", b"h")]}

    async def one():
        async def receive():
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(message):
            pass

        await middleware(dict(scope), receive, send)

    async def flood():
        await asyncio.gather(*(one() for _ in range(8)))

    asyncio.run(flood())
    assert CAPTURES_AT_ONCE == 2 and most[0] == 2


def test_a_lone_surrogate_in_a_header_or_url_leaves_the_line_readable(tmp_path, secrets_file):
    # A server that decodes header bytes with surrogateescape (not PEP 3333's Latin-1) hands
    # over "\udcff" for the byte 0xff. Written as a JSON escape, the reader called the whole
    # line unreadable: the request's signature was never checked.
    body = b'{"id":"evt_s","event":"incident.created"}'
    received = time.time()
    headers = [*_signed(body, int(received)).items(), ("X-Odd\udcfe", "a\udcffb\ud800")]
    rec = CaptureRecord(received, headers, body, 204, 1.0, SUB, "https://h/p\udce9")
    CaptureWriter(tmp_path / "caps", fsync=False).append(rec)
    (line,) = _lines(tmp_path / "caps")
    record = json.loads(line)
    # Each \udcXX (0x80-0xff) is the byte 0xXX, read as Latin-1 as PEP 3333 servers read every
    # header byte; any other lone surrogate is U+FFFD.
    assert record["headers"][-1] == ["X-Odd\u00fe", "a\u00ffb\ufffd"]
    assert record["url"] == "https://h/p\u00e9"
    d = load_captures([tmp_path / "caps"], secrets=read_secrets(secrets_file)).deliveries
    assert list(d["verdict"]) == ["valid"]


# -- WSGI applications as PEP 3333 allows them, and a sender that leaves mid-body


def _wsgi_call(middleware, body: bytes, length: int | None = None) -> tuple[list, bytes]:
    """Call a WSGI middleware as a server does: the answers given to start_response, and the
    body read from the iterable it returns (then closed)."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/hook",
        "SERVER_NAME": "h",
        "SERVER_PORT": "80",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body) if length is None else length),
    }
    answers: list = []
    result = middleware(environ, lambda status, headers, exc_info=None: answers.append(status))
    try:
        sent = b"".join(result)
    finally:
        getattr(result, "close", lambda: None)()
    return answers, sent


def test_wsgi_body_cut_short_is_answered_400_and_never_reaches_the_app(tmp_path, caplog):
    # A sender that declared 200 bytes and left after 21: the app used to answer the 21 bytes
    # (a 401 "signature mismatch" captured for a request that never arrived whole).
    called = []

    def app(environ, start_response):
        called.append(environ["wsgi.input"].read())
        start_response("401 Unauthorized", [])
        return [b""]

    mw = WSGICaptureMiddleware(app, tmp_path / "caps", paths=["/hook"])
    answers, _ = _wsgi_call(mw, b'{"id":"evt_cut","e":1}'[:21], length=200)
    assert answers == ["400 Bad Request"] and called == []
    assert not (tmp_path / "caps").exists() or _lines(tmp_path / "caps") == []
    assert "cut short (21 of 200 bytes)" in caplog.text


def _late_answer(fail_first: bool):
    """A generator application: it answers (start_response) only once it is first read."""

    def app(environ, start_response):
        environ["wsgi.input"].read()
        if fail_first:
            raise RuntimeError("boom before answering")
        start_response("200 OK", [("Content-Type", "text/plain")])
        yield b"accepted"

    return app


def test_wsgi_generator_app_that_raises_before_answering_is_captured_as_500(tmp_path):
    mw = WSGICaptureMiddleware(_late_answer(True), tmp_path / "caps", paths=["/hook"])
    with pytest.raises(RuntimeError, match="boom"):
        _wsgi_call(mw, b"{}")
    (record,) = [json.loads(line) for line in _lines(tmp_path / "caps")]
    assert record["response_status"] == 500 and record["body"] == "{}"


def test_wsgi_generator_app_answers_and_is_captured(tmp_path):
    mw = WSGICaptureMiddleware(_late_answer(False), tmp_path / "caps", paths=["/hook"])
    answers, sent = _wsgi_call(mw, b"{}")
    assert answers == ["200 OK"] and sent == b"accepted"
    (record,) = [json.loads(line) for line in _lines(tmp_path / "caps")]
    assert record["response_status"] == 200


def test_wsgi_generator_app_whose_capture_fails_sends_503_without_its_body(tmp_path, caplog):
    in_the_way = tmp_path / "file"
    in_the_way.write_text("not a folder")
    mw = WSGICaptureMiddleware(_late_answer(False), in_the_way, paths=["/hook"])
    answers, sent = _wsgi_call(mw, b"{}")
    assert answers == ["503 Service Unavailable"] and sent == b""
    # The log names what could not be written (it said only "File exists").
    assert f"capture failed ({in_the_way}: File exists)" in caplog.text


def test_a_body_whose_escapes_would_pass_the_readers_limit_is_kept_as_base64(tmp_path):
    # 10 MiB of control characters escape to 60 MiB (\u0001 each); with big headers the text
    # line passed the loader's 64 MiB limit and a request answered 204 read back unreadable.
    from audit.ingest.formats.jsonl import MAX_RECORD_BYTES

    body = b"\x01" * 10_485_760
    headers = [(f"X-Pad-{i}", "\x01" * 8000) for i in range(90)]
    line = capture_log.capture_line(CaptureRecord(1767225600.0, headers, body, 204, 1.0))
    assert len(line) <= MAX_RECORD_BYTES
    record = json.loads(line)
    assert "body" not in record and base64.b64decode(record["body_b64"]) == body
    (tmp_path / "caps").mkdir()
    (tmp_path / "caps" / "2026-01-01.jsonl").write_bytes(line)
    d = load_captures([tmp_path / "caps"]).deliveries
    assert list(d["verdict"]) != ["unreadable"] and d["body"][0] == body
