"""The fake on a real socket (:class:`ServedFake`), and ``python -m audit.service.fake``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import httpx

from audit.service.fake.state import LISTING_SHAPES, Dropped

if TYPE_CHECKING:
    from audit.service.fake.http import FakeService

__all__ = ["ServedFake", "main"]

log = logging.getLogger(__name__)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _serve(self) -> None:
        fake = self.server.fake
        n = int(self.headers.get("content-length") or 0)
        content = self.rfile.read(n) if n else b""
        request = httpx.Request(
            self.command,
            f"http://{self.server.server_address[0]}:{self.server.server_address[1]}{self.path}",
            headers=list(self.headers.items()),
            content=content,
        )
        try:
            response = fake._process(request, lambda s: fake._stopping.wait(s))
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
    fake: FakeService

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("fake service: connection from %s ended with an error", client_address)


class ServedFake:
    """A :class:`FakeService` listening on a real socket; ``base_url`` has no ``/v1``."""

    def __init__(self, fake: FakeService, host: str = "127.0.0.1", port: int = 0) -> None:
        self.fake = fake
        self._server = _Server((host, port), _Handler)
        self._server.fake = fake
        self.host, self.port = self._server.server_address[:2]
        self.base_url = f"http://{self.host}:{self.port}"
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


_DESCRIPTION = (
    "A local stand-in for the incident service's webhook API, for tests and credential-free trials."
)


def main(argv: list[str] | None = None) -> int:
    """``python -m audit.service.fake``: serve a fake on 127.0.0.1 until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m audit.service.fake", description=_DESCRIPTION)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--api-key-env",
        default="AUDIT_API_KEY",
        metavar="NAME",
        help="variable holding the API key the fake accepts (default: AUDIT_API_KEY)",
    )
    parser.add_argument("--client-id", default="client_1")
    parser.add_argument("--listing-shape", choices=LISTING_SHAPES, default="data")
    parser.add_argument(
        "--expose-secrets-in-listing",
        action="store_true",
        help="misbehave: show each subscription's current secret in GET /webhooks",
    )
    args = parser.parse_args(argv)
    key = os.environ.get(args.api_key_env)
    if not key:
        print(f"fake_service: error: set {args.api_key_env} to the key to accept", file=sys.stderr)
        return 3
    from audit.service.fake.http import FakeService

    fake = FakeService(
        api_keys={key: args.client_id},
        listing_shape=args.listing_shape,
        expose_secrets_in_listing=args.expose_secrets_in_listing,
    )
    try:
        served = fake.serve(args.host, args.port)
    except OSError as e:
        print(
            f"fake_service: error: cannot listen on {args.host}:{args.port}: {e.strerror}",
            file=sys.stderr,
        )
        return 3
    print(f"fake service listening on {served.base_url} (Ctrl-C to stop)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        served.close()
    return 0
