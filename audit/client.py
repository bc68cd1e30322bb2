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
  attachment).
* Published limits are checked before a byte is sent (section 8): 5 subscriptions per client,
  12 files and under 10485760 bytes per attachment request. Delivery URLs must be HTTPS and
  event types known ones.
* Answers are unwrapped from ``{data, message}``; the listing shape is not published, so
  :func:`audit.subscriptions.unwrap_listing` accepts every plausible one.

Errors all derive from :class:`audit.errors.ServiceError` (refusals on bad arguments from
:class:`audit.errors.InputError`)::

    ServiceError          any other unexpected answer (e.g. 409, a body that is not JSON)
    ├── TerminalError     400/401/403/404/422: fix the request
    │   └── PayloadTooLarge  413, with the server's ``error`` and ``message``
    ├── RetryableError    429/5xx/connection failure that outlived the retries
    └── LimitError        refused before sending
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import mimetypes
import os
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from audit import __version__
from audit.errors import (
    InputError,
    LimitError,
    PayloadTooLarge,
    RetryableError,
    ServiceError,
    TerminalError,
)
from audit.spec import (
    API_VERSION_PATH,
    EVENTS,
    MAX_ATTACHMENTS,
    MAX_REQUEST_BYTES,
    MAX_SUBSCRIPTIONS_PER_CLIENT,
    TERMINAL_STATUSES,
)
from audit.subscriptions import unwrap_listing

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

#: What a secret value is replaced by wherever the toolkit writes or shows a listing.
REDACTED = "[redacted]"

_DIGITS = re.compile(r"[0-9]+")
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
#: Failures where the request cannot have reached the service: always safe to repeat.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: Failures after the request may have reached the service.
_MAYBE_SENT = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before repeating a request that failed in a retryable way.

    Parameters
    ----------
    max_attempts
        Attempts in all, the first one included (1 disables retries).
    base_delay_s, max_delay_s
        Retry ``n`` (1 for the second attempt) waits a uniformly random time in
        ``[0, min(max_delay_s, base_delay_s * 2 ** (n - 1))]`` ("full jitter").
    max_retry_after_s
        A ``Retry-After`` is honoured as given, up to this many seconds; a longer one ends the
        retries at once (the error says how long the service asked to wait).

    Examples
    --------
    >>> RetryPolicy(max_attempts=3).backoff_cap_s(2)
    1.0
    """

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_retry_after_s: float = 120.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise InputError("max_attempts must be an integer of at least 1")
        for name in ("base_delay_s", "max_delay_s", "max_retry_after_s"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise InputError(f"{name} must be a finite number of seconds, at least 0")

    def backoff_cap_s(self, retry: int) -> float:
        """Upper bound of the jittered wait before retry number ``retry`` (1-based)."""
        return min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1))


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait according to a ``Retry-After`` header, or None when absent or unusable.

    Accepts delay-seconds (``"120"``) or an HTTP date (RFC 9110, e.g.
    ``"Wed, 21 Oct 2015 07:28:00 GMT"``); a date in the past means 0.

    Examples
    --------
    >>> t = datetime(2015, 10, 21, 7, 27, 30, tzinfo=UTC)
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", t), parse_retry_after("2", t)
    (30.0, 2.0)
    """
    if value is None:
        return None
    text = value.strip()
    if _DIGITS.fullmatch(text):
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" zones: RFC 9110 dates are UTC
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


@dataclass(frozen=True)
class IssuedSecret:
    """A signing secret the service just issued (creation or rotation).

    The value is hidden from ``repr``; save it (e.g. with :func:`audit.secrets.add_secret`)
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
        """The listed subscriptions (see :func:`audit.subscriptions.unwrap_listing`)."""
        return unwrap_listing(self.body)


def redact_secrets(value: Any, *, also: Iterable[str] = ()) -> tuple[Any, int]:
    """Copy a decoded JSON value with every non-empty ``secret`` field replaced by ``[redacted]``.

    Keys are matched case-insensitively at any depth. Strings listed in ``also`` (e.g. the API
    key) are cut out of every string value as well.

    Returns
    -------
    (copy, count)
        ``count`` is the number of ``secret`` values replaced.

    Examples
    --------
    >>> redact_secrets({"data": [{"id": "wh_1", "secret": "s3cret"}]})
    ({'data': [{'id': 'wh_1', 'secret': '[redacted]'}]}, 1)
    """
    extra = [s for s in also if s]
    count = 0

    def walk(v: Any) -> Any:
        nonlocal count
        if isinstance(v, dict):
            out = {}
            for k, item in v.items():
                if isinstance(k, str) and k.lower() == "secret" and item not in (None, ""):
                    out[k] = REDACTED
                    count += 1
                else:
                    out[k] = walk(item)
            return out
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, str):
            for s in extra:
                v = v.replace(s, REDACTED)
        return v

    return walk(value), count


FileSpec = str | os.PathLike | tuple[str, bytes] | tuple[str, bytes, str]


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
        :meth:`audit.fake_service.FakeService.transport` in tests.
    timeout
        Seconds (or an :class:`httpx.Timeout`) for connect, read, write and pool.
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
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.base_url = _check_base_url(base_url)
        if not isinstance(api_key, str) or not api_key.strip():
            raise InputError("the API key is empty")
        if any(c in api_key for c in "\r\n\0") or api_key != api_key.strip():
            raise InputError("the API key contains whitespace or control characters")
        self._api_key = api_key
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
            payload["description"] = _check_description(description)
        existing = self.list_webhooks()
        if len(existing) >= MAX_SUBSCRIPTIONS_PER_CLIENT:
            raise LimitError(
                f"refused before sending: the client already has {len(existing)} webhook "
                f"subscriptions and the service allows {MAX_SUBSCRIPTIONS_PER_CLIENT} per client; "
                "delete one first"
            )
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
            payload["description"] = _check_description(description)
        if not payload:
            raise InputError("nothing to update: give a URL, events, active or a description")
        path = f"/webhooks/{_segment(subscription_id)}"
        response, _ = self._request("PATCH", path, json=payload)
        return _unwrap(_json_body(response, f"PATCH {API_VERSION_PATH}{path}", allow_empty=True))

    def delete_webhook(self, subscription_id: str) -> Any:
        """Delete a subscription (``DELETE /webhooks/:id``); returns the unwrapped answer.

        >>> client.delete_webhook("wh_1")  # doctest: +SKIP
        """
        path = f"/webhooks/{_segment(subscription_id)}"
        response, _ = self._request("DELETE", path)
        return _unwrap(_json_body(response, f"DELETE {API_VERSION_PATH}{path}", allow_empty=True))

    def test_webhook(self, subscription_id: str) -> Any:
        """Ask for a ``webhook.test`` delivery (``POST /webhooks/:id/test``).

        >>> client.test_webhook("wh_1")  # doctest: +SKIP
        """
        path = f"/webhooks/{_segment(subscription_id)}/test"
        response, _ = self._request("POST", path)
        return _unwrap(_json_body(response, f"POST {API_VERSION_PATH}{path}", allow_empty=True))

    def rotate_secret(self, subscription_id: str) -> IssuedSecret:
        """Rotate the signing secret (``POST /webhooks/:id/rotate-secret``).

        The previous secret stops working at once (spec 4.6): save the new one before anything
        else. A retry after a lost answer is safe: it issues another secret, and only the
        newest one counts.

        >>> issued = client.rotate_secret("wh_1")  # doctest: +SKIP
        """
        sub = _segment(subscription_id)
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
        path = f"/incident/{_segment(incident_id, what='incident id')}/attach"
        if not files:
            raise InputError("no file to upload")
        if len(files) > MAX_ATTACHMENTS:
            raise LimitError(
                f"refused before sending: {len(files)} files, the service accepts at most "
                f"{MAX_ATTACHMENTS} per request"
            )
        form = {str(k): str(v) for k, v in (fields or {}).items()}
        paths = [Path(f) for f in files if isinstance(f, str | os.PathLike)]
        sizes = []
        for p in paths:
            try:
                sizes.append(p.stat().st_size)
            except OSError as e:
                raise InputError(f"{p}: cannot read ({e.strerror or type(e).__name__})") from None
        raw = sum(sizes) + sum(len(f[1]) for f in files if isinstance(f, tuple))
        if raw >= MAX_REQUEST_BYTES:
            raise LimitError(
                f"refused before sending: the files hold {raw} bytes; a request must stay under "
                f"{MAX_REQUEST_BYTES} bytes"
            )
        parts = [("attachments", _file_part(f)) for f in files]
        probe = self._http.build_request("POST", path, files=parts, data=form)
        length = int(probe.headers.get("content-length", "0"))
        if length >= MAX_REQUEST_BYTES:
            raise LimitError(
                f"refused before sending: the multipart request would be {length} bytes; it "
                f"must stay under {MAX_REQUEST_BYTES} bytes"
            )
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
                response = self._http.send(request)
            except httpx.TransportError as e:
                failure = f"{type(e).__name__}: {self._scrub(str(e)) or 'connection failed'}"
                if isinstance(e, _MAYBE_SENT) and not repeatable:
                    raise ServiceError(
                        f"{where}: {failure}; not repeated because the request may have reached "
                        "the service (list before trying again)"
                    ) from None
                if not isinstance(e, _NOT_SENT + _MAYBE_SENT):
                    raise ServiceError(f"{where}: {failure}") from None
                status, server_message, wait = None, None, None
            else:
                received_at = self._clock()
                status = response.status_code
                log.debug("%s -> %d (attempt %d)", where, status, attempt)
                if 200 <= status < 300:
                    return response, received_at
                server_message = self._server_message(response)
                if status not in TERMINAL_STATUSES and status != 429 and not 500 <= status < 600:
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
                    raise RetryableError(
                        f"{where}: {failure}; the service asked to wait {wait:.0f} s "
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
                wait = self._rng.uniform(0.0, policy.backoff_cap_s(attempt))
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

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, REDACTED) if self._api_key else text

    def _server_message(self, response: httpx.Response) -> str | None:
        try:
            body = response.json()
        except (ValueError, UnicodeDecodeError):
            text = " ".join(response.text.split())[:200]
            return self._scrub(text) or None
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
                f"{where}: 413 {error or response.reason_phrase or 'Request Entity Too Large'}"
                f"{_suffix(server_message)}",
                status=status,
                server_message=server_message,
            )
        return TerminalError(
            f"{where}: {_describe(response, server_message)}",
            status=status,
            server_message=server_message,
        )


# -- checks


def check_delivery_url(url: str) -> str:
    """Return ``url`` if it can be a delivery URL (HTTPS with a host), else raise InputError.

    >>> check_delivery_url("https://hooks.example/incidents")
    'https://hooks.example/incidents'
    """
    if not isinstance(url, str) or not url.strip():
        raise InputError("the delivery URL is empty")
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, ValueError):
        raise InputError(f"not a valid URL: {url!r}") from None
    if parsed.scheme != "https":
        raise InputError(f"delivery URLs must be HTTPS (spec 4.1): {url!r}")
    if not parsed.host:
        raise InputError(f"the delivery URL has no host: {url!r}")
    return url.strip()


def check_events(events: Sequence[str]) -> list[str]:
    """Return the event types without repeats, or raise InputError for an empty or unknown one.

    >>> check_events(["incident.created", "incident.created", "incident.status_changed"])
    ['incident.created', 'incident.status_changed']
    """
    if isinstance(events, str):
        events = [events]
    out: list[str] = []
    for e in events:
        if e not in EVENTS:
            raise InputError(f"unknown event type {e!r}; known: {', '.join(EVENTS)}")
        if e not in out:
            out.append(e)
    if not out:
        raise InputError("give at least one event type")
    return out


def _check_description(description: str) -> str:
    if not isinstance(description, str):
        raise InputError("the description must be a string")
    return description


def _check_base_url(base_url: str) -> str:
    if not isinstance(base_url, str) or not base_url.strip():
        raise InputError("no base URL given")
    try:
        u = httpx.URL(base_url.strip())
    except (httpx.InvalidURL, ValueError):
        raise InputError(f"not a valid base URL: {base_url!r}") from None
    if u.scheme not in ("https", "http") or not u.host:
        raise InputError(f"the base URL must be https://host[/path]: {base_url!r}")
    if u.userinfo:
        raise InputError("the base URL must not hold credentials; the API key goes by variable")
    if u.query or u.fragment:
        raise InputError(f"the base URL must not have a query or fragment: {base_url!r}")
    if u.scheme == "http" and u.host not in _LOOPBACK_HOSTS:
        raise InputError(
            f"refusing to send the API key over plain HTTP to {u.host}; use https:// "
            "(http:// is allowed for 127.0.0.1 and localhost only)"
        )
    text = str(u).rstrip("/")
    if text.endswith(API_VERSION_PATH):
        raise InputError(
            f"give the base URL without {API_VERSION_PATH}; the client adds it: {base_url!r}"
        )
    return text


def _segment(value: str, *, what: str = "subscription id") -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"the {what} is empty")
    return quote(value, safe="")


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


def _status_text(response: httpx.Response) -> str:
    reason = response.reason_phrase
    return f"{response.status_code} {reason}" if reason else str(response.status_code)


def _describe(response: httpx.Response, server_message: str | None) -> str:
    """``"503 Service Unavailable: <message>"``, without a message that repeats the reason."""
    same = server_message and server_message.lower() == response.reason_phrase.lower()
    return _status_text(response) + ("" if same else _suffix(server_message))


def _suffix(server_message: str | None) -> str:
    return f": {server_message}" if server_message else ""
