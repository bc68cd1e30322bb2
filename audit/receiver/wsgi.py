"""WSGI capture middleware (Flask, Django, any WSGI application).

Wrap the WSGI callable and name the webhook route(s)::

    app.wsgi_app = WSGICaptureMiddleware(app.wsgi_app, "captures",
                                         paths=["/webhooks/phishfort"], subscription_id="wh_main")

It reads the whole body, gives the application the same bytes (``wsgi.input`` is replaced), and
when the application calls ``start_response`` writes one capture line (status and duration
included) and fsyncs it before returning, i.e. before the server sends anything. If the line
cannot be written the client gets 503 instead, so the service retries. If the application raises
before answering, the line is written with status 500 and the exception propagates.
"""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.util import request_uri

from audit.receiver.asgi import RECEIVED_AT_KEY
from audit.receiver.capture_log import CaptureRecord, CaptureWriter, oversized
from audit.spec import MAX_REQUEST_BYTES

__all__ = ["WSGICaptureMiddleware"]

WSGIApp = Callable[[dict, Callable[..., Any]], Iterable[bytes]]

log = logging.getLogger("audit.receiver")

_STATUS_TEXT = {413: "413 Content Too Large", 503: "503 Service Unavailable"}


class WSGICaptureMiddleware:
    """Capture every matching request to daily JSON Lines files before its answer leaves.

    The parameters are those of :class:`audit.receiver.asgi.CaptureMiddleware`.
    """

    def __init__(
        self,
        app: WSGIApp,
        folder: str | os.PathLike | None = None,
        *,
        writer: CaptureWriter | None = None,
        paths: Iterable[str] | None = None,
        methods: Iterable[str] = ("POST",),
        subscription_id: str | None = None,
        max_body_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        if (folder is None) == (writer is None):
            raise ValueError("give exactly one of folder and writer")
        self.app = app
        self.writer = writer if writer is not None else CaptureWriter(folder)  # type: ignore[arg-type]
        self.paths = None if paths is None else frozenset(paths)
        self.methods = frozenset(m.upper() for m in methods)
        self.subscription_id = subscription_id
        self.max_body_bytes = max_body_bytes

    def _wanted(self, environ: dict) -> bool:
        return environ.get("REQUEST_METHOD", "").upper() in self.methods and (
            self.paths is None or environ.get("PATH_INFO") in self.paths
        )

    def __call__(self, environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not self._wanted(environ):
            return self.app(environ, start_response)
        received_at, started = time.time(), time.perf_counter()
        body, size = _read_body(environ, self.max_body_bytes)
        headers = _headers(environ)
        if body is None:  # kept as evidence: headers and size, no body
            log.warning("request body over %d bytes answered 413", self.max_body_bytes)
            try:
                url = request_uri(environ)
                self.writer.append(
                    oversized(received_at, headers, started, size, self.subscription_id, url)
                )
            except OSError as e:
                log.error("capture failed (%s)", e.strerror or e)
            start_response(_STATUS_TEXT[413], [("Content-Length", "0")])
            return [b""]
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ[RECEIVED_AT_KEY] = received_at
        url = request_uri(environ)
        state = {"written": False, "failed": False}

        def capture(status: int) -> None:
            self.writer.append(
                CaptureRecord(
                    received_at=received_at,
                    headers=headers,
                    body=body,
                    response_status=status,
                    response_ms=(time.perf_counter() - started) * 1000,
                    subscription_id=self.subscription_id,
                    url=url,
                )
            )

        def start_after_capture(status: str, response_headers: list, exc_info: Any = None) -> Any:
            if not state["written"]:
                state["written"] = True
                try:
                    capture(int(status.split(" ", 1)[0]))
                except OSError as e:
                    state["failed"] = True
                    log.error("capture failed (%s); answering 503 instead", e.strerror or e)
                    start_response(_STATUS_TEXT[503], [("Content-Length", "0")], exc_info)
                    return lambda data: None
            return start_response(status, response_headers, exc_info)

        try:
            result = self.app(environ, start_after_capture)
        except Exception:
            if not state["written"]:
                state["written"] = True
                try:
                    capture(500)
                except OSError as e:
                    log.error("capture failed (%s)", e.strerror or e)
            raise
        if state["failed"]:
            close = getattr(result, "close", None)
            if close is not None:
                close()
            return [b""]
        return result


def _read_body(environ: dict, limit: int) -> tuple[bytes | None, int]:
    """(the whole request body, or None when it is longer than ``limit``; its size as far as
    known: the declared length, or the bytes read before stopping)."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return b"", 0
    try:
        length = int(environ.get("CONTENT_LENGTH") or -1)
    except ValueError:
        length = -1
    if length < 0 and not environ.get("wsgi.input_terminated"):
        return b"", 0  # no length and no end-of-input guarantee: reading could block
    if length > limit:
        return None, length
    parts, size = [], 0
    while length < 0 or size < length:
        chunk = stream.read(65536 if length < 0 else min(65536, length - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return None, size
    return b"".join(parts), size


def _headers(environ: dict) -> list[tuple[str, str]]:
    """The request headers back from CGI names (``HTTP_X_A`` -> ``X-A``), in environ order."""
    out = []
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            name = "-".join(part.capitalize() for part in key[5:].split("_"))
        elif key in ("CONTENT_TYPE", "CONTENT_LENGTH") and value:
            name = key.replace("_", "-").title()
        else:
            continue
        out.append((name, str(value)))
    return out
