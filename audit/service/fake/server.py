"""The fake on a real socket: :class:`ServedFake` serves anything that answers like the fake.

It knows nothing of the API: each request goes to the served object's ``_process`` (see
:class:`Answering`), so :mod:`audit.service.fake.http` depends on this module, not the reverse.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import httpx

from audit.service.fake.state import Dropped

__all__ = ["Answering", "ServedFake"]

log = logging.getLogger(__name__)


class Answering(Protocol):
    """What :class:`ServedFake` serves (:class:`~audit.service.fake.FakeService` is one).

    ``_process`` answers one request, calling ``wait(seconds)`` for a scripted delay, or raises
    :class:`~audit.service.fake.state.Dropped` to drop the connection; ``_stopping`` is set
    when serving ends, which cuts such waits short.
    """

    _stopping: threading.Event

    def _process(self, request: httpx.Request, wait: Callable[[float], None]) -> httpx.Response: ...


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _serve(self) -> None:
        fake = self.server.fake
        n = int(self.headers.get("content-length") or 0)
        content = self.rfile.read(n) if n else b""
        request = httpx.Request(
            self.command,
            self.server.base_url + self.path,
            headers=list(self.headers.items()),
            content=content,
        )

        def wait(delay_s: float) -> None:
            fake._stopping.wait(delay_s)

        try:
            response = fake._process(request, wait)
        except Dropped:
            self.close_connection = True
            return
        body = response.content
        self.send_response(response.status_code)
        for k, v in response.headers.items():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        try:
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up (e.g. it timed out on a slow answer)
            self.close_connection = True

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # keep-alive connections must not hold up close()
    fake: Answering
    base_url: str

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("fake service: connection from %s ended with an error", client_address)


class ServedFake:
    """A :class:`~audit.service.fake.FakeService` on a real socket; ``base_url`` has no ``/v1``.

    Made by :meth:`FakeService.serve() <audit.service.fake.FakeService.serve>`.
    """

    def __init__(self, fake: Answering, host: str = "127.0.0.1", port: int = 0) -> None:
        self.fake = fake
        self._server = _Server((host, port), _Handler)
        self._server.fake = fake
        address: tuple[str, int] = self._server.socket.getsockname()[:2]
        self.host, self.port = address
        self.base_url = f"http://{self.host}:{self.port}"
        self._server.base_url = self.base_url
        fake._stopping.clear()
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # close() waits for one poll at most
            name="fake-service",
            daemon=True,
        )
        self._thread.start()

    def __repr__(self) -> str:
        return f"ServedFake({self.base_url!r})"

    def __enter__(self) -> ServedFake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving: slow answers in progress end at once, the socket is closed."""
        self.fake._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
