"""Client for the incident service's API: webhook subscriptions and attachment uploads.

Every operation of the webhook spec (section 4) plus ``POST /incident/{id}/attach``. The rules
it follows, each from the spec:

* Base URL without ``/v1``; the client adds the version prefix (section 9). The API key travels
  in the ``x-api-key`` header (section 5) and only there: it is added to each request, never
  stored on the underlying :class:`httpx.Client`, and never written to a log, a repr or an
  exception message. Redirects are not followed, so the key never goes to another host.
* 429, 5xx and connection failures are retried with bounded exponential backoff and full jitter,
  honouring ``Retry-After`` (seconds or an HTTP date); 400, 401, 403, 404, 413 and 422 are
  terminal (section 7). A request that may have reached the service before the connection
  failed is not repeated when repeating it could create something twice (a subscription, an
  attachment). The rules are in :mod:`audit.service.retry`.
* Published limits are checked before a byte is sent (section 8): 5 subscriptions per client,
  12 files and under 10485760 bytes per attachment request. Delivery URLs must be HTTPS and
  event types known ones. The checks are in :mod:`audit.service.request_checks`.
* Answers are unwrapped from ``{data, message}``; the listing shape is not published, so
  :func:`audit.analysis.subscriptions.unwrap_listing` accepts every plausible one.

Errors all derive from :class:`audit.errors.ServiceError` (refusals on bad arguments from
:class:`audit.errors.InputError`)::

    ServiceError          any other unexpected answer (e.g. 409, a body that is not JSON)
    ├── TerminalError     400/401/403/404/422: fix the request
    │   └── PayloadTooLarge  413, with the server's ``error`` and ``message``
    ├── RetryableError    429/5xx/connection failure that outlived the retries
    └── LimitError        refused before sending
"""

from __future__ import annotations

import json
import logging
import mimetypes
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from audit import __version__
from audit.analysis.subscriptions import unwrap_listing
from audit.errors import (
    InputError,
    PayloadTooLarge,
    RetryableError,
    ServiceError,
    TerminalError,
)
from audit.redaction import (
    HTTP_LOGGERS,
    REDACTED,
    install_log_filter,
    redact_secrets,
    register_sensitive,
    scrub,
)
from audit.service.request_checks import (
    FileSpec,
    check_attachment_count,
    check_attachment_sizes,
    check_base_url,
    check_delivery_url,
    check_description,
    check_events,
    check_request_size,
    check_subscription_room,
    path_segment,
)
from audit.service.retry import (
    MAYBE_SENT_ERRORS,
    NOT_SENT_ERRORS,
    RetryPolicy,
    is_retryable_status,
    parse_retry_after,
)
from audit.spec import API_VERSION_PATH, TERMINAL_STATUSES

__all__ = [
    "REDACTED",
    "IssuedSecret",
    "Listing",
    "RetryPolicy",
    "ServiceClient",
    "check_delivery_url",
    "check_events",
    "parse_retry_after",
    "redact_secrets",
]

log = logging.getLogger(__name__)
install_log_filter([__name__, *HTTP_LOGGERS])


@dataclass(frozen=True)
class IssuedSecret:
    """A signing secret the service just issued (creation or rotation).

    The value is hidden from ``repr``; save it (e.g. with :func:`audit.ingest.secrets.add_secret`)
    because the service never shows it again.

    Attributes
    ----------
    subscription_id : str
    issued_at : datetime
        When the response arrived, by the client's clock (UTC): the secret's ``valid_from``.
    secret : str
    subscription : dict or None
        The created subscription's fields without the secret (None for a rotation).
    message : str or None
        The service's note that came with the secret.
    """

    subscription_id: str
    issued_at: datetime
    secret: str = field(repr=False)
    subscription: dict[str, Any] | None = None
    message: str | None = None


@dataclass(frozen=True)
class Listing:
    """A ``GET /webhooks`` answer as received, with the time it arrived.

    ``body`` may hold secret values if the service exposes them: use :func:`redact_secrets`
    before showing or storing it.
    """

    body: Any = field(repr=False)
    received_at: datetime

    @property
    def items(self) -> list[dict[str, Any]]:
        """The listed subscriptions (see :func:`audit.analysis.subscriptions.unwrap_listing`)."""
        return unwrap_listing(self.body)


class ServiceClient:
    """Synchronous client for the service's webhook and attachment operations.

    Parameters
    ----------
    base_url
        The service address without ``/v1``. HTTPS, or HTTP to a loopback host (the local
        fake); no credentials, query or fragment.
    api_key
        The client's API key; sent in ``x-api-key`` and nowhere else.
    transport
        An :mod:`httpx` transport, e.g. ``httpx.MockTransport(handler)`` or
        :meth:`audit.service.fake.FakeService.transport` in tests.
    timeout
        Seconds (or an :class:`httpx.Timeout`) for connect, read, write and pool.
    deadline_s
        Overall limit for one request with all its retries, waits and reads (default 120 s):
        a server that trickles its answer cannot hold a call longer than this. Set
        :attr:`deadline_at` (a :func:`time.monotonic` value) to bound several calls together,
        as the CLI does for a whole command.
    max_response_bytes
        Largest response body accepted, counted after decompression (default 10 MB,
        :data:`DEFAULT_MAX_RESPONSE_BYTES`); a larger one is abandoned with a ServiceError.
    retry
        The :class:`RetryPolicy`; the default makes at most 4 attempts.
    sleep, rng, clock
        Injected for tests: the wait between attempts, the jitter source and the UTC clock that
        stamps responses (and resolves ``Retry-After`` dates).

    Examples
    --------
    >>> with ServiceClient(base_url="https://api.example", api_key=key) as c:  # doctest: +SKIP
    ...     for sub in c.list_webhooks():
    ...         print(sub["id"], sub["url"])
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        transport: httpx.BaseTransport | None = None,
        timeout: float | httpx.Timeout = 10.0,
        deadline_s: float = 120.0,
        max_response_bytes: int = 10_000_000,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.base_url = check_base_url(base_url)
        if not isinstance(api_key, str) or not api_key.strip():
            raise InputError("the API key is empty")
        if any(c in api_key for c in "\r\n\0") or api_key != api_key.strip():
            raise InputError("the API key contains whitespace or control characters")
        self._api_key = api_key
        register_sensitive(api_key)
        if not (isinstance(deadline_s, int | float) and deadline_s > 0):
            raise InputError("deadline_s must be a positive number of seconds")
        if not (isinstance(max_response_bytes, int) and max_response_bytes > 0):
            raise InputError("max_response_bytes must be a positive integer")
        self.deadline_s = float(deadline_s)
        #: Optional absolute end (``time.monotonic()``) for every request of this client.
        self.deadline_at: float | None = None
        self.max_response_bytes = max_response_bytes
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._http = httpx.Client(
            base_url=self.base_url + API_VERSION_PATH,
            transport=transport,
            timeout=timeout,
            follow_redirects=False,
            headers={"accept": "application/json", "user-agent": f"audit/{__version__}"},
        )

    def __repr__(self) -> str:
        return f"ServiceClient(base_url={self.base_url!r}, max_attempts={self.retry.max_attempts})"

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    # -- webhook operations (spec 4.1-4.6)

    def fetch_listing(self) -> Listing:
        """``GET /webhooks``, the body kept as received (for snapshots).

        Raises ServiceError when the body is not a recognisable listing.
        """
        response, received_at = self._request("GET", "/webhooks")
        body = _json_body(response, f"GET {API_VERSION_PATH}/webhooks")
        try:
            unwrap_listing(body)
        except ValueError as e:
            raise ServiceError(
                f"GET {API_VERSION_PATH}/webhooks: unrecognised listing: {e}",
                status=response.status_code,
            ) from None
        return Listing(body=body, received_at=received_at)

    def list_webhooks(self) -> list[dict[str, Any]]:
        """The client's subscriptions (``GET /webhooks``), each a dict as the service sent it.

        >>> [s["id"] for s in client.list_webhooks()]  # doctest: +SKIP
        ['wh_1', 'wh_2']
        """
        return self.fetch_listing().items

    def create_webhook(
        self, url: str, events: Sequence[str], description: str | None = None
    ) -> IssuedSecret:
        """Register a subscription (``POST /webhooks``) and return its secret.

        Before sending: ``url`` must be HTTPS, ``events`` known event types, and the client must
        have fewer than 5 subscriptions (one ``GET /webhooks`` counts them).

        Raises
        ------
        InputError
            Bad URL, events or description.
        LimitError
            The client already has 5 subscriptions.

        Examples
        --------
        >>> issued = client.create_webhook("https://hooks.example/a", ["incident.created"])
        ... # doctest: +SKIP
        >>> add_secret("secrets.json", issued.subscription_id, issued.secret, issued.issued_at)
        ... # doctest: +SKIP
        """
        payload: dict[str, Any] = {"url": check_delivery_url(url), "events": check_events(events)}
        if description is not None:
            payload["description"] = check_description(description)
        existing = self.list_webhooks()
        check_subscription_room(len(existing))
        response, received_at = self._request("POST", "/webhooks", json=payload, repeatable=False)
        data = _unwrap(_json_body(response, f"POST {API_VERSION_PATH}/webhooks"))
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
            raise ServiceError(
                "POST /v1/webhooks: the creation response has no subscription id; list the "
                "subscriptions to see whether one was created",
                status=response.status_code,
            )
        secret = data.get("secret")
        if not isinstance(secret, str) or not secret:
            raise ServiceError(
                f"POST /v1/webhooks: subscription {data['id']} was created but the response "
                "holds no secret; rotate its secret to obtain one",
                status=response.status_code,
            )
        note = data.get("message")
        return IssuedSecret(
            subscription_id=data["id"],
            issued_at=received_at,
            secret=secret,
            subscription={k: v for k, v in data.items() if k != "secret"},
            message=note if isinstance(note, str) else None,
        )

    def update_webhook(
        self,
        subscription_id: str,
        *,
        url: str | None = None,
        events: Sequence[str] | None = None,
        active: bool | None = None,
        description: str | None = None,
    ) -> Any:
        """Change a subscription (``PATCH /webhooks/:id``); returns the unwrapped answer.

        Only the fields given are sent; at least one is required.

        >>> client.update_webhook("wh_1", active=False)  # doctest: +SKIP
        """
        payload: dict[str, Any] = {}
        if url is not None:
            payload["url"] = check_delivery_url(url)
        if events is not None:
            payload["events"] = check_events(events)
        if active is not None:
            if not isinstance(active, bool):
                raise InputError("active must be true or false")
            payload["active"] = active
        if description is not None:
            payload["description"] = check_description(description)
        if not payload:
            raise InputError("nothing to update: give a URL, events, active or a description")
        path = f"/webhooks/{path_segment(subscription_id)}"
        response, _ = self._request("PATCH", path, json=payload)
        return _unwrap(_json_body(response, f"PATCH {API_VERSION_PATH}{path}", allow_empty=True))

    def delete_webhook(self, subscription_id: str) -> Any:
        """Delete a subscription (``DELETE /webhooks/:id``); returns the unwrapped answer.

        >>> client.delete_webhook("wh_1")  # doctest: +SKIP
        """
        path = f"/webhooks/{path_segment(subscription_id)}"
        response, _ = self._request("DELETE", path)
        return _unwrap(_json_body(response, f"DELETE {API_VERSION_PATH}{path}", allow_empty=True))

    def test_webhook(self, subscription_id: str) -> Any:
        """Ask for a ``webhook.test`` delivery (``POST /webhooks/:id/test``).

        >>> client.test_webhook("wh_1")  # doctest: +SKIP
        """
        path = f"/webhooks/{path_segment(subscription_id)}/test"
        response, _ = self._request("POST", path)
        return _unwrap(_json_body(response, f"POST {API_VERSION_PATH}{path}", allow_empty=True))

    def rotate_secret(self, subscription_id: str) -> IssuedSecret:
        """Rotate the signing secret (``POST /webhooks/:id/rotate-secret``).

        The previous secret stops working at once (spec 4.6): save the new one before anything
        else. A retry after a lost answer is safe: it issues another secret, and only the
        newest one counts.

        >>> issued = client.rotate_secret("wh_1")  # doctest: +SKIP
        """
        sub = path_segment(subscription_id)
        path = f"/webhooks/{sub}/rotate-secret"
        response, received_at = self._request("POST", path)
        data = _unwrap(_json_body(response, f"POST {API_VERSION_PATH}{path}"))
        secret = data.get("secret") if isinstance(data, dict) else None
        if not isinstance(secret, str) or not secret:
            raise ServiceError(
                f"POST {API_VERSION_PATH}{path}: the rotation response holds no secret; the "
                "previous secret may already be invalid, rotate again",
                status=response.status_code,
            )
        note = data.get("message")
        return IssuedSecret(
            subscription_id=subscription_id,
            issued_at=received_at,
            secret=secret,
            message=note if isinstance(note, str) else None,
        )

    # -- attachments (spec 4.7, 8)

    def upload_attachments(
        self,
        incident_id: str,
        files: Sequence[FileSpec],
        *,
        fields: Mapping[str, str] | None = None,
    ) -> Any:
        """Upload files to an incident (``POST /incident/{id}/attach``, multipart).

        Each file is a path, ``(filename, bytes)`` or ``(filename, bytes, content_type)``; every
        file part is named ``attachments``. ``fields`` are extra form fields (not published).

        Refused before sending (LimitError) when there are more than 12 files, or when the
        multipart body would reach 10485760 bytes (a file size sum that already does is refused
        before any file is read).

        Examples
        --------
        >>> client.upload_attachments("inc_1", ["shot.png", ("note.txt", b"seen at 09:30")])
        ... # doctest: +SKIP
        """
        path = f"/incident/{path_segment(incident_id, what='incident id')}/attach"
        check_attachment_count(files)
        form = {str(k): str(v) for k, v in (fields or {}).items()}
        check_attachment_sizes(files)
        parts = [("attachments", _file_part(f)) for f in files]
        probe = self._http.build_request("POST", path, files=parts, data=form)
        check_request_size(int(probe.headers.get("content-length", "0")))
        response, _ = self._request("POST", path, files=parts, data=form, repeatable=False)
        return _unwrap(_json_body(response, f"POST {API_VERSION_PATH}{path}", allow_empty=True))

    # -- transport

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        files: Any = None,
        data: Any = None,
        repeatable: bool = True,
    ) -> tuple[httpx.Response, datetime]:
        """Send with the retry rules; return the 2xx response and the time it arrived."""
        where = f"{method} {API_VERSION_PATH}{path}"
        policy = self.retry
        deadline = time.monotonic() + self.deadline_s
        if self.deadline_at is not None:
            deadline = min(deadline, self.deadline_at)
        for attempt in range(1, policy.max_attempts + 1):
            request = self._http.build_request(
                method,
                path,
                json=json,
                files=files,
                data=data,
                headers={"x-api-key": self._api_key},
            )
            try:
                response = self._send(request, where, deadline)
            except httpx.TransportError as e:
                failure = f"{type(e).__name__}: {self._scrub(str(e)) or 'connection failed'}"
                if isinstance(e, MAYBE_SENT_ERRORS) and not repeatable:
                    raise ServiceError(
                        f"{where}: {failure}; not repeated because the request may have reached "
                        "the service (list before trying again)"
                    ) from None
                if not isinstance(e, NOT_SENT_ERRORS + MAYBE_SENT_ERRORS):
                    raise ServiceError(f"{where}: {failure}") from None
                status, server_message, wait = None, None, None
            else:
                received_at = self._clock()
                status = response.status_code
                log.debug("%s -> %d (attempt %d)", where, status, attempt)
                if 200 <= status < 300:
                    return response, received_at
                server_message = self._server_message(response)
                if status not in TERMINAL_STATUSES and not is_retryable_status(status):
                    raise ServiceError(
                        f"{where}: unexpected {_describe(response, server_message)}",
                        status=status,
                        server_message=server_message,
                    )
                if status in TERMINAL_STATUSES:
                    raise self._terminal(where, response, server_message)
                failure = _describe(response, server_message)
                wait = parse_retry_after(response.headers.get("retry-after"), received_at)
                if wait is not None and wait > policy.max_retry_after_s:
                    asked = f"{wait:.0f} s" if wait < 1e12 else "an absurdly long time"
                    raise RetryableError(
                        f"{where}: {failure}; the service asked to wait {asked} "
                        f"(Retry-After), longer than the {policy.max_retry_after_s:.0f} s this "
                        "client waits",
                        status=status,
                        server_message=server_message,
                    )
            if attempt == policy.max_attempts:
                raise RetryableError(
                    f"{where}: {failure}, after {attempt} attempt{'s' if attempt > 1 else ''}",
                    status=status,
                    server_message=server_message,
                )
            if wait is None:
                wait = policy.backoff_s(attempt, self._rng)
            if time.monotonic() + wait > deadline:
                raise RetryableError(
                    f"{where}: {failure}; no time left for another attempt within the "
                    f"{self.deadline_s:.0f} s deadline",
                    status=status,
                    server_message=server_message,
                )
            log.warning(
                "%s: %s; retrying in %.2f s (attempt %d of %d)",
                where,
                failure,
                wait,
                attempt + 1,
                policy.max_attempts,
            )
            self._sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, request: httpx.Request, where: str, deadline: float) -> httpx.Response:
        """Send one request and read its body within the size limit and the deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServiceError(f"{where}: the {self.deadline_s:.0f} s deadline passed")
        timeout = self._http.timeout
        request.extensions["timeout"] = httpx.Timeout(
            connect=_min(timeout.connect, left),
            read=_min(timeout.read, left),
            write=_min(timeout.write, left),
            pool=_min(timeout.pool, left),
        ).as_dict()
        response = self._http.send(request, stream=True)
        try:
            chunks, size = [], 0
            for chunk in response.iter_bytes():  # decoded: the limit counts decompressed bytes
                size += len(chunk)
                if size > self.max_response_bytes:
                    raise ServiceError(
                        f"{where}: response body larger than {self.max_response_bytes} bytes "
                        "(after decompression); abandoned",
                        status=response.status_code,
                    )
                if time.monotonic() > deadline:
                    raise ServiceError(
                        f"{where}: the answer did not arrive within the {self.deadline_s:.0f} s "
                        "deadline",
                        status=response.status_code,
                    )
                chunks.append(chunk)
            response._content = b"".join(chunks)  # what httpx's own read() sets
        finally:
            response.close()
        return response

    def _scrub(self, text: str) -> str:
        return scrub(text, [self._api_key])

    def _server_message(self, response: httpx.Response) -> str | None:
        """The error body's message: scrubbed of the key and secrets first, then shortened."""
        try:
            body = response.json()
        except (ValueError, UnicodeDecodeError, RecursionError):
            text = self._scrub(" ".join(response.content.decode("utf-8", "replace").split()))
            return text[:200] or None
        if isinstance(body, dict):
            for key in ("message", "error"):
                v = body.get(key)
                if isinstance(v, str) and v:
                    return self._scrub(" ".join(v.split()))[:500]
                if isinstance(v, dict) and isinstance(v.get("message"), str):
                    return self._scrub(" ".join(v["message"].split()))[:500]
        return None

    def _terminal(
        self, where: str, response: httpx.Response, server_message: str | None
    ) -> TerminalError:
        status = response.status_code
        if status == 413:
            error = None
            try:
                body = response.json()
            except (ValueError, UnicodeDecodeError):
                body = None
            if isinstance(body, dict) and isinstance(body.get("error"), str):
                error = self._scrub(body["error"])
            return PayloadTooLarge(
                f"{where}: 413 {error or _reason(response) or 'Request Entity Too Large'}"
                f"{_suffix(server_message)}",
                status=status,
                server_message=server_message,
            )
        return TerminalError(
            f"{where}: {_describe(response, server_message)}",
            status=status,
            server_message=server_message,
        )


# -- request bodies


def _file_part(f: FileSpec) -> tuple[str, bytes, str]:
    if isinstance(f, tuple):
        name, content = f[0], f[1]
        ctype = f[2] if len(f) > 2 else None
    else:
        p = Path(f)
        name, ctype = p.name, None
        try:
            content = p.read_bytes()
        except OSError as e:
            raise InputError(f"{p}: cannot read ({e.strerror or type(e).__name__})") from None
    if not isinstance(content, bytes):
        raise InputError(f"{name}: file content must be bytes")
    ctype = ctype or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return (name, content, ctype)


# -- responses


def _unwrap(body: Any) -> Any:
    """``data`` of a ``{data, message}`` answer; other shapes (not published) as they are."""
    if isinstance(body, dict) and "data" in body:
        return body["data"]
    return body


def _min(value: float | None, left: float) -> float:
    return left if value is None else min(value, left)


def _json_body(response: httpx.Response, where: str, *, allow_empty: bool = False) -> Any:
    if not response.content.strip():
        if allow_empty:
            return None
        raise ServiceError(
            f"{where}: {_status_text(response)} with an empty body", status=response.status_code
        )
    try:
        return json.loads(response.content)
    except (ValueError, UnicodeDecodeError):
        raise ServiceError(
            f"{where}: {_status_text(response)} with a body that is not JSON",
            status=response.status_code,
        ) from None
    except RecursionError:
        raise ServiceError(
            f"{where}: {_status_text(response)} with a JSON body nested too deeply to read",
            status=response.status_code,
        ) from None


def _reason(response: httpx.Response) -> str:
    """The reason phrase, with every known secret and the API key cut out (servers echo)."""
    return scrub(" ".join(response.reason_phrase.split()))[:200]


def _status_text(response: httpx.Response) -> str:
    reason = _reason(response)
    return f"{response.status_code} {reason}" if reason else str(response.status_code)


def _describe(response: httpx.Response, server_message: str | None) -> str:
    """``"503 Service Unavailable: <message>"``, without a message that repeats the reason."""
    same = server_message and server_message.lower() == _reason(response).lower()
    return _status_text(response) + ("" if same else _suffix(server_message))


def _suffix(server_message: str | None) -> str:
    return f": {server_message}" if server_message else ""
