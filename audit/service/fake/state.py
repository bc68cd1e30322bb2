"""The fake service's state: subscriptions, secrets, attachments, requests seen, scripted faults.

No HTTP here: :class:`~audit.service.fake.http.FakeService` answers requests from this state
(in-process or, through :mod:`audit.service.fake.server`, on a socket).
"""

from __future__ import annotations

import random
import secrets as _random_secrets
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from audit.ingest.signatures import sign
from audit.service.wire import envelope, iso, signed_headers
from audit.spec import EVENTS

__all__ = ["LISTING_SHAPES", "Dropped", "FakeState", "Fault", "Issued", "RecordedRequest", "iso"]

#: How ``GET /webhooks`` may answer (unpublished in the spec): see :class:`FakeState`.
LISTING_SHAPES = ("data", "list", "nested")


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
class Issued:
    secret: str = field(repr=False)
    issued_at: datetime


class Dropped(Exception):
    """A scripted fault drops the connection (``kind``: ``connect`` or ``disconnect``)."""

    def __init__(self, kind: str):
        self.kind = kind


class FakeState:
    """The fake's in-memory state and its scripting; see :class:`~audit.service.fake.FakeService`.

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
        ``(low, high)``: every answer waits a random time in this range (seconds) after the
        request was processed, so answers arrive in another order than the service acted (on a
        socket it really waits; in-process only a wait longer than the read timeout matters).
    """

    def __init__(
        self,
        *,
        api_keys: Mapping[str, str] | None = None,
        listing_shape: str = "data",
        expose_secrets_in_listing: bool = False,
        clock: Callable[[], datetime] | None = None,
        secret_factory: Callable[[], str] | None = None,
        latency_s: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        if listing_shape not in LISTING_SHAPES:
            raise ValueError(f"listing_shape must be one of {LISTING_SHAPES}")
        if not 0 <= latency_s[0] <= latency_s[1]:
            raise ValueError("latency_s must be (low, high) with 0 <= low <= high")
        self.latency_s = latency_s
        self._rng = random.Random()
        self._keys = dict(api_keys or {"test-key": "client_1"})
        self.listing_shape = listing_shape
        self.expose_secrets_in_listing = expose_secrets_in_listing
        self._clock = clock or (lambda: datetime.now(UTC))
        self._new_secret = secret_factory or (lambda: "whsec_" + _random_secrets.token_urlsafe(32))
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._next_id = 0
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self._secrets: dict[str, list[Issued]] = {}
        self.attachments: dict[str, list[dict[str, Any]]] = {}
        self.outbox: list[tuple[str, dict[str, str], bytes]] = []
        self.requests: list[RecordedRequest] = []
        self._faults: list[Fault] = []

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({len(self.subscriptions)} subscriptions, "
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

        >>> fake = FakeState()
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
            The delivery headers (:func:`audit.service.wire.signed_headers`) and the raw body
            bytes that were signed.

        Examples
        --------
        >>> import json
        >>> import httpx
        >>> from audit.service.fake import FakeService
        >>> fake = FakeService(api_keys={"k": "client_1"})
        >>> with httpx.Client(transport=fake.transport(), base_url="http://fake/v1") as http:
        ...     sub = http.post(
        ...         "/webhooks",
        ...         json={"url": "https://hooks.example/a", "events": ["incident.created"]},
        ...         headers={"x-api-key": "k"},
        ...     ).json()["data"]
        >>> headers, body = fake.deliver(
        ...     sub["id"], "incident.created", {"incidentId": "inc_1"}, timestamp=1767225600
        ... )
        >>> headers["X-PhishFort-Event"], json.loads(body)["data"]
        ('incident.created', {'clientId': 'client_1', 'incidentId': 'inc_1'})
        """
        if event not in EVENTS:
            raise ValueError(f"unknown event type {event!r}")
        if not isinstance(data.get("incidentId"), str):
            raise ValueError("data needs a string incidentId")
        with self._lock:
            sub = self.subscriptions[subscription_id]
            secret = self._secrets[subscription_id][-1].secret
        eid = event_id or f"evt_{uuid.uuid4()}"
        body = envelope(eid, event, timestamp, {"clientId": sub["clientId"], **data}).encode()
        signature = sign(secret, timestamp, body)
        headers = dict(signed_headers(event, str(uuid.uuid4()), timestamp, signature))
        return headers, body
