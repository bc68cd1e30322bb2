"""A local stand-in for the incident service's webhook API, for tests and credential-free trials.

It keeps state (subscriptions per client, each one's secrets, rotation, the 5-per-client limit,
attachments), answers with the documented shapes where the spec publishes them and with the
shapes documented in ``docs/client.md`` where it says "not shown", and can be told to fail:

>>> fake = FakeService(api_keys={"demo-key": "client_1"})
>>> fake.fail_next(status=429, retry_after="2")  # next request: 429 with Retry-After: 2
>>> fake.fail_next(status=503, times=2)  # then two 503s
>>> fake.fail_next(delay_s=30)  # then a response slower than most timeouts

Use it in-process with ``httpx.Client(transport=fake.transport())`` (no socket, no sleeping: a
slow answer becomes ``httpx.ReadTimeout`` when it exceeds the request's read timeout), or on a
real socket with ``with fake.serve() as served: served.base_url``. From a shell::

    AUDIT_API_KEY=demo-key python -m audit.fake_service --port 8765

It is a test double, not a server to expose: it binds to 127.0.0.1 by default.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets as _random_secrets
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email import policy as _email_policy
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from audit.signatures import sign
from audit.spec import (
    DEFAULT_HEADER_PREFIX,
    EVENTS,
    MAX_ATTACHMENTS,
    MAX_REQUEST_BYTES,
    MAX_SUBSCRIPTIONS_PER_CLIENT,
    TEST_EVENT,
)

__all__ = ["FakeService", "Fault", "RecordedRequest", "ServedFake"]

log = logging.getLogger(__name__)

#: The 413 body's ``message`` (spec section 7: the statement, then the limit).
TOO_LARGE_MESSAGE = f"Payload content length greater than maximum allowed: {MAX_REQUEST_BYTES}"
_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    413: "Request Entity Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
_LISTING_SHAPES = ("data", "list", "nested")


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour, consumed by the next matching request.

    ``delay_s`` delays the answer; ``status`` replaces it with an error (``Retry-After`` set
    from ``retry_after`` when given); ``error`` drops the connection instead of answering:
    ``"connect"`` (in-process: ``httpx.ConnectError``) or ``"disconnect"`` (in-process:
    ``httpx.RemoteProtocolError``). On a socket both close the connection without a reply. A
    fault that only delays lets the request through afterwards. ``path`` limits the fault to
    requests whose path (after ``/v1``) starts with it.
    """

    status: int | None = None
    retry_after: str | None = None
    delay_s: float = 0.0
    error: str | None = None
    message: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class RecordedRequest:
    """What the fake saw of one request (never the key: only whether a known one came)."""

    method: str
    path: str
    content_length: int
    authorised: bool
    status: int | None  # None when the connection was dropped


@dataclass
class _Issued:
    secret: str = field(repr=False)
    issued_at: datetime


class _Dropped(Exception):
    def __init__(self, kind: str):
        self.kind = kind


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class FakeService:
    """In-memory fake of the webhook API (spec section 4) with scriptable faults.

    Parameters
    ----------
    api_keys
        Accepted API keys and the client id each belongs to.
    listing_shape
        How ``GET /webhooks`` answers (unpublished in the spec): ``"data"``
        (``{data: [...], message}``, the default), ``"list"`` (a bare list) or ``"nested"``
        (``{data: {webhooks: [...]}, message}``).
    expose_secrets_in_listing
        Misbehave like a service that shows each subscription's current secret in the listing.
    clock
        UTC clock for ``createdAt`` and secret issue times.
    secret_factory
        Makes new secrets (default: 32 random bytes, URL-safe base64).

    Examples
    --------
    >>> fake = FakeService(api_keys={"k": "client_1"})
    >>> with httpx.Client(transport=fake.transport(), base_url="http://fake/v1") as http:
    ...     http.get("/webhooks", headers={"x-api-key": "k"}).json()
    {'data': [], 'message': 'Success'}
    """

    def __init__(
        self,
        *,
        api_keys: Mapping[str, str] | None = None,
        listing_shape: str = "data",
        expose_secrets_in_listing: bool = False,
        clock: Callable[[], datetime] | None = None,
        secret_factory: Callable[[], str] | None = None,
    ) -> None:
        if listing_shape not in _LISTING_SHAPES:
            raise ValueError(f"listing_shape must be one of {_LISTING_SHAPES}")
        self._keys = dict(api_keys or {"test-key": "client_1"})
        self.listing_shape = listing_shape
        self.expose_secrets_in_listing = expose_secrets_in_listing
        self._clock = clock or (lambda: datetime.now(UTC))
        self._new_secret = secret_factory or (lambda: "whsec_" + _random_secrets.token_urlsafe(32))
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._next_id = 0
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self._secrets: dict[str, list[_Issued]] = {}
        self.attachments: dict[str, list[dict[str, Any]]] = {}
        self.outbox: list[tuple[str, dict[str, str], bytes]] = []
        self.requests: list[RecordedRequest] = []
        self._faults: list[Fault] = []

    def __repr__(self) -> str:
        return (
            f"FakeService({len(self.subscriptions)} subscriptions, "
            f"{len(self._keys)} API keys, {len(self._faults)} pending faults)"
        )

    # -- scripting -------------------------------------------------------------------------------

    def fail_next(
        self,
        status: int | None = None,
        *,
        retry_after: str | None = None,
        delay_s: float = 0.0,
        error: str | None = None,
        message: str | None = None,
        times: int = 1,
        path: str | None = None,
    ) -> None:
        """Queue a fault for the next ``times`` matching requests (see :class:`Fault`).

        >>> fake = FakeService()
        >>> fake.fail_next(status=413)  # the documented 413 body
        >>> fake.fail_next(error="connect", path="/webhooks")
        """
        if status is None and error is None and delay_s <= 0:
            raise ValueError("a fault needs a status, an error or a delay")
        if error not in (None, "connect", "disconnect"):
            raise ValueError("error must be 'connect' or 'disconnect'")
        if status is not None and not 400 <= status <= 599:
            raise ValueError("status must be an error status (400-599)")
        fault = Fault(status, retry_after, float(delay_s), error, message, path)
        with self._lock:
            self._faults.extend([fault] * times)

    def current_secret(self, subscription_id: str) -> str:
        """The subscription's current secret (tests only: the real service never shows it)."""
        with self._lock:
            return self._secrets[subscription_id][-1].secret

    def secret_issue_times(self, subscription_id: str) -> list[datetime]:
        """When each of the subscription's secrets was issued, oldest first (no values)."""
        with self._lock:
            return [i.issued_at for i in self._secrets[subscription_id]]

    def deliver(
        self,
        subscription_id: str,
        event: str,
        data: Mapping[str, Any],
        *,
        timestamp: int,
        event_id: str | None = None,
    ) -> tuple[dict[str, str], bytes]:
        """Build a delivery the service would send, signed with the current secret.

        Parameters
        ----------
        subscription_id
            Whose secret signs it.
        event
            The event type (spec section 6).
        data
            The incident data object; ``incidentId`` is required, ``clientId`` is added.
        timestamp
            Unix seconds: the timestamp header and (as ISO 8601) the envelope's ``timestamp``.
        event_id
            The envelope ``id`` (default ``evt_<uuid4>``).

        Returns
        -------
        (headers, body)
            The four ``X-PhishFort-*`` headers and the raw body bytes that were signed.

        Examples
        --------
        >>> fake = FakeService()  # doctest: +SKIP
        >>> headers, body = fake.deliver("wh_1", "incident.created", {"incidentId": "inc_1"},
        ...                              timestamp=1767225600)  # doctest: +SKIP
        """
        if event not in EVENTS:
            raise ValueError(f"unknown event type {event!r}")
        if not isinstance(data.get("incidentId"), str):
            raise ValueError("data needs a string incidentId")
        with self._lock:
            sub = self.subscriptions[subscription_id]
            secret = self._secrets[subscription_id][-1].secret
        envelope = {
            "id": event_id or f"evt_{uuid.uuid4()}",
            "event": event,
            "timestamp": _iso(datetime.fromtimestamp(timestamp, UTC)),
            "data": {"clientId": sub["clientId"], **data},
        }
        body = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        p = DEFAULT_HEADER_PREFIX
        headers = {
            f"{p}-Signature": sign(secret, timestamp, body),
            f"{p}-Event": event,
            f"{p}-Delivery-Id": str(uuid.uuid4()),
            f"{p}-Timestamp": str(timestamp),
            "Content-Type": "application/json",
        }
        return headers, body

    # -- in-process use --------------------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        """An httpx transport answering from this fake, without a socket.

        >>> client = httpx.Client(transport=FakeService().transport())  # doctest: +SKIP
        """
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer one request in-process (the handler of :meth:`transport`)."""

        def wait(delay_s: float) -> None:
            read = (request.extensions.get("timeout") or {}).get("read")
            if read is not None and delay_s > read:
                raise httpx.ReadTimeout("simulated slow answer: read timed out", request=request)

        try:
            return self._process(request, wait)
        except _Dropped as d:
            if d.kind == "connect":
                raise httpx.ConnectError("simulated connection failure", request=request) from None
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            ) from None

    # -- on a socket -----------------------------------------------------------------------------

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> ServedFake:
        """Serve the fake over HTTP in a background thread; use as a context manager.

        >>> with FakeService().serve() as served:  # doctest: +SKIP
        ...     print(served.base_url)
        http://127.0.0.1:43215
        """
        return ServedFake(self, host, port)

    # -- the API ---------------------------------------------------------------------------------

    def _process(self, request: httpx.Request, wait: Callable[[float], None]) -> httpx.Response:
        path = request.url.path
        api_path = path[3:] if path.startswith("/v1/") else None
        length = len(request.content)
        authorised = request.headers.get("x-api-key") in self._keys
        with self._lock:
            fault = None
            for i, f in enumerate(self._faults):
                if f.path is None or (api_path or path).startswith(f.path):
                    fault = self._faults.pop(i)
                    break
        status: int | None = None
        try:
            if fault is not None:
                if fault.delay_s > 0:
                    wait(fault.delay_s)
                if fault.error:
                    raise _Dropped(fault.error)
                if fault.status is not None:
                    response = self._error(fault.status, fault.message)
                    if fault.retry_after is not None:
                        response.headers["Retry-After"] = fault.retry_after
                    status = response.status_code
                    return response
            response = self._route(request, api_path, length, authorised)
            status = response.status_code
            return response
        finally:
            with self._lock:
                self.requests.append(
                    RecordedRequest(request.method, path, length, authorised, status)
                )

    def _route(
        self, request: httpx.Request, api_path: str | None, length: int, authorised: bool
    ) -> httpx.Response:
        if length > MAX_REQUEST_BYTES:
            return self._error(413)
        if not authorised:
            return self._error(401, "Invalid or missing API key")
        client_id = self._keys[request.headers["x-api-key"]]
        parts = (api_path or "").strip("/").split("/")
        method = request.method
        with self._lock:
            if api_path is None:
                return self._error(404, "Not Found")
            if parts == ["webhooks"] and method == "GET":
                return self._list(client_id)
            if parts == ["webhooks"] and method == "POST":
                return self._create(client_id, request)
            if len(parts) >= 2 and parts[0] == "webhooks":
                sub = self.subscriptions.get(parts[1])
                if sub is None or sub["clientId"] != client_id:
                    return self._error(404, "Webhook not found")
                if len(parts) == 2 and method == "PATCH":
                    return self._update(sub, request)
                if len(parts) == 2 and method == "DELETE":
                    del self.subscriptions[sub["id"]]
                    return _ok({"id": sub["id"], "deleted": True})
                if parts[2:] == ["test"] and method == "POST":
                    return self._test(sub)
                if parts[2:] == ["rotate-secret"] and method == "POST":
                    issued = _Issued(self._new_secret(), self._clock())
                    self._secrets[sub["id"]].append(issued)
                    note = "Save this secret now: it will not be shown again."
                    return _ok({"secret": issued.secret, "message": note})
            is_attach = len(parts) == 3 and parts[0] == "incident" and parts[2] == "attach"
            if is_attach and method == "POST":
                return self._attach(parts[1], request)
            return self._error(404, "Not Found")

    def _list(self, client_id: str) -> httpx.Response:
        items = []
        for sub in self.subscriptions.values():
            if sub["clientId"] == client_id:
                item = dict(sub, events=list(sub["events"]))
                if self.expose_secrets_in_listing:
                    item["secret"] = self._secrets[sub["id"]][-1].secret
                items.append(item)
        if self.listing_shape == "list":
            return httpx.Response(200, json=items)
        if self.listing_shape == "nested":
            return _ok({"webhooks": items})
        return _ok(items)

    def _create(self, client_id: str, request: httpx.Request) -> httpx.Response:
        body = _json(request)
        if not isinstance(body, dict):
            return self._error(400, "Request body must be a JSON object")
        problem = _check_fields(body, required=("url", "events"))
        if problem:
            return self._error(400, problem)
        mine = [s for s in self.subscriptions.values() if s["clientId"] == client_id]
        if len(mine) >= MAX_SUBSCRIPTIONS_PER_CLIENT:
            return self._error(
                400,
                f"Webhook limit reached: at most {MAX_SUBSCRIPTIONS_PER_CLIENT} per client",
            )
        self._next_id += 1
        now = self._clock()
        sub: dict[str, Any] = {
            "id": f"wh_{self._next_id}",
            "clientId": client_id,
            "url": body["url"],
            "events": list(body["events"]),
            "active": True,
            "createdAt": _iso(now),
        }
        if "description" in body:
            sub["description"] = body["description"]
        self.subscriptions[sub["id"]] = sub
        issued = _Issued(self._new_secret(), now)
        self._secrets[sub["id"]] = [issued]
        note = "Save this secret now: it will not be shown again."
        return _ok({**sub, "secret": issued.secret, "message": note}, status=201)

    def _update(self, sub: dict[str, Any], request: httpx.Request) -> httpx.Response:
        body = _json(request)
        if not isinstance(body, dict):
            return self._error(400, "Request body must be a JSON object")
        problem = _check_fields(body, required=())
        if problem:
            return self._error(400, problem)
        sub.update({k: (list(v) if k == "events" else v) for k, v in body.items()})
        return _ok(dict(sub))

    def _test(self, sub: dict[str, Any]) -> httpx.Response:
        now = self._clock()
        incident = f"test_{uuid.uuid4()}"
        headers, body = self.deliver(
            sub["id"], TEST_EVENT, {"incidentId": incident}, timestamp=int(now.timestamp())
        )
        self.outbox.append((sub["id"], headers, body))
        event_id = json.loads(body)["id"]
        return _ok({"id": event_id, "event": TEST_EVENT, "queued": sub["active"]})

    def _attach(self, incident_id: str, request: httpx.Request) -> httpx.Response:
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            return self._error(400, "Expected multipart/form-data")
        msg = BytesParser(policy=_email_policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode("latin-1") + b"\r\n\r\n" + request.content
        )
        if not msg.is_multipart():
            return self._error(400, "Malformed multipart body")
        files = []
        for part in msg.iter_parts():
            if part.get_param("name", header="content-disposition") == "attachments":
                payload = part.get_payload(decode=True) or b""
                files.append({"filename": part.get_filename(), "size": len(payload)})
        if not files:
            return self._error(400, "No file in field 'attachments'")
        if len(files) > MAX_ATTACHMENTS:
            return self._error(400, f"Too many files: at most {MAX_ATTACHMENTS}")
        self.attachments.setdefault(incident_id, []).extend(files)
        return _ok({"incidentId": incident_id, "attachments": files})

    def _error(self, status: int, message: str | None = None) -> httpx.Response:
        reason = _REASONS.get(status, "Error")
        if status == 413 and message is None:
            message = TOO_LARGE_MESSAGE
        body = {"statusCode": status, "error": reason, "message": message or reason}
        return httpx.Response(status, json=body)


def _ok(data: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json={"data": data, "message": "Success"})


def _json(request: httpx.Request) -> Any:
    try:
        return json.loads(request.content)
    except (ValueError, UnicodeDecodeError):
        return None


def _check_fields(body: dict[str, Any], *, required: tuple[str, ...]) -> str | None:
    allowed = {"url", "events", "description"} | ({"active"} if not required else set())
    unknown = sorted(set(body) - allowed)
    if unknown:
        return f"Unknown field(s): {', '.join(unknown)}"
    missing = [k for k in required if k not in body]
    if missing:
        return f"Missing field(s): {', '.join(missing)}"
    if not required and not body:
        return "Nothing to update"
    if "url" in body and not _is_https(body["url"]):
        return "url must be an HTTPS URL"
    if "events" in body:
        ev = body["events"]
        if not isinstance(ev, list) or not ev or not all(e in EVENTS for e in ev):
            return "events must be a non-empty list of known event types"
    if "active" in body and not isinstance(body["active"], bool):
        return "active must be a boolean"
    if "description" in body and not isinstance(body["description"], str):
        return "description must be a string"
    return None


def _is_https(url: object) -> bool:
    try:
        u = httpx.URL(url) if isinstance(url, str) else None
    except (httpx.InvalidURL, ValueError):
        return False
    return u is not None and u.scheme == "https" and bool(u.host)


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
        except _Dropped:
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


def main(argv: list[str] | None = None) -> int:
    """``python -m audit.fake_service``: serve a fake on 127.0.0.1 until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m audit.fake_service", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--api-key-env",
        default="AUDIT_API_KEY",
        metavar="NAME",
        help="variable holding the API key the fake accepts (default: AUDIT_API_KEY)",
    )
    parser.add_argument("--client-id", default="client_1")
    parser.add_argument("--listing-shape", choices=_LISTING_SHAPES, default="data")
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
