"""ASGI capture middleware (Starlette, FastAPI, any ASGI 3 application).

Wrap the application (or add it with ``app.add_middleware``) and name the webhook route(s)::

    app.add_middleware(CaptureMiddleware, folder="captures", paths=["/webhooks/phishfort"],
                       subscription_id="wh_main")

For each matching request the middleware reads the whole body, hands the application the same
bytes, and when the application starts its answer writes one capture line (status and duration
included) and fsyncs it *before* forwarding the answer. If the line cannot be written the
client gets 503 instead of the application's answer, so the service retries and no 2xx leaves
for an event that is not stored (spec 5.2 rule 6). If the application raises before answering,
the line is written with status 500 (what the server answers) and the exception propagates.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import anyio.to_thread

from audit.receiver.capture_log import (
    CaptureRecord,
    CaptureWriter,
    oversized,
    why_not_written,
    writer_for,
)
from audit.spec import MAX_REQUEST_BYTES

__all__ = ["RECEIVED_AT_KEY", "CaptureMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Scope key (ASGI) / environ key (WSGI) holding the receipt time in Unix seconds, so that the
#: application can verify against the same clock reading the capture line records.
RECEIVED_AT_KEY = "audit.received_at"
#: Captures encoded and written at once (each in a worker thread). The lines are written one at
#: a time anyway (one lock, one fsync each), and the encoding holds the GIL; a flood of large
#: requests then holds at most this many encoded lines (up to 6x a 10 MB body each, for a body
#: of control characters) besides the bodies themselves, not one per worker thread (40).
CAPTURES_AT_ONCE = 2

log = logging.getLogger("audit.receiver")
#: The kinds of this module's per-connection log lines: the reference receiver logs each at
#: most once per interval and counts the rest (:class:`audit.receiver.serving.FloodLog`).
LEFT_EARLY = "sender left before its body arrived: not captured"
TOO_LARGE = "request body over the limit answered 413"


class CaptureMiddleware:
    """Capture every matching request to daily JSON Lines files before its answer leaves.

    Parameters
    ----------
    app
        The ASGI application.
    folder
        Where the daily ``YYYY-MM-DD.jsonl`` files go (or give ``writer``).
    writer
        A shared :class:`~audit.receiver.capture_log.CaptureWriter`.
    paths
        Paths to capture (exact match); None captures every request with a method in
        ``methods``.
    methods
        HTTP methods to capture; POST by default.
    subscription_id
        Written as ``subscription_id`` in each line (the subscription this endpoint serves).
    max_body_bytes
        Larger bodies are answered 413 without calling the application; the request is
        captured without its body (``body_omitted_bytes``: the bytes read before stopping).
        The service never sends more than 10485760 bytes (spec section 8).
    """

    def __init__(
        self,
        app: ASGIApp,
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
        self._capturing = threading.BoundedSemaphore(CAPTURES_AT_ONCE)

    def _append(self, record: CaptureRecord) -> None:
        """Write a record (in a worker thread): at most :data:`CAPTURES_AT_ONCE` at a time."""
        with self._capturing:
            self.writer.append(record)

    def _wanted(self, scope: Scope) -> bool:
        return (
            scope["type"] == "http"
            and scope.get("method", "").upper() in self.methods
            and (self.paths is None or scope.get("path") in self.paths)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._wanted(scope):
            await self.app(scope, receive, send)
            return
        received_at, started = time.time(), time.perf_counter()
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":  # nothing to answer, said in the log
                log.warning(  # once per connection: limited as a flood while a server runs
                    "sender left before its body arrived (%d bytes read): not captured",
                    size,
                    extra={"flood_kind": LEFT_EARLY},
                )
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:  # kept as evidence: headers and size, no body
                log.warning(
                    "request body over %d bytes answered 413",
                    self.max_body_bytes,
                    extra={"flood_kind": TOO_LARGE},
                )
                await self._capture_oversized(scope, received_at, started, size)
                await _answer(send, 413)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        chunks.clear()  # one copy of the body is kept for the request's lifetime, not two
        scope = dict(scope)
        scope[RECEIVED_AT_KEY] = received_at
        headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in scope["headers"]]
        url = _url(scope)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        state = {"written": False, "failed": False}

        async def capture(status: int) -> None:
            record = CaptureRecord(
                received_at=received_at,
                headers=headers,
                body=body,
                response_status=status,
                response_ms=(time.perf_counter() - started) * 1000,
                subscription_id=self.subscription_id,
                url=url,
            )
            # fsync blocks: keep it off the event loop so other requests go on meanwhile.
            await anyio.to_thread.run_sync(self._append, record)

        async def send_after_capture(message: Message) -> None:
            if message["type"] == "http.response.start" and not state["written"]:
                state["written"] = True
                try:
                    await capture(int(message["status"]))
                except OSError as e:
                    state["failed"] = True
                    log.error("capture failed (%s); answering 503 instead", why_not_written(e))
                    await _answer(send, 503)
                    return
            if not state["failed"]:
                await send(message)

        try:
            await self.app(scope, replay, send_after_capture)
        except Exception:
            await self._capture_500(state, capture)
            raise
        # An application that returns without answering gets a 500 from the server.
        await self._capture_500(state, capture)

    async def _capture_oversized(
        self, scope: Scope, received_at: float, started: float, size: int
    ) -> None:
        headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in scope["headers"]]
        record = oversized(received_at, headers, started, size, self.subscription_id, _url(scope))
        try:
            await anyio.to_thread.run_sync(self._append, record)
        except OSError as e:
            log.error("capture failed (%s)", why_not_written(e))

    @staticmethod
    async def _capture_500(state: dict, capture: Callable[[int], Awaitable[None]]) -> None:
        if state["written"]:
            return
        state["written"] = True
        try:
            await capture(500)
        except OSError as e:
            log.error("capture failed (%s)", why_not_written(e))


async def _answer(send: Send, status: int) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]}
    )
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _url(scope: Scope) -> str | None:
    host = next((v.decode("latin-1") for n, v in scope["headers"] if n.lower() == b"host"), None)
    if host is None and scope.get("server"):
        h, p = scope["server"][0], scope["server"][1]
        host = f"{h}:{p}" if p else str(h)
    if host is None:
        return None
    path = scope.get("root_path", "") + scope.get("path", "")
    query = scope.get("query_string", b"").decode("latin-1")
    return f"{scope.get('scheme', 'http')}://{host}{path}" + (f"?{query}" if query else "")
