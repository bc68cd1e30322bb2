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
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.util import request_uri

from audit.receiver.asgi import RECEIVED_AT_KEY
from audit.receiver.capture_log import (
    CaptureRecord,
    CaptureWriter,
    oversized,
    why_not_written,
    writer_for,
)
from audit.spec import MAX_REQUEST_BYTES

__all__ = ["WSGICaptureMiddleware"]

WSGIApp = Callable[[dict, Callable[..., Any]], Iterable[bytes]]

log = logging.getLogger("audit.receiver")

_STATUS_TEXT = {
    400: "400 Bad Request",
    413: "413 Content Too Large",
    503: "503 Service Unavailable",
}


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
        self.writer = writer_for(folder, writer)
        self.app = app
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
        try:
            body, size = _read_body(environ, self.max_body_bytes)
        except _CutShort as e:  # the application would answer a request that never arrived
            log.warning(
                "request body cut short (%d of %d bytes): answered 400, not captured",
                e.size,
                e.length,
            )
            start_response(_STATUS_TEXT[400], [("Content-Length", "0")])
            return [b""]
        headers = _headers(environ)
        if body is None:  # kept as evidence: headers and size, no body
            log.warning("request body over %d bytes answered 413", self.max_body_bytes)
            try:
                url = request_uri(environ)
                self.writer.append(
                    oversized(received_at, headers, started, size, self.subscription_id, url)
                )
            except OSError as e:
                log.error("capture failed (%s)", why_not_written(e))
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
                    log.error("capture failed (%s); answering 503 instead", why_not_written(e))
                    start_response(_STATUS_TEXT[503], [("Content-Length", "0")], exc_info)
                    return lambda data: None
            return start_response(status, response_headers, exc_info)

        def capture_500() -> None:
            if not state["written"]:
                state["written"] = True
                try:
                    capture(500)
                except OSError as e:
                    log.error("capture failed (%s)", why_not_written(e))

        try:
            result = self.app(environ, start_after_capture)
        except Exception:
            capture_500()
            raise
        if state["failed"]:
            _close(result)
            return [b""]
        if state["written"]:
            return result
        # PEP 3333 lets an application answer only once its iterable is first read (a
        # generator): what it yields is watched until then.
        return _Answer(result, state, capture_500)


class _Answer:
    """An application's iterable that has not answered yet: an error before its answer is
    captured as 500 (and propagates); after a failed capture (the server sends 503) nothing of
    the application's body follows. ``close`` closes the application's iterable."""

    def __init__(self, result: Iterable[bytes], state: dict, capture_500: Callable[[], None]):
        self._result = result
        self._state = state
        self._capture_500 = capture_500

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._result:
                if self._state["failed"]:
                    return
                yield chunk
        except Exception:
            self._capture_500()
            raise
        # An application that ends without answering gets a 500 from the server.
        self._capture_500()

    def close(self) -> None:
        _close(self._result)


def _close(result: Iterable[bytes]) -> None:
    close = getattr(result, "close", None)
    if close is not None:
        close()


class _CutShort(Exception):
    """The body ended before its declared length: the sender is gone."""

    def __init__(self, size: int, length: int) -> None:
        super().__init__(size, length)
        self.size, self.length = size, length


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
    if 0 <= size < length:
        raise _CutShort(size, length)
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
