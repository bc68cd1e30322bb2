"""The service client's exchanges over real sockets (127.0.0.1): the deadline covers the status
line and headers too, and compressed bodies cost no more memory than the size limit."""

from __future__ import annotations

import socket
import threading
import time
import zlib
from collections.abc import Iterator

import httpx
import pytest

from audit.cli import main
from audit.errors import ServiceError
from audit.service.client import ServiceClient
from audit.service.exchange import deadline_scope, install_deadline
from audit.service.retry import RetryPolicy

KEY = "ak_transport_test_0a1b2c3d"
#: Seconds after which a call is taken for hung: a guard against hangs, never a bound on speed.
HANG_S = 120


def _serve(reply) -> Iterator[str]:
    """Accept connections on 127.0.0.1 and run ``reply(conn, stop)`` on each, in threads."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_handle, args=(conn,), daemon=True).start()

    def _handle(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            reply(conn, stop)
        except OSError:
            pass
        finally:
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


@pytest.fixture
def header_trickle():
    """Sends the status line, then one header line every 0.2 s until the test ends (never a
    blank line): each line comes well within any read timeout and the headers never end, so
    only a deadline ends a call to it, however slow the machine (no test times it). After
    HANG_S it stops, so that a broken deadline fails its test (another error) instead of
    hanging it."""

    def reply(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        hung = time.monotonic() + HANG_S
        while not stop.wait(0.2) and time.monotonic() < hung:
            conn.sendall(b"X-A: b\r\n")

    yield from _serve(reply)


@pytest.fixture
def bomb_server():
    """Answers 200 with ``reply.body`` under ``reply.encoding``."""

    def reply(conn: socket.socket, stop: threading.Event) -> None:
        head = (
            f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            f"content-encoding: {reply.encoding}\r\ncontent-length: {len(reply.body)}\r\n\r\n"
        )
        conn.sendall(head.encode() + reply.body)

    gen = _serve(reply)
    url = next(gen)
    yield url, reply
    gen.close()


def _client(url: str, **kw) -> ServiceClient:
    kw.setdefault("retry", RetryPolicy(max_attempts=1))
    return ServiceClient(base_url=url, api_key=KEY, **kw)


def test_trickled_headers_cannot_hold_a_call_past_the_deadline(header_trickle):
    client = _client(header_trickle, timeout=5.0, deadline_s=1.0)
    with pytest.raises(ServiceError, match="did not arrive within the 1 s deadline") as err:
        client.list_webhooks()  # the headers never end: only the deadline ends the call
    assert "\n" not in str(err.value)


def test_trickled_headers_cannot_hold_a_command_past_its_deadline(
    header_trickle, monkeypatch, capsys
):
    monkeypatch.setenv("AUDIT_BASE_URL", header_trickle)
    monkeypatch.setenv("AUDIT_API_KEY", KEY)
    monkeypatch.setenv("AUDIT_DEADLINE_S", "1")
    assert main(["webhooks", "list", "--timeout", "5", "--max-attempts", "1"]) == 3
    err = capsys.readouterr().err
    assert "deadline" in err and err.count("\n") == 1


def test_a_non_repeatable_request_cut_at_the_deadline_says_to_list_first(header_trickle):
    client = _client(header_trickle, timeout=5.0, deadline_s=1.0)
    with pytest.raises(ServiceError, match=r"deadline.*list before trying again"):
        client.upload_attachments("inc_1", [("a.txt", b"x")])


def test_the_deadline_wraps_the_client_network_layer_only_inside_its_scope(header_trickle):
    with httpx.Client(timeout=5.0) as http:
        assert install_deadline(http) == 1
        assert install_deadline(http) == 0  # idempotent
        with deadline_scope(time.monotonic() + 0.5), pytest.raises(httpx.ReadTimeout):
            http.get(header_trickle)  # a header line every 0.2 s: the 5 s timeout never ends it


def test_stacked_gzip_over_a_socket_is_refused_before_decoding(bomb_server):
    url, reply = bomb_server
    inner = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * 2**20
    body = b"".join([*(inner.compress(block) for _ in range(256)), inner.flush()])
    reply.body, reply.encoding = zlib.compress(body, 9, wbits=31), "gzip, gzip"
    with pytest.raises(ServiceError, match=r"2 stacked content-codings \(gzip, gzip\)"):
        _client(url).list_webhooks()


def test_one_gzip_layer_over_a_socket_is_cut_at_the_limit(bomb_server):
    url, reply = bomb_server
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * 2**20
    reply.body = b"".join([*(c.compress(block) for _ in range(256)), c.flush()])
    reply.encoding = "gzip"
    with pytest.raises(ServiceError, match="larger than 2000000 bytes"):
        _client(url, max_response_bytes=2_000_000).list_webhooks()
