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

    AUDIT_API_KEY=demo-key python -m audit.service.fake --port 8765

It is a test double, not a server to expose: it binds to 127.0.0.1 by default.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from email import policy as _email_policy
from email.parser import BytesParser
from typing import Any

import httpx

from audit.service.fake.server import ServedFake
from audit.service.fake.state import Dropped, FakeState, Issued, RecordedRequest
from audit.service.wire import iso
from audit.spec import (
    EVENTS,
    MAX_ATTACHMENTS,
    MAX_REQUEST_BYTES,
    MAX_SUBSCRIPTIONS_PER_CLIENT,
    TEST_EVENT,
)

__all__ = ["TOO_LARGE_MESSAGE", "FakeService"]

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


class FakeService(FakeState):
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
    latency_s
        ``(low, high)``: each answer waits a random time in this range after the request was
        processed (on a socket; in-process only a wait past the read timeout matters). Served
        answers carry a ``Date`` header (whole seconds), as most servers' do.

    Examples
    --------
    >>> fake = FakeService(api_keys={"k": "client_1"})
    >>> with httpx.Client(transport=fake.transport(), base_url="http://fake/v1") as http:
    ...     http.get("/webhooks", headers={"x-api-key": "k"}).json()
    {'data': [], 'message': 'Success'}
    """

    # -- in-process use --------------------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        """An httpx transport answering from this fake, without a socket.

        >>> fake = FakeService(api_keys={"k": "client_1"})
        >>> with httpx.Client(transport=fake.transport(), base_url="http://fake/v1") as http:
        ...     http.get("/webhooks").status_code  # no key
        401
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
        except Dropped as d:
            if d.kind == "connect":
                raise httpx.ConnectError("simulated connection failure", request=request) from None
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            ) from None

    # -- on a socket -----------------------------------------------------------------------------

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> ServedFake:
        """Serve the fake over HTTP in a background thread; use as a context manager.

        >>> with FakeService(api_keys={"k": "client_1"}).serve() as served:
        ...     httpx.get(served.base_url + "/v1/webhooks", headers={"x-api-key": "k"}).json()
        {'data': [], 'message': 'Success'}
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
                    raise Dropped(fault.error)
                if fault.status is not None:
                    response = self._error(fault.status, fault.message)
                    if fault.retry_after is not None:
                        response.headers["Retry-After"] = fault.retry_after
                    status = response.status_code
                    return response
            response = self._route(request, api_path, length, authorised)
            status = response.status_code
            if self.latency_s[1] > 0:  # the service has acted; its answer takes a while
                wait(self._rng.uniform(*self.latency_s))
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
                    issued = Issued(self._new_secret(), self._clock())
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
            "createdAt": iso(now),
        }
        if "description" in body:
            sub["description"] = body["description"]
        self.subscriptions[sub["id"]] = sub
        issued = Issued(self._new_secret(), now)
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
